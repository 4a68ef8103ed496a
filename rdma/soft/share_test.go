package soft

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// shareAddrs returns the target and host addresses of the shared-device
// tests: 127.S.T.5 and .6, beside addrA and addrB.
func shareAddrs() (netip.Addr, netip.Addr) {
	a := addrA.As4()
	a[3] = 5
	b := a
	b[3] = 6
	return netip.AddrFrom4(a), netip.AddrFrom4(b)
}

// shareMode is one way of running shared devices: a target device's
// configuration and the shared hosts' (Addr and ShareDir set by the test).
type shareMode struct {
	name         string
	target, host Config
}

// shareModes returns GSO mode and raw mode on 127.0.0.0/8, and IPv6 on
// ::1 (where the target binds a port the kernel picks and the hosts a
// port found free, each sending to the other's).
func shareModes(t *testing.T) []shareMode {
	tgt, host := shareAddrs()
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	port6 := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	return []shareMode{
		{"gso", Config{Addr: tgt}, Config{Addr: host}},
		{"raw", Config{Addr: tgt, DisableGSO: true}, Config{Addr: host, DisableGSO: true}},
		{"ipv6", Config{Addr: netip.IPv6Loopback(), UDPPort: -1, PeerUDPPort: port6},
			Config{Addr: netip.IPv6Loopback(), UDPPort: port6}},
	}
}

// openShared opens a shared device with cfg, skipping the test where the
// steering cannot be set up (no privilege).
func openShared(t *testing.T, cfg Config) *Device {
	t.Helper()
	cfg.Share = true
	d, err := Open(cfg)
	if err != nil {
		if errors.Is(err, ErrShareUnsupported) || errors.Is(err, syscall.EPERM) {
			t.Skipf("shared device: %v", err)
		}
		t.Fatalf("Open shared %v: %v", cfg.Addr, err)
	}
	return d
}

// exchange moves a SEND each way and an RDMA WRITE from h to t over the
// connected pair, with distinct data per seed, and checks it all arrived.
func exchange(t *testing.T, h, tg *end, seed int) {
	t.Helper()
	const n = 8192
	hm := regMR(t, h.pd, 2*n, rdma.AccessLocalWrite)
	tm := regMR(t, tg.pd, 2*n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	fill(hm.Bytes()[:n], seed)
	fill(tm.Bytes()[:n], seed+1)
	postRecv(t, tg.qp, 1, sge(tm, n, n))
	postRecv(t, h.qp, 2, sge(hm, n, n))
	postSend(t, h.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(hm, 0, n)},
		RemoteAddr: tm.Addr() + n, RKey: tm.RKey()})
	postSend(t, h.qp, &rdma.SendWR{WRID: 4, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(hm, 0, 64)}})
	checkWC(t, poll(t, h.scq, 1, 10*time.Second)[0], 4, rdma.Success)
	checkWC(t, poll(t, tg.rcq, 1, 10*time.Second)[0], 1, rdma.Success)
	if !bytes.Equal(tm.Bytes()[n:], hm.Bytes()[:n]) {
		t.Fatalf("seed %d: the target's buffer does not hold what the host wrote", seed)
	}
	postSend(t, tg.qp, &rdma.SendWR{WRID: 5, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(tm, 0, n)}})
	checkWC(t, poll(t, tg.scq, 1, 10*time.Second)[0], 5, rdma.Success)
	checkWC(t, poll(t, h.rcq, 1, 10*time.Second)[0], 2, rdma.Success)
	if !bytes.Equal(hm.Bytes()[n:], tm.Bytes()[:n]) {
		t.Fatalf("seed %d: the host received other data than the target sent", seed)
	}
}

// TestSharedDevices opens three shared devices on one host address, each
// with an RC QP to one target device, and checks that each gets exactly
// its own traffic, that a closed one leaves the others working and frees
// its slot for a new one, in each receive mode.
func TestSharedDevices(t *testing.T) {
	for _, m := range shareModes(t) {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			tg := openDev(t, m.target)
			hcfg := m.host
			hcfg.ShareDir = dir
			if m.name == "ipv6" {
				hcfg.PeerUDPPort = tg.UDPPort()
			}
			var hosts [4]*Device
			var ends, tends [4]*end
			open := func(i int) {
				hosts[i] = openShared(t, hcfg)
				t.Cleanup(func() { hosts[i].Close() })
				ends[i], tends[i] = connect(t, hosts[i], tg, qpOpts{})
			}
			for i := range 3 {
				open(i)
			}
			slots := map[uint8]bool{}
			for i := range 3 {
				s := hosts[i].socks.share.slot
				if slots[s] {
					t.Fatalf("slot %d given twice", s)
				}
				slots[s] = true
				if got := ends[i].qp.QPN() >> shareQPNBits; got != uint32(s) {
					t.Fatalf("device %d in slot %d made QP %#x", i, s, ends[i].qp.QPN())
				}
			}
			for round := range 2 {
				for i := range 3 {
					exchange(t, ends[i], tends[i], 10*round+i)
				}
			}
			freed := hosts[1].socks.share.slot
			hosts[1].Close()
			exchange(t, ends[0], tends[0], 100)
			exchange(t, ends[2], tends[2], 102)
			open(3)
			if s := hosts[3].socks.share.slot; s != freed {
				t.Errorf("new device took slot %d, want the freed slot %d", s, freed)
			}
			for _, i := range []int{0, 2, 3} {
				exchange(t, ends[i], tends[i], 200+i)
			}
		})
	}
}

