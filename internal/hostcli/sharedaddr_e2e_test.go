package hostcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/netnstest"
	"github.com/nvmeof/nvmeof/target/server"
)

// sharedTargetHCL is an in-process target on one address serving one
// subsystem per (NQN, backing file) pair.
func sharedTargetHCL(addr string, subs [][2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "port \"p0\" {\n  transport = \"rdma\"\n  provider = \"soft\"\n  address = %q\n  service = 4420\n}\n", addr)
	for _, s := range subs {
		fmt.Fprintf(&b, "subsystem %q {\n  ports = [\"p0\"]\n  allow_any_host = true\n  namespace \"1\" {\n    backend = \"file\"\n    path = %q\n    size = \"4MiB\"\n  }\n}\n", s[0], s[1])
	}
	return b.String()
}

// startFileTargets serves sharedTargetHCL(addr, subs) in this process
// until the test ends.
func startFileTargets(t *testing.T, addr string, subs [][2]string) {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(sharedTargetHCL(addr, subs)), "shared.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{Logger: hclog.NewNullLogger()})
	if err := srv.Apply(tree); err != nil {
		srv.Close()
		t.Fatalf("target on %s: %v", addr, err)
	}
	t.Cleanup(func() { srv.Close() })
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) % 4096
	return b[off : off+n]
}

// pattern fills b with data that names subsystem i, round r and offset off.
func pattern(b []byte, i, r int, off int64) {
	for j := range b {
		b[j] = byte(i*31+r*7) ^ byte((off+int64(j))>>9) ^ byte(j)
	}
}

// TestSharedHostAddress connects three controllers (two targets, three
// subsystems on file namespaces) from one host address, each through its
// own connection daemon and so its own shared soft RoCE device, maps each
// namespace (FUSE + loop) and writes and reads verified data through all
// three. It then SIGKILLs one daemon: the other two go on, the dead one's
// mount and loop device are cleaned up, its subsystem connects again
// from the same address; after disconnect-all each backing file holds
// what was written to its namespace.
func TestSharedHostAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (shared soft RoCE devices, FUSE and loop devices)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	const a, b, host = "127.62.9.1", "127.62.9.3", "127.62.9.2"
	dir := t.TempDir()
	nqns := []string{"nqn.2026-12.io.nvmeof:shared-a1", "nqn.2026-12.io.nvmeof:shared-a2", "nqn.2026-12.io.nvmeof:shared-b1"}
	addrs := []string{a, a, b}
	files := make([]string, 3)
	for i := range files {
		files[i] = filepath.Join(dir, fmt.Sprintf("ns%d.img", i))
	}
	startFileTargets(t, a, [][2]string{{nqns[0], files[0]}, {nqns[1], files[1]}})
	startFileTargets(t, b, [][2]string{{nqns[2], files[2]}})
	runDir := filepath.Join(dir, "run")
	cli := runDirCLI(t, runDir)
	type connected struct {
		Device     string
		Namespaces []struct{ Device string }
	}
	devs := make([]string, 3)
	names := make([]string, 3)
	connect := func(i int) {
		t.Helper()
		code, out, errs := cli("connect", "-t", "rdma", "-a", addrs[i], "-s", "4420", "--provider", "soft", "-w", host,
			"-n", nqns[i], "-q", tHost, "--map", "fuse", "--timeout", "30s", "-o", "json")
		if code != 0 {
			t.Fatalf("connect %s from %s: exit %d: %s", nqns[i], host, code, errs)
		}
		var c connected
		if err := json.Unmarshal([]byte(out), &c); err != nil || len(c.Namespaces) != 1 || c.Namespaces[0].Device == "" {
			t.Fatalf("connect %s printed %q: %v", nqns[i], out, err)
		}
		names[i], devs[i] = c.Device, c.Namespaces[0].Device
	}
	for i := range 3 {
		connect(i)
	}
	if names[0] == names[1] || names[1] == names[2] || names[0] == names[2] {
		t.Fatalf("controller names %v: want three", names)
	}
	// written[i] records what namespace i must hold: offset → round.
	written := []map[int64]int{{}, {}, {}}
	io := func(i, round int) {
		t.Helper()
		fd, err := unix.Open(devs[i], unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open %s: %v", devs[i], err)
		}
		defer unix.Close(fd)
		wb, rb := alignedBuf(64<<10), alignedBuf(64<<10)
		for k := range 8 {
			off := int64((round*8+k)%32) * (64 << 10)
			pattern(wb, i, round, off)
			if _, err := unix.Pwrite(fd, wb, off); err != nil {
				t.Fatalf("%s (%s): write at %d: %v", devs[i], nqns[i], off, err)
			}
			if _, err := unix.Pread(fd, rb, off); err != nil || !bytes.Equal(rb, wb) {
				t.Fatalf("%s (%s): read back at %d: %v, equal %v", devs[i], nqns[i], off, err, bytes.Equal(rb, wb))
			}
			written[i][off] = round
		}
	}
	for round := range 2 {
		for i := range 3 {
			io(i, round)
		}
	}

	// SIGKILL the daemon of the second controller.
	live, _, err := session.Scan(runDir)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, e := range live {
		if e.Name == names[1] && e.State != nil {
			pid = e.State.PID
		}
	}
	if pid == 0 {
		t.Fatalf("no daemon for %s among %d", names[1], len(live))
	}
	loopDev := devs[1]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d still there 30 s after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The others go on.
	io(0, 2)
	io(2, 2)
	// list cleans the dead daemon's entry up: no FUSE mount under its
	// directory, no loop device on it.
	if code, _, errs := cli("list"); code != 0 {
		t.Fatalf("list: exit %d: %s", code, errs)
	}
	if m := mountsBelow(runDir); len(m) != 2 {
		t.Errorf("FUSE mounts under the run directory after the kill: %v, want the two live daemons'", m)
	}
	if bf, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loopDev), "loop/backing_file")); err == nil && strings.HasPrefix(string(bf), runDir) {
		t.Errorf("%s still backed by %s after its daemon died", loopDev, bytes.TrimSpace(bf))
	}
	// The killed subsystem connects again from the same address.
	connect(1)
	io(1, 3)
	io(0, 3)

	if code, _, errs := cli("disconnect-all"); code != 0 {
		t.Fatalf("disconnect-all: exit %d: %s", code, errs)
	}
	want := make([]byte, 64<<10)
	for i, f := range files {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for off, round := range written[i] {
			pattern(want, i, round, off)
			if !bytes.Equal(got[off:off+int64(len(want))], want) {
				t.Errorf("backing file of %s: 64 KiB at %d do not hold round %d's data", nqns[i], off, round)
			}
		}
	}
}

