package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary play a daemon started by StartDaemon:
// SESSION_TEST_DAEMON selects its behaviour.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SESSION_TEST_DAEMON"); mode != "" {
		os.Exit(fakeDaemon(mode))
	}
	os.Exit(m.Run())
}

func fakeDaemon(mode string) int {
	runDir, name := os.Args[1], os.Args[2]
	slot, rep, err := Inherited(runDir, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Programs the daemon runs must not inherit its lock: they would hold
	// it after the daemon died.
	for _, fd := range []int{lockFD, reportFD} {
		if f, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || f&unix.FD_CLOEXEC == 0 {
			rep.Send(Report{Error: fmt.Sprintf("inherited descriptor %d is not close-on-exec", fd)})
			return 4
		}
	}
	switch mode {
	case "ok":
		// Stay alive (holding the lock) until told to go by SIGUSR1
		// (watched before the report, which the test answers with it).
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGUSR1)
		st := &State{Name: slot.Name, PID: os.Getpid(), State: "live"}
		if err := WriteState(slot.StatePath(), st); err != nil {
			return 3
		}
		rep.Send(Report{State: st})
		select {
		case <-stop:
		case <-time.After(time.Minute): // the test is gone
		}
		slot.Release()
		return 0
	case "fail":
		rep.Send(Report{Error: "unknown subsystem nqn.x"})
		return 1
	case "die":
		fmt.Fprintln(os.Stderr, "fatal: something broke")
		return 1
	case "hang":
		// No report: StartDaemon kills the daemon at its timeout, long
		// before this minute (which only bounds an orphan).
		time.Sleep(time.Minute)
	}
	return 0
}

func TestAllocateAndScan(t *testing.T) {
	dir := t.TempDir()
	a, err := Allocate(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Allocate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "nvmeof0" || b.Name != "nvmeof1" {
		t.Fatalf("names %s, %s", a.Name, b.Name)
	}
	if err := WriteState(a.StatePath(), &State{Name: a.Name, SubsysNQN: "nqn.a"}); err != nil {
		t.Fatal(err)
	}
	live, stale, err := Scan(dir)
	if err != nil || len(live) != 2 || len(stale) != 0 {
		t.Fatalf("Scan: %v %v %v", live, stale, err)
	}
	if live[0].State == nil || live[0].State.SubsysNQN != "nqn.a" || live[1].State != nil {
		t.Errorf("states: %+v %+v", live[0].State, live[1].State)
	}
	// a's daemon dies: its lock is no longer held.
	a.Lock.Close()
	a.Lock = nil
	live, stale, err = Scan(dir)
	if err != nil || len(live) != 1 || live[0].Name != "nvmeof1" || !reflect.DeepEqual(stale, []string{"nvmeof0"}) {
		t.Fatalf("after a death: live %v stale %v err %v", live, stale, err)
	}
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale directory left: %v", err)
	}
	c, err := Allocate(dir)
	if err != nil || c.Name != "nvmeof0" {
		t.Fatalf("reallocation: %v %v", c, err)
	}
	// A stale lock found by Allocate itself is taken over.
	c.Lock.Close()
	c.Lock = nil
	d, err := Allocate(dir)
	if err != nil || d.Name != "nvmeof0" {
		t.Fatalf("takeover: %v %v", d, err)
	}
	d.Release()
	b.Release()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("left in the run directory: %v", ents)
	}
}

