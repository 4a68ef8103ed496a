// Command testfails reads the JSON events of go test (go test -json, or
// go tool test2json over a go test -v log) and prints, for every test that
// failed, the last lines of its own output: the digest CI prints after a
// long log whose middle it may cut.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is the part of a test2json event read here.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	lines := flag.Int("lines", 80, "output lines kept per failed test")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *lines); err != nil {
		fmt.Fprintln(os.Stderr, "testfails:", err)
		os.Exit(1)
	}
}

// run writes the digest of the events read from r to w.
func run(r io.Reader, w io.Writer, keep int) error {
	type key struct{ pkg, test string }
	out := map[key][]string{}
	var failed []key
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line that is not an event (build output)
		}
		if ev.Test == "" {
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "output":
			o := append(out[k], strings.TrimRight(ev.Output, "\n"))
			if len(o) > keep {
				o = o[len(o)-keep:]
			}
			out[k] = o
		case "fail":
			failed = append(failed, k)
		case "run":
			delete(out, k) // a rerun (-count) starts afresh
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, k := range failed {
		fmt.Fprintf(w, "== failed: %s %s (its last %d lines of output)\n", k.pkg, k.test, keep)
		for _, l := range out[k] {
			fmt.Fprintln(w, l)
		}
	}
	if len(failed) == 0 {
		fmt.Fprintln(w, "== no failed test in the log")
	}
	return nil
}
