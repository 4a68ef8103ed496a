package loop

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// memHandler stores host-to-controller data and returns it on reads.
type memHandler struct {
	stored []byte
	closed chan error
}

func (m *memHandler) HandleCommand(r *fabrics.Request) {
	switch r.SQE[0] & 3 {
	case 1:
		m.stored = append(m.stored[:0], r.Data...)
	case 2:
		copy(r.Data, m.stored)
	}
	r.CQE[0] = r.SQE[0] // echo the opcode in DW0
	r.Complete()
}

func (m *memHandler) QueueClosed(err error) { m.closed <- err }

// listen starts a listener on a new network, closed when the test ends.
func listen(t *testing.T) (*Network, fabrics.Address, *Listener) {
	t.Helper()
	n := NewNetwork()
	addr := fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: 4420}
	l, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return n, addr, l
}

func TestLoopRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, addr, l := listen(t)
	if _, err := (Dialer{n}).Dial(ctx, fabrics.Address{ServiceID: 1}, fabrics.QueueParams{SQSize: 32}); !errors.Is(err, ErrRefused) {
		t.Fatalf("dial to nothing: %v", err)
	}
	h := &memHandler{closed: make(chan error, 1)}
	accepted := make(chan fabrics.TargetQueue, 1)
	go func() {
		tq, err := l.Accept(ctx)
		if err == nil {
			tq.Serve(h)
		}
		accepted <- tq
	}()
	hq, err := (Dialer{n}).Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	<-accepted
	done := make(chan *fabrics.HostCommand, 4)
	submit := func(op byte, data []byte, dir fabrics.DataDirection) *fabrics.HostCommand {
		c := &fabrics.HostCommand{Data: data, Direction: dir, Done: func(c *fabrics.HostCommand) { done <- c }}
		c.SQE[0] = op
		if err := hq.Submit(c); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-done:
			return c
		case <-ctx.Done():
			t.Fatal("timeout")
		}
		return nil
	}
	want := bytes.Repeat([]byte("nvme"), 1024)
	w := submit(0x01, want, fabrics.DirHostToCtrl)
	if w.Err != nil || w.CQE[0] != 0x01 || w.CQE[10] != 1 {
		t.Fatalf("write completion %x err %v", w.CQE, w.Err)
	}
	got := make([]byte, len(want))
	r := submit(0x02, got, fabrics.DirCtrlToHost)
	if r.Err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back differs (err %v)", r.Err)
	}
	if err := hq.Submit(&fabrics.HostCommand{Data: make([]byte, DefaultMaxTransfer+1), Done: func(*fabrics.HostCommand) {}}); err == nil {
		t.Fatal("oversize transfer accepted")
	}
	hq.Close()
	select {
	case err := <-h.closed:
		if !errors.Is(err, fabrics.ErrQueueClosed) {
			t.Fatalf("QueueClosed(%v)", err)
		}
	case <-ctx.Done():
		t.Fatal("handler never saw the close")
	}
	if err := hq.Submit(&fabrics.HostCommand{Done: func(*fabrics.HostCommand) {}}); !errors.Is(err, fabrics.ErrQueueClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

// holdHandler hands every command to the test instead of completing it.
type holdHandler struct{ held chan *fabrics.Request }

func (h holdHandler) HandleCommand(r *fabrics.Request) { h.held <- r }
func (h holdHandler) QueueClosed(error)                {}

// TestCloseWaitsForCompletion completes a Read on the target side while
// the host closes the queue: once Close has returned, the host's buffer
// is the caller's again, so no completion may still be copying into it
// (the race detector also sees an unordered copy).
func TestCloseWaitsForCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, addr, l := listen(t)
	h := holdHandler{held: make(chan *fabrics.Request, 1)}
	const size = 256 << 10
	pattern, zero := bytes.Repeat([]byte{0xa5}, size), make([]byte, size)
	for i := range 100 {
		accepted := make(chan error, 1)
		go func() {
			tq, err := l.Accept(ctx)
			if err == nil {
				tq.Serve(h)
			}
			accepted <- err
		}()
		hq, err := (Dialer{n}).Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		cmd := &fabrics.HostCommand{Data: buf, Direction: fabrics.DirCtrlToHost, Done: func(*fabrics.HostCommand) {}}
		cmd.SQE[0] = 0x02
		if err := hq.Submit(cmd); err != nil {
			t.Fatal(err)
		}
		var r *fabrics.Request
		select {
		case r = <-h.held:
		case <-ctx.Done():
			t.Fatal("command never reached the target")
		}
		copy(r.Data, pattern)
		started, completed := make(chan struct{}), make(chan struct{})
		go func() {
			close(started)
			r.Complete()
			close(completed)
		}()
		<-started // most rounds, Close comes while Complete copies
		hq.Close()
		// The buffer is ours: write it, then check that nothing else does.
		clear(buf)
		<-completed
		if !bytes.Equal(buf, zero) {
			t.Fatalf("round %d: buffer written after Close returned", i)
		}
	}
}

