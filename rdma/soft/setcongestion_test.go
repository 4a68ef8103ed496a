//go:build linux

package soft

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
)

// recvTOSOn reports whether every UDP receive socket of d asks for the
// TOS / traffic class of its datagrams; raw mode devices have none and
// report true.
func recvTOSOn(t *testing.T, d *Device) bool {
	t.Helper()
	on := true
	for i, sc := range d.socks.recv {
		if !d.socks.udpQueue(i) {
			continue
		}
		var v int
		var gerr error
		if err := sc.Control(func(fd uintptr) {
			if d.v6 {
				v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS)
			} else {
				v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS)
			}
		}); err != nil || gerr != nil {
			t.Fatalf("getsockopt: %v, %v", err, gerr)
		}
		on = on && v == 1
	}
	return on
}

// pacedLen returns the length of the paced queue of d's QP qpn.
func pacedLen(d *Device, qpn uint32) int {
	q := d.lookupQP(qpn)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cc == nil {
		return 0
	}
	return len(q.cc.respQ)
}

// eventually waits up to 5 s for cond, which a packet still on its way
// (a CNP sent at the end of a receive batch) may make true.
func eventually(t *testing.T, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// ccCounts are the congestion counters of a pair of devices.
type ccCounts struct{ bMarked, bCNPs, aHandled, aMarked, aCNPs, bHandled, marksA, marksB uint64 }

func countCC(a, b *Device) ccCounts {
	sa, sb := a.Stats(), b.Stats()
	return ccCounts{sb.NPECNMarkedRoCEPackets, sb.NPCNPSent, sa.RPCNPHandled, sa.NPECNMarkedRoCEPackets, sa.NPCNPSent, sb.RPCNPHandled,
		sa.FaultCEMarks, sb.FaultCEMarks}
}

// TestSetCongestion turns congestion control on and off on two running
// devices whose fault injectors mark CE every ECN-capable packet they
// receive, on one pair of existing QPs. Off at open: nothing is ECT, so
// nothing is marked. On mid-flow (RDMA WRITEs in flight): a's WRITEs
// marked at b make b send a CNP (MinCNPInterval an hour: one) that halves
// a's rate; b's READ responses marked at a halve b's. Off while a 4 MiB
// READ waits in b's paced queue: the queue leaves at once, the READ
// completes intact, and no CE mark, CNP or cut follows. On again with
// another line rate: the QPs start over at it and the CNPs come back.
// The receive sockets ask for the TOS exactly while it is on.
func TestSetCongestion(t *testing.T) {
	for _, tc := range []struct {
		mode string
		last byte
	}{{"GSO", 140}, {"raw", 141}, {"IPv6", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			mark := &FaultConfig{CEMark: 1, Seed: 7}
			a, b := ccPair(t, tc.mode, tc.last, Config{RecvFaults: mark}, Config{RecvFaults: mark})
			ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024})
			const size = 4 << 20
			src := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
			mem := regMR(t, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			dst := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
			wrid := uint64(0)
			// write posts n RDMA WRITEs of 64 KiB from src to mem.
			write := func(n int) {
				for i := range n {
					off := i * 64 << 10
					wrid++
					postSend(t, ea.qp, &rdma.SendWR{WRID: wrid, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
						SGL: []rdma.SGE{sge(src, off, 64<<10)}, RemoteAddr: mem.Addr() + uint64(off), RKey: mem.RKey()})
				}
			}
			wait := func(n int) {
				for range n {
					if wc := poll(t, ea.scq, 1, 10*time.Second)[0]; wc.Status != rdma.Success {
						t.Fatalf("completion %+v", wc)
					}
				}
			}
			read := func(n int) {
				wrid++
				postSend(t, ea.qp, &rdma.SendWR{WRID: wrid, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{sge(dst, 0, n)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
			}
			// check compares what was written (w bytes) and read (r).
			check := func(what string, w, r int) {
				t.Helper()
				if !bytes.Equal(src.Bytes()[:w], mem.Bytes()[:w]) || !bytes.Equal(dst.Bytes()[:r], mem.Bytes()[:r]) {
					t.Fatalf("%s: data differs", what)
				}
			}

			fill(src.Bytes(), 1)
			write(16)
			wait(16)
			read(1 << 20)
			wait(1)
			check("off", 1<<20, 1<<20)
			if c := countCC(a, b); c != (ccCounts{}) {
				t.Fatalf("off: %+v", c)
			}
			if recvTOSOn(t, a) && tc.mode != "raw" {
				t.Fatal("off: the receive sockets ask for the TOS")
			}

			// On mid-flow: b reacts at 200 Mb/s so that a READ's
			// responses queue.
			const lineA, lineB = 4e9, 200e6
			ccA := &CongestionConfig{Enabled: true, LineRate: lineA, MinCNPInterval: time.Hour, IncreasePeriod: time.Hour}
			ccB := *ccA
			ccB.LineRate = lineB
			fill(src.Bytes(), 2)
			write(16)
			if err := b.SetCongestion(&ccB); err != nil {
				t.Fatal(err)
			}
			if err := a.SetCongestion(ccA); err != nil {
				t.Fatal(err)
			}
			if !recvTOSOn(t, a) || !recvTOSOn(t, b) {
				t.Fatal("on: the receive sockets do not ask for the TOS")
			}
			write(16) // surely after the change
			wait(32)
			read(64 << 10)
			wait(1)
			check("on", 1<<20, 64<<10)
			var c ccCounts
			if !eventually(t, func() bool {
				c = countCC(a, b)
				return c.bCNPs == 1 && c.aHandled == 1 && c.aCNPs == 1 && c.bHandled == 1 && c.bMarked > 0 && c.aMarked > 0
			}) {
				t.Fatalf("on: %+v, want one CNP each way", c)
			}
			if s := qpStat(t, a, ea.qp.QPN()); !s.RPLimited || s.RPRate != lineA/2 {
				t.Fatalf("on: a's QP %+v, want limited at %v", s, lineA/2)
			}
			if s := qpStat(t, b, eb.qp.QPN()); !s.RPLimited || s.RPRate != lineB/2 {
				t.Fatalf("on: b's QP %+v, want limited at %v", s, lineB/2)
			}
			if got := b.Congestion(); got == nil || *got != ccB {
				t.Fatalf("b.Congestion() = %+v, want %+v", got, ccB)
			}

			// Off while b's paced queue holds READ responses (4 MiB
			// at 100 Mb/s would take a third of a second).
			read(size)
			for deadline := time.Now().Add(5 * time.Second); pacedLen(b, eb.qp.QPN()) == 0; {
				if time.Now().After(deadline) {
					t.Fatal("no READ response queued")
				}
				time.Sleep(50 * time.Microsecond)
			}
			if err := b.SetCongestion(nil); err != nil {
				t.Fatal(err)
			}
			if err := a.SetCongestion(&CongestionConfig{LineRate: 1}); err != nil { // not Enabled: off
				t.Fatal(err)
			}
			wait(1)
			check("turned off", 1<<20, size)
			if recvTOSOn(t, a) && tc.mode != "raw" || recvTOSOn(t, b) && tc.mode != "raw" {
				t.Fatal("off again: the receive sockets ask for the TOS")
			}
			if a.Congestion() != nil || b.Congestion() != nil {
				t.Fatal("Congestion() not nil once off")
			}
			if pacedLen(b, eb.qp.QPN()) != 0 {
				t.Fatal("paced queue left")
			}
			was := countCC(a, b)
			fill(src.Bytes(), 3)
			write(64)
			wait(64)
			read(size)
			wait(1)
			check("off again", size, size)
			if c := countCC(a, b); c != was {
				t.Fatalf("off again: %+v, was %+v", c, was)
			}
			for _, s := range []QPStats{qpStat(t, a, ea.qp.QPN()), qpStat(t, b, eb.qp.QPN())} {
				if s.RPLimited || s.RPRate != 0 {
					t.Fatalf("off again: QP %+v", s)
				}
			}

			// On again, with another line rate: the QPs start at it.
			ccA.LineRate = 3e9
			if err := a.SetCongestion(ccA); err != nil {
				t.Fatal(err)
			}
			if s := qpStat(t, a, ea.qp.QPN()); s.RPLimited || s.RPRate != 3e9 {
				t.Fatalf("on again: a's QP %+v", s)
			}
			if err := b.SetCongestion(&ccB); err != nil {
				t.Fatal(err)
			}
			write(4)
			wait(4)
			if !eventually(t, func() bool {
				c = countCC(a, b)
				return c.bCNPs == was.bCNPs+1 && c.aHandled == was.aHandled+1
			}) {
				t.Fatalf("on again: %+v, was %+v", c, was)
			}
			if s := qpStat(t, a, ea.qp.QPN()); !s.RPLimited || s.RPRate != 1.5e9 {
				t.Fatalf("on again: a's QP %+v", s)
			}
			sa, sb := a.Stats(), b.Stats()
			t.Logf("a: %d retransmissions, %d timeouts; b: %d paced drops", sa.Retransmissions, sa.Timeouts, sb.PacedDrops)
			if sa.ICRCErrors != 0 || sb.ICRCErrors != 0 {
				t.Fatalf("ICRC errors: a %+v\nb %+v", sa, sb)
			}
		})
	}
}

// TestSetCongestionParams: new parameters reach an existing QP, keeping
// its state: an unlimited QP moves to the new line rate, a limited one
// keeps its rate unless the new line rate is below it. Bad settings are
// refused as Open refuses them and change nothing; a closed device
// refuses any.
func TestSetCongestionParams(t *testing.T) {
	a, b := ccPair(t, "GSO", 142, Config{Congestion: &CongestionConfig{Enabled: true, LineRate: 2e9}}, Config{})
	ea, _ := connect(t, a, b, qpOpts{})
	qpn := ea.qp.QPN()
	for _, tc := range []struct {
		name    string
		cc      *CongestionConfig
		cut     bool // a CNP reaches the QP first
		rate    uint64
		limited bool
		err     bool
	}{
		{name: "faster", cc: &CongestionConfig{Enabled: true, LineRate: 5e9}, rate: 5e9},
		{name: "bad G", cc: &CongestionConfig{Enabled: true, G: 2}, err: true, rate: 5e9},
		{name: "min above line", cc: &CongestionConfig{Enabled: true, LineRate: 1e9, MinRate: 2e9}, err: true, rate: 5e9},
		{name: "cut", cc: &CongestionConfig{Enabled: true, LineRate: 5e9, IncreasePeriod: time.Second, AlphaPeriod: time.Second}, cut: true, rate: 2.5e9, limited: true},
		{name: "limited, line above", cc: &CongestionConfig{Enabled: true, LineRate: 4e9, IncreasePeriod: time.Second, AlphaPeriod: time.Second}, rate: 2.5e9, limited: true},
		// At the new line rate: unlimited.
		{name: "limited, line below", cc: &CongestionConfig{Enabled: true, LineRate: 2e9, IncreasePeriod: time.Second, AlphaPeriod: time.Second}, rate: 2e9},
		{name: "off", rate: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.SetCongestion(tc.cc)
			if tc.err != (err != nil) || err != nil && !errors.Is(err, rdma.ErrInvalidArgument) {
				t.Fatalf("SetCongestion: %v", err)
			}
			if tc.cut {
				q := a.lookupQP(qpn)
				q.mu.Lock()
				q.onCNP()
				q.mu.Unlock()
			}
			if s := qpStat(t, a, qpn); s.RPRate != tc.rate || s.RPLimited != tc.limited {
				t.Fatalf("QP %+v, want rate %d, limited %v", s, tc.rate, tc.limited)
			}
		})
	}
	a.Close()
	if err := a.SetCongestion(&CongestionConfig{Enabled: true}); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("SetCongestion on a closed device: %v", err)
	}
}

// TestSetCongestionNewQP: a QP created while SetCongestion turns
// congestion control on and off ends with the device's last setting.
func TestSetCongestionNewQP(t *testing.T) {
	a, _ := ccPair(t, "GSO", 143, Config{}, Config{})
	pd, err := a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	newQP := func() rdma.QP {
		q, err := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: rdma.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Destroy() })
		return q
	}
	for i := range 20 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for k := range 4 {
				cc := &CongestionConfig{Enabled: (k+i)%2 == 0, LineRate: float64(1+i) * 1e9}
				if err := a.SetCongestion(cc); err != nil {
					t.Error(err)
				}
			}
		}()
		q := newQP()
		<-done
		want := uint64(0)
		if last := a.Congestion(); last != nil {
			want = uint64(last.LineRate)
		}
		if s := qpStat(t, a, q.QPN()); s.RPRate != want {
			t.Fatalf("round %d: new QP at %d b/s, want %d", i, s.RPRate, want)
		}
	}
}
