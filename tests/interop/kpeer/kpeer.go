// Package kpeer drives ../shared/kernel-peer from Go tests: it boots Linux
// guests under QEMU in a private network namespace (guest a = 192.0.2.2,
// guest b = 192.0.2.3, the host side = 192.0.2.1) and runs guest scripts
// against programs of ours started on the host side of that namespace.
//
// Tests skip when kernel-peer cannot run here (not root, no QEMU, no image)
// unless NVMEOF_INTEROP=1 is set, as .ci/run does: then they fail instead.
package kpeer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sessions bounds the kernel-peer sessions running at once: each guest is a
// single-vCPU QEMU under TCG and a session is mostly one busy guest, so on
// a 2-core machine two sessions side by side finish the suite in about
// half the time. NVMEOF_INTEROP_PARALLEL sets the bound (1 runs them one
// after another, as before).
var sessions = make(chan struct{}, parallelSessions())

func parallelSessions() int {
	if n, err := strconv.Atoi(os.Getenv("NVMEOF_INTEROP_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return 2
}

// Addresses inside the kernel-peer namespace.
const (
	HostAddr   = "192.0.2.1"
	GuestAAddr = "192.0.2.2"
	GuestBAddr = "192.0.2.3"
)

// Dir returns the kernel-peer directory: $KPEER_DIR, or shared/kernel-peer
// beside the repository.
func Dir() (string, error) {
	if d := os.Getenv("KPEER_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "kernel-peer"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("kpeer: repository root not found above %s", wd)
		}
	}
}

// Cache returns the image cache directory of the default (6.1) kernel.
func Cache() string { return CacheOf("") }

// CacheOf returns the image cache directory of a kernel series ("" for
// the default, "6.12" for KPEER_KERNEL=6.12), as build.sh and run.sh
// choose it.
func CacheOf(kernel string) string {
	if c := os.Getenv("KPEER_CACHE"); c != "" && kernel == "" {
		return c
	}
	if kernel != "" {
		if c := os.Getenv("KPEER_CACHE_" + strings.ReplaceAll(kernel, ".", "_")); c != "" {
			return c
		}
		return "/var/cache/kernel-peer-" + kernel
	}
	return "/var/cache/kernel-peer"
}

// Require skips (or, with NVMEOF_INTEROP=1, fails) the test when
// kernel-peer cannot run, and returns its directory. A *testing.T is
// marked parallel: each session has its own network namespace, bridge and
// share, and Do bounds how many run at once, so the test must not use
// t.Setenv or other process-wide state (Run.HostEnv passes environment to
// run.sh).
func Require(t testing.TB) string {
	t.Helper()
	return RequireKernel(t, "")
}

// RequireKernel is Require for the image of a kernel series ("6.12"); the
// Run must then name the same Kernel.
func RequireKernel(t testing.TB, kernel string) string {
	t.Helper()
	missing := func(why string) {
		if os.Getenv("NVMEOF_INTEROP") == "1" {
			t.Fatalf("kernel-peer interop required (NVMEOF_INTEROP=1) but %s", why)
		}
		t.Skipf("kernel-peer interop not possible here: %s (set NVMEOF_INTEROP=1 to make this a failure)", why)
	}
	if testing.Short() {
		t.Skip("kernel-peer interop skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		missing("not root")
	}
	dir, err := Dir()
	if err != nil {
		missing(err.Error())
	}
	if _, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil {
		missing("no kernel-peer at " + dir)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		missing("qemu-system-x86_64 not installed")
	}
	for _, f := range []string{"vmlinuz", "initramfs.img"} {
		if _, err := os.Stat(filepath.Join(CacheOf(kernel), f)); err != nil {
			missing("no kernel-peer image in " + CacheOf(kernel) + " (run " + buildCmd(kernel) + ")")
		}
	}
	if pt, ok := t.(*testing.T); ok && cap(sessions) > 1 {
		pt.Parallel()
	}
	return dir
}

func buildCmd(kernel string) string {
	if kernel == "" {
		return "kernel-peer/build.sh"
	}
	return "KPEER_KERNEL=" + kernel + " kernel-peer/build.sh"
}

// Run describes one kernel-peer session.
type Run struct {
	Kernel   string   // kernel series of the guests: "" (6.1) or "6.12"
	Scripts  []string // guest scripts: a path, or a name in kernel-peer/guest
	HostCmd  string   // started in the namespace before the guests boot
	HostTest string   // run in the namespace once a guest signals target-ready
	Env      []string // K=V exported to the guest scripts
	Capture  string   // pcapng file for everything on the bridge
	Timeout  time.Duration
	SMP      int    // guest vCPUs (run.sh default 1)
	MemMiB   int    // guest memory (run.sh default 1024)
	Share    string // share directory (default: a new temporary one)
	// HostEnv is K=V added to run.sh's own environment (KPEER_QEMU_ARGS,
	// KPEER_NIC_OFFLOAD, …), as opposed to Env for the guest scripts.
	HostEnv []string

	retried bool // Do ran it again after an emulator fault
}

// Result is what a session left behind.
type Result struct {
	Share  string // the share directory (out/ holds the logs)
	Output string // run.sh's own output
	Err    error  // non-nil when run.sh exited non-zero
}

// Log returns a log file from the share's out/ directory ("a/script.log",
// "host-cmd.log", …), or a note that it is missing.
func (r *Result) Log(name string) string {
	b, err := os.ReadFile(filepath.Join(r.Share, "out", name))
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	return string(b)
}

// Do runs the session and returns its result; it never outlives the
// test's deadline by more than run.sh's own timeout handling.
func Do(t testing.TB, dir string, r Run) *Result {
	t.Helper()
	if r.Timeout == 0 {
		r.Timeout = 5 * time.Minute
	}
	share := r.Share
	if share == "" {
		share = t.TempDir()
	}
	args := []string{filepath.Join(dir, "run.sh"), "--timeout", fmt.Sprint(int(r.Timeout.Seconds())), "--share", share}
	if r.SMP > 0 {
		args = append(args, "--smp", fmt.Sprint(r.SMP))
	}
	if r.MemMiB > 0 {
		args = append(args, "--mem", fmt.Sprint(r.MemMiB))
	}
	// no_timer_check: a guest booting under TCG on a loaded machine can
	// miss the kernel's IO-APIC timer check and panic ("IO-APIC + timer
	// doesn't work!"); cloud images boot with it for the same reason.
	args = append(args, "--append", "no_timer_check")
	if r.HostCmd != "" {
		args = append(args, "--host-cmd", r.HostCmd)
	}
	if r.HostTest != "" {
		args = append(args, "--host-test", r.HostTest)
	}
	if r.Capture != "" {
		args = append(args, "--capture", r.Capture)
	}
	for _, e := range r.Env {
		args = append(args, "--env", e)
	}
	args = append(args, r.Scripts...)
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = append(os.Environ(), r.HostEnv...)
	if r.Kernel != "" {
		cmd.Env = append(cmd.Env, "KPEER_KERNEL="+r.Kernel, "KPEER_CACHE="+CacheOf(r.Kernel))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	waited := time.Now()
	sessions <- struct{}{}
	if w := time.Since(waited); w > time.Second {
		t.Logf("kernel-peer: waited %s for a session slot", w.Round(time.Second))
	}
	err := cmd.Run()
	<-sessions
	res := &Result{Share: share, Output: out.String(), Err: err}
	t.Logf("kernel-peer %s: %v\n%s", strings.Join(r.Scripts, " "), err, lastLines(res.Output, 30))
	if err != nil && !r.retried {
		if f := emulatorFault(share); f != "" {
			t.Logf("kernel-peer: the session failed on a fault of the emulator, not of the code under test (%s); running it once more", f)
			r.retried = true
			// run.sh clears each guest's out/ but not the signals the
			// first run's guests left.
			_ = os.RemoveAll(filepath.Join(share, "signal"))
			return Do(t, dir, r)
		}
	}
	return res
}

// emulatorFaults are guest kernel messages of faults of QEMU under TCG, not
// of the code under test: the guest's virtio-net transmit queue stalls
// (seen once in a suite run: the guest's netdev watchdog fired, its
// traffic stopped, and the test hung until its timeout; alone it passed).
var emulatorFaults = []string{"NETDEV WATCHDOG"}

// emulatorFault returns the first guest log line of a session's share that
// shows an emulator fault, or "".
func emulatorFault(share string) string {
	logs, _ := filepath.Glob(filepath.Join(share, "out", "*", "*.txt"))
	more, _ := filepath.Glob(filepath.Join(share, "out", "*", "*.log"))
	for _, name := range append(logs, more...) {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, f := range emulatorFaults {
				if strings.Contains(line, f) {
					return filepath.Base(filepath.Dir(name)) + "/" + filepath.Base(name) + ": " + strings.TrimSpace(line)
				}
			}
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