func TestParseDeviceName(t *testing.T) {
	tests := []struct {
		in   string
		ctrl string
		nsid uint32
		ok   bool
	}{
		{"nvmeof0", "nvmeof0", 0, true},
		{"nvmeof12", "nvmeof12", 0, true},
		{"/dev/nvmeof3n2", "nvmeof3", 2, true},
		{"nvmeof0n10", "nvmeof0", 10, true},
		{"nvmeof", "", 0, false},
		{"nvmeof01", "", 0, false},
		{"nvmeof0n0", "", 0, false},
		{"nvmeof0n", "", 0, false},
		{"nvmeofn1", "", 0, false},
		{"nvme0n1", "", 0, false},
		{"/dev/loop3", "", 0, false},
	}
	for _, tc := range tests {
		c, n, ok := ParseDeviceName(tc.in)
		if c != tc.ctrl || n != tc.nsid || ok != tc.ok {
			t.Errorf("ParseDeviceName(%q) = %q, %d, %v; want %q, %d, %v", tc.in, c, n, ok, tc.ctrl, tc.nsid, tc.ok)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	in := "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"40 36 7:3 / /mnt/with\\040space rw shared:9 - ext4 /dev/loop3 rw\n" +
		"41 36 0:55 / /run/nvmeof/nvmeof0/n1/fuse rw,nosuid - fuse.nvmeof nvmeof rw\n" +
		"garbage\n"
	got := parseMountInfo([]byte(in))
	want := []Mount{
		{Major: 98, Minor: 0, Point: "/mnt2", FSType: "ext3", Source: "/dev/root"},
		{Major: 7, Minor: 3, Point: "/mnt/with space", FSType: "ext4", Source: "/dev/loop3"},
		{Major: 0, Minor: 55, Point: "/run/nvmeof/nvmeof0/n1/fuse", FSType: "fuse.nvmeof", Source: "nvmeof"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountInfo:\n got %+v\nwant %+v", got, want)
	}
	if !within("/run/nvmeof/nvmeof0/n1/fuse", "/run/nvmeof/nvmeof0") || within("/run/nvmeof/nvmeof01", "/run/nvmeof/nvmeof0") {
		t.Error("within")
	}
}

func TestControlRoundTrip(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, SocketFile)
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Serve(ln, time.Second, func(r Request) Response {
			switch r.Op {
			case OpState:
				return Response{State: &State{Name: "nvmeof0"}}
			case OpIdentify:
				return Response{Data: make([]byte, 4096)}
			}
			return Response{Error: "no such thing"}
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := Call(ctx, sock, Request{Op: OpState})
	if err != nil || resp.State == nil || resp.State.Name != "nvmeof0" {
		t.Fatalf("state: %+v %v", resp, err)
	}
	resp, err = Call(ctx, sock, Request{Op: OpIdentify, NSID: 1})
	if err != nil || len(resp.Data) != 4096 {
		t.Fatalf("identify: %v", err)
	}
	if _, err := Call(ctx, sock, Request{Op: "bogus"}); err == nil || err.Error() != "no such thing" {
		t.Fatalf("error response: %v", err)
	}
	ln.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := Call(ctx, sock, Request{Op: OpState}); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("call without daemon: %v", err)
	}
}

func TestStartDaemon(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mode    string
		timeout time.Duration
		wantErr string
	}{
		{"ok", 10 * time.Second, ""},
		{"fail", 10 * time.Second, "unknown subsystem nqn.x"},
		{"die", 10 * time.Second, "exited without a report: fatal: something broke"},
		{"hang", 500 * time.Millisecond, "no answer from the connection daemon within 500ms"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			slot, err := Allocate(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("SESSION_TEST_DAEMON", tc.mode)
			st, err := StartDaemon(exe, []string{dir, slot.Name}, slot, tc.timeout)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("StartDaemon: %v, want %q", err, tc.wantErr)
				}
				if left := leftBehind(dir, slot.Name); len(left) != 0 {
					t.Errorf("left after failure: %v", left)
				}
				if tc.mode == "die" {
					if b, err := os.ReadFile(LogPath(dir, slot.Name)); err != nil || !strings.Contains(string(b), "fatal: something broke") {
						t.Errorf("the dead daemon's log is not kept: %v %q", err, b)
					}
				}
				return
			}
			if err != nil || st == nil || st.State != "live" {
				t.Fatalf("StartDaemon: %+v %v", st, err)
			}
			// The daemon holds the name after this process let go.
			live, _, _ := Scan(dir)
			if len(live) != 1 || live[0].State == nil || live[0].State.PID != st.PID {
				t.Fatalf("Scan: %+v", live)
			}
			// Tell the daemon to go and wait for it to exit (it released
			// its slot first); StartDaemon's goroutine reaps it, so its
			// exit is watched through a pidfd.
			pidfd, err := unix.PidfdOpen(st.PID, 0)
			if err != nil {
				t.Fatalf("pidfd_open(%d): %v", st.PID, err)
			}
			defer unix.Close(pidfd)
			if err := syscall.Kill(st.PID, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			for {
				n, err := unix.Poll(fds, 10_000)
				if err == unix.EINTR {
					continue
				}
				if err != nil || n == 0 {
					t.Fatalf("daemon did not exit: %v", err)
				}
				break
			}
			if left := leftBehind(dir, slot.Name); len(left) != 0 {
				t.Fatalf("daemon exited without releasing its slot: %v", left)
			}
		})
	}
}

// leftBehind lists what is in dir besides the log file of name, which
// stays after its daemon exits.
func leftBehind(dir, name string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Name() != name+LogSuffix {
			out = append(out, e.Name())
		}
	}
	return out
}
