package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/nvme"
)

// gatherHandler answers reads from a region lent in pieces of 3000 bytes
// (Request.Gather), as a memory backend does; with short it lends one
// piece too few, which the transport must answer from Data instead. With
// hold it keeps the reads and completes them when release is closed.
type gatherHandler struct {
	reg     *region.Region
	short   bool
	hold    bool
	mu      sync.Mutex
	held    []*fabrics.Request
	got     chan struct{} // a read was held
	closed  chan error
	gathers int
}

func (h *gatherHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabrics.OpcodeFabrics {
		nvme.CQE(r.CQE[:]).SetDW0(1)
		r.Complete()
		return
	}
	if !r.Queue.(fabrics.GatherSender).SendsGather() {
		panic("SendsGather false")
	}
	off := int(binary.LittleEndian.Uint64(r.SQE[40:])) * 512
	n := len(r.Data)
	for p := 0; p < n; p += 3000 {
		l := min(3000, n-p)
		if h.short && p+l == n {
			copy(r.Data[p:], h.reg.Bytes()[off+p:off+p+l]) // the rest: Data only
			break
		}
		h.reg.Acquire()
		r.Gather = append(r.Gather, region.Segment{Region: h.reg, Off: off + p, Len: l})
	}
	h.mu.Lock()
	h.gathers++
	if h.hold {
		h.held = append(h.held, r)
		h.mu.Unlock()
		h.got <- struct{}{}
		return
	}
	h.mu.Unlock()
	r.Complete()
}

func (h *gatherHandler) QueueClosed(err error) { h.closed <- err }

// TestTargetGather: reads lent by the backend go out from its memory
// (digests off and on, SUCCESS and CapsuleResp), a short lending is sent
// from Data, and every lent piece is released: once sent, and when the
// queue closed before the read completed.
func TestTargetGather(t *testing.T) {
	tests := []struct {
		name         string
		dgst, cattr  uint8
		short, close bool
	}{
		{"plain", 0, 0, false, false},
		{"digests, sqflow off", DGSTHeader | DGSTData, 4, false, false},
		{"short lending", DGSTData, 0, true, false},
		{"queue closed first", 0, 0, false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := tgtPattern(1<<20, byte(i))
			released := make(chan struct{})
			reg := region.New(mem, func() { close(released) })
			h := &gatherHandler{reg: reg, short: tt.short, hold: tt.close, got: make(chan struct{}, 3), closed: make(chan error, 1)}
			l, err := Listen(TargetConfig{Addr: netip.AddrFrom4([4]byte{127, 0, 45, byte(1 + i)}), Ephemeral: true, TOS: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				if q, err := l.Accept(t.Context()); err == nil {
					q.Serve(h)
				}
			}()
			c := tgtDial(t, l)
			c.connect(tt.dgst, 0, tt.cattr)
			for k, blocks := range []int{8, 256, 7} {
				cid := uint16(30 + k)
				c.write(c.capsule(tgtIOSQE(nvme.IORead, cid, uint64(k*1000), blocks, false), nil))
				if tt.close {
					continue
				}
				p := c.read()
				if p == nil || p.Type() != TypeC2HData {
					t.Fatalf("read %d: %v", k, p)
				}
				want := mem[k*1000*512 : k*1000*512+blocks*512]
				if !bytes.Equal(p.Data(), want) {
					t.Fatalf("read %d: data differs from the region's", k)
				}
				if p.Header().Flags()&FlagDataSuccess == 0 {
					if st := c.expectResp(cid); st != 0 {
						t.Fatalf("read %d: status %#x", k, st)
					}
				}
			}
			if tt.close {
				for range 3 {
					<-h.got
				}
			}
			c.c.Close()
			if err := <-h.closed; !errors.Is(err, fabrics.ErrQueueClosed) {
				t.Fatalf("QueueClosed(%v)", err)
			}
			for _, r := range h.held {
				r.Complete() // after the queue is gone: released, not sent
			}
			reg.Close() // the owner's reference: the last once all pieces are back
			select {
			case <-released:
			default:
				t.Fatalf("region still referenced (%d) after the queue closed", reg.Refs())
			}
			if h.gathers != 3 {
				t.Fatal(fmt.Sprint("reads lent: ", h.gathers))
			}
		})
	}
}
