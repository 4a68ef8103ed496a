package initiator

import (
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Op is the operation of an asynchronous I/O (IO).
type Op uint8

// Operations of an IO.
const (
	OpRead        Op = iota // Read: IO.Buf at IO.Off (ReadAt)
	OpWrite                 // Write: IO.Buf at IO.Off (WriteAt)
	OpWriteZeroes           // Write Zeroes: IO.Len bytes at IO.Off (WriteZeroes)
	OpTrim                  // Dataset Management, Deallocate: IO.Len bytes at IO.Off (Trim)
	OpFlush                 // Flush (Flush)
)

// String returns the NVMe command name of the operation, as errors name it.
func (o Op) String() string {
	switch o {
	case OpRead:
		return "Read"
	case OpWrite:
		return "Write"
	case OpWriteZeroes:
		return "Write Zeroes"
	case OpTrim:
		return "Dataset Management"
	case OpFlush:
		return "Flush"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// IO is one asynchronous I/O on a namespace (Namespace.Start). The caller
// fills Op, Buf, Off, Len and Done, and owns nothing of the IO (nor Buf)
// from Start until Done is called; it may then reuse the IO.
type IO struct {
	Op Op
	// Buf is the data of a Read (filled) or a Write (sent); Off the byte
	// offset and Len the byte length of Write Zeroes and Trim (a Read or
	// Write moves len(Buf) bytes). Offsets and lengths are whole blocks.
	Buf []byte
	Off int64
	Len int64
	// Done (required) is called exactly once when the I/O has finished,
	// with N and Err set. It must not block: it may run on a transport goroutine
	// (serialized with the other completions of that queue), on a
	// goroutine of the package, or on the goroutine that called Start,
	// before Start returns (a transport may complete a command inline).
	Done func(*IO)
	// N is the number of bytes read or written (Read and Write only), as
	// ReadAt and WriteAt return it; Err is their error (io.EOF for a Read
	// that runs past the end, with the blocks before the end read), or
	// that of WriteZeroes, Trim or Flush.
	N   int
	Err error

	sqe [64]byte // the command of the fast path, kept for a retry
}

// Start starts io and returns without waiting for it; io.Done is called
// exactly once with the result, which is what ReadAt, WriteAt,
// WriteZeroes, Trim or Flush would have returned for the same request.
// Start and the synchronous methods run on the same engine, with the same
// timeout policy (docs/host-engine.md).
//
// A Read, Write, Write Zeroes or Flush that is one command (at most the
// controller's transfer limit and 65536 blocks), on a live controller
// whose next I/O queue (round robin) has a free slot, is submitted on the
// caller's goroutine and completes from the transport's completion
// callback: no goroutine hand-off and no allocation. Everything else
// (split transfers, Trim, a full queue, a controller that reconnects, a
// command that must be retried after a queue reset or a status without
// DNR, invalid requests) runs the synchronous method on a goroutine of its
// own.
//
// Start never blocks for long. Done may be called before Start returns,
// on the caller's goroutine: a Done that calls Start again may recurse.
func (ns *Namespace) Start(io *IO) {
	io.N, io.Err = 0, nil
	if ns.startFast(io) {
		return // io may already be done and reused: touch nothing
	}
	go ns.runSync(io)
}

// runSync carries io out with the synchronous methods and completes it.
func (ns *Namespace) runSync(io *IO) {
	switch io.Op {
	case OpRead:
		io.N, io.Err = ns.ReadAt(io.Buf, io.Off)
	case OpWrite:
		io.N, io.Err = ns.WriteAt(io.Buf, io.Off)
	case OpWriteZeroes:
		io.Err = ns.WriteZeroes(io.Off, io.Len)
	case OpTrim:
		io.Err = ns.Trim(io.Off, io.Len)
	case OpFlush:
		io.Err = ns.Flush()
	default:
		io.Err = fmt.Errorf("initiator: nsid %d: unknown I/O operation %v", ns.nsid, io.Op)
	}
	io.Done(io)
}

// command returns the data and the direction of io's command.
func (io *IO) command() ([]byte, fabrics.DataDirection) {
	switch io.Op {
	case OpRead:
		return io.Buf, fabrics.DirCtrlToHost
	case OpWrite:
		return io.Buf, fabrics.DirHostToCtrl
	}
	return nil, fabrics.DirNone
}

// finish completes io, done as one command that failed with err or
// succeeded.
func (io *IO) finish(err error) {
	if err != nil {
		io.N, io.Err = 0, err
	} else if io.Op == OpRead || io.Op == OpWrite {
		io.N = len(io.Buf)
	}
	io.Done(io)
}

// startFast submits io as one command if it can go the fast path (see
// Start). It reports false, with io untouched but for its private
// command, when the caller must take the slow path.
func (ns *Namespace) startFast(io *IO) bool {
	if ns.removed.Load() {
		return false
	}
	switch io.Op {
	case OpRead, OpWrite, OpWriteZeroes:
		info := ns.info.Load()
		bs := int64(info.blockSize)
		n := int64(len(io.Buf))
		op := nvme.IORead
		switch io.Op {
		case OpWrite:
			op = nvme.IOWrite
		case OpWriteZeroes:
			// No data, but limited as the synchronous path splits it (at
			// the transfer limit, as Linux's max_write_zeroes_sectors).
			a := ns.c.cur.Load()
			if a.id.ONCS()&nvme.ONCSWriteZeroes == 0 || (a.maxXfer > 0 && io.Len > int64(a.maxXfer)) {
				return false
			}
			n, op = io.Len, nvme.IOWriteZeroes
		}
		size := int64(info.nblocks) * bs
		if n <= 0 || io.Off < 0 || io.Off%bs != 0 || n%bs != 0 || io.Off > size || n > size-io.Off || n/bs > maxBlocksPerCommand {
			return false // invalid, past the end, or more than one command
		}
		ns.fill(&io.sqe, op, uint64(io.Off/bs), uint64(n/bs))
	case OpFlush:
		io.sqe = [64]byte{}
		s := nvme.SQE(io.sqe[:])
		s.SetOpcode(uint8(nvme.IOFlush))
		s.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
		s.SetNSID(ns.nsid)
	default:
		return false
	}
	return ns.c.startAsync(io)
}

// startAsync submits io's command on the next I/O queue if the controller
// is live and the queue has a free slot; it never blocks. It reports false
// when io must take the slow path (nothing submitted, or the submission
// failed: io is the caller's again).
func (c *Controller) startAsync(io *IO) bool {
	if State(c.state.Load()) != StateLive {
		return false
	}
	a := c.cur.Load()
	data, dir := io.command()
	if len(a.io) == 0 || (a.maxXfer > 0 && len(data) > a.maxXfer) {
		return false
	}
	q := a.io[c.rr.Add(1)%uint32(len(a.io))].Load()
	if q.closing.Load() {
		return false
	}
	if mx := q.hq.MaxTransfer(); mx > 0 && len(data) > mx {
		return false
	}
	s := q.tryGet()
	if s == nil {
		return false
	}
	s.prep(&io.sqe, data, dir, io.Op.String(), c.cmdWait())
	s.aio = io
	// On success io may be done already: touch nothing.
	return s.submit() == nil
}

// asyncRetry kinds: how a completed command must go on.
const (
	retryNone   = iota
	retryReset  // the queue went away: redo it on another queue
	retryStatus // a status without DNR: retry it
)

// completeAsync finishes an asynchronous slot (from finish: on a
// transport goroutine, the submitting one, or the timeout handler's): the
// slot goes back to the free list, then io completes, or a retry starts.
func (s *cmdSlot) completeAsync() {
	io, q := s.aio, s.q
	var err error
	retry := retryNone
	switch {
	case s.terr != nil:
		err = s.terr
	case s.cmd.Err != nil:
		retry = retryReset
	case !nvme.CQE(s.cmd.CQE[:]).Status().Success():
		err = s.result(io.Op.String())
		if retryable(err) {
			retry = retryStatus
		}
	}
	q.put(s)
	switch retry {
	case retryNone:
		io.finish(err)
	default:
		go q.c.asyncRetry(io, q, retry == retryReset)
	}
}

// asyncRetry redoes io's command synchronously, as ioCollect does for a
// piece of a transfer, and completes io.
func (c *Controller) asyncRetry(io *IO, q *queue, reset bool) {
	data, dir := io.command()
	name := io.Op.String()
	var err error
	if reset {
		c.waitGone(q)
		err = c.ioSync(&io.sqe, data, dir, name)
	} else {
		err = c.ioSyncN(&io.sqe, data, dir, name, 1)
	}
	io.finish(err)
}