// TestTags: the queue keeps its commands by the caller's tags: a tag in
// use or outside the depth is refused (and that command never completes),
// the CID carries the tag with a generation bumped per reuse, and a
// command refused because the queue closed is not completed as well.
func TestTags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, addr, l := listen(t)
	h := holdHandler{held: make(chan *fabrics.Request, 4)}
	go func() {
		if tq, err := l.Accept(ctx); err == nil {
			tq.Serve(h)
		}
	}()
	hq, err := (Dialer{n}).Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer hq.Close()
	if hq.Depth() != 2 {
		t.Fatalf("depth %d", hq.Depth())
	}
	var dones [4]int
	cmds := make([]fabrics.HostCommand, 4)
	for i := range cmds {
		cmds[i].Done = func(*fabrics.HostCommand) { dones[i]++ }
	}
	cid := func(c *fabrics.HostCommand) uint16 { return uint16(c.SQE[2]) | uint16(c.SQE[3])<<8 }
	recv := func() *fabrics.Request {
		select {
		case r := <-h.held:
			return r
		case <-ctx.Done():
			t.Fatal("command never reached the target")
			return nil
		}
	}
	cmds[0].Tag = 1
	if err := hq.Submit(&cmds[0]); err != nil {
		t.Fatal(err)
	}
	first := cid(&cmds[0])
	if fabrics.CIDTag(first) != 1 {
		t.Fatalf("CID %#x for tag 1", first)
	}
	r := recv()
	cmds[1].Tag = 1
	if err := hq.Submit(&cmds[1]); err == nil {
		t.Fatal("a second command under tag 1 accepted")
	}
	cmds[2].Tag = 2
	if err := hq.Submit(&cmds[2]); err == nil {
		t.Fatal("tag 2 of a queue of 2 accepted")
	}
	r.Complete()
	if dones != [4]int{1, 0, 0, 0} {
		t.Fatalf("Done calls %v, want only the first command's", dones)
	}
	if c := nvme16(cmds[0].CQE[12:]); c != first {
		t.Fatalf("CQE CID %#x, want %#x", c, first)
	}
	if err := hq.Submit(&cmds[0]); err != nil {
		t.Fatal(err)
	}
	if second := cid(&cmds[0]); fabrics.CIDTag(second) != 1 || second == first {
		t.Fatalf("reused tag 1: CID %#x after %#x", second, first)
	}
	recv().Complete()
	if dones[0] != 2 {
		t.Fatalf("Done calls %v", dones)
	}
	hq.Close()
	if err := hq.Submit(&cmds[3]); !errors.Is(err, fabrics.ErrQueueClosed) {
		t.Fatalf("submit after close: %v", err)
	}
	if dones[3] != 0 {
		t.Fatal("a refused command completed")
	}
}

func nvme16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
