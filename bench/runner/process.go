package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture's ABI.
const clockTicks = 100

// Server is a process the runner started (nbdkit, nvmetd) and stops by its
// PID.
type Server struct {
	Name string
	// PID is the server's own process: the one started, or, when it runs
	// under wrappers (perf stat, a new network namespace), the wrappers'
	// child running the server's binary.
	PID int
	// Grace is how long Stop waits after SIGTERM before SIGKILL (default
	// 5 s).
	Grace time.Duration
	// Killed is set by Stop when the process outlived Grace and got
	// SIGKILL.
	Killed bool
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // set when done is closed
	log    *os.File
	// perfOut is the perf stat -I output counting the server's system
	// calls, perfT0 about when perf started counting; empty when not
	// counted.
	perfOut string
	perfT0  time.Time
}

// serverWrap runs a server under other commands.
type serverWrap struct {
	// Prefix is the command line the server's runs under, each part
	// exec'ing or starting the next (unshare ... sh -c 'exec "$@"', perf
	// stat ... --, setpriv --pdeathsig TERM --). The server is then the
	// started process's descendant whose executable is the server's.
	Prefix []string
	// PerfOut is the perf stat -I output file when the prefix counts the
	// server's system calls with perf.
	PerfOut string
}

// startServer starts argv[0] with argv[1:], under w's prefix if any, its
// output going to logPath. The process started gets SIGTERM if the thread
// that started it exits (Pdeathsig), as it does when the runner dies without
// stopping it; a wrapper prefix must pass that on (setpriv --pdeathsig).
func startServer(name string, argv []string, logPath string, w serverWrap) (*Server, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: no command", name)
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	full := append(append([]string(nil), w.Prefix...), argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, strings.Join(full, " "), err)
	}
	s := &Server{Name: name, PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logf,
		perfOut: w.PerfOut, perfT0: t0}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	if len(w.Prefix) > 0 {
		pid, err := s.findDescendant(argv[0], bin, 10*time.Second)
		if err != nil {
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
			<-s.done
			logf.Close()
			return nil, err
		}
		s.PID = pid
	}
	return s, nil
}

// findDescendant waits until the process started, or a child or grandchild
// of it, runs bin (given as name to exec, found at path), and returns its
// PID. A process runs bin when its executable is bin, or, for a script, when
// bin is its second argument (the kernel runs "interpreter script args").
func (s *Server) findDescendant(name, path string, timeout time.Duration) (int, error) {
	want, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", s.Name, err)
	}
	runs := func(pid int) bool {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		if fi, err := os.Stat(filepath.Join(dir, "exe")); err == nil && os.SameFile(fi, want) {
			return true
		}
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			return false
		}
		args := strings.Split(string(b), "\x00")
		return len(args) > 1 && (args[1] == name || args[1] == path)
	}
	root := s.cmd.Process.Pid
	deadline := time.Now().Add(timeout)
	for {
		queue := []int{root}
		for depth := 0; depth < 4 && len(queue) > 0; depth++ {
			var next []int
			for _, p := range queue {
				if runs(p) {
					return p, nil
				}
				next = append(next, children(p)...)
			}
			queue = next
		}
		if s.exited() {
			return 0, fmt.Errorf("%s (pid %d) exited before starting %s: %v%s", s.Name, root, name, s.err, s.logTail())
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: no process running %s under pid %d after %v%s", s.Name, name, root, timeout, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// children returns the PIDs of pid's children (all its threads').
func children(pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// Syscalls returns the system calls the server entered between from and
// to, from its perf stat -I output, each interval pro rata of its overlap
// (so to within about one interval), waiting up to wait for perf to write
// the interval that holds to.
func (s *Server) Syscalls(from, to time.Time, wait time.Duration) (float64, error) {
	if s.perfOut == "" {
		return -1, errors.New("not counted")
	}
	a, b := from.Sub(s.perfT0).Seconds(), to.Sub(s.perfT0).Seconds()
	deadline := time.Now().Add(wait)
	for {
		data, err := os.ReadFile(s.perfOut)
		if err != nil {
			return -1, fmt.Errorf("%s syscalls: %w", s.Name, err)
		}
		lines, err := parsePerfLines(data)
		if err != nil {
			return -1, fmt.Errorf("%s syscalls: %w", s.Name, err)
		}
		n, ok := windowCount(lines, a, b)
		if ok {
			return n, nil
		}
		if time.Now().After(deadline) || s.exited() {
			return -1, fmt.Errorf("%s syscalls: perf output ends before the run did", s.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports whether the process has ended.
func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitFor polls ready until it returns true, the process exits or timeout.
func (s *Server) waitFor(ctx context.Context, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		if s.exited() {
			return fmt.Errorf("%s (pid %d) exited before it was ready: %v%s", s.Name, s.PID, s.err, s.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) not ready after %v%s", s.Name, s.PID, timeout, s.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", s.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// logHas reports whether a line of the server's log holds every one of subs.
func (s *Server) logHas(subs ...string) bool {
	b, err := os.ReadFile(s.log.Name())
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, sub := range subs {
			if !strings.Contains(line, sub) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// logTail returns the end of the server's log for an error message.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log.Name())
	if err != nil || len(b) == 0 {
		return ""
	}
	t := strings.TrimSpace(string(b))
	if len(t) > 400 {
		t = "…" + t[len(t)-400:]
	}
	return ": " + t
}

// CPUSeconds returns the process's user+system CPU time, all threads.
func (s *Server) CPUSeconds() (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID), "stat"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", s.Name, err)
	}
	return parseStatCPU(string(b))
}

// CtxSwitches returns the voluntary and involuntary context switches of the
// server's threads now (/proc/PID/task/TID/status); a thread that ended
// takes its count with it.
func (s *Server) CtxSwitches() (float64, error) {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(s.PID), "task", "*", "status"))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("%s: no threads in /proc/%d/task", s.Name, s.PID)
	}
	var n float64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		n += parseCtxSwitches(string(b))
	}
	return n, nil
}

// parseCtxSwitches sums voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches in the text of /proc/PID/status.
func parseCtxSwitches(status string) float64 {
	var n float64
	for _, l := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			n += x
		}
	}
	return n
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/PID/stat. The command name, field 2, is in parentheses and may hold
// spaces and parentheses itself, so fields are counted after the last ')'.
func parseStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no ')' after the command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[14-3], 10, 64)
	stime, err2 := strconv.ParseUint(f[15-3], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// Stop ends the server by its PID: SIGTERM, then SIGKILL after Grace (to
// the wrappers too, if any), and waits for the process started to exit
// (wrappers exit with the server).
func (s *Server) Stop() error {
	defer s.log.Close()
	if s.exited() {
		return nil
	}
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGTERM pid %d: %w", s.Name, s.PID, err)
	}
	grace := s.Grace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(grace):
	}
	s.Killed = true
	for _, pid := range []int{s.PID, s.cmd.Process.Pid} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%s: SIGKILL pid %d: %w", s.Name, pid, err)
		}
	}
	<-s.done
	return nil
}

