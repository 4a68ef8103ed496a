package runner

import (
	"context"
	"errors"
	"fmt"
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
	PID  int
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
}

// startServer starts argv[0] with argv[1:], its output going to logPath. The
// process gets SIGTERM if the thread that started it exits (Pdeathsig), as it
// does when the runner dies without stopping it.
func startServer(name string, argv []string, logPath string) (*Server, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: no command", name)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, strings.Join(argv, " "), err)
	}
	s := &Server{Name: name, PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	return s, nil
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

// Stop ends the process by its PID: SIGTERM, then SIGKILL after Grace.
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
	if err := syscall.Kill(s.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: SIGKILL pid %d: %w", s.Name, s.PID, err)
	}
	<-s.done
	return nil
}

// Nbdkit is `nbdkit memory SIZE` serving on a Unix socket.
type Nbdkit struct {
	*Server
	Socket string
}

// StartNbdkit starts `nbdkit -f --exit-with-parent -U dir/nbdkit.sock memory
// size` and waits for its socket. nbdkit stays in the foreground, so the PID
// is nbdkit's own, and it exits by itself if the runner dies.
func StartNbdkit(ctx context.Context, nbdkit, dir, size string) (*Nbdkit, error) {
	if nbdkit == "" {
		nbdkit = "nbdkit"
	}
	sock := filepath.Join(dir, "nbdkit.sock")
	argv := []string{nbdkit, "-f", "--exit-with-parent", "-U", sock, "memory", size}
	s, err := startServer("nbdkit", argv, filepath.Join(dir, "nbdkit.log"))
	if err != nil {
		return nil, err
	}
	ready := func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}
	if err := s.waitFor(ctx, 10*time.Second, ready); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return &Nbdkit{Server: s, Socket: sock}, nil
}

// URI is the NBD URI of the export, for fio's nbd engine.
func (n *Nbdkit) URI() string { return "nbd+unix:///?socket=" + n.Socket }

// Engine returns fio's engine options for this server.
func (n *Nbdkit) Engine() []string { return []string{"ioengine=nbd", "uri=" + n.URI()} }
