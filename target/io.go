package target

import (
	"bytes"
	"errors"
	"syscall"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// ioCmd is an I/O command on its way to a namespace's workers. Queues
// keep a free list of them: the I/O path allocates nothing per command.
type ioCmd struct {
	q     *queue
	r     *fabrics.Request
	ns    *namespace
	op    nvme.IOOpcode
	off   int64 // byte offset
	n     int64 // byte count (Read, Write, Compare, Write Zeroes)
	slba  uint64
	nr    int   // Dataset Management ranges
	flush bool  // Write: flush after (FUA, or the write cache disabled)
	all   bool  // Flush of every namespace (NSID FFFFFFFFh)
	start int64 // monoNanos when handed off, for the latency (0: not measured)
	ri    int   // Dataset Management: the range in flight on an async backend
	// chained: an operation of the command has completed, so the next
	// one (a write's flush, the next range) starts from the backend's
	// goroutine, not the transport's (SubmitPlug).
	chained bool
}

// handleIO validates an I/O command and hands it to the namespace's
// workers (Linux nvmet_parse_io_cmd and the bdev/file executors).
func (c *controller) handleIO(q *queue, r *fabrics.Request) {
	if !c.ready() {
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locOpcode, 0)
		return
	}
	sqe := nvme.SQE(r.SQE[:])
	op := nvme.IOOpcode(sqe.Opcode())
	nsid := sqe.NSID()
	if op == nvme.IOFlush && nsid == nvme.NSIDAll {
		c.flushAll(q, r)
		return
	}
	ns := c.subsys.activeNamespace(nsid)
	if ns == nil {
		q.complete(r, dnr(nvme.StatusInvalidNamespaceOrFormat), locNSID, 0)
		return
	}
	if s := c.port.anaStatus(ns); s != nvme.StatusSuccess {
		q.complete(r, st(s), locNSID, 0)
		return
	}
	if ns.pr != nil && !ns.pr.allows(c.hostID, op) {
		q.complete(r, dnr(nvme.StatusReservationConflict), locOpcode, 0)
		return
	}
	rw := nvme.RWCommand{SQE: sqe}
	var slba, nlb uint64
	switch op {
	case nvme.IORead, nvme.IOWrite, nvme.IOCompare, nvme.IOWriteZeroes, nvme.IOVerify:
		if ns.ro && (op == nvme.IOWrite || op == nvme.IOWriteZeroes) {
			q.complete(r, st(nvme.StatusNamespaceWriteProtected), locNSID, 0)
			return
		}
		slba, nlb = rw.SLBA(), uint64(rw.Blocks())
		want := 0
		if op != nvme.IOWriteZeroes && op != nvme.IOVerify {
			n := nlb << ns.bsShift
			if c.maxXfer != 0 && n > uint64(c.maxXfer) {
				q.complete(r, dnr(nvme.StatusInvalidField), locLength, slba)
				return
			}
			want = int(n)
		}
		if !q.checkLen(r, want) {
			return
		}
		if nb := ns.nblocks.Load(); slba > nb || nlb > nb-slba {
			q.complete(r, dnr(nvme.StatusLBAOutOfRange), locSLBA, slba)
			return
		}
	case nvme.IOFlush:
		if !q.checkLen(r, 0) {
			return
		}
	case nvme.IODatasetManagement:
		if ns.ro {
			q.complete(r, st(nvme.StatusNamespaceWriteProtected), locNSID, 0)
			return
		}
		dsm := nvme.DSMCommand{SQE: sqe}
		// The range list may come in a longer buffer (Linux's hosts
		// send a 4 KiB page over TCP); the ranges NR names are read
		// (nvmet_check_data_len_lte).
		if len(r.Data) < dsm.DataLength() {
			q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
			return
		}
		if !dsm.AD() {
			q.ok(r) // only hints: nothing to do (Linux)
			return
		}
		nb := ns.nblocks.Load()
		for i := range dsm.Ranges() {
			rg := nvme.DSMRange(r.Data[i*nvme.DSMRangeSize:])
			l, s := uint64(rg.Length()), rg.SLBA()
			if s > nb || l > nb-s {
				q.complete(r, dnr(nvme.StatusLBAOutOfRange), locDPTR, s)
				return
			}
		}
		nlb = uint64(dsm.Ranges())
	case nvme.IOReservationRegister, nvme.IOReservationReport, nvme.IOReservationAcquire, nvme.IOReservationRelease:
		if ns.pr == nil {
			q.complete(r, dnr(nvme.StatusInvalidOpcode), locOpcode, 0)
			return
		}
		c.reservationCommand(q, r, ns, op)
		return
	default:
		q.complete(r, dnr(nvme.StatusInvalidOpcode), locOpcode, 0)
		return
	}
	if !ns.acquire() {
		q.complete(r, dnr(nvme.StatusInvalidNamespaceOrFormat), locNSID, 0)
		return
	}
	cmd := q.getCmd()
	cmd.r, cmd.ns, cmd.op, cmd.slba = r, ns, op, slba
	cmd.start = c.t.ioStart()
	q.inflight.Add(1)
	switch op {
	case nvme.IODatasetManagement:
		cmd.nr = int(nlb)
	default:
		cmd.off = int64(slba << ns.bsShift)
		cmd.n = int64(nlb << ns.bsShift)
	}
	cmd.flush = op == nvme.IOWrite && (rw.FUA() || !c.vwc.Load())
	ns.submit(q, cmd)
}