// TestSharedExclusiveConflict checks that a device opened without Share
// and shared devices exclude each other on one address, either way, with
// EADDRINUSE.
func TestSharedExclusiveConflict(t *testing.T) {
	_, host := shareAddrs()
	dir := t.TempDir()
	s := openShared(t, Config{Addr: host, ShareDir: dir})
	if d, err := Open(Config{Addr: host}); !errors.Is(err, syscall.EADDRINUSE) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("exclusive Open beside a shared device: %v, want EADDRINUSE", err)
	}
	s.Close()
	ex := openDev(t, Config{Addr: host})
	if d, err := Open(Config{Addr: host, Share: true, ShareDir: dir}); !errors.Is(err, syscall.EADDRINUSE) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("shared Open beside an exclusive device: %v, want EADDRINUSE", err)
	}
	ex.Close()
	// The port is free again: a shared device opens.
	openShared(t, Config{Addr: host, ShareDir: dir}).Close()
}

// TestSharedDevicesCM connects two shared devices of one address to a
// listener through their connection managers: each REP reaches the
// device that sent the REQ, and a DREQ from the target reaches the one
// it disconnects and no other.
func TestSharedDevicesCM(t *testing.T) {
	tgAddr, host := shareAddrs()
	tg := openDev(t, Config{Addr: tgAddr})
	dir := t.TempDir()
	var devs [2]*Device
	for i := range devs {
		devs[i] = openShared(t, Config{Addr: host, ShareDir: dir})
		t.Cleanup(func() { devs[i].Close() })
	}
	tcm, err := tg.ConnManager()
	if err != nil {
		t.Fatal(err)
	}
	hcm, err := devs[0].ConnManager()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hcm.Listen(4420); !errors.Is(err, rdma.ErrInvalidArgument) {
		t.Fatalf("Listen on a shared device: %v, want ErrInvalidArgument", err)
	}
	l, err := tcm.Listen(4420)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	param := rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	var hconns, tconns [2]rdma.Conn
	for i, d := range devs {
		o := qpOpts{}
		o.defaults()
		he, te := newEnd(t, d, &o), newEnd(t, tg, &o)
		accepted := make(chan error, 1)
		go func() {
			req, err := l.Next(ctx)
			if err == nil {
				tconns[i], err = req.Accept(ctx, te.qp, nil, param)
			}
			accepted <- err
		}()
		cm, err := d.ConnManager()
		if err != nil {
			t.Fatal(err)
		}
		if hconns[i], err = cm.Connect(ctx, tgAddr, 4420, he.qp, []byte{byte(i)}, param); err != nil {
			t.Fatalf("device %d: Connect: %v", i, err)
		}
		if err := <-accepted; err != nil {
			t.Fatalf("device %d: Accept: %v", i, err)
		}
		if got := tconns[i].PrivateData(); len(got) == 0 || got[0] != byte(i) {
			t.Fatalf("device %d: the target got private data %x", i, got)
		}
	}
	// The target disconnects device 1: only its connection goes down.
	if err := tconns[1].Disconnect(ctx); err != nil {
		t.Fatalf("target's Disconnect: %v", err)
	}
	select {
	case <-hconns[1].Done():
	case <-ctx.Done():
		t.Fatal("device 1 never saw the target's DREQ")
	}
	select {
	case <-hconns[0].Done():
		t.Fatal("device 0's connection went down with device 1's")
	default:
	}
	if err := hconns[0].Disconnect(ctx); err != nil {
		t.Fatalf("device 0's Disconnect: %v", err)
	}
	select {
	case <-tconns[0].Done():
	case <-ctx.Done():
		t.Fatal("the target never saw device 0's DREQ")
	}
}
