package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// rogue is a target that speaks raw verbs to a host queue: it receives
// the host's capsules and does with the host's keys whatever a test asks
// (answers with any CID, RDMA READs and WRITEs out of turn). Every call
// waits for its own completion; ctx bounds them all.
type rogue struct {
	t      *testing.T
	ctx    context.Context
	pd     rdma.PD
	cq     rdma.CQ
	qp     rdma.QP
	conn   rdma.Conn
	mr     rdma.MR
	mem    []byte // receive buffers, then the send buffer, then the data buffer
	nrecv  int
	recvWR []rdma.RecvWR
	got    [][]byte // capsules received while waiting for something else
	wcs    []rdma.WorkCompletion
	host   rdma.Device // the host queue's device
}

const (
	rogueCapsule = 64
	rogueData    = 256 << 10
	rogueRecvs   = 8
)

// rogueDevs counts the device pairs the rogue tests opened: each pair
// gets addresses of its own, 127.22.P.2k+1 and 127.22.P.2k+2 with P from
// the process ID, so that a pair is not in use by another test (or
// another process's) while a test opens the next.
var rogueDevs atomic.Uint32

// dialRogue opens a host queue (QID 1, 32 entries) to a rogue target on
// port.
func dialRogue(t *testing.T, ctx context.Context, port uint16) (*rogue, fabrics.HostQueue) {
	t.Helper()
	k := byte(rogueDevs.Add(1) % 120)
	p := byte(os.Getpid())
	taddr := netip.AddrFrom4([4]byte{127, 22, p, 2*k + 1})
	tdev, hdev := openSoft(t, taddr), openSoft(t, netip.AddrFrom4([4]byte{127, 22, p, 2*k + 2}))
	cm, err := tdev.ConnManager()
	if err != nil {
		t.Fatal(err)
	}
	l, err := cm.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	type dialed struct {
		hq  fabrics.HostQueue
		err error
	}
	dc := make(chan dialed, 1)
	go func() {
		hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: taddr, ServiceID: port},
			fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
		dc <- dialed{hq, err}
	}()
	req, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rogue{t: t, ctx: ctx, nrecv: rogueRecvs, wcs: make([]rdma.WorkCompletion, 16), host: hdev}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r.pd, err = tdev.AllocPD()
	must(err)
	r.cq, err = tdev.CreateCQ(64)
	must(err)
	r.qp, err = r.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: rdma.QPCap{MaxSendWR: 16, MaxRecvWR: rogueRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(err)
	r.mem = make([]byte, rogueRecvs*rogueCapsule+nvme.CQESize+rogueData)
	r.mr, err = r.pd.RegMR(r.mem, rdma.AccessLocalWrite)
	must(err)
	t.Cleanup(func() {
		r.qp.Destroy()
		r.mr.Deregister()
		r.cq.Destroy()
		r.pd.Dealloc()
	})
	must(r.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit}, rdma.QPAttrState|rdma.QPAttrAccessFlags|rdma.QPAttrPKeyIndex|rdma.QPAttrPort))
	r.recvWR = make([]rdma.RecvWR, rogueRecvs)
	for i := range r.recvWR {
		r.recvWR[i] = rdma.RecvWR{WRID: uint64(i), SGL: []rdma.SGE{{Addr: r.mr.Addr() + uint64(i*rogueCapsule), Length: rogueCapsule, LKey: r.mr.LKey()}}}
		must(r.qp.PostRecv(&r.recvWR[i]))
	}
	acc := make(CMAccept, CMAcceptLen)
	acc.Set(32)
	r.conn, err = req.Accept(ctx, r.qp, acc, rdma.ConnParam{InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7, FlowControl: true})
	must(err)
	d := <-dc
	must(d.err)
	t.Cleanup(func() { d.hq.Close() })
	return r, d.hq
}

// rogueSendWRID marks the rogue's send work requests (receives have
// their buffer's index).
const rogueSendWRID = 1 << 32

// poll waits for the next completion of a receive (recv) or of a send
// work request; receives that complete meanwhile are kept as capsules
// (or dropped when they failed).
func (r *rogue) poll(recv bool) rdma.WorkCompletion {
	r.t.Helper()
	notify := r.cq.Notify()
	for {
		n := r.cq.Poll(r.wcs[:1])
		if n == 0 {
			select {
			case <-notify:
				continue
			case <-r.ctx.Done():
				r.t.Fatalf("rogue: no completion (receive %v)", recv)
			}
		}
		wc := r.wcs[0]
		if isRecv := wc.WRID < rogueSendWRID; isRecv != recv {
			if isRecv && wc.Status == rdma.Success {
				r.keep(wc)
			}
			continue
		}
		return wc
	}
}

