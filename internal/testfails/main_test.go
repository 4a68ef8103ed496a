package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestDigest(t *testing.T) {
	var in strings.Builder
	ev := func(action, test, output string) {
		fmt.Fprintf(&in, `{"Action":%q,"Package":"p","Test":%q,"Output":%q}`+"\n", action, test, output)
	}
	ev("run", "TestA", "")
	ev("output", "TestA", "=== RUN   TestA\n")
	ev("run", "TestB", "")
	for i := range 5 {
		ev("output", "TestB", fmt.Sprintf("line %d\n", i))
	}
	ev("output", "TestA", "ok\n")
	ev("pass", "TestA", "")
	ev("fail", "TestB", "")
	in.WriteString("not json\n")
	var out bytes.Buffer
	if err := run(strings.NewReader(in.String()), &out, 3); err != nil {
		t.Fatal(err)
	}
	want := "== failed: p TestB (its last 3 lines of output)\nline 2\nline 3\nline 4\n"
	if out.String() != want {
		t.Errorf("digest:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := run(strings.NewReader(`{"Action":"pass","Package":"p","Test":"T"}`+"\n"), &out, 3); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no failed test") {
		t.Errorf("digest of a passing log: %q", out.String())
	}
}
