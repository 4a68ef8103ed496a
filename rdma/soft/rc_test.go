package soft

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

func TestSendSmoke(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	src := regMR(t, ea.pd, 4096, 0)
	dst := regMR(t, eb.pd, 4096, rdma.AccessLocalWrite)
	fill(src.Bytes(), 1)
	postRecv(t, eb.qp, 7, sge(dst, 0, 4096))
	postSend(t, ea.qp, &rdma.SendWR{WRID: 9, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 3000)}})
	wc := poll(t, eb.rcq, 1, 2*time.Second)
	checkWC(t, wc[0], 7, rdma.Success)
	if wc[0].ByteLen != 3000 || wc[0].Opcode != rdma.WCRecv || wc[0].QPN != eb.qp.QPN() {
		t.Fatalf("receive completion %+v", wc[0])
	}
	sc := poll(t, ea.scq, 1, 2*time.Second)[0]
	checkWC(t, sc, 9, rdma.Success)
	if sc.Opcode != rdma.WCSend || sc.QPN != ea.qp.QPN() {
		t.Fatalf("send completion %+v", sc)
	}
	if !bytes.Equal(dst.Bytes()[:3000], src.Bytes()[:3000]) {
		t.Fatal("received data differs")
	}
}

// TestDataPath moves SEND, RDMA WRITE and RDMA READ messages of sizes
// around the MTU boundaries up to 16 MiB, at each path MTU, and checks
// every byte and that nothing beyond the message was written. The PSNs
// start just below the 24-bit wrap.
func TestDataPath(t *testing.T) {
	maxSize := 16 << 20
	if raceEnabled || testing.Short() {
		maxSize = 1 << 20
	}
	a, b := openPair(t, Config{}, Config{})
	for _, mtu := range []rdma.MTU{rdma.MTU256, rdma.MTU1024, rdma.MTU4096} {
		t.Run(fmt.Sprintf("mtu%d", mtu.Bytes()), func(t *testing.T) {
			m := mtu.Bytes()
			top := maxSize
			if mtu == rdma.MTU256 {
				top = min(top, 4<<20)
			}
			ea, eb := connect(t, a, b, qpOpts{mtu: mtu, psnA: 0xffffff - 37, psnB: 0xfffff0})
			const guard = 64
			srcA := regMR(t, ea.pd, top, 0)
			readA := regMR(t, ea.pd, top+guard, rdma.AccessLocalWrite)
			memB := regMR(t, eb.pd, top+guard, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			sizes := []int{0, 1, 3, m - 1, m, m + 1, 2*m - 1, 2 * m, 2*m + 1, 7*m + 5, 64 << 10, 1<<20 + 3, top}
			wrid := uint64(0)
			for _, n := range sizes {
				if n > top {
					continue
				}
				for _, op := range []rdma.WROpcode{rdma.WRSend, rdma.WRRDMAWrite, rdma.WRRDMARead} {
					wrid++
					fill(srcA.Bytes()[:n], int(wrid))
					fill(memB.Bytes()[:n], int(wrid)+1000)
					clear(memB.Bytes()[n : n+guard])
					clear(readA.Bytes()[:n+guard])
					want := srcA.Bytes()[:n]
					wr := rdma.SendWR{WRID: wrid, Opcode: op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(srcA, 0, n)},
						RemoteAddr: memB.Addr(), RKey: memB.RKey()}
					switch op {
					case rdma.WRSend:
						clear(memB.Bytes()[:n])
						postRecv(t, eb.qp, wrid, sge(memB, 0, top+guard))
					case rdma.WRRDMARead:
						wr.SGL = []rdma.SGE{sge(readA, 0, n)}
						want = append([]byte(nil), memB.Bytes()[:n]...)
					}
					postSend(t, ea.qp, &wr)
					wc := poll(t, ea.scq, 1, 10*time.Second)[0]
					checkWC(t, wc, wrid, rdma.Success)
					if wc.ByteLen != uint32(n) {
						t.Fatalf("%s of %d bytes: completion byte_len %d", op, n, wc.ByteLen)
					}
					got, rest := memB.Bytes()[:n], memB.Bytes()[n:n+guard]
					if op == rdma.WRSend {
						rc := poll(t, eb.rcq, 1, 10*time.Second)[0]
						checkWC(t, rc, wrid, rdma.Success)
						if rc.ByteLen != uint32(n) || rc.Opcode != rdma.WCRecv {
							t.Fatalf("SEND of %d bytes: receive completion %+v", n, rc)
						}
					}
					if op == rdma.WRRDMARead {
						got, rest = readA.Bytes()[:n], readA.Bytes()[n:n+guard]
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s of %d bytes at MTU %d: data differs", op, n, m)
					}
					if !bytes.Equal(rest, make([]byte, guard)) {
						t.Fatalf("%s of %d bytes at MTU %d wrote past the message", op, n, m)
					}
				}
			}
			t.Logf("A %+v\nB %+v", a.Stats(), b.Stats())
			if s := a.Stats(); s.ICRCErrors+s.Malformed+s.UnknownQP != 0 {
				t.Errorf("A: %+v", s)
			}
		})
	}
}
