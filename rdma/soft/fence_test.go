package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// rawPeer is a hand-driven RC requester: an ordinary UDP socket on
// addrA:4791 that sends packets to a device's QP and reads what comes
// back, so that a test decides exactly what happens between two packets
// of one message.
type rawPeer struct {
	t   *testing.T
	pc  *net.UDPConn
	dst *net.UDPAddr
	qpn uint32 // the device's QP
}

// newRawPeer opens the socket (DF set, so the IP ID is 0 as the ICRC
// below assumes), closed at the end of the test.
func newRawPeer(t *testing.T, qpn uint32) *rawPeer {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
		return serr
	}}
	pc, err := lc.ListenPacket(t.Context(), "udp4", net.JoinHostPort(addrA.String(), "4791"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return &rawPeer{t: t, pc: pc.(*net.UDPConn), dst: &net.UDPAddr{IP: net.IP(addrB.AsSlice()), Port: wire.UDPPort}, qpn: qpn}
}

// send sends a request packet: BTH, the extension headers ext, payload.
func (r *rawPeer) send(op wire.Opcode, psn uint32, ackReq bool, ext, payload []byte) {
	r.t.Helper()
	pad := wire.PadFor(len(payload))
	pkt := make([]byte, wire.BTHLen, wire.BTHLen+len(ext)+len(payload)+pad+wire.ICRCLen)
	writeBTH(pkt, op, false, pad, r.qpn, psn, ackReq)
	pkt = append(pkt, ext...)
	pkt = append(pkt, payload...)
	pkt = append(pkt, make([]byte, pad+wire.ICRCLen)...)
	v := wire.ICRCForIPv4(addrA.As4(), addrB.As4(), 0, true, wire.UDPPort, wire.UDPPort, pkt[:len(pkt)-wire.ICRCLen])
	binary.LittleEndian.PutUint32(pkt[len(pkt)-wire.ICRCLen:], v)
	if _, err := r.pc.WriteTo(pkt, r.dst); err != nil {
		r.t.Fatal(err)
	}
}

// reth returns a RETH.
func reth(va uint64, rkey, n uint32) []byte {
	b := make([]byte, wire.RETHLen)
	wire.RETH(b).Set(va, rkey, n)
	return b
}

// ack reads packets until an Acknowledge arrives (within 5 s) and returns
// its syndrome and PSN.
func (r *rawPeer) ack() (wire.Syndrome, uint32) {
	r.t.Helper()
	buf := make([]byte, 9000)
	r.pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, _, err := r.pc.ReadFrom(buf)
		if err != nil {
			r.t.Fatalf("waiting for an acknowledgement: %v", err)
		}
		var p wire.Packet
		if p.Parse(buf[:n]) == nil && p.Opcode() == wire.RCAcknowledge {
			return p.AETH.Syndrome(), p.BTH.PSN()
		}
	}
}