// flushAll runs Flush with NSID FFFFFFFFh: every active namespace.
func (c *controller) flushAll(q *queue, r *fabrics.Request) {
	if !q.checkLen(r, 0) {
		return
	}
	active := c.subsys.table().active
	if len(active) == 0 {
		q.ok(r)
		return
	}
	ns := active[0]
	if !ns.acquire() {
		q.ok(r) // going away; nothing left to flush there
		return
	}
	cmd := q.getCmd()
	cmd.r, cmd.ns, cmd.op, cmd.all = r, ns, nvme.IOFlush, true
	cmd.start = c.t.ioStart()
	q.inflight.Add(1)
	ns.submit(q, cmd)
}

// submit runs cmd on the namespace's workers, or at once on the calling
// transport goroutine when the backend never blocks (docs/design.md §3: run
// to completion where it can, without a goroutine hop).
func (ns *namespace) submit(q *queue, cmd *ioCmd) {
	if ns.async != nil && cmd.startAsync() {
		return
	}
	if ns.inline {
		q.inline.run(cmd)
		return
	}
	ns.pool.push(cmd)
}

// worker is the state of one I/O goroutine of a namespace.
type worker struct {
	buf []byte // Compare's read buffer, grown as needed
}

// run executes an I/O command on the backend and completes it.
func (w *worker) run(c *ioCmd) {
	ns, r := c.ns, c.r
	dev := ns.dev
	var err error
	var s nvme.Error
	switch c.op {
	case nvme.IORead:
		if ns.segs != nil && c.q.gather {
			r.Gather, err = ns.segs.ReadSegments(c.off, c.n, r.Gather[:0])
		} else {
			_, err = dev.ReadAt(r.Data, c.off)
		}
	case nvme.IOWrite:
		_, err = dev.WriteAt(r.Data, c.off)
		if err == nil && c.flush {
			err = dev.Flush()
		}
	case nvme.IOCompare:
		if cap(w.buf) < len(r.Data) {
			w.buf = make([]byte, len(r.Data))
		}
		buf := w.buf[:len(r.Data)]
		if _, err = dev.ReadAt(buf, c.off); err == nil && !bytes.Equal(buf, r.Data) {
			s = dnr(nvme.StatusCompareFailure)
		}
	case nvme.IOWriteZeroes:
		err = dev.WriteZeroes(c.off, c.n)
	case nvme.IOVerify:
		err = w.verify(dev, c.off, c.n)
	case nvme.IODatasetManagement:
		for i := range c.nr {
			rg := nvme.DSMRange(r.Data[i*nvme.DSMRangeSize:])
			l, slba := int64(rg.Length()), rg.SLBA()
			if l == 0 {
				continue
			}
			if err = dev.Discard(int64(slba<<ns.bsShift), l<<ns.bsShift); err != nil {
				c.slba = slba
				break
			}
		}
	case nvme.IOFlush:
		err = dev.Flush()
		if c.all {
			for _, other := range c.q.ctrlSubsys().table().active {
				if other == ns || !other.acquire() {
					continue
				}
				if ferr := other.dev.Flush(); ferr != nil && err == nil {
					err = ferr
				}
				other.release()
			}
		}
	}
	c.finish(err, s, nil)
}

