package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/rdma/wire"
	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// RoCEv2 over IPv6 against the Linux kernel (rdma_rxe, nvme-rdma) under
// kernel-peer. The namespace has IPv6 off (run.sh); the host command
// turns it on for the bridge alone and gives it v6HostAddr, the guest
// (booted with KPEER_IPV6=1) gives its eth0 v6GuestAddr. Nothing leaves
// the namespace: 2001:db8::/32 is the documentation prefix.
const (
	v6HostAddr  = "2001:db8::1"
	v6GuestAddr = "2001:db8::2"
	v6GuestGID  = "2001:0db8:0000:0000:0000:0000:0000:0002"
)

// v6HostSetup is the shell prefix of a host command that enables IPv6 on
// the namespace's bridge and adds v6HostAddr to it (no DAD, so it can be
// bound at once).
const v6HostSetup = `sysctl -qw "net.ipv6.conf.$KPEER_BRIDGE.disable_ipv6=0" && ` +
	`ip -6 addr add ` + v6HostAddr + `/64 dev "$KPEER_BRIDGE" nodad && `

// TestIPv6KernelHostAgainstNvmetd: nvmetd on soft RoCEv2 at
// [2001:db8::1]:4420 on the host side; the guest kernel's nvme-rdma host
// (guest/kernel-host-ipv6.sh, then kernel-peer's kernel-host.sh) discovers
// and connects over IPv6, reads Identify, SMART and properties, writes a
// pattern with direct I/O, reads it back, runs fio with verification and
// disconnects. The backing file must hold the guest's pattern, and the
// capture on the bridge must hold only IPv6 RoCEv2 packets, every one of
// them (the kernel's and ours) with an ICRC that our code verifies, the
// kernel's CM REQ with an rdma_cm header of IP version 6, and no packet
// the kernel dropped for a bad ICRC (rxe counters in the guest log).
func TestIPv6KernelHostAgainstNvmetd(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	cfg := fmt.Sprintf(`
log_level = "debug"
port "kpeer6" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer6"]
  allow_any_host = true
  serial         = "NVMEOFKPEER6"
  model          = "nvmeof-interop-ipv6"
  namespace "1" {
    backend    = "file"
    path       = %q
    size       = "64MiB"
    block_size = 512
  }
}
`, v6HostAddr, kpeerNQN, img)
	cfgPath := filepath.Join(work, "nvmetd.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	capPath := filepath.Join(work, "ipv6-kernel-host.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{guestScript(t, "kernel-host-ipv6.sh")},
		HostCmd: v6HostSetup + fmt.Sprintf("exec %s --config %s", bin, cfgPath),
		Env: []string{"KPEER_IPV6=1", "NQN=" + kpeerNQN, "IO_MB=2", "FIO_MB=2", "DISCOVER_TRIES=10",
			"GUEST_ADDR6=" + v6GuestAddr, "GUEST_GID6=" + v6GuestGID, "TARGET_ADDR6=" + v6HostAddr},
		Capture: capPath,
		// Under TCG on a busy machine the guest alone took 6 minutes to
		// reach nvme discover (module loads); the I/O takes seconds.
		Timeout: 15 * time.Minute,
	})
	defer keepOnFailure(t, res, capPath)
	script := res.Log("a/script.log")
	checkLines(t, "guest", script)
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", tail(script, 80))
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 80))
		t.Fatalf("kernel host against nvmetd over IPv6 failed: %v", res.Err)
	}
	for _, want := range []string{"PASS: rxe GID", "PASS: " + v6HostAddr + " answers ping", "discover: " + kpeerNQN} {
		if !strings.Contains(script, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
	if strings.Contains(script, "traddr:  192.0.2") || strings.Contains(script, "traddr: 192.0.2") {
		t.Errorf("the discovery log shows an IPv4 port")
	}
	for _, l := range strings.Split(script, "\n") {
		if f := strings.Fields(l); len(f) == 2 && (f[0] == "rcvd_icrc_err" || f[0] == "rcvd_seq_err" || f[0] == "send_err") {
			t.Errorf("guest rxe counter %s = %s", f[0], f[1])
		}
	}

	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 0; i < 2*2048; i++ {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	if len(b) < want.Len() || !bytes.Equal(b[:want.Len()], want.Bytes()) {
		t.Fatalf("backing file differs from the guest's pattern (sha256 %x, want %x)",
			sha256.Sum256(b[:min(len(b), want.Len())]), sha256.Sum256(want.Bytes()))
	}
	checkIPv6Capture(t, capPath, netip.MustParseAddr(v6GuestAddr), netip.MustParseAddr(v6HostAddr))
}

// checkIPv6Capture checks every RoCEv2 frame of a kernel-peer capture:
// IPv6 only, between guest and host, each ICRC verified by wire.CheckICRC
// over the header as captured; every REQ carries an rdma_cm header of IP
// version 6 with the two addresses, which are also its path's GIDs. It
// logs what each side sent.
func checkIPv6Capture(t *testing.T, path string, guest, host netip.Addr) {
	t.Helper()
	frames, err := capture.Load(path)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	var fromGuest, fromHost, v4, bad, zeroCsum int
	var reqs int
	for _, f := range frames {
		if !f.IsRoCEv2() {
			continue
		}
		if !f.IPv6 {
			v4++
			continue
		}
		src, dst := netip.AddrFrom16([16]byte(f.IP[8:24])), netip.AddrFrom16([16]byte(f.IP[24:40]))
		switch {
		case src == guest && dst == host:
			fromGuest++
			if f.L4[6] == 0 && f.L4[7] == 0 {
				zeroCsum++
			}
		case src == host && dst == guest:
			fromHost++
		default:
			t.Errorf("frame %d: RoCEv2 from %v to %v", f.Number, src, dst)
			continue
		}
		if err := wire.CheckICRC(f.IPOnward()); err != nil {
			bad++
			if bad <= 5 {
				t.Errorf("frame %d (%v -> %v): %v", f.Number, src, dst, err)
			}
			continue
		}
		var p wire.Packet
		if p.Parse(f.Payload) != nil || p.Opcode() != wire.UDSendOnly || len(p.Payload) < wire.MADLen {
			continue
		}
		mad := wire.MAD(p.Payload[:wire.MADLen])
		if mad.MgmtClass() != wire.MgmtClassCM || wire.CMAttr(mad.AttrID()) != wire.CMAttrREQ {
			continue
		}
		reqs++
		req := wire.REQ(mad.Data())
		hdr, err := wire.ParseCMAHdr(req.PrivateData())
		if err != nil || hdr.IPVersion() != 6 || hdr.SrcAddr() != src || hdr.DstAddr() != dst {
			t.Errorf("frame %d: REQ rdma_cm header %v (%v)", f.Number, hdr, err)
		}
		if path := req.Primary(); path.LocalGID() != wire.GIDFromAddr(src) || path.RemoteGID() != wire.GIDFromAddr(dst) {
			t.Errorf("frame %d: REQ path GIDs %v -> %v", f.Number, path.LocalGID(), path.RemoteGID())
		}
		if reqs == 1 {
			t.Logf("REQ from %v: %v, flow label %#x, hop limit %d, traffic class %d, service ID %#x, IP flow label %#x", src,
				hdr, req.Primary().FlowLabel(), req.Primary().HopLimit(), req.Primary().TrafficClass(), req.ServiceID(),
				binary.BigEndian.Uint32(f.IP[0:4])&0xfffff)
		}
	}
	t.Logf("capture: %d RoCEv2 frames from the guest (%d with UDP checksum 0), %d from the host, %d IPv4, %d bad ICRCs, %d REQs",
		fromGuest, zeroCsum, fromHost, v4, bad, reqs)
	if v4 != 0 {
		t.Errorf("%d RoCEv2 frames over IPv4", v4)
	}
	if fromGuest < 10 || fromHost < 10 || reqs == 0 {
		t.Errorf("too little traffic captured: %d from the guest, %d from the host, %d REQs", fromGuest, fromHost, reqs)
	}
}

// hostSideEnv makes TestIPv6InitiatorHostSide run: it is the program
// TestIPv6InitiatorAgainstKernelTarget starts on the host side of the
// namespace (this test binary again).
const hostSideEnv = "NVMEOF_IPV6_HOST_SIDE"

// Our initiator over RoCEv2/IPv6 against the guest kernel's target.
const (
	v6PatternMB = 1  // the guest's pattern at offset 0
	v6HostOffMB = 16 // where the host writes
	v6HostMB    = 2  // how much
)

// TestIPv6InitiatorAgainstKernelTarget: the guest kernel's nvmet-rdma
// serves a memory-backed namespace on rdma ipv6 [2001:db8::2]:4420
// (guest/kernel-target-ipv6.sh); on the host side, this test binary again
// (TestIPv6InitiatorHostSide) opens a soft device on 2001:db8::1 and, with
// the initiator library, discovers the port (adrfam ipv6), connects with
// two I/O queues, reads the guest's pattern, writes 2 MiB in commands of
// 4 KiB to 1 MiB, reads them back, flushes and disconnects. The guest
// then finds exactly those bytes in its namespace and no QP left; the
// capture holds only IPv6 RoCEv2 with good ICRCs.
func TestIPv6InitiatorAgainstKernelTarget(t *testing.T) {
	dir := kpeer.Require(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	capPath := filepath.Join(t.TempDir(), "ipv6-initiator-kernel-target.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{guestScript(t, "kernel-target-ipv6.sh")},
		HostTest: v6HostSetup + fmt.Sprintf("%s=1 exec %s -test.run '^TestIPv6InitiatorHostSide$' -test.v -test.timeout 10m",
			hostSideEnv, self),
		Env: []string{"KPEER_IPV6=1", "NQN=" + kpeerNQN, "GUEST_ADDR6=" + v6GuestAddr, "GUEST_GID6=" + v6GuestGID,
			fmt.Sprintf("PATTERN_MB=%d", v6PatternMB), fmt.Sprintf("HOST_OFF_MB=%d", v6HostOffMB), fmt.Sprintf("HOST_MB=%d", v6HostMB)},
		Capture: capPath,
		Timeout: 15 * time.Minute,
	})
	defer keepOnFailure(t, res, capPath)
	hostLog, guest := res.Log("host-test.log"), res.Log("a/script.log")
	checkLines(t, "host", hostLog)
	checkLines(t, "guest", guest)
	if res.Err != nil || !strings.Contains(hostLog, "RESULT: PASS") || !strings.Contains(guest, "RESULT: PASS") {
		t.Fatalf("session failed: %v\nhost:\n%s\nguest:\n%s", res.Err, tail(hostLog, 60), tail(guest, 60))
	}
	for _, want := range []string{"PASS: the namespace holds the host's", "PASS: no RC QP left on rxe0"} {
		if !strings.Contains(guest, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
	checkIPv6Capture(t, capPath, netip.MustParseAddr(v6GuestAddr), netip.MustParseAddr(v6HostAddr))
}

// TestIPv6InitiatorHostSide is the host side of
// TestIPv6InitiatorAgainstKernelTarget, run in the kernel-peer namespace;
// it skips unless NVMEOF_IPV6_HOST_SIDE=1. It prints PASS:/FAIL: lines
// and RESULT: for the driving test, and always releases the guest.
func TestIPv6InitiatorHostSide(t *testing.T) {
	if os.Getenv(hostSideEnv) != "1" {
		t.Skip("the host side of TestIPv6InitiatorAgainstKernelTarget (set " + hostSideEnv + "=1 in the kernel-peer namespace)")
	}
	signal, share := os.Getenv("KPEER_SIGNAL"), os.Getenv("KPEER_SHARE")
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
	fail := func(format string, args ...any) {
		t.Helper()
		fmt.Printf("FAIL: "+format+"\n", args...)
		t.FailNow()
	}
	pass := func(format string, args ...any) { fmt.Printf("PASS: "+format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(v6HostAddr), Logger: hclog.New(&hclog.LoggerOptions{Name: "soft", Level: hclog.Debug})})
	if err != nil {
		fail("soft device on %s: %v", v6HostAddr, err)
	}
	defer dev.Close()
	pass("soft device %s, GID %v, UDP port %d, MTU %d", dev.Name(), dev.GID(), dev.UDPPort(), dev.Port().ActiveMTU.Bytes())
	dialer := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: hclog.New(&hclog.LoggerOptions{Name: "rdma", Level: hclog.Info})})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(v6GuestAddr), ServiceID: 4420}
	opts := initiator.Options{CommandTimeout: 30 * time.Second}

	entries, err := initiator.Discover(ctx, dialer, addr, opts)
	if err != nil {
		fail("discover [%s]:4420: %v", v6GuestAddr, err)
	}
	found := false
	for _, e := range entries {
		fmt.Printf("INFO: discovery entry: trtype %v adrfam %v traddr %s trsvcid %s subnqn %s\n", e.TRType, e.AdrFam, e.TRADDR, e.TRSVCID, e.SubNQN)
		if e.SubNQN == kpeerNQN {
			found = e.AdrFam == fabrics.AdrFamIPv6 && e.TRADDR == v6GuestAddr && e.TRSVCID == "4420"
		}
	}
	if !found {
		fail("discovery: no ipv6 entry for %s at %s", kpeerNQN, v6GuestAddr)
	}
	pass("discover: %s on rdma ipv6 [%s]:4420", kpeerNQN, v6GuestAddr)

	opts.SubsystemNQN, opts.NrIOQueues = kpeerNQN, 2
	c, err := initiator.Connect(ctx, dialer, addr, opts)
	if err != nil {
		fail("connect: %v", err)
	}
	id := c.IdentifyData()
	pass("connect: model %q serial %q, %d namespace(s)", strings.TrimSpace(id.MN()), strings.TrimSpace(id.SN()), len(c.Namespaces()))
	ns, err := c.Namespace(1)
	if err != nil {
		fail("namespace 1: %v", err)
	}
	if ns.Size() != 64<<20 {
		fail("namespace size %d", ns.Size())
	}
	got := make([]byte, v6PatternMB<<20)
	if _, err := ns.ReadAt(got, 0); err != nil {
		fail("read the guest's pattern: %v", err)
	}
	var want bytes.Buffer
	for i := 0; i < v6PatternMB*2048; i++ {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	if !bytes.Equal(got, want.Bytes()) {
		fail("the guest's pattern reads back different")
	}
	pass("read the guest's %d MiB pattern", v6PatternMB)

	data := make([]byte, v6HostMB<<20)
	for i := range data {
		data[i] = byte(i*131 + i>>12)
	}
	off := int64(v6HostOffMB << 20)
	for pos, n := 0, 4096; pos < len(data); n = min(n*4, 1<<20) {
		n = min(n, len(data)-pos)
		if _, err := ns.WriteAt(data[pos:pos+n], off+int64(pos)); err != nil {
			fail("write %d bytes at %d: %v", n, off+int64(pos), err)
		}
		pos += n
	}
	back := make([]byte, len(data))
	if _, err := ns.ReadAt(back, off); err != nil {
		fail("read back: %v", err)
	}
	if !bytes.Equal(back, data) {
		fail("%d MiB at %d MiB read back different", v6HostMB, v6HostOffMB)
	}
	if err := ns.Flush(); err != nil {
		fail("flush: %v", err)
	}
	sum := sha256.Sum256(data)
	pass("wrote, read back and flushed %d MiB at %d MiB (sha256 %x)", v6HostMB, v6HostOffMB, sum)
	if err := os.WriteFile(filepath.Join(share, "host-wrote.sha256"), fmt.Appendf(nil, "%x\n", sum), 0o644); err != nil {
		fail("share: %v", err)
	}
	if err := c.Close(); err != nil {
		fail("disconnect: %v", err)
	}
	pass("disconnect")
	if s := dev.Stats(); s.ICRCErrors != 0 || s.SendErrors != 0 {
		fail("device counters %+v", s)
	} else {
		fmt.Printf("INFO: soft device: %d packets sent, %d received, %d retransmissions, 0 ICRC errors\n", s.PacketsSent, s.PacketsReceived, s.Retransmissions)
	}
}