// TestFenceMultiPacketWrite: an Invalidate, Rekey, Remap or Deregister,
// a SEND with Invalidate on another QP or a LOCAL_INV between the
// packets of one RDMA WRITE fences it. The rkey travels in
// the FIRST packet only; the MIDDLE packet after the change is NAKed with
// Remote Access Error, the QP fails, nothing lands in the new buffer and
// the old one holds the FIRST packet's bytes only. A Remap to a shorter
// buffer used to make the receive goroutine panic (slice bounds), and a
// Remap to one as long took the rest of the old-key WRITE and ACKed it.
func TestFenceMultiPacketWrite(t *testing.T) {
	const mtu, size = 1024, 3 * 1024
	// fenceEnv is what a change may use: the region, the QP the WRITE
	// goes to and the peer.
	type fenceEnv struct {
		m  rdma.RemappableMR
		eb *end
		r  *rawPeer
	}
	tests := []struct {
		name   string
		change func(t *testing.T, x fenceEnv) ([]byte, error) // returns the new buffer, if any
	}{
		{"remap-shorter", func(_ *testing.T, x fenceEnv) ([]byte, error) {
			m := x.m
			nb := make([]byte, mtu/2) // shorter than what FIRST wrote
			_, err := m.Remap(nb)
			return nb, err
		}},
		{"remap-same-length", func(_ *testing.T, x fenceEnv) ([]byte, error) {
			nb := make([]byte, 8192)
			_, err := x.m.Remap(nb)
			return nb, err
		}},
		{"invalidate", func(_ *testing.T, x fenceEnv) ([]byte, error) { return nil, x.m.Invalidate() }},
		{"rekey", func(_ *testing.T, x fenceEnv) ([]byte, error) { _, err := x.m.Rekey(); return nil, err }},
		{"deregister", func(_ *testing.T, x fenceEnv) ([]byte, error) { return nil, x.m.Deregister() }},
		{"local-inv", func(t *testing.T, x fenceEnv) ([]byte, error) {
			postSend(t, x.eb.qp, &rdma.SendWR{WRID: 9, Opcode: rdma.WRLocalInv, InvalidateRKey: x.m.RKey(), Flags: rdma.SendSignaled})
			checkWC(t, poll(t, x.eb.scq, 1, 5*time.Second)[0], 9, rdma.Success)
			return nil, nil
		}},
		{"send-with-invalidate", func(t *testing.T, x fenceEnv) ([]byte, error) {
			// From another QP of the same protection domain.
			o := qpOpts{mtu: rdma.MTU1024}
			o.defaults()
			qp2, err := x.eb.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: x.eb.scq, RecvCQ: x.eb.rcq,
				Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			e2 := &end{dev: x.eb.dev, pd: x.eb.pd, scq: x.eb.scq, rcq: x.eb.rcq, qp: qp2}
			bringUp(t, e2, addrA, 0x78, 0, 500, &o)
			postRecv(t, qp2, 8)
			ieth := make([]byte, wire.IETHLen)
			binary.BigEndian.PutUint32(ieth, x.m.RKey())
			p2 := *x.r
			p2.qpn = qp2.QPN()
			p2.send(wire.RCSendOnlyWithInvalidate, 500, true, ieth, nil)
			wc := poll(t, x.eb.rcq, 1, 5*time.Second)[0]
			if wc.Status != rdma.Success || wc.Flags&rdma.WCWithInvalidate == 0 {
				t.Fatalf("SEND with Invalidate: %+v", wc)
			}
			if s, p := x.r.ack(); s.Kind() != wire.SyndromeACK || p != 500 {
				t.Fatalf("SEND with Invalidate: %s for PSN %d", s, p)
			}
			return nil, nil
		}},
	}
	b := openDev(t, Config{Addr: addrB})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := qpOpts{mtu: rdma.MTU1024}
			o.defaults()
			eb := newEnd(t, b, &o)
			const peerQPN, psn = 0x77, 100
			bringUp(t, eb, addrA, peerQPN, 0, psn, &o)
			r := newRawPeer(t, eb.qp.QPN())
			mr, err := eb.pd.RegMR(make([]byte, 8192), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			m := mr.(rdma.RemappableMR)
			old := m.Bytes()
			data := make([]byte, size)
			fill(data, 7)

			r.send(wire.RCRDMAWriteFirst, psn, true, reth(m.Addr(), m.RKey(), size), data[:mtu])
			if s, p := r.ack(); s.Kind() != wire.SyndromeACK || p != psn {
				t.Fatalf("FIRST: %s for PSN %d, want ACK of %d", s, p, psn)
			}
			nb, err := tc.change(t, fenceEnv{m: m, eb: eb, r: r})
			if err != nil {
				t.Fatal(err)
			}
			r.send(wire.RCRDMAWriteMiddle, psn+1, true, nil, data[mtu:2*mtu])
			if s, p := r.ack(); s != wire.Syndrome(wire.SyndromeNAK|wire.NAKRemoteAccessError) || p != psn+1 {
				t.Fatalf("MIDDLE after the change: %s for PSN %d, want NAK Remote Access Error of %d", s, p, psn+1)
			}
			if nb != nil && !bytes.Equal(nb, make([]byte, len(nb))) {
				t.Fatal("the old-key WRITE wrote into the new buffer")
			}
			if !bytes.Equal(old[:mtu], data[:mtu]) || !bytes.Equal(old[mtu:], make([]byte, len(old)-mtu)) {
				t.Fatal("the old buffer does not hold exactly the FIRST packet's bytes")
			}
			var a rdma.QPAttr
			if err := eb.qp.Query(&a); err != nil || a.State != rdma.QPSErr {
				t.Fatalf("QP state %v (%v), want ERR", a.State, err)
			}
		})
	}
}

// TestFenceReadRemap races RDMA READs of a region against Remaps of it
// to buffers of another pattern and Invalidates: a READ under the old
// key either fails or returns the old buffer's bytes only; it never
// returns a byte of a buffer bound after it was issued. Under -race it
// also checks that Remap and the receive path share no unsynchronized
// state.
func TestFenceReadRemap(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	const size = 16 * 1024
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	seen := map[rdma.WCStatus]int{}
	for round := range rounds {
		ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024, timeout: 8, retry: 1})
		dst := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
		mr, err := eb.pd.RegMR(bytes.Repeat([]byte{0xAA}, size), rdma.AccessLocalWrite|rdma.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		m := mr.(rdma.RemappableMR)
		key := m.RKey()
		nb := bytes.Repeat([]byte{0xBB}, size)
		postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{sge(dst, 0, size)}, RemoteAddr: m.Addr(), RKey: key})
		var wg sync.WaitGroup
		wg.Go(func() {
			if round%2 == 0 {
				if _, err := m.Remap(nb); err != nil {
					t.Error(err)
				}
			} else if err := m.Invalidate(); err != nil {
				t.Error(err)
			}
		})
		wc := poll(t, ea.scq, 1, 10*time.Second)[0]
		wg.Wait()
		seen[wc.Status]++
		switch wc.Status {
		case rdma.Success:
			if !bytes.Equal(dst.Bytes(), bytes.Repeat([]byte{0xAA}, size)) {
				t.Fatalf("round %d: READ under the old key succeeded with bytes not of the old buffer", round)
			}
		case rdma.RemoteAccessError, rdma.RetryExceeded:
			if bytes.IndexByte(dst.Bytes(), 0xBB) >= 0 {
				t.Fatalf("round %d: the new buffer's bytes reached the requester", round)
			}
		default:
			t.Fatalf("round %d: READ completed with %s", round, wc.Status)
		}
		if err := m.Deregister(); err != nil && !errors.Is(err, rdma.ErrClosed) {
			t.Fatal(err)
		}
	}
	t.Logf("READ outcomes: %v", seen)
}

// TestFenceNoAllocs: the fence costs no allocation; an NVMe host remaps
// and invalidates a region for every command.
func TestFenceNoAllocs(t *testing.T) {
	d := openDev(t, Config{Addr: addrB})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 8192), rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	m := mr.(rdma.RemappableMR)
	bufs := [2][]byte{make([]byte, 4096), make([]byte, 8192)}
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		i++
		if _, err := m.Remap(bufs[i%2]); err != nil {
			t.Fatal(err)
		}
		if err := m.Invalidate(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Remap and Invalidate: %v allocations", n)
	}
}