// keep stores the capsule of receive completion wc and reposts its buffer.
func (r *rogue) keep(wc rdma.WorkCompletion) {
	i := int(wc.WRID)
	r.got = append(r.got, append([]byte(nil), r.mem[i*rogueCapsule:i*rogueCapsule+int(wc.ByteLen)]...))
	if err := r.qp.PostRecv(&r.recvWR[i]); err != nil {
		r.t.Fatal(err)
	}
}

// capsule returns the next command capsule the host sent.
func (r *rogue) capsule() nvme.SQE {
	r.t.Helper()
	for len(r.got) == 0 {
		wc := r.poll(true)
		if wc.Status != rdma.Success {
			r.t.Fatalf("rogue: receive failed: %v", wc.Status)
		}
		r.keep(wc)
	}
	c := r.got[0]
	r.got = r.got[1:]
	return nvme.SQE(c[:nvme.SQESize])
}

// post posts wr, signaled, and returns its completion's status.
func (r *rogue) post(wr *rdma.SendWR) rdma.WCStatus {
	r.t.Helper()
	wr.Flags |= rdma.SendSignaled
	wr.WRID = rogueSendWRID
	if err := r.qp.PostSend(wr); err != nil {
		r.t.Fatal(err)
	}
	return r.poll(false).Status
}

// respond sends a CQE for cid with DW0 dw0 (a SEND with Invalidate of
// inv if inv is not 0).
func (r *rogue) respond(cid uint16, dw0 uint32, inv uint32) rdma.WCStatus {
	off := rogueRecvs * rogueCapsule
	cqe := nvme.CQE(r.mem[off : off+nvme.CQESize])
	clear(cqe)
	cqe.SetCID(cid)
	cqe.SetSQID(1)
	cqe.SetDW0(dw0)
	wr := rdma.SendWR{Opcode: rdma.WRSend, SGL: []rdma.SGE{{Addr: r.mr.Addr() + uint64(off), Length: nvme.CQESize, LKey: r.mr.LKey()}}}
	if inv != 0 {
		wr.Opcode, wr.InvalidateRKey = rdma.WRSendWithInv, inv
	}
	return r.post(&wr)
}

// dataSGE returns an SGE of n bytes of the rogue's data buffer.
func (r *rogue) dataSGE(n int) []rdma.SGE {
	off := rogueRecvs*rogueCapsule + nvme.CQESize
	return []rdma.SGE{{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}}
}

// data returns the rogue's data buffer.
func (r *rogue) data() []byte { return r.mem[rogueRecvs*rogueCapsule+nvme.CQESize:] }

// write RDMA-WRITEs n bytes of the data buffer to addr/rkey at the host.
func (r *rogue) write(addr uint64, rkey uint32, n int) rdma.WCStatus {
	return r.post(&rdma.SendWR{Opcode: rdma.WRRDMAWrite, SGL: r.dataSGE(n), RemoteAddr: addr, RKey: rkey})
}

// read RDMA-READs n bytes at addr/rkey at the host into the data buffer.
func (r *rogue) read(addr uint64, rkey uint32, n int) rdma.WCStatus {
	return r.post(&rdma.SendWR{Opcode: rdma.WRRDMARead, SGL: r.dataSGE(n), RemoteAddr: addr, RKey: rkey})
}

// testTags hands out the lowest tag not outstanding on each host queue
// of the tests (commands submitted one after the other reuse tag 0).
var testTags struct {
	sync.Mutex
	busy map[fabrics.HostQueue][]bool
}

// takeTag returns a free tag of hq.
func takeTag(t *testing.T, hq fabrics.HostQueue) uint16 {
	t.Helper()
	testTags.Lock()
	defer testTags.Unlock()
	if testTags.busy == nil {
		testTags.busy = map[fabrics.HostQueue][]bool{}
	}
	b := testTags.busy[hq]
	if b == nil {
		b = make([]bool, hq.Depth())
		testTags.busy[hq] = b
	}
	for i, used := range b {
		if !used {
			b[i] = true
			return uint16(i)
		}
	}
	t.Fatalf("all %d tags of the queue outstanding", len(b))
	return 0
}

// freeTag returns tag to hq's free tags.
func freeTag(hq fabrics.HostQueue, tag uint16) {
	testTags.Lock()
	testTags.busy[hq][tag] = false
	testTags.Unlock()
}

// submitAsync submits a command under a free tag and returns the channel
// its Done sends on.
func submitAsync(t *testing.T, hq fabrics.HostQueue, op byte, data []byte, dir fabrics.DataDirection) <-chan *fabrics.HostCommand {
	t.Helper()
	done := make(chan *fabrics.HostCommand, 1)
	tag := takeTag(t, hq)
	c := &fabrics.HostCommand{Data: data, Direction: dir, Tag: tag, Done: func(c *fabrics.HostCommand) {
		freeTag(hq, tag)
		done <- c
	}}
	c.SQE[0] = op
	if err := hq.Submit(c); err != nil {
		freeTag(hq, tag)
		t.Fatal(err)
	}
	return done
}

