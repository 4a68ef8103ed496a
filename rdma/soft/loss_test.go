package soft

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// lossy is the fault mix of the loss tests, applied to what each device
// receives (requests at one side, ACKs and READ responses at the other).
func lossy(seed uint64) *FaultConfig {
	return &FaultConfig{Drop: 0.05, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: seed}
}

// msgSize is the size of message k of the loss test: 1 to 3000 bytes,
// so 1 to 3 packets at MTU 1024.
func msgSize(k int) int { return 1 + (k*7919)%3000 }

// fillMsg writes message k: its number, then a pattern.
func fillMsg(b []byte, k int) {
	fill(b, k)
	if len(b) >= 4 {
		binary.BigEndian.PutUint32(b, uint32(k))
	}
}

// TestLossRecovery sends 10 000 SENDs through 5 % loss, 1 % duplication,
// 1 % reordering and 1 % corruption in both directions: every message
// must arrive exactly once, in order, intact, and every send complete
// successfully in order.
func TestLossRecovery(t *testing.T) {
	n := 10000
	if raceEnabled {
		n = 1500
	}
	a, b := openPair(t, Config{RecvFaults: lossy(1)}, Config{RecvFaults: lossy(2)})
	const depth, rdepth, slot = 64, 256, 4096
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024, timeout: lossTimeout, psnA: 0xffff00, psnB: 77, sendWR: depth, recvWR: rdepth})
	src := regMR(t, ea.pd, depth*slot, 0)
	dst := regMR(t, eb.pd, rdepth*slot, rdma.AccessLocalWrite)
	for k := 0; k < rdepth; k++ {
		postRecv(t, eb.qp, uint64(k), sge(dst, k*slot, slot))
	}
	var sendWR rdma.SendWR
	var recvWR rdma.RecvWR
	sg := make([]rdma.SGE, 1)
	rsg := make([]rdma.SGE, 1)
	wcs := make([]rdma.WorkCompletion, 64)
	want := make([]byte, slot)
	posted, sent, received := 0, 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for sent < n || received < n {
		for posted < n && posted-sent < depth {
			s := posted % depth
			size := msgSize(posted)
			fillMsg(src.Bytes()[s*slot:s*slot+size], posted)
			sg[0] = sge(src, s*slot, size)
			sendWR = rdma.SendWR{WRID: uint64(posted), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: sg}
			if err := ea.qp.PostSend(&sendWR); err != nil {
				t.Fatalf("post send %d: %v", posted, err)
			}
			posted++
		}
		progress := false
		for _, wc := range wcs[:ea.scq.Poll(wcs)] {
			if wc.Status != rdma.Success || wc.WRID != uint64(sent) {
				t.Fatalf("send completion %d: %+v (A %+v)", sent, wc, a.Stats())
			}
			sent++
			progress = true
		}
		for _, wc := range wcs[:eb.rcq.Poll(wcs)] {
			size := msgSize(received)
			if wc.Status != rdma.Success || wc.WRID != uint64(received) || wc.ByteLen != uint32(size) {
				t.Fatalf("receive completion %d: %+v", received, wc)
			}
			s := received % rdepth
			fillMsg(want[:size], received)
			if got := dst.Bytes()[s*slot : s*slot+size]; !bytes.Equal(got, want[:size]) {
				t.Fatalf("message %d: data differs (got number %d)", received, binary.BigEndian.Uint32(got))
			}
			if next := received + rdepth; next < n {
				rsg[0] = sge(dst, s*slot, slot)
				recvWR = rdma.RecvWR{WRID: uint64(next), SGL: rsg}
				if err := eb.qp.PostRecv(&recvWR); err != nil {
					t.Fatal(err)
				}
			}
			received++
			progress = true
		}
		if !progress {
			if time.Now().After(deadline) {
				t.Fatalf("stuck: %d posted, %d sent, %d received\nA %+v\nB %+v", posted, sent, received, a.Stats(), b.Stats())
			}
			select {
			case <-ea.scq.Notify():
			case <-eb.rcq.Notify():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("A %+v", sa)
	t.Logf("B %+v", sb)
	if sa.Retransmissions == 0 || sb.FaultDrops == 0 || sb.ICRCErrors == 0 || sb.Duplicates == 0 || sa.FaultReorders+sb.FaultReorders == 0 {
		t.Errorf("the faults did not exercise recovery: A %+v B %+v", sa, sb)
	}
	if ea.qp.State() != rdma.QPSRTS || eb.qp.State() != rdma.QPSRTS {
		t.Errorf("QP states %s, %s", ea.qp.State(), eb.qp.State())
	}
	// The requester's QP is the device's only one: its own counters of
	// the recovery are the device's (all sends acknowledged, so they
	// no longer move).
	qa := qpStatsOf(t, a, ea.qp.QPN())
	if qa.Retransmissions == 0 || qa.Retransmissions != sa.Retransmissions || qa.Timeouts != sa.Timeouts ||
		qa.SeqNAKsReceived != sa.SeqNAKsReceived || qa.RNRNAKsReceived != sa.RNRNAKsReceived {
		t.Errorf("QP %#x: %+v; device A %+v", qa.QPN, qa, sa)
	}
}

// TestLossWriteRead alternates RDMA WRITEs and multi-chunk RDMA READs of
// 1 to 200 KiB through the same faults and checks the data read back.
func TestLossWriteRead(t *testing.T) {
	n := 100
	if raceEnabled {
		n = 30
	}
	a, b := openPair(t, Config{RecvFaults: lossy(3), ReadChunk: 8}, Config{RecvFaults: lossy(4)})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024, timeout: lossTimeout, psnA: 0xfffff0, psnB: 0xffff80})
	const size = 200 << 10
	src := regMR(t, ea.pd, size, 0)
	back := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	for k := 0; k < n; k++ {
		sz := 1 + (k*104729)%size
		off := (k * 4099) % (size - sz + 1)
		fill(src.Bytes()[:sz], k)
		clear(back.Bytes()[:sz])
		wrs := []rdma.SendWR{
			{WRID: uint64(2 * k), Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, sz)}, RemoteAddr: mem.Addr() + uint64(off), RKey: mem.RKey()},
			{WRID: uint64(2*k + 1), Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(back, 0, sz)}, RemoteAddr: mem.Addr() + uint64(off), RKey: mem.RKey()},
		}
		wrs[0].Next = &wrs[1]
		postSend(t, ea.qp, &wrs[0])
		wc := poll(t, ea.scq, 1, 30*time.Second)[0]
		if wc.Status != rdma.Success {
			t.Logf("responder QP %s\nA %+v\nB %+v", eb.qp.State(), a.Stats(), b.Stats())
		}
		checkWC(t, wc, uint64(2*k+1), rdma.Success)
		if !bytes.Equal(back.Bytes()[:sz], src.Bytes()[:sz]) {
			t.Fatalf("round %d (%d bytes at %d): data read back differs", k, sz, off)
		}
	}
	t.Logf("A %+v", a.Stats())
	t.Logf("B %+v", b.Stats())
}

// lossTimeout is the local ACK timeout code of the loss tests: 33.6 ms,
// 67.1 ms under the race detector. Shorter timeouts make the retry count
// (7) run out when a busy machine stalls a receive goroutine for eight
// timeouts in a row (16.8 and 33.6 ms did, about one run in three, with
// two CPU burners beside other tests); each lost retransmission or NAK
// costs one timeout.
var lossTimeout = uint8(13)

func init() {
	if raceEnabled {
		lossTimeout = 14
	}
}