// verifyChunk is the most Verify reads from the backend at once.
const verifyChunk = 1 << 20

// verify reads n bytes from off and drops them: the backend reports what
// it cannot read (Verify without protection information checks that the
// medium returns the data, as a read would).
func (w *worker) verify(dev bdev.Device, off, n int64) error {
	for n > 0 {
		l := min(n, verifyChunk)
		if int64(cap(w.buf)) < l {
			w.buf = make([]byte, l)
		}
		if _, err := dev.ReadAt(w.buf[:l], off); err != nil {
			return err
		}
		off += l
		n -= l
	}
	return nil
}

// finish counts a command's result, releases its context and completes
// it: err from the backend, or s for a status of the target's own
// (Compare Failure). With b, the request waits in b for the end of the
// backend's pass, to leave with the others of its queue.
func (c *ioCmd) finish(err error, s nvme.Error, b *fabrics.CompletionBatch) {
	ns, r, q := c.ns, c.r, c.q
	if err == nil {
		switch c.op {
		case nvme.IORead, nvme.IOCompare, nvme.IOVerify:
			ns.stats.hostReads.Add(1)
		case nvme.IOWrite, nvme.IOWriteZeroes:
			ns.stats.hostWrites.Add(1)
		}
	}
	loc := uint16(noLoc)
	if err != nil {
		s, loc = ioStatus(c.op, err)
		if s.Status == nvme.StatusUnrecoveredReadError || s.Status == nvme.StatusWriteFault {
			ns.stats.mediaErrors.Add(1)
		}
		off := c.off
		if c.op == nvme.IODatasetManagement {
			off = int64(c.slba << ns.bsShift) // the failed range's
		}
		ns.mon.Error(c.op.String(), off, c.n, err)
	} else if !s.Status.Success() {
		loc = locSLBA
	}
	slba := c.slba
	ns.io.record(c.op, c.n, !s.Status.Success(), c.start)
	q.inflight.Add(-1)
	ns.release()
	q.putCmd(c)
	if b == nil {
		q.complete(r, s, loc, slba)
		return
	}
	q.settle(r, s, loc, slba, true)
	b.Add(r)
}

// startAsync starts cmd on the namespace's asynchronous backend
// (bdev.Async) and reports whether it did; Complete finishes it. Compare
// and a Flush of every namespace go to the workers.
func (c *ioCmd) startAsync() bool {
	a := c.ns.async
	switch c.op {
	case nvme.IORead:
		a.ReadAsync(c.r.Data, c.off, c)
	case nvme.IOWrite:
		if c.flush && c.ns.fua != nil {
			c.flush = false // durable by itself: no flush of everything after
			c.ns.fua.WriteFUAAsync(c.r.Data, c.off, c)
			return true
		}
		a.WriteAsync(c.r.Data, c.off, c)
	case nvme.IOWriteZeroes:
		a.WriteZeroesAsync(c.off, c.n, c)
	case nvme.IOFlush:
		if c.all {
			return false
		}
		a.FlushAsync(c)
	case nvme.IODatasetManagement:
		c.ri = -1
		if !c.nextRange() {
			c.finish(nil, nvme.Error{}, nil)
		}
	default:
		return false
	}
	return true
}