func waitDone(t *testing.T, ctx context.Context, done <-chan *fabrics.HostCommand) *fabrics.HostCommand {
	t.Helper()
	select {
	case c := <-done:
		return c
	case <-ctx.Done():
		t.Fatal("no completion")
	}
	return nil
}

// TestHostCIDGeneration: a CQE that names an earlier command of a reused
// slot (a stray or late CQE) must not complete the slot's new command; it
// is dropped and counted.
func TestHostCIDGeneration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, hq := dialRogue(t, ctx, 4440)
	a := submitAsync(t, hq, 0x7e, nil, fabrics.DirNone)
	cidA := r.capsule().CID()
	if st := r.respond(cidA, 0xaaaa, 0); st != rdma.Success {
		t.Fatal(st)
	}
	if c := waitDone(t, ctx, a); c.Err != nil || nvme.CQE(c.CQE[:]).DW0() != 0xaaaa {
		t.Fatalf("first command: %v, DW0 %#x", c.Err, nvme.CQE(c.CQE[:]).DW0())
	}
	b := submitAsync(t, hq, 0x7e, nil, fabrics.DirNone)
	cidB := r.capsule().CID()
	if fabrics.CIDTag(cidA) != 0 || fabrics.CIDTag(cidB) != 0 {
		t.Fatalf("CIDs %#x, %#x: both commands had tag 0", cidA, cidB)
	}
	if cidB == cidA {
		t.Fatalf("the reused slot's command has the same CID %#x", cidA)
	}
	// The earlier command's CQE again, then a CID no command has, then
	// the right one: only the last completes the command.
	r.respond(cidA, 0xaaaa, 0)
	r.respond(cidB^0x8000, 0xcccc, 0)
	r.respond(cidB, 0xbbbb, 0)
	if c := waitDone(t, ctx, b); c.Err != nil || nvme.CQE(c.CQE[:]).DW0() != 0xbbbb {
		t.Fatalf("second command completed by DW0 %#x (%v), want its own CQE (0xbbbb)", nvme.CQE(c.CQE[:]).DW0(), c.Err)
	}
	// A repeat of the right CQE, now for nothing outstanding.
	r.respond(cidB, 0xbbbb, 0)
	c := submitAsync(t, hq, 0x7e, nil, fabrics.DirNone)
	cidC := r.capsule().CID()
	r.respond(cidC, 0xdddd, 0)
	if c := waitDone(t, ctx, c); nvme.CQE(c.CQE[:]).DW0() != 0xdddd {
		t.Fatalf("third command completed by DW0 %#x", nvme.CQE(c.CQE[:]).DW0())
	}
	if n := hq.(fabrics.StrayCounter).StrayCompletions(); n != 3 {
		t.Errorf("%d stray completions counted, want 3", n)
	}
	// The caller's tag is the CID's slot part; a tag in use or beyond
	// the depth is refused without a Done.
	refused := func(*fabrics.HostCommand) { t.Error("Done of a refused command") }
	d := make(chan *fabrics.HostCommand, 1)
	e := &fabrics.HostCommand{Tag: 5, Done: func(c *fabrics.HostCommand) { d <- c }}
	e.SQE[0] = 0x7e
	if err := hq.Submit(e); err != nil {
		t.Fatal(err)
	}
	cidE := r.capsule().CID()
	if fabrics.CIDTag(cidE) != 5 {
		t.Fatalf("CID %#x for tag 5", cidE)
	}
	if err := hq.Submit(&fabrics.HostCommand{Tag: 5, Done: refused}); err == nil {
		t.Fatal("a second command under tag 5 accepted")
	}
	if err := hq.Submit(&fabrics.HostCommand{Tag: uint16(hq.Depth()), Done: refused}); err == nil {
		t.Fatalf("tag %d of a queue of %d accepted", hq.Depth(), hq.Depth())
	}
	r.respond(cidE, 0xeeee, 0)
	if c := waitDone(t, ctx, d); nvme.CQE(c.CQE[:]).DW0() != 0xeeee {
		t.Fatalf("tag 5 completed by DW0 %#x", nvme.CQE(c.CQE[:]).DW0())
	}
}

