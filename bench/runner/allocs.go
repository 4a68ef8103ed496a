package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nvmeof/nvmeof/bench/report"
)

// AllocBenchmarks are the Go benchmarks of the I/O path whose allocations
// per operation (-benchmem) the report shows, by package: the fio engine
// over the initiator and the loop transport to an in-process target, the
// NVMe-oF RDMA transport over two soft RoCE devices, the target's command
// path, and the initiator's asynchronous start. Each operation is one I/O.
var AllocBenchmarks = []struct{ Package, Bench string }{
	{"./fio/", "BenchmarkLoopRead4K"},
	{"./fabrics/rdma/", "BenchmarkSoftRead4K"},
	{"./fabrics/rdma/", "BenchmarkSoftRead4KQD16"},
	{"./target/", "BenchmarkRead4K"},
	{"./initiator/", "BenchmarkStartRead4K"},
}

// allocBenchTime is -benchtime: a fixed count of operations, enough for a
// steady state, short on a busy machine.
const allocBenchTime = "5000x"

// allocsCommand returns the go test command line for AllocBenchmarks.
func allocsCommand() []string {
	var names, pkgs []string
	for _, b := range AllocBenchmarks {
		if !slices.Contains(names, b.Bench) {
			names = append(names, b.Bench)
		}
		if !slices.Contains(pkgs, b.Package) {
			pkgs = append(pkgs, b.Package)
		}
	}
	args := []string{"go", "test", "-run", "^$", "-bench", "^(" + strings.Join(names, "|") + ")$", "-benchmem",
		"-benchtime", allocBenchTime, "-count", "1"}
	return append(args, pkgs...)
}

// runAllocs runs AllocBenchmarks and stores their results (or why not) in
// r. As root they run in a network namespace of their own, where their soft
// RoCE devices on loopback meet nobody else's.
func (c Config) runAllocs(ctx context.Context, r *report.Report) {
	argv := allocsCommand()
	r.AllocsCommand = strings.Join(argv, " ")
	if _, err := exec.LookPath("go"); err != nil {
		r.AllocsError = "go not found"
		return
	}
	if os.Geteuid() == 0 && netnsTools() == "" {
		argv = append(append([]string(nil), netnsPrefix...), argv...)
	}
	c.logf("== Go benchmarks, allocations per I/O: %s", r.AllocsCommand)
	actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(actx, argv[0], argv[1:]...)
	cmd.Dir = c.GoDir
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	r.Allocs = parseBenchmem(string(out))
	c.logf("   %d benchmarks in %v", len(r.Allocs), time.Since(t0).Round(time.Second))
	if err != nil {
		r.AllocsError = fmt.Sprintf("%v: %s", err, cut(lastLines(string(out), 3), 300))
		c.logf("   %s", r.AllocsError)
	} else if len(r.Allocs) == 0 {
		r.AllocsError = "no benchmark results in go test's output"
	}
}

// lastLines returns the last n non-empty lines of s, joined with "; ".
func lastLines(s string, n int) string {
	var l []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(line) != "" {
			l = append(l, strings.TrimSpace(line))
		}
	}
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "; ")
}

// parseBenchmem reads go test -benchmem output: "pkg: PATH" lines name the
// package of the benchmark lines after them ("BenchmarkX-2  N  T ns/op ...
// B B/op A allocs/op").
func parseBenchmem(out string) []report.AllocBench {
	var res []report.AllocBench
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "pkg:" {
			pkg = f[1]
			continue
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		b := report.AllocBench{Package: pkg, Name: f[0], NsPerOp: -1, BytesPerOp: -1, AllocsPerOp: -1}
		for i := 2; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				b.NsPerOp = v
			case "B/op":
				b.BytesPerOp = v
			case "allocs/op":
				b.AllocsPerOp = v
			}
		}
		if b.AllocsPerOp >= 0 {
			res = append(res, b)
		}
	}
	return res
}
