package fio

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The testdata files are real fio 3.33 output of this repository's
// examples/fio jobs run with fio's nbd engine against `nbdkit memory 1G`,
// including the lines the engine prints before the report.

func load(t *testing.T, name string) *Output {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestParseMixed(t *testing.T) {
	out := load(t, "randrw70-4k-qd32.nbd.json")
	if out.Version != "fio-3.33" {
		t.Errorf("Version = %q", out.Version)
	}
	if len(out.Jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(out.Jobs))
	}
	j := out.Jobs[0]
	if j.Name != "randrw70-4k-qd32" || j.Error != 0 {
		t.Errorf("job %q error %d", j.Name, j.Error)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"read.iops", j.Read.IOPS, 30632.183908},
		{"read.io_bytes", float64(j.Read.IOBytes), 251064320},
		{"read.bw_bytes", j.Read.BwBytes, 125469425},
		{"write.iops", j.Write.IOPS, 13049.975012},
		{"write.io_bytes", float64(j.Write.IOBytes), 106958848},
		{"job_runtime", float64(j.RuntimeMS), 2000},
		{"usr_cpu", j.UsrCPU, 6.65},
		{"sys_cpu", j.SysCPU, 30.05},
		{"read.clat_ns.N", float64(j.Read.Clat.N), 61295},
	}
	for _, c := range checks {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		lat  Latency
		p    float64
		want float64
	}{
		{j.Read.Clat, 50, 296960},
		{j.Read.Clat, 99, 6979584},
		{j.Read.Clat, 99.99, 73924608},
		{j.Read.Clat, 99.2, 10027008}, // not a key: the next one up (99.5)
	} {
		got, ok := c.lat.Percentile(c.p)
		if !ok || got != c.want {
			t.Errorf("Percentile(%v) = %v, %v, want %v", c.p, got, ok, c.want)
		}
	}
	if _, ok := j.Trim.Clat.Percentile(50); ok {
		t.Error("trim has no I/O, yet Percentile(50) reported one")
	}
	if v, ok := out.Option(&j, "rwmixread"); !ok || v != "70" {
		t.Errorf("Option(rwmixread) = %q, %v", v, ok)
	}
	if v, ok := out.Option(&j, "bs"); !ok || v != "4k" {
		t.Errorf("Option(bs) = %q, %v (from [global])", v, ok)
	}
	if v, ok := out.Option(&j, "ioengine"); !ok || v != "nbd" {
		t.Errorf("Option(ioengine) = %q, %v (from the command line)", v, ok)
	}
	if got, want := j.CPUSeconds(), (6.65+30.05)/100*2; !near(got, want) {
		t.Errorf("CPUSeconds() = %v, want %v", got, want)
	}
	if got := j.Bytes(); got != 251064320+106958848 {
		t.Errorf("Bytes() = %d", got)
	}
}

func TestParsePrepAndVerify(t *testing.T) {
	out := load(t, "randread-4k-qd1-verify.nbd.json")
	var names []string
	for _, j := range out.Jobs {
		names = append(names, j.Name)
	}
	if want := []string{"prep-randread-4k-qd1-verify", "randread-4k-qd1-verify"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("jobs %v, want %v", names, want)
	}
	prep, rd := out.Jobs[0], out.Jobs[1]
	if prep.Write.IOBytes != 64<<20 || prep.Read.IOBytes != 0 {
		t.Errorf("prep moved r=%d w=%d, want w=64 MiB", prep.Read.IOBytes, prep.Write.IOBytes)
	}
	if rd.Read.IOBytes != 64<<20 || rd.Write.IOBytes != 0 || rd.GroupID != 1 {
		t.Errorf("read job r=%d w=%d group %d", rd.Read.IOBytes, rd.Write.IOBytes, rd.GroupID)
	}
	if v, _ := out.Option(&rd, "iodepth"); v != "1" {
		t.Errorf("read job iodepth %q, want 1", v)
	}
}

func TestParseWriteOnly(t *testing.T) {
	out := load(t, "seqwrite-128k-qd8.nbd.json")
	j := out.Jobs[0]
	if j.Read.IOBytes != 0 || j.Write.IOBytes == 0 {
		t.Errorf("r=%d w=%d, want only writes", j.Read.IOBytes, j.Write.IOBytes)
	}
	if _, ok := j.Read.Clat.Percentile(50); ok {
		t.Error("read clat percentile reported for a write-only job")
	}
	if p50, ok := j.Write.Clat.Percentile(50); !ok || p50 <= 0 {
		t.Errorf("write clat p50 = %v, %v", p50, ok)
	}
}