// TestHostRKeys: the target reaches a command's data only with the
// command's rkey, only its bytes, only in its direction and only until
// the command completes.
func TestHostRKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 4096
	type sgl struct {
		addr uint64
		rkey uint32
		cid  uint16
		inv  bool
	}
	capsule := func(r *rogue) sgl {
		sqe := r.capsule()
		d := fabrics.SGL(sqe[24:40])
		if d.Type() != fabrics.SGLTypeKeyedDataBlock || d.KeyedLength() != n {
			t.Fatalf("SGL %x: want a keyed data block of %d bytes", []byte(d), n)
		}
		return sgl{d.Address(), d.Key(), sqe.CID(), d.Invalidate()}
	}
	fill := func(r *rogue, b byte) { copy(r.data(), bytes.Repeat([]byte{b}, n)) }

	t.Run("read then late write", func(t *testing.T) {
		r, hq := dialRogue(t, ctx, 4441)
		buf := make([]byte, n)
		done := submitAsync(t, hq, 0x02, buf, fabrics.DirCtrlToHost)
		s := capsule(r)
		if !s.inv {
			t.Errorf("keyed SGL without the invalidate subtype")
		}
		if st := r.read(s.addr, s.rkey, n); st == rdma.Success {
			t.Errorf("RDMA READ through a controller-to-host command's rkey succeeded")
			fill(r, 0x11)
		} else {
			// The failed READ broke the connection: start over.
			r, hq = dialRogue(t, ctx, 4442)
			done = submitAsync(t, hq, 0x02, buf, fabrics.DirCtrlToHost)
			s = capsule(r)
		}
		fill(r, 0x11)
		if st := r.write(s.addr, s.rkey, n); st != rdma.Success {
			t.Fatalf("RDMA WRITE of the command's data: %v", st)
		}
		r.respond(s.cid, 0, 0)
		if c := waitDone(t, ctx, done); c.Err != nil || buf[0] != 0x11 || buf[n-1] != 0x11 {
			t.Fatalf("read: %v, data %#x..%#x", c.Err, buf[0], buf[n-1])
		}
		// The command is done: its rkey must be too.
		fill(r, 0x22)
		st := r.write(s.addr, s.rkey, n)
		if st == rdma.Success {
			t.Errorf("RDMA WRITE with a completed command's rkey succeeded")
		}
		if buf[0] != 0x11 {
			t.Errorf("the caller's buffer was written after the command completed")
		}
	})

	t.Run("write: beyond the command and the wrong way", func(t *testing.T) {
		r, hq := dialRogue(t, ctx, 4443)
		buf := bytes.Repeat([]byte{0x33}, n)
		submitAsync(t, hq, 0x01, buf, fabrics.DirHostToCtrl)
		s := capsule(r)
		if st := r.read(s.addr, s.rkey, n+1); st == rdma.Success {
			t.Errorf("RDMA READ of %d bytes through a %d-byte command's rkey succeeded", n+1, n)
		}
		r, hq = dialRogue(t, ctx, 4444)
		submitAsync(t, hq, 0x01, buf, fabrics.DirHostToCtrl)
		s = capsule(r)
		fill(r, 0x44)
		if st := r.write(s.addr, s.rkey, n); st == rdma.Success {
			t.Errorf("RDMA WRITE through a host-to-controller command's rkey succeeded")
		}
		if buf[0] != 0x33 {
			t.Errorf("write data overwritten by the target")
		}
	})

	t.Run("other commands' memory", func(t *testing.T) {
		r, hq := dialRogue(t, ctx, 4445)
		secret := bytes.Repeat([]byte{0x55}, n)
		submitAsync(t, hq, 0x01, secret, fabrics.DirHostToCtrl)
		first := capsule(r)
		mine := make([]byte, n)
		submitAsync(t, hq, 0x01, mine, fabrics.DirHostToCtrl)
		second := capsule(r)
		if second.rkey == first.rkey && second.addr == first.addr {
			t.Fatalf("two outstanding commands share address and rkey")
		}
		// The second command's key, the first command's address.
		if st := r.read(first.addr, second.rkey, n); st == rdma.Success && bytes.Equal(r.data()[:n], secret) {
			t.Errorf("RDMA READ of another command's data through this command's rkey succeeded")
		}
	})
}

// TestHostBogusInvalidate: a response that invalidates an rkey its
// command did not carry fails the queue (nvme_rdma_process_nvme_rsp).
func TestHostBogusInvalidate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, hq := dialRogue(t, ctx, 4446)
	a := submitAsync(t, hq, 0x02, make([]byte, 4096), fabrics.DirCtrlToHost)
	sa := r.capsule()
	b := submitAsync(t, hq, 0x02, make([]byte, 4096), fabrics.DirCtrlToHost)
	sb := r.capsule()
	keyB := fabrics.SGL(sb[24:40]).Key()
	r.respond(sa.CID(), 0, keyB)
	for _, d := range []<-chan *fabrics.HostCommand{a, b} {
		if c := waitDone(t, ctx, d); c.Err == nil {
			t.Errorf("command %#x completed (status %v) after a bogus invalidation", binary.LittleEndian.Uint16(c.SQE[2:]), nvme.CQE(c.CQE[:]).Status())
		}
	}
}
