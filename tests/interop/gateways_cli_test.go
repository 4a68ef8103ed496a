package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/initiator/session"
)

// TestNvmeofTwoGatewaysDevice is the user's view of the same scenario as
// TestInitiatorTwoGateways: `nvmeof connect` to each of two nvmetd
// gateways of one subsystem (soft RoCE on loopback, a shared file,
// disjoint cntlid ranges, ANA optimized / non-optimized) gives one mapped
// block device (FUSE + loop) with two paths; verified direct I/O on the
// device runs while the optimized gateway is SIGKILLed and restarted and
// while an ANA change by reload moves the I/O, without an error.
func TestNvmeofTwoGatewaysDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (soft RoCE, FUSE and loop devices)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	needTargetANA(t)
	nvmetd := buildBinary(t, "./cmd/nvmetd")
	nvmeof := buildBinary(t, "./cmd/nvmeof")
	dir := t.TempDir()
	file := filepath.Join(dir, "shared.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 16<<20); err != nil {
		t.Fatal(err)
	}
	g1 := &mpGateway{t: t, bin: nvmetd, dir: dir, addr: "127.71.10.1", cmin: 1, file: file, state: "optimized"}
	g2 := &mpGateway{t: t, bin: nvmetd, dir: dir, addr: "127.71.10.3", cmin: 1001, file: file, state: "non-optimized"}
	for _, g := range []*mpGateway{g1, g2} {
		g.start()
		t.Cleanup(g.kill)
	}
	runDir := filepath.Join(dir, "run")
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(nvmeof, append([]string{"--run-dir", runDir}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("nvmeof %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
		}
		return out.String(), err
	}
	t.Cleanup(func() {
		_, _ = cli("disconnect-all")
		if t.Failed() {
			b, _ := os.ReadFile(session.LogPath(runDir, "nvmeof0"))
			t.Logf("daemon log:\n%s\ngateway 1:\n%s\ngateway 2:\n%s", lastLines(string(b), 60), g1.logTail(), g2.logTail())
		}
	})
	const nqn = mpGwNQN
	type connected struct {
		Device     string
		Namespaces []struct {
			NSID   uint32
			Device string
		}
	}
	connect := func(addr string) connected {
		t.Helper()
		var out string
		mpEventually(t, "connect "+addr, 30*time.Second, func() bool {
			var err error
			out, err = cli("connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", "127.71.10.2",
				"-n", nqn, "--map", "fuse", "-c", "1", "-o", "json")
			return err == nil
		})
		var c connected
		if err := json.Unmarshal([]byte(out), &c); err != nil || len(c.Namespaces) != 1 {
			t.Fatalf("connect %s printed %q: %v", addr, out, err)
		}
		return c
	}
	first, second := connect(g1.addr), connect(g2.addr)
	if first.Device != "nvmeof0" || second.Device != "nvmeof0" || first.Namespaces[0].Device == "" || second.Namespaces[0].Device != first.Namespaces[0].Device {
		t.Fatalf("connects: %+v then %+v; want one controller name and one device", first, second)
	}
	devPath := first.Namespaces[0].Device
	t.Logf("one device %s for both paths", devPath)
	listSubsys := func() string {
		out, err := cli("list-subsys")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := listSubsys(); !strings.Contains(out, " +- nvmeof0 rdma traddr=127.71.10.1,trsvcid=4420 live optimized\n") ||
		!strings.Contains(out, " +- nvmeof0c1 rdma traddr=127.71.10.3,trsvcid=4420 live non-optimized\n") {
		t.Fatalf("list-subsys:\n%s", out)
	}
	// pathState returns the daemon's view of path i: state and ANA state.
	pathState := func(i int) (string, string) {
		live, _, _ := session.Scan(runDir)
		for _, e := range live {
			if e.State != nil && len(e.State.Paths) > i {
				return e.State.Paths[i].State, e.State.Paths[i].ANAState
			}
		}
		return "", ""
	}

	fd, err := unix.Open(devPath, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	var ops, errs atomic.Uint64
	var stop atomic.Bool
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(base int64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(base), 9))
			wb := alignedBlock(64 << 10)
			rb := alignedBlock(64 << 10)
			for seq := byte(1); !stop.Load(); seq++ {
				n := 4096 << rng.IntN(5)
				off := base + rng.Int64N(int64((4<<20-n)/4096+1))*4096
				for j := range wb[:n] {
					wb[j] = seq ^ byte(j>>3) ^ byte(off>>12)
				}
				var err error
				if _, err = unix.Pwrite(fd, wb[:n], off); err == nil {
					if _, err = unix.Pread(fd, rb[:n], off); err == nil && !bytes.Equal(rb[:n], wb[:n]) {
						err = fmt.Errorf("data mismatch: %d bytes at %d", n, off)
					}
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err))
					continue
				}
				ops.Add(1)
			}
		}(int64(w) * 4 << 20)
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	progress := func(what string) {
		t.Helper()
		n := ops.Load()
		mpEventually(t, what, 60*time.Second, func() bool { return ops.Load() >= n+30 })
	}
	check := func(what string) {
		t.Helper()
		if n := errs.Load(); n > 0 {
			t.Fatalf("%s: %d I/O errors on %s, the first: %v", what, n, devPath, firstErr.Load())
		}
	}
	progress("I/O on the device")

	t.Log("SIGKILL of gateway 1")
	g1.kill()
	mpEventually(t, "path nvmeof0 down", 30*time.Second, func() bool { st, _ := pathState(0); return st != "live" })
	progress("I/O with gateway 1 down")
	check("gateway 1 down")

	t.Log("restarting gateway 1")
	g1.start()
	mpEventually(t, "path nvmeof0 back", 60*time.Second, func() bool { st, ana := pathState(0); return st == "live" && ana == "optimized" })
	progress("I/O after gateway 1 returned")
	check("gateway 1 back")

	t.Log("reload: gateway 2 optimized, gateway 1 inaccessible")
	g2.reload("optimized")
	g1.reload("inaccessible")
	mpEventually(t, "ANA change in list-subsys", 30*time.Second, func() bool {
		out := listSubsys()
		return strings.Contains(out, "traddr=127.71.10.1,trsvcid=4420 live inaccessible") && strings.Contains(out, "traddr=127.71.10.3,trsvcid=4420 live optimized")
	})
	progress("I/O after the ANA change")
	stop.Store(true)
	wg.Wait()
	check("ANA change")
	t.Logf("%d verified direct I/Os on %s, no error", ops.Load(), devPath)
	unix.Close(fd)
	fd = -1
	if _, err := cli("disconnect", "-n", nqn); err != nil {
		t.Fatal(err)
	}
	if live, _, _ := session.Scan(runDir); len(live) != 0 {
		t.Fatalf("%d daemons left after disconnect", len(live))
	}
}

// alignedBlock returns n bytes aligned for O_DIRECT.
func alignedBlock(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) % 4096
	return b[off : off+n]
}
