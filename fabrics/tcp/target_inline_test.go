package tcp

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// tgtSendCounts waits (bounded) until nobody is sending on q and returns
// how many sends went whole from the caller of enqueue or uncork, and how
// many from the writer goroutine.
func tgtSendCounts(t *testing.T, q *TargetQueue) (inlined, sent uint64) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; {
		q.mu.Lock()
		busy, i, s := q.busy, q.inlined, q.sent
		q.mu.Unlock()
		if !busy {
			return i, s
		}
		if time.Now().After(end) {
			t.Fatal("a send did not end within 10 s")
		}
	}
}

// TestTargetInlineSend: at QD1 the goroutine that completes a command (or
// queues its R2T) writes the PDUs itself: the writer goroutine sends
// nothing, so a command wakes no goroutine on its way out. Commands that
// arrive together are answered together: one writev once the reader has
// taken the last of them.
func TestTargetInlineSend(t *testing.T) {
	h := &syncHandler{closed: make(chan error, 1)}
	c, q := tgtServeOne(t, "127.0.41.31", h)
	i0, s0 := tgtSendCounts(t, q)

	const rounds = 10
	for range rounds {
		c.write(c.capsule(tgtIOSQE(nvme.IORead, 1, 0, 8, false), nil))
		if p := c.read(); p == nil || p.Type() != TypeC2HData {
			t.Fatalf("read: %v", p)
		}
		c.write(c.capsule(tgtIOSQE(nvme.IOWrite, 2, 0, 8, true), make([]byte, 4096)))
		if st := c.expectResp(2); st != 0 {
			t.Fatalf("write status %#x", st)
		}
		c.write(c.capsule(tgtIOSQE(nvme.IOWrite, 3, 0, 64, false), nil))
		p := c.read()
		if p == nil || p.Type() != TypeR2T {
			t.Fatalf("R2T write: %v", p)
		}
		hdr := make([]byte, DataHLen)
		Header(hdr).SetType(TypeH2CData)
		Header(hdr).SetFlags(FlagDataLast)
		DataPDU(hdr).SetCCCID(3)
		DataPDU(hdr).SetTTag(p.R2T().TTag())
		DataPDU(hdr).SetDataL(32 << 10)
		c.write(c.seal(hdr, make([]byte, 32<<10)))
		if st := c.expectResp(3); st != 0 {
			t.Fatalf("R2T write status %#x", st)
		}
	}
	i1, s1 := tgtSendCounts(t, q)
	if got, want := i1-i0, uint64(rounds*4); got != want { // C2HData, CapsuleResp, R2T, CapsuleResp
		t.Errorf("QD1: %d sends inline, want %d", got, want)
	}
	if s1 != s0 {
		t.Errorf("QD1: %d sends by the writer goroutine, want 0", s1-s0)
	}

	// A burst of 16 reads in one write: one send answers them all.
	const burst = 16
	var b []byte
	for i := range burst {
		b = append(b, c.capsule(tgtIOSQE(nvme.IORead, uint16(10+i), 0, 1, false), nil)...)
	}
	c.write(b)
	seen := map[uint16]bool{}
	for range burst {
		p := c.read()
		if p == nil || p.Type() != TypeC2HData {
			t.Fatalf("burst: %v", p)
		}
		seen[binary.LittleEndian.Uint16(p[8:])] = true
	}
	if len(seen) != burst {
		t.Fatalf("burst: %d distinct commands answered, want %d", len(seen), burst)
	}
	i2, s2 := tgtSendCounts(t, q)
	if got := i2 - i1 + s2 - s1; got != 1 {
		t.Errorf("burst of %d: %d sends, want 1", burst, got)
	}
}

// tgtServeOne listens on addr, serves the first queue accepted with h,
// and returns a host connected to it (SQ flow control off: a read is one
// C2HData with SUCCESS) and the target's queue.
func tgtServeOne(t *testing.T, addr string, h fabrics.CommandHandler) (*tgtHost, *TargetQueue) {
	t.Helper()
	l, err := Listen(TargetConfig{Addr: netip.MustParseAddr(addr), Ephemeral: true, TOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan *TargetQueue, 1)
	go func() {
		q, err := l.Accept(context.Background())
		if err == nil {
			accepted <- q.(*TargetQueue)
			q.Serve(h)
		}
	}()
	c := tgtDial(t, l)
	c.connect(0, 0, 4)
	return c, <-accepted
}
