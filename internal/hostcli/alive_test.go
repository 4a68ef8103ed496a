package hostcli

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcessAlive: this process runs; a child that exited and was not
// yet reaped (a zombie of one thread) does not, nor once it is reaped.
func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("no true(1): %v", err)
	}
	pid := cmd.Process.Pid
	// Wait for its exit without reaping it: it stays a zombie.
	if err := unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Error("a zombie of one thread is alive")
	}
	_ = cmd.Wait()
	if processAlive(pid) {
		t.Error("a reaped child is alive")
	}
}

// TestProcessAliveZombieLeader: a process whose main thread has exited
// (a zombie leader) while another thread runs still holds its files: it
// is alive until that thread has exited too.
func TestProcessAliveZombieLeader(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	// The main thread leaves through pthread_exit; a thread stays blocked
	// reading stdin, which the test closes to end it.
	cmd := exec.Command(py, "-c", "import threading,sys,ctypes; threading.Thread(target=sys.stdin.read).start(); ctypes.CDLL(None).pthread_exit(None)")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	zombie := func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		i := bytes.LastIndexByte(b, ')')
		return err == nil && i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
	}
	for end := time.Now().Add(10 * time.Second); !zombie(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the main thread did not exit in 10 s")
		}
	}
	if !processAlive(pid) {
		t.Fatal("a zombie leader with a thread still running is not alive")
	}
	in.Close()
	if err := unix.Waitid(unix.P_PID, pid, nil, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatal("alive after its last thread exited")
	}
	_ = cmd.Wait()
}