// nextRange starts the discard of the next non-empty Dataset Management
// range after c.ri, one at a time, and reports whether there was one.
func (c *ioCmd) nextRange() bool {
	for c.ri++; c.ri < c.nr; c.ri++ {
		rg := nvme.DSMRange(c.r.Data[c.ri*nvme.DSMRangeSize:])
		if l := int64(rg.Length()); l != 0 {
			c.ns.async.DiscardAsync(int64(rg.SLBA()<<c.ns.bsShift), l<<c.ns.bsShift, c)
			return true
		}
	}
	return false
}

// Complete implements bdev.Completion for the asynchronous path: it chains
// a write's flush (FUA, or the write cache disabled) and the next
// Dataset Management range, then finishes the command. It runs on the
// backend's thread and never blocks.
func (c *ioCmd) Complete(err error) { c.complete(err, nil) }

var _ bdev.BatchCompletion = (*ioCmd)(nil)

// NewBatch implements bdev.BatchCompletion: a reaper's batch is a
// fabrics.CompletionBatch, whose Flush hands each queue its requests of
// the pass at once.
func (c *ioCmd) NewBatch() bdev.Batch { return new(fabrics.CompletionBatch) }

// CompleteBatched implements bdev.BatchCompletion: Complete, with the
// request left in b (when it is one of NewBatch's) until the end of the
// backend's pass.
func (c *ioCmd) CompleteBatched(err error, b bdev.Batch) {
	cb, _ := b.(*fabrics.CompletionBatch)
	c.complete(err, cb)
}

var _ bdev.PluggedCompletion = (*ioCmd)(nil)

// SubmitPlug implements bdev.PluggedCompletion: the command's first
// operation may wait in the plug of the transport goroutine that handles
// it; one chained from a completion submits at once.
func (c *ioCmd) SubmitPlug() bdev.Plug {
	if c.chained || c.r.Plug == nil {
		return nil
	}
	return c.r.Plug
}

// complete is Complete, finishing into b when not nil.
func (c *ioCmd) complete(err error, b *fabrics.CompletionBatch) {
	c.chained = true
	if err == nil {
		switch c.op {
		case nvme.IOWrite:
			if c.flush {
				c.flush = false
				c.ns.async.FlushAsync(c)
				return
			}
		case nvme.IODatasetManagement:
			if c.nextRange() {
				return
			}
		}
	} else if c.op == nvme.IODatasetManagement {
		c.slba = nvme.DSMRange(c.r.Data[c.ri*nvme.DSMRangeSize:]).SLBA()
	}
	c.finish(err, nvme.Error{}, b)
}

// ctrlSubsys returns the subsystem of the queue's controller.
func (q *queue) ctrlSubsys() *Subsystem { return q.ctrl.Load().subsys }

// ioStatus maps a backend error to a completion status and the error
// location (Linux errno_to_nvme_status and blk_to_nvme_status, with two
// deliberate differences documented in docs/backends.md: EIO and ENODATA
// are the media errors they are, Unrecovered Read Error for reads and
// Write Fault for writes, where nvmet answers Internal Error and Access
// Denied).
func ioStatus(op nvme.IOOpcode, err error) (nvme.Error, uint16) {
	switch {
	case errors.Is(err, bdev.ErrOutOfRange), errors.Is(err, syscall.EREMOTEIO):
		return dnr(nvme.StatusLBAOutOfRange), locSLBA
	case errors.Is(err, bdev.ErrNotSupported), errors.Is(err, syscall.EOPNOTSUPP):
		return dnr(nvme.StatusInvalidOpcode), locOpcode
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return dnr(nvme.StatusCapacityExceeded), locLength
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.ENODATA):
		if op == nvme.IORead || op == nvme.IOCompare || op == nvme.IOVerify {
			return dnr(nvme.StatusUnrecoveredReadError), locSLBA
		}
		return dnr(nvme.StatusWriteFault), locSLBA
	case errors.Is(err, syscall.EROFS):
		return dnr(nvme.StatusNamespaceWriteProtected), locNSID
	}
	return dnr(nvme.StatusInternalError), locOpcode
}
