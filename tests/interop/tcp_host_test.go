package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// tcpHostSideEnv makes TestTCPHostSide run: it is the program
// TestTCPHostAgainstKernelTarget starts on the host side of the namespace
// (this test binary again).
const tcpHostSideEnv = "NVMEOF_TCP_HOST_SIDE"

// TestTCPHostAgainstKernelTarget: our NVMe/TCP host (fabrics/tcp) against
// the guest kernel's nvmet-tcp, 6.1 and 6.12 (guest/initiator-target.sh with only a TCP
// port, 192.0.2.2:4420, the guest's 2 MiB pattern at offset 0 of a 64 MiB
// null_blk namespace). On the host side, this test binary again
// (TestTCPHostSide), once without digests, once with header and data
// digests and once with data digests only: discovery lists the subsystem
// on trtype tcp; connect with two I/O queues; Identify names the kernel's
// controller; the guest's pattern reads back; writes of 512 B to 2 MiB+4
// KiB (in the capsule up to IOCCSZ, through R2T/H2CData above it) and 16
// writers at once read back equal; the SMART log; a controller reset
// (every queue dialed again) after which the data reads back; the
// previous round's data (written with other digests) reads back; flush
// and disconnect. Then, through the nvmeof command: discover -g -G,
// connect -G -i 2 -Q 32, id-ctrl, list, disconnect, connect-all -g,
// disconnect-all; on 6.12 the target has an RDMA port as well, and
// nvmeof connect -t rdma adds a second path to the TCP one. The guest then
// finds no controller lost by keep-alive expiry and no digest error in
// its log.
func TestTCPHostAgainstKernelTarget(t *testing.T) {
	for _, k := range []struct {
		name, kernel string
		mixed        bool // an RDMA port too, and a multipath check
	}{{"6.1", "", false}, {"6.12", "6.12", true}} {
		t.Run(k.name, func(t *testing.T) { tcpHostAgainstKernel(t, k.kernel, k.mixed) })
	}
}