func TestParseVerifyFailure(t *testing.T) {
	out := load(t, "verify-failure.nbd.json")
	if len(out.Jobs) != 1 || out.Jobs[0].Error != 84 {
		t.Fatalf("want one job with error 84 (EILSEQ), got %+v", out.Jobs)
	}
}

func TestParseBad(t *testing.T) {
	for _, in := range []string{
		"",
		"fio: connected to NBD server\n",
		"fio: engine nbd not loadable\nfio: failed to load engine\n",
		"{\n \"fio version\" : \"fio-3.33\",\n \"jobs\" : [ {\"jobname\": ",
		"{\n}\n",
		"{\n\"jobs\": 5}\n",
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		}
	}
	if _, err := Parse([]byte("no report\n")); !errors.Is(err, ErrNoJSON) {
		t.Errorf("Parse without JSON: %v, want ErrNoJSON", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"randrw70-4k-qd32.nbd.json", "verify-failure.nbd.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("{\n\"jobs\":[{\"read\":{\"clat_ns\":{\"percentile\":{\"x\":1}}}}]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := Parse(b)
		if err != nil {
			return
		}
		for i := range out.Jobs {
			out.Jobs[i].Read.Clat.Percentile(50)
			out.Jobs[i].CPUSeconds()
		}
	})
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"4k", 4096, false},
		{"128K", 128 << 10, false},
		{"1m", 1 << 20, false},
		{"64mi", 64 << 20, false},
		{"1G", 1 << 30, false},
		{"4096", 4096, false},
		{"4kb", 4096, false},
		{"", 0, true},
		{"k", 0, true},
		{"-4k", 0, true},
		{"4x", 0, true},
	} {
		got, err := ParseSize(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestArgs(t *testing.T) {
	c := Command{
		JobFile:   "examples/fio/randread-4k-qd1.fio",
		Engine:    []string{"ioengine=nbd", "uri=nbd+unix:///?socket=/tmp/x.sock"},
		Runtime:   3 * time.Second,
		TimeBased: true,
		Extra:     []string{"group_reporting=0"},
	}
	want := []string{
		"--output-format=json", "--lat_percentiles=1", "--runtime=3000ms", "--time_based=1",
		"--ioengine=nbd", "--uri=nbd+unix:///?socket=/tmp/x.sock",
		"--group_reporting=0", "examples/fio/randread-4k-qd1.fio",
	}
	if got := c.Args(); !reflect.DeepEqual(got, want) {
		t.Errorf("Args() = %q\nwant %q", got, want)
	}
	if got := c.String(); got != "fio --output-format=json --lat_percentiles=1 --runtime=3000ms --time_based=1 --ioengine=nbd '--uri=nbd+unix:///?socket=/tmp/x.sock' --group_reporting=0 examples/fio/randread-4k-qd1.fio" {
		t.Errorf("String() = %s", got)
	}
	c.Wrap = []string{"nsenter", "--net=/proc/1/ns/net", "--"}
	if got := c.String(); !strings.HasPrefix(got, "nsenter --net=/proc/1/ns/net -- fio --output-format=json ") {
		t.Errorf("String() under Wrap = %s", got)
	}
}

// TestRunNull runs fio itself with its null engine when fio is installed.
func TestRunNull(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed")
	}
	dir := t.TempDir()
	res, err := Run(context.Background(), Command{
		Engine: []string{"ioengine=null"},
		Extra:  []string{"name=null", "rw=randread", "bs=4k", "size=64m"},
		Dir:    dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := res.Output; len(out.Jobs) != 1 || out.Jobs[0].Read.IOBytes != 64<<20 {
		t.Errorf("null job: %+v", out.Jobs)
	}
	// fio's own CPU time, from wait4: at least its start-up, at most the
	// wall time on every CPU.
	if res.CPU <= 0 || res.Wall <= 0 || res.CPU > res.Wall*time.Duration(runtime.NumCPU()) {
		t.Errorf("fio CPU %v over %v wall", res.CPU, res.Wall)
	}
	// Under a wrapper (env execs fio): the same run.
	res, err = Run(context.Background(), Command{
		Engine: []string{"ioengine=null"},
		Extra:  []string{"name=null", "rw=randread", "bs=4k", "size=1m"},
		Dir:    dir,
		Wrap:   []string{"env", "NVMEOF_BENCH_WRAPPED=1"},
	})
	if err != nil || len(res.Output.Jobs) != 1 || res.Output.Jobs[0].Read.IOBytes != 1<<20 {
		t.Errorf("null job under env: %v", err)
	}
	if _, err := Run(context.Background(), Command{Engine: []string{"ioengine=no-such-engine"}, Extra: []string{"name=x", "size=1m"}}); err == nil {
		t.Error("fio with an unknown engine: no error")
	}
}
