package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Report is what a starting daemon tells the command that started it,
// once: its state after connecting and mapping, or why it failed.
type Report struct {
	Error string `json:"error,omitempty"`
	State *State `json:"state,omitempty"`
}

// The file descriptors a daemon inherits (os/exec ExtraFiles start at 3).
const (
	lockFD   = 3
	reportFD = 4
)

// StartDaemon runs path with args as the daemon of slot and waits at most
// timeout for its Report. The daemon runs in a new session (setsid) with
// its working directory at /, stdin from /dev/null, stdout and stderr
// appended to the slot's log file (which stays after the daemon exits), the slot's lock file as descriptor 3
// (so it holds the lock after this process exits), the write end of the
// report pipe as descriptor 4 and extra as descriptors 5 on (for what must
// not appear in the daemon's command line, such as a secret in a pipe).
//
// On success the slot belongs to the daemon: StartDaemon closes this
// process's copy of the lock and returns the reported state. On failure
// (an error report, the daemon's death, or the timeout, after which the
// daemon is killed) it releases the slot and returns the error.
func StartDaemon(path string, args []string, slot *Slot, timeout time.Duration, extra ...*os.File) (*State, error) {
	if fi, err := os.Stat(slot.LogPath()); err == nil && fi.Size() > MaxLogSize {
		_ = os.Rename(slot.LogPath(), slot.LogPath()+".1")
	}
	logf, err := os.OpenFile(slot.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		slot.Release()
		return nil, fmt.Errorf("session: log file: %w", err)
	}
	var logStart int64 // where this daemon's lines start
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		slot.Release()
		return nil, fmt.Errorf("session: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = append([]*os.File{slot.Lock, pw}, extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	pw.Close()
	logf.Close()
	if err != nil {
		pr.Close()
		slot.Release()
		return nil, fmt.Errorf("session: starting the daemon: %w", err)
	}
	type result struct {
		rep Report
		err error
	}
	got := make(chan result, 1)
	go func() {
		defer pr.Close()
		line, err := readLine(bufio.NewReader(pr))
		if err != nil {
			got <- result{err: err}
			return
		}
		var r Report
		if err := json.Unmarshal(line, &r); err != nil {
			got <- result{err: fmt.Errorf("bad report: %w", err)}
			return
		}
		got <- result{rep: r}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var res result
	select {
	case res = <-got:
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
		slot.Release()
		return nil, fmt.Errorf("no answer from the connection daemon within %v (killed it)", timeout)
	}
	if res.err == nil && res.rep.Error == "" && res.rep.State != nil {
		// The daemon holds the lock through its own descriptor.
		slot.Lock.Close()
		slot.Lock = nil
		return res.rep.State, nil
	}
	// Failed: wait for the daemon to exit (it does after reporting), then
	// remove what is left.
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	var msg string
	switch {
	case res.rep.Error != "":
		msg = res.rep.Error
	case res.err == nil || errors.Is(res.err, io.EOF):
		msg = "the connection daemon exited without a report"
	default:
		msg = "the connection daemon failed: " + fmt.Sprint(res.err)
	}
	if res.rep.Error == "" {
		if tail := logTail(slot.LogPath(), logStart); tail != "" {
			msg += ": " + tail
		}
	}
	slot.Release()
	return nil, errors.New(msg)
}

// logTail returns the last non-empty line of a log file written after
// offset start.
func logTail(path string, start int64) string {
	b, err := os.ReadFile(path)
	if err != nil || start > int64(len(b)) {
		return ""
	}
	b = b[start:]
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) == 0 {
		return ""
	}
	return string(bytes.TrimSpace(lines[len(lines)-1]))
}

// Inherited returns the slot and the report pipe a daemon started by
// StartDaemon inherited (descriptors 3 and 4), for controller name in
// runDir.
func Inherited(runDir, name string) (*Slot, *Reporter, error) {
	if !validName(name) {
		return nil, nil, fmt.Errorf("session: bad controller name %q", name)
	}
	lock := os.NewFile(lockFD, "lock")
	rep := os.NewFile(reportFD, "report")
	if lock == nil || rep == nil {
		return nil, nil, errors.New("session: not started by StartDaemon (descriptors 3 and 4 missing)")
	}
	if !sameFile(lock, lockPath(runDir, name)) {
		return nil, nil, fmt.Errorf("session: descriptor 3 is not %s", lockPath(runDir, name))
	}
	// Inherited descriptors are not close-on-exec: a program the daemon
	// runs (a mount helper that stays, say) would hold the lock, and the
	// daemon would look alive after it died.
	syscall.CloseOnExec(lockFD)
	syscall.CloseOnExec(reportFD)
	s := &Slot{Name: name, RunDir: runDir, Dir: filepath.Join(runDir, name), Lock: lock}
	return s, &Reporter{f: rep}, nil
}

// Reporter sends a daemon's one report to the command that started it.
type Reporter struct{ f *os.File }

// Send writes the report and closes the pipe; later calls do nothing.
func (r *Reporter) Send(rep Report) error {
	if r == nil || r.f == nil {
		return nil
	}
	defer func() { r.f.Close(); r.f = nil }()
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = r.f.Write(append(b, '\n'))
	return err
}