func tcpHostAgainstKernel(t *testing.T, kernel string, mixed bool) {
	dir := kpeer.RequireKernel(t, kernel)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cli := buildBinary(t, "./cmd/nvmeof")
	trtypes := "tcp"
	if mixed {
		trtypes = "rdma tcp"
	}
	res := kpeer.Do(t, dir, kpeer.Run{
		Kernel:  kernel,
		Scripts: []string{guestScript(t, "initiator-target.sh")},
		HostTest: fmt.Sprintf("%s=1 %s=%s %s=%d exec %s -test.run '^TestTCPHostSide$' -test.v -test.timeout 10m",
			tcpHostSideEnv, tcpHostCLIEnv, cli, tcpHostMixedEnv, b2i(mixed), self),
		Env:     []string{"NQN=" + kpeerNQN, "PATTERN_MB=2", "TARGET_TRTYPES=" + trtypes},
		Timeout: 12 * time.Minute,
	})
	defer keepOnFailure(t, res, "")
	hostLog, guest := res.Log("host-test.log"), res.Log("a/script.log")
	checkLines(t, "host", hostLog)
	checkLines(t, "guest", guest)
	if res.Err != nil || !strings.Contains(hostLog, "RESULT: PASS") {
		t.Fatalf("session failed: %v\nhost:\n%s\nguest:\n%s", res.Err, tail(hostLog, 60), tail(guest, 60))
	}
	for _, want := range []string{"PASS: no keep-alive expiry", "PASS: kernel target up"} {
		if !strings.Contains(guest, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
	for _, bad := range []string{"digest error", "nvmet_tcp: failed", "queue error"} {
		if strings.Contains(guest, bad) {
			t.Errorf("guest log has %q", bad)
		}
	}
	for _, want := range []string{"PASS: round hdgst=false ddgst=false", "PASS: round hdgst=true ddgst=true", "PASS: round hdgst=false ddgst=true",
		"PASS: nvmeof discover -t tcp", "PASS: nvmeof connect -t tcp", "PASS: nvmeof id-ctrl", "PASS: nvmeof disconnect",
		"PASS: nvmeof connect-all -t tcp", "PASS: nvmeof disconnect-all"} {
		if !strings.Contains(hostLog, want) {
			t.Errorf("host log lacks %q", want)
		}
	}
	if mixed && !strings.Contains(hostLog, "PASS: nvmeof connect -t rdma beside -t tcp") {
		t.Errorf("host log lacks the TCP and RDMA paths of one namespace")
	}
}

// tcpHostCLIEnv names the nvmeof command TestTCPHostSide checks as well;
// with tcpHostMixedEnv=1 the target has an RDMA port too, and the command
// adds an RDMA path beside the TCP one.
const (
	tcpHostCLIEnv   = "NVMEOF_TCP_CLI"
	tcpHostMixedEnv = "NVMEOF_TCP_MIXED"
)

// TestTCPHostSide is the host side of TestTCPHostAgainstKernelTarget, run
// in the kernel-peer namespace; it skips unless NVMEOF_TCP_HOST_SIDE=1.
// It prints PASS:/FAIL: lines and RESULT: for the driving test, and
// always releases the guest.
func TestTCPHostSide(t *testing.T) {
	if os.Getenv(tcpHostSideEnv) != "1" {
		t.Skip("the host side of TestTCPHostAgainstKernelTarget (set " + tcpHostSideEnv + "=1 in the kernel-peer namespace)")
	}
	signal := os.Getenv("KPEER_SIGNAL")
	defer func() {
		if t.Failed() {
			fmt.Println("RESULT: FAIL")
		} else {
			fmt.Println("RESULT: PASS")
		}
		if signal != "" {
			_ = os.WriteFile(filepath.Join(signal, "release"), nil, 0o644)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	addr := fabrics.Address{Transport: fabrics.TransportTCP, Addr: netip.MustParseAddr(kpeer.GuestAAddr), ServiceID: 4420}
	rounds := []struct{ hdgst, ddgst bool }{{false, false}, {true, true}, {false, true}}
	var prev []byte // the previous round's data at prevOff
	var prevOff int64
	for k, r := range rounds {
		name := fmt.Sprintf("hdgst=%v ddgst=%v", r.hdgst, r.ddgst)
		data, off, ok := tcpHostRound(ctx, t, addr, r.hdgst, r.ddgst, k, prev, prevOff)
		if !ok {
			fmt.Printf("FAIL: round %s\n", name)
			t.FailNow()
		}
		fmt.Printf("PASS: round %s\n", name)
		prev, prevOff = data, off
	}

	// Failures in one line, quickly.
	d := tcp.NewDialer(tcp.HostConfig{})
	opts := initiator.Options{CommandTimeout: 20 * time.Second, ConnectTimeout: 10 * time.Second,
		SubsystemNQN: "nqn.2014-08.org.nvmexpress:kpeer-no-such-subsystem"}
	start := time.Now()
	if _, err := initiator.Connect(ctx, d, addr, opts); err == nil {
		fmt.Println("FAIL: connect to an unknown NQN succeeded")
		t.Fail()
	} else {
		fmt.Printf("PASS: unknown NQN refused in %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	}
	start = time.Now()
	opts.SubsystemNQN = kpeerNQN
	noPort := addr
	noPort.ServiceID = 4421
	if _, err := initiator.Connect(ctx, d, noPort, opts); !errors.Is(err, initiator.ErrUnreachable) {
		fmt.Printf("FAIL: connect to a port without listener: %v, want ErrUnreachable\n", err)
		t.Fail()
	} else {
		fmt.Printf("PASS: port 4421 without listener: unreachable in %v\n", time.Since(start).Round(time.Millisecond))
	}
	if cli := os.Getenv(tcpHostCLIEnv); cli != "" {
		tcpHostCLI(t, cli)
	}
}

// tcpHostCLI runs nvmeof discover, connect, id-ctrl, list, disconnect,
// connect-all and disconnect-all with -t tcp and nvme-cli's flags.
func tcpHostCLI(t *testing.T, cli string) {
	runDir := t.TempDir()
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		full := append([]string{"--run-dir", runDir}, args...)
		fmt.Printf("$ nvmeof %s\n", strings.Join(full, " "))
		cmd := exec.CommandContext(ctx, cli, full...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code == 0 {
			code = -1
		}
		fmt.Print(o.String(), e.String())
		return o.String(), code
	}
	check := func(ok bool, format string, args ...any) {
		if ok {
			fmt.Printf("PASS: "+format+"\n", args...)
		} else {
			fmt.Printf("FAIL: "+format+"\n", args...)
			t.Fail()
		}
	}
	namespaces := func() int {
		out, code := run("list", "-o", "json")
		var v any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			return -1
		}
		return countJSONNamespaces(v)
	}
	target := []string{"-t", "tcp", "-a", kpeer.GuestAAddr, "-s", "4420"}

	out, code := run(append([]string{"discover", "-g", "-G"}, target...)...)
	check(code == 0 && strings.Contains(out, kpeerNQN) && strings.Contains(out, "tcp"), "nvmeof discover -t tcp -g -G: exit %d", code)

	out, code = run(append([]string{"connect", "--map", "none", "-n", kpeerNQN, "-G", "-i", "2", "-Q", "32"}, target...)...)
	lines := strings.Fields(strings.TrimSpace(out))
	check(code == 0 && len(lines) > 0, "nvmeof connect -t tcp -G -i 2 -Q 32: exit %d", code)
	if len(lines) > 0 {
		out, code = run("id-ctrl", lines[len(lines)-1])
		check(code == 0 && strings.Contains(out, "kpeer-linux-nvmet"), "nvmeof id-ctrl %s: exit %d", lines[len(lines)-1], code)
	}
	n := namespaces()
	check(n == 1, "nvmeof list while connected: %d namespace(s)", n)
	if os.Getenv(tcpHostMixedEnv) == "1" {
		// A second path to the subsystem over RDMA (soft RoCE from
		// 192.0.2.1): one namespace, a tcp and an rdma path.
		_, code = run("connect", "--map", "none", "-n", kpeerNQN, "-t", "rdma", "-a", kpeer.GuestAAddr, "-s", "4420")
		out, lcode := run("list", "-o", "json")
		var v any
		paths := map[string]int{}
		if lcode == 0 && json.Unmarshal([]byte(out), &v) == nil {
			countJSONPaths(v, paths)
		}
		n = namespaces()
		check(code == 0 && n == 1 && paths["tcp"] == 1 && paths["rdma"] == 1,
			"nvmeof connect -t rdma beside -t tcp: exit %d, %d namespace(s), paths %v", code, n, paths)
	}
	_, code = run("disconnect", "-n", kpeerNQN)
	check(code == 0, "nvmeof disconnect: exit %d", code)
	n = namespaces()
	check(n == 0, "nvmeof list after disconnect: %d namespace(s)", n)

	_, code = run(append([]string{"connect-all", "--map", "none", "-g"}, target...)...)
	n = namespaces()
	check(code == 0 && n == 1, "nvmeof connect-all -t tcp -g: exit %d, %d namespace(s)", code, n)
	_, code = run("disconnect-all")
	n = namespaces()
	check(code == 0 && n == 0, "nvmeof disconnect-all: exit %d, %d namespace(s) left", code, n)
}

// countJSONPaths counts the "Paths" entries of a list -o json document by
// their "Transport".
func countJSONPaths(v any, by map[string]int) {
	switch x := v.(type) {
	case map[string]any:
		for k, y := range x {
			if a, ok := y.([]any); ok && k == "Paths" {
				for _, e := range a {
					if m, ok := e.(map[string]any); ok {
						tr, _ := m["Transport"].(string)
						by[tr]++
					}
				}
				continue
			}
			countJSONPaths(y, by)
		}
	case []any:
		for _, y := range x {
			countJSONPaths(y, by)
		}
	}
}

// countJSONNamespaces counts the namespaces of a list -o json document:
// the objects with a "NameSpace" field (the flat Devices[] list), or the
// entries of "Namespaces" arrays (nvme-cli's tree).
func countJSONNamespaces(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["NameSpace"]; ok {
			return 1
		}
		for k, y := range x {
			if a, ok := y.([]any); ok && strings.EqualFold(k, "Namespaces") {
				n += len(a)
				continue
			}
			n += countJSONNamespaces(y)
		}
	case []any:
		for _, y := range x {
			n += countJSONNamespaces(y)
		}
	}
	return n
}

// tcpHostRound is one connection with the given digests; k picks where it
// writes. It checks the previous round's data (prev at prevOff) and
// returns its own.
func tcpHostRound(ctx context.Context, t *testing.T, addr fabrics.Address, hdgst, ddgst bool, k int, prev []byte, prevOff int64) ([]byte, int64, bool) {
	ok := true
	fail := func(format string, args ...any) {
		fmt.Printf("FAIL: "+format+"\n", args...)
		ok = false
	}
	pass := func(format string, args ...any) { fmt.Printf("PASS: "+format+"\n", args...) }
	log := hclog.New(&hclog.LoggerOptions{Name: "tcp", Level: hclog.Info, Output: os.Stdout})
	d := tcp.NewDialer(tcp.HostConfig{HeaderDigest: hdgst, DataDigest: ddgst, Logger: log})
	opts := initiator.Options{CommandTimeout: 30 * time.Second, Logger: log}

	entries, err := initiator.Discover(ctx, d, addr, opts)
	if err != nil {
		fail("discover %s: %v", addr, err)
		return nil, 0, false
	}
	found := false
	for _, e := range entries {
		fmt.Printf("INFO: discovery entry: trtype %v adrfam %v traddr %s trsvcid %s subnqn %s\n", e.TRType, e.AdrFam, e.TRADDR, e.TRSVCID, e.SubNQN)
		if e.SubNQN == kpeerNQN && e.TRType == fabrics.TRTypeTCP && e.TRADDR == kpeer.GuestAAddr && e.TRSVCID == "4420" {
			found = true
		}
	}
	if !found {
		fail("discovery: no tcp entry for %s at %s:4420", kpeerNQN, kpeer.GuestAAddr)
		return nil, 0, false
	}
	pass("discover: %s on tcp %s:4420 (%d entries)", kpeerNQN, kpeer.GuestAAddr, len(entries))

	opts.SubsystemNQN, opts.NrIOQueues, opts.QueueSize = kpeerNQN, 2, 64
	c, err := initiator.Connect(ctx, d, addr, opts)
	if err != nil {
		fail("connect: %v", err)
		return nil, 0, false
	}
	defer func() {
		if err := c.Close(); err != nil {
			fail("disconnect: %v", err)
		} else {
			pass("disconnect")
		}
	}()
	id := c.IdentifyData()
	if mn, sn := strings.TrimSpace(id.MN()), strings.TrimSpace(id.SN()); mn != "kpeer-linux-nvmet" || sn != "kpeer0001" {
		fail("identify: model %q serial %q", mn, sn)
		return nil, 0, false
	}
	pass("connect: model %q serial %q, IOCCSZ %d (in-capsule data up to %d bytes), MDTS %d, %d namespace(s)",
		strings.TrimSpace(id.MN()), strings.TrimSpace(id.SN()), id.IOCCSZ(), int(id.IOCCSZ())*16-64, id.MDTS(), len(c.Namespaces()))
	ns, err := c.Namespace(1)
	if err != nil {
		fail("namespace 1: %v", err)
		return nil, 0, false
	}
	if ns.Size() != 64<<20 {
		fail("namespace size %d", ns.Size())
		return nil, 0, false
	}
	got := make([]byte, 2<<20)
	if _, err := ns.ReadAt(got, 0); err != nil {
		fail("read the guest's pattern: %v", err)
		return nil, 0, false
	}
	var want bytes.Buffer
	for i := range 2 * 2048 {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	if !bytes.Equal(got, want.Bytes()) {
		fail("the guest's pattern reads back different")
		return nil, 0, false
	}
	pass("read the guest's 2 MiB pattern")

	if prev != nil {
		back := make([]byte, len(prev))
		if _, err := ns.ReadAt(back, prevOff); err != nil || !bytes.Equal(back, prev) {
			fail("the previous round's %d bytes at %d: err %v, equal %v", len(prev), prevOff, err, err == nil && bytes.Equal(back, prev))
			return nil, 0, false
		}
		pass("the previous round's %d bytes at %d MiB read back", len(prev), prevOff>>20)
	}

	// Sizes across the in-capsule limit and MDTS; each at its own offset.
	sizes := []int{512, 4096, 8192, 16384, 65536, 131072, 1 << 20, 2<<20 + 4096}
	off := int64(8+k*8) << 20
	total := 0
	for _, n := range sizes {
		total += n
	}
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i*131+i>>12) ^ byte(k*37)
	}
	pos := 0
	for _, n := range sizes {
		if _, err := ns.WriteAt(data[pos:pos+n], off+int64(pos)); err != nil {
			fail("write %d bytes at %d: %v", n, off+int64(pos), err)
			return nil, 0, false
		}
		back := make([]byte, n)
		if _, err := ns.ReadAt(back, off+int64(pos)); err != nil || !bytes.Equal(back, data[pos:pos+n]) {
			fail("read back %d bytes at %d: err %v", n, off+int64(pos), err)
			return nil, 0, false
		}
		pos += n
	}
	pass("wrote and read back %d sizes from 512 B to 2 MiB+4 KiB (%d bytes) at %d MiB", len(sizes), total, off>>20)

	// 16 writers at once, 4 KiB to 64 KiB each, on both I/O queues.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	base := off + 6<<20
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				n := 4096 << (i % 5)
				at := base + int64(w)<<17 + int64(i%2)<<16
				b := make([]byte, n)
				for j := range b {
					b[j] = byte(w*13 + i*7 + j)
				}
				back := make([]byte, n)
				_, err := ns.WriteAt(b, at)
				if err == nil {
					_, err = ns.ReadAt(back, at)
				}
				if err != nil || !bytes.Equal(b, back) {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("writer %d I/O %d (%d bytes at %d): err %v", w, i, n, at, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		fail("concurrent writers: %s", strings.Join(errs, "; "))
		return nil, 0, false
	}
	pass("16 concurrent writers, 8 verified writes each")
	if _, err := c.SMARTLog(ctx); err != nil {
		fail("SMART log: %v", err)
		return nil, 0, false
	}
	// A controller reset: every queue is dialed again.
	if err := c.Reset(ctx); err != nil {
		fail("reset: %v", err)
		return nil, 0, false
	}
	back := make([]byte, len(data))
	if _, err := ns.ReadAt(back, off); err != nil || !bytes.Equal(back, data) {
		fail("read back after the reset: err %v", err)
		return nil, 0, false
	}
	pass("SMART log; reset (new connections); %d bytes read back after it", len(data))
	if err := ns.Flush(); err != nil {
		fail("flush: %v", err)
		return nil, 0, false
	}
	return data, off, ok
}
