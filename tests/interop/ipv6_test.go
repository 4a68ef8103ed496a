package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/capture"
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
// over the header as captured; the guest's REQ carries an rdma_cm header
// of IP version 6 with the two addresses. It logs what each side sent.
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
		if p.Parse(f.Payload) != nil || p.Opcode() != wire.UDSendOnly || len(p.Payload) < wire.MADLen || src != guest {
			continue
		}
		mad := wire.MAD(p.Payload[:wire.MADLen])
		if mad.MgmtClass() != wire.MgmtClassCM || wire.CMAttr(mad.AttrID()) != wire.CMAttrREQ {
			continue
		}
		reqs++
		req := wire.REQ(mad.Data())
		hdr, err := wire.ParseCMAHdr(req.PrivateData())
		if err != nil || hdr.IPVersion() != 6 || hdr.SrcAddr() != guest || hdr.DstAddr() != host {
			t.Errorf("frame %d: REQ rdma_cm header %v (%v)", f.Number, hdr, err)
		}
		if path := req.Primary(); path.LocalGID() != wire.GIDFromAddr(guest) || path.RemoteGID() != wire.GIDFromAddr(host) {
			t.Errorf("frame %d: REQ path GIDs %v -> %v", f.Number, path.LocalGID(), path.RemoteGID())
		}
		if reqs == 1 {
			t.Logf("kernel REQ: %v, flow label %#x, hop limit %d, traffic class %d, service ID %#x, IP flow label %#x",
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