// mountsBelow returns the mount points under dir.
func mountsBelow(dir string) []string {
	ms, err := session.Mounts()
	if err != nil {
		return []string{"(" + err.Error() + ")"}
	}
	var out []string
	for _, m := range ms {
		if strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

// TestConnectAllSharedAddress: connect-all with a discovery.conf naming
// two targets, one with two subsystems, from one host address connects
// all three subsystems (a daemon each, on one shared soft device address)
// and disconnect-all ends them.
func TestConnectAllSharedAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (shared soft RoCE devices)")
	}
	const a, b, host = "127.62.10.1", "127.62.10.3", "127.62.10.2"
	dir := t.TempDir()
	nqns := []string{"nqn.2026-12.io.nvmeof:all-a1", "nqn.2026-12.io.nvmeof:all-a2", "nqn.2026-12.io.nvmeof:all-b1"}
	startFileTargets(t, a, [][2]string{{nqns[0], filepath.Join(dir, "a1")}, {nqns[1], filepath.Join(dir, "a2")}})
	startFileTargets(t, b, [][2]string{{nqns[2], filepath.Join(dir, "b1")}})
	runDir := filepath.Join(dir, "run")
	cli := runDirCLI(t, runDir)
	conf := filepath.Join(dir, "discovery.conf")
	lines := fmt.Sprintf("--transport=rdma --traddr=%s --trsvcid=4420 --host-traddr=%s\n--transport=rdma --traddr=%s --trsvcid=4420 --host-traddr=%s\n", a, host, b, host)
	if err := os.WriteFile(conf, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli("connect-all", "--discovery-conf", conf, "--provider", "soft", "-q", tHost, "--map", "none", "--timeout", "30s"); code != 0 {
		t.Fatalf("connect-all: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	live, _, err := session.Scan(runDir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range live {
		if e.State != nil {
			got[e.State.SubsysNQN] = true
		}
	}
	for _, n := range nqns {
		if !got[n] {
			t.Errorf("connect-all did not connect %s (connected: %v)", n, got)
		}
	}
	if code, _, errs := cli("disconnect-all"); code != 0 {
		t.Fatalf("disconnect-all: exit %d: %s", code, errs)
	}
	if live, _, _ := session.Scan(runDir); len(live) != 0 {
		t.Fatalf("%d daemons after disconnect-all", len(live))
	}
}

// TestHostAddressHeldByRxe: where something binds UDP 4791 on every
// address without sharing it, as the kernel's rdma_rxe does, opening the
// host's soft device fails with the clear error (not a shared device
// joining it). The stand-in binds 0.0.0.0:4791 inside a network namespace
// of the test's.
func TestHostAddressHeldByRxe(t *testing.T) {
	p := netnstest.New(t, 0)
	var holder *net.UDPConn
	if err := netnstest.Do(p.B, func() (err error) {
		holder, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 4791})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var openErr error
	if err := netnstest.Do(p.B, func() error {
		dev, err := openSoft([]netip.Addr{netnstest.AddrB}, 0, nil, hclog.NewNullLogger())
		if dev != nil {
			dev.Close()
		}
		openErr = err
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if openErr == nil || !strings.Contains(openErr.Error(), "is taken") || !strings.Contains(openErr.Error(), "rdma_rxe") {
		t.Fatalf("open beside a socket holding 0.0.0.0:4791: %v", openErr)
	}
}
