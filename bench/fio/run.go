package fio

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Command is one fio invocation: a job file run with the engine, target and
// time bounds given on the command line. fio applies command-line options
// before the job file, as defaults the file's [global] and job sections may
// override (the verify job files set time_based=0 that way).
type Command struct {
	// Fio is the fio binary (default "fio").
	Fio string
	// JobFile is the job file to run. When it is empty, Extra must define a
	// command-line job (for example "name=prefill", "rw=write").
	JobFile string
	// Engine holds the engine and its options as name=value, in order:
	// {"ioengine=nbd", "uri=nbd+unix:///?socket=/tmp/nbd.sock"} or
	// {"ioengine=external:/path/engine.so", "traddr=127.0.0.1", ...}.
	Engine []string
	// Runtime, when set, bounds every job (fio's runtime); TimeBased makes
	// jobs loop over their area until then (time_based=1).
	Runtime   time.Duration
	TimeBased bool
	// Extra holds more name=value options, placed after the engine's.
	Extra []string
	// Dir is fio's working directory (default: the caller's), where fio
	// writes files of its own such as verify state on a failed verify. A
	// relative JobFile is taken relative to Dir.
	Dir string
	// Wrap, when set, is a command line fio runs under, each wrapper
	// exec'ing the next (nsenter --net=..., perf stat ... --): the process
	// started is Wrap[0], given the rest of Wrap, the fio binary and its
	// arguments.
	Wrap []string
}

// Args returns fio's arguments for c, without the binary.
func (c Command) Args() []string {
	// Total latency percentiles (submission to completion) as well as
	// completion latency: engines split the two at different points (fio's
	// nbd engine sends in ->queue, before fio stamps the issue time; ours and
	// libaio stamp it before sending), so only the total compares engines.
	args := []string{"--output-format=json", "--lat_percentiles=1"}
	if c.Runtime > 0 {
		args = append(args, fmt.Sprintf("--runtime=%dms", c.Runtime.Milliseconds()))
	}
	if c.TimeBased {
		args = append(args, "--time_based=1")
	}
	for _, o := range c.Engine {
		args = append(args, "--"+o)
	}
	for _, o := range c.Extra {
		args = append(args, "--"+o)
	}
	if c.JobFile != "" {
		args = append(args, c.JobFile)
	}
	return args
}

func (c Command) binary() string {
	if c.Fio == "" {
		return "fio"
	}
	return c.Fio
}

// argv returns the whole command line: Wrap, the fio binary, Args.
func (c Command) argv() []string {
	return append(append(append([]string(nil), c.Wrap...), c.binary()), c.Args()...)
}

// String returns the command line as a shell would take it (for logs).
func (c Command) String() string {
	var parts []string
	for _, a := range c.argv() {
		if strings.ContainsAny(a, " ?&;'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// Result is what one fio run left behind.
type Result struct {
	// Output is fio's report; nil when fio wrote none.
	Output *Output
	// Raw is fio's standard output as it was.
	Raw []byte
	// CPU is the fio process's user+system CPU time over the whole run,
	// from wait4's resource usage: all of its threads (an external
	// engine's own threads included, which fio's per-job usr_cpu and
	// sys_cpu leave out under --thread) and the job processes it forked
	// and waited for. Zero when fio did not run.
	// Under Wrap, the wrappers' own time counts too (wait4 of the
	// outermost one); perf stat and nsenter spend little.
	CPU time.Duration
	// CtxSwitches is the fio process's voluntary and involuntary context
	// switches over the run, from the same resource usage (all threads
	// and waited-for children); -1 when not known.
	CtxSwitches int64
	// Wall is the run's elapsed time.
	Wall time.Duration
}

// Run runs c and parses its report. When fio exits non-zero but still wrote a
// report (a verify failure does), Run returns both the report and an error.
// fio gets SIGKILL when the context is done, and (Pdeathsig) when the thread
// that started it exits, as it does when the caller's process dies: no fio
// outlives its caller.
func Run(ctx context.Context, c Command) (Result, error) {
	argv := c.argv()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	runErr := cmd.Run()
	res := Result{Raw: stdout.Bytes(), Wall: time.Since(t0), CtxSwitches: -1}
	if ps := cmd.ProcessState; ps != nil {
		res.CPU = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.CtxSwitches = ru.Nvcsw + ru.Nivcsw
		}
	}
	out, parseErr := Parse(res.Raw)
	res.Output = out
	if runErr != nil {
		return res, fmt.Errorf("fio %s: %w%s", c.JobFile, runErr, tail(stderr.Bytes(), res.Raw))
	}
	if parseErr != nil {
		return res, fmt.Errorf("fio %s: %w%s", c.JobFile, parseErr, tail(stderr.Bytes(), res.Raw))
	}
	for _, j := range out.Jobs {
		if j.Error != 0 {
			return res, fmt.Errorf("fio %s: job %s: error %d%s", c.JobFile, j.Name, j.Error, tail(stderr.Bytes(), res.Raw))
		}
	}
	return res, nil
}

// tail returns the last lines of fio's messages (stderr, and stdout lines
// starting with "fio:"), prefixed for an error message.
func tail(stderr, stdout []byte) string {
	var lines []string
	for _, l := range strings.Split(string(stdout), "\n") {
		if strings.HasPrefix(l, "fio:") && !strings.Contains(l, "connected to NBD server") {
			lines = append(lines, l)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(string(stderr)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	if len(lines) == 0 {
		return ""
	}
	return ": " + strings.Join(lines, "; ")
}

// Version returns fio's version string ("fio-3.33").
func Version(ctx context.Context, fio string) (string, error) {
	if fio == "" {
		fio = "fio"
	}
	b, err := exec.CommandContext(ctx, fio, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("fio --version: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