// Nbdkit is `nbdkit memory SIZE` serving over TCP on loopback (the
// comparison issue #12 defines) or on a Unix socket.
type Nbdkit struct {
	*Server
	// Socket is the Unix socket's path; empty when serving over TCP on
	// Addr (host:port).
	Socket string
	Addr   string
}

// nbdkitTCPAddr is the loopback address nbdkit listens on over TCP.
const nbdkitTCPAddr = "127.0.0.1"

// StartNbdkit starts `nbdkit -f --exit-with-parent memory size`, under w
// if set, listening on a Unix socket in dir (unixSocket) or on a free TCP
// port of 127.0.0.1, and waits until it accepts. nbdkit stays in the
// foreground, so the PID is nbdkit's own, and it exits by itself when its
// parent (the runner, or perf under it) dies.
func StartNbdkit(ctx context.Context, nbdkit, dir, size string, unixSocket bool, w serverWrap) (*Nbdkit, error) {
	logPath := filepath.Join(dir, "nbdkit.log")
	if unixSocket {
		sock := filepath.Join(dir, "nbdkit.sock")
		s, err := startNbdkit(ctx, nbdkit, logPath, size, []string{"-U", sock}, w, func() bool {
			fi, err := os.Stat(sock)
			return err == nil && fi.Mode()&os.ModeSocket != 0
		})
		if err != nil {
			return nil, err
		}
		return &Nbdkit{Server: s, Socket: sock}, nil
	}
	// nbdkit cannot report a port the kernel chose: take a free one and
	// try again should another program bind it first.
	var err error
	for range 3 {
		var port int
		if port, err = freeTCPPort(nbdkitTCPAddr); err != nil {
			return nil, err
		}
		var n *Nbdkit
		n, err = startNbdkitTCP(ctx, nbdkit, logPath, size, nbdkitTCPAddr, port, w, func(addr string) error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return n, nil
		}
	}
	return nil, err
}

// startNbdkitTCP starts nbdkit (as StartNbdkit does) listening on TCP
// host:port, and waits until dial connects to it.
func startNbdkitTCP(ctx context.Context, nbdkit, logPath, size, host string, port int, w serverWrap, dial func(addr string) error) (*Nbdkit, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	s, err := startNbdkit(ctx, nbdkit, logPath, size, []string{"-i", host, "-p", strconv.Itoa(port)}, w,
		func() bool { return dial(addr) == nil })
	if err != nil {
		return nil, err
	}
	return &Nbdkit{Server: s, Addr: addr}, nil
}

// startNbdkit runs nbdkit serving memory of size, listening as listen
// says, and waits for ready.
func startNbdkit(ctx context.Context, nbdkit, logPath, size string, listen []string, w serverWrap, ready func() bool) (*Server, error) {
	if nbdkit == "" {
		nbdkit = "nbdkit"
	}
	argv := append(append([]string{nbdkit, "-f", "--exit-with-parent"}, listen...), "memory", size)
	s, err := startServer("nbdkit", argv, logPath, w)
	if err != nil {
		return nil, err
	}
	if err := s.waitFor(ctx, 10*time.Second, ready); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// freeTCPPort returns a TCP port of host that was free a moment ago.
func freeTCPPort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free TCP port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URI is the NBD URI of the export, for fio's nbd engine.
func (n *Nbdkit) URI() string {
	if n.Socket != "" {
		return "nbd+unix:///?socket=" + n.Socket
	}
	return "nbd://" + n.Addr + "/"
}

// Engine returns fio's engine options for this server.
func (n *Nbdkit) Engine() []string { return []string{"ioengine=nbd", "uri=" + n.URI()} }
