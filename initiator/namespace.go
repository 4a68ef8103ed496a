package initiator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// ErrNoNamespace is wrapped by errors for a namespace that is not (or no
// longer) active on the controller.
var ErrNoNamespace = errors.New("no such namespace")

// maxBlocksPerCommand is the most logical blocks one Read, Write or Write
// Zeroes moves (NLB is a 16-bit 0's based count).
const maxBlocksPerCommand = 1 << 16

// dsmMaxRanges is the most ranges of one Dataset Management command.
const dsmMaxRanges = 256

// maxNSListPages bounds the pages of the Active Namespace ID list read
// (64 × 1024 namespaces).
const maxNSListPages = 64

// maxWindow bounds the chunks of one ReadAt or WriteAt in flight at once.
const maxWindow = 64

// nsInfo is what the host knows of a namespace; replaced as a whole on
// rescan.
type nsInfo struct {
	id        nvme.IdentifyNamespace
	blockSize int
	nblocks   uint64
	nguid     [16]byte
	uuid      [16]byte
	eui64     [8]byte
}

// Namespace is an active namespace of a controller, used as a block
// device: ReadAt and WriteAt move whole logical blocks. Its methods are
// safe for concurrent use; the handle stays valid across reconnects.
type Namespace struct {
	c       *Controller
	nsid    uint32
	info    atomic.Pointer[nsInfo]
	removed atomic.Bool
	ana     atomic.Uint32 // nvme.ANAState through this controller (ana.go)
}

// scan reads the active namespace list and every namespace in it, adds new
// namespaces, updates known ones and drops those no longer active
// (nvme_scan_work).
func (c *Controller) scan(ctx context.Context, a *assoc) error {
	_, err := c.scanChanges(ctx, a)
	return err
}

// scanChanges is scan that also returns the namespaces it found added,
// removed or resized (block count or block size), in NSID order.
func (c *Controller) scanChanges(ctx context.Context, a *assoc) ([]uint32, error) {
	c.scanMu.Lock()
	defer c.scanMu.Unlock()
	ids, err := c.activeNSIDs(ctx, a)
	if err != nil {
		return nil, err
	}
	var changed []uint32
	active := make(map[uint32]bool, len(ids))
	for _, nsid := range ids {
		info, err := c.readNS(ctx, a, nsid)
		if err != nil {
			c.log.Warn("identify namespace failed", "nsid", nsid, "error", err)
			continue
		}
		if info == nil {
			continue // not allocated (NCAP 0)
		}
		active[nsid] = true
		c.nsMu.Lock()
		ns := c.ns[nsid]
		if ns == nil {
			ns = &Namespace{c: c, nsid: nsid}
			c.ns[nsid] = ns
			c.log.Info("namespace", "nsid", nsid, "blocks", info.nblocks, "block_size", info.blockSize)
			changed = append(changed, nsid)
		} else if old := ns.info.Load(); old != nil && (old.nblocks != info.nblocks || old.blockSize != info.blockSize) {
			c.log.Info("namespace changed", "nsid", nsid, "blocks", info.nblocks, "block_size", info.blockSize)
			changed = append(changed, nsid)
		}
		ns.info.Store(info)
		ns.removed.Store(false)
		ns.setANA(c.ana.Load())
		c.nsMu.Unlock()
	}
	c.nsMu.Lock()
	for nsid, ns := range c.ns {
		if !active[nsid] {
			c.log.Info("namespace removed", "nsid", nsid)
			ns.removed.Store(true)
			delete(c.ns, nsid)
			changed = append(changed, nsid)
		}
	}
	c.nsMu.Unlock()
	slices.Sort(changed)
	return changed, nil
}

// activeNSIDs reads the Active Namespace ID list (CNS 02h) page by page;
// a controller that does not have it is scanned from 1 to NN
// (nvme_scan_ns_sequential).
func (c *Controller) activeNSIDs(ctx context.Context, a *assoc) ([]uint32, error) {
	var ids []uint32
	buf := make([]byte, nvme.IdentifyDataSize)
	var prev uint32
	for page := 0; ; page++ {
		if page == maxNSListPages {
			return nil, fmt.Errorf("initiator: active namespace list longer than %d pages", maxNSListPages)
		}
		clear(buf)
		if err := c.identify(ctx, a, nvme.CNSActiveNSList, prev, buf); err != nil {
			var ce *CommandError
			if errors.As(err, &ce) && prev == 0 {
				return c.sequentialNSIDs(ctx, a)
			}
			return nil, err
		}
		list, err := nvme.DecodeNSIDList(buf)
		if err != nil {
			return nil, err
		}
		for _, id := range list {
			if id <= prev {
				return nil, fmt.Errorf("initiator: active namespace list not increasing (%d after %d)", id, prev)
			}
			ids = append(ids, id)
			prev = id
		}
		if len(list) < nvme.MaxNSIDListEntries {
			return ids, nil
		}
	}
}

// sequentialNSIDs identifies NSIDs 1..NN (at most 1024) one by one.
func (c *Controller) sequentialNSIDs(ctx context.Context, a *assoc) ([]uint32, error) {
	var ids []uint32
	nn := min(a.id.NN(), nvme.MaxNSIDListEntries)
	for nsid := uint32(1); nsid <= nn; nsid++ {
		info, err := c.readNS(ctx, a, nsid)
		if err == nil && info != nil {
			ids = append(ids, nsid)
		}
	}
	return ids, nil
}

// readNS identifies a namespace and its identifiers; nil for an
// unallocated one.
func (c *Controller) readNS(ctx context.Context, a *assoc, nsid uint32) (*nsInfo, error) {
	id := nvme.NewIdentifyNamespace()
	if err := c.identify(ctx, a, nvme.CNSNamespace, nsid, id); err != nil {
		return nil, err
	}
	if id.NCAP() == 0 && id.NSZE() == 0 {
		return nil, nil
	}
	bs := int(id.LBADataSize())
	if bs < 512 || bs > 1<<16 {
		return nil, fmt.Errorf("initiator: namespace %d: unsupported LBA data size %d (FLBAS %#x)", nsid, bs, id.FLBAS())
	}
	if id.NSZE() > math.MaxInt64/uint64(bs) {
		return nil, fmt.Errorf("initiator: namespace %d: size of %d blocks overflows", nsid, id.NSZE())
	}
	info := &nsInfo{id: id, blockSize: bs, nblocks: id.NSZE(), nguid: id.NGUID(), eui64: id.EUI64()}
	if a.vs >= nvme.Version1_3 {
		buf := make([]byte, nvme.IdentifyDataSize)
		if err := c.identify(ctx, a, nvme.CNSNSDescriptorList, nsid, buf); err != nil {
			c.log.Debug("identify namespace descriptors failed", "nsid", nsid, "error", err)
		} else if ds, err := nvme.DecodeNSDescriptors(buf); err == nil {
			for _, d := range ds {
				switch d.NIDT {
				case nvme.NIDTNGUID:
					copy(info.nguid[:], d.NID)
				case nvme.NIDTUUID:
					copy(info.uuid[:], d.NID)
				case nvme.NIDTEUI64:
					copy(info.eui64[:], d.NID)
				}
			}
		}
	}
	return info, nil
}

// NSID returns the namespace ID.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// Controller returns the controller the namespace belongs to.
func (ns *Namespace) Controller() *Controller { return ns.c }

// BlockSize returns the logical block size in bytes.
func (ns *Namespace) BlockSize() int { return ns.info.Load().blockSize }

// Blocks returns the namespace size in logical blocks (NSZE).
func (ns *Namespace) Blocks() uint64 { return ns.info.Load().nblocks }

// Size returns the namespace size in bytes.
func (ns *Namespace) Size() int64 {
	i := ns.info.Load()
	return int64(i.nblocks) * int64(i.blockSize)
}

// Identify returns a copy of the Identify Namespace data.
func (ns *Namespace) Identify() nvme.IdentifyNamespace {
	return append(nvme.IdentifyNamespace(nil), ns.info.Load().id...)
}

// NGUID returns the Namespace Globally Unique Identifier (zero if none).
func (ns *Namespace) NGUID() [16]byte { return ns.info.Load().nguid }

// UUID returns the namespace UUID (zero if none).
func (ns *Namespace) UUID() [16]byte { return ns.info.Load().uuid }

// EUI64 returns the IEEE Extended Unique Identifier (zero if none).
func (ns *Namespace) EUI64() [8]byte { return ns.info.Load().eui64 }

// Removed reports whether the namespace is no longer active.
func (ns *Namespace) Removed() bool { return ns.removed.Load() }

// goneErr says why a removed namespace takes no I/O: its controller ended
// (ErrClosed after Disconnect, ErrControllerLost), or the namespace went
// away (ErrNoNamespace).
func (ns *Namespace) goneErr(op string) error {
	c := ns.c
	c.mu.Lock()
	st, endErr := State(c.state.Load()), c.endErr
	c.mu.Unlock()
	if (st == StateDeleted || st == StateDead) && endErr != nil {
		return fmt.Errorf("initiator: %s nsid %d: %w", op, ns.nsid, endErr)
	}
	return fmt.Errorf("initiator: %s nsid %d: %w", op, ns.nsid, ErrNoNamespace)
}

// check validates an I/O of n bytes at off: block-aligned and within the
// namespace, for a device whose size may change; it returns the info to use.
func (ns *Namespace) check(op string, off int64, n int) (*nsInfo, error) {
	if ns.removed.Load() {
		return nil, ns.goneErr(op)
	}
	info := ns.info.Load()
	bs := int64(info.blockSize)
	if off < 0 || off%bs != 0 || int64(n)%bs != 0 {
		return nil, fmt.Errorf("initiator: %s nsid %d: offset %d and length %d must be multiples of the %d-byte block size", op, ns.nsid, off, n, bs)
	}
	return info, nil
}

// ReadAt reads len(p) bytes at byte offset off, both multiples of the
// block size (io.ReaderAt). It returns io.EOF when the range runs past the
// end of the namespace (with the blocks before the end read).
func (ns *Namespace) ReadAt(p []byte, off int64) (int, error) {
	info, err := ns.check("Read", off, len(p))
	if err != nil {
		return 0, err
	}
	size := int64(info.nblocks) * int64(info.blockSize)
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > size-off {
		n = int(size - off)
	}
	if err := ns.transfer(info, nvme.IORead, "Read", fabrics.DirCtrlToHost, p[:n], uint64(off)/uint64(info.blockSize), uint64(n/info.blockSize)); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes len(p) bytes at byte offset off, both multiples of the
// block size (io.WriterAt). Writing past the end of the namespace is an
// error and writes nothing.
func (ns *Namespace) WriteAt(p []byte, off int64) (int, error) {
	info, err := ns.check("Write", off, len(p))
	if err != nil {
		return 0, err
	}
	if err := ns.inRange(info, "Write", off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := ns.transfer(info, nvme.IOWrite, "Write", fabrics.DirHostToCtrl, p, uint64(off)/uint64(info.blockSize), uint64(len(p)/info.blockSize)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// inRange checks that n bytes at off lie within the namespace.
func (ns *Namespace) inRange(info *nsInfo, op string, off, n int64) error {
	size := int64(info.nblocks) * int64(info.blockSize)
	if off > size || n > size-off {
		return fmt.Errorf("initiator: %s nsid %d: %d bytes at offset %d run past the end (%d bytes)", op, ns.nsid, n, off, size)
	}
	return nil
}

// WriteZeroes zeroes length bytes at off (Write Zeroes), both multiples of
// the block size.
func (ns *Namespace) WriteZeroes(off, length int64) error {
	if ns.c.cur.Load().id.ONCS()&nvme.ONCSWriteZeroes == 0 {
		return fmt.Errorf("initiator: Write Zeroes nsid %d: %w", ns.nsid, ErrNotSupported)
	}
	info, err := ns.check("Write Zeroes", off, 0)
	if err != nil {
		return err
	}
	if length%int64(info.blockSize) != 0 || length < 0 {
		return fmt.Errorf("initiator: Write Zeroes nsid %d: length %d is not a multiple of the %d-byte block size", ns.nsid, length, info.blockSize)
	}
	if err := ns.inRange(info, "Write Zeroes", off, length); err != nil {
		return err
	}
	if length == 0 {
		return nil
	}
	bs := uint64(info.blockSize)
	return ns.transfer(info, nvme.IOWriteZeroes, "Write Zeroes", fabrics.DirNone, nil, uint64(off)/bs, uint64(length)/bs)
}

// Flush commits the volatile write cache (Flush).
func (ns *Namespace) Flush() error {
	if ns.removed.Load() {
		return ns.goneErr("Flush")
	}
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.IOFlush))
	s.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
	s.SetNSID(ns.nsid)
	return ns.c.ioSync(&cdw, nil, fabrics.DirNone, "Flush")
}

// Trim deallocates length bytes at off (Dataset Management with the
// Deallocate attribute), both multiples of the block size.
func (ns *Namespace) Trim(off, length int64) error {
	if ns.c.cur.Load().id.ONCS()&nvme.ONCSDatasetManagement == 0 {
		return fmt.Errorf("initiator: Dataset Management nsid %d: %w", ns.nsid, ErrNotSupported)
	}
	info, err := ns.check("Dataset Management", off, 0)
	if err != nil {
		return err
	}
	bs := int64(info.blockSize)
	if length%bs != 0 || length < 0 {
		return fmt.Errorf("initiator: Dataset Management nsid %d: length %d is not a multiple of the %d-byte block size", ns.nsid, length, bs)
	}
	if err := ns.inRange(info, "Dataset Management", off, length); err != nil {
		return err
	}
	slba, nblocks := uint64(off/bs), uint64(length/bs)
	buf := make([]byte, dsmMaxRanges*nvme.DSMRangeSize)
	for nblocks > 0 {
		n := 0
		for n < dsmMaxRanges && nblocks > 0 {
			cnt := min(nblocks, 0xffffffff)
			r := nvme.DSMRange(buf[n*nvme.DSMRangeSize : (n+1)*nvme.DSMRangeSize])
			r.SetContextAttributes(0)
			r.SetLength(uint32(cnt))
			r.SetSLBA(slba)
			slba += cnt
			nblocks -= cnt
			n++
		}
		var cdw [64]byte
		s := nvme.SQE(cdw[:])
		s.SetOpcode(uint8(nvme.IODatasetManagement))
		s.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
		s.SetNSID(ns.nsid)
		d := nvme.DSMCommand{SQE: s}
		d.SetNR(uint8(n - 1))
		d.SetAD(true)
		data := append([]byte(nil), buf[:n*nvme.DSMRangeSize]...)
		if err := ns.c.ioSync(&cdw, data, fabrics.DirHostToCtrl, "Dataset Management"); err != nil {
			return err
		}
	}
	return nil
}

// chunk is one command of a larger transfer.
type chunk struct {
	sqe  [64]byte
	data []byte
	q    *queue
	s    *cmdSlot
}

// transfer moves nblocks blocks at slba with opcode op (Read, Write or
// Write Zeroes), split at the transfer limit (MDTS, the transport) and at
// 65536 blocks, the pieces spread round robin over the I/O queues and kept
// in flight together.
func (ns *Namespace) transfer(info *nsInfo, op nvme.IOOpcode, name string, dir fabrics.DataDirection, data []byte, slba, nblocks uint64) error {
	c := ns.c
	bs := uint64(info.blockSize)
	per := uint64(maxBlocksPerCommand)
	if mx := uint64(c.cur.Load().maxXfer); mx > 0 {
		per = min(per, max(mx/bs, 1))
	}
	if nblocks <= per {
		var cdw [64]byte
		ns.fill(&cdw, op, slba, nblocks)
		return c.ioSync(&cdw, data, dir, name)
	}
	var win [maxWindow]chunk
	head, n := 0, 0
	var firstErr error
	collect := func() {
		ch := &win[head]
		if err := c.ioCollect(ch, dir, name); err != nil && firstErr == nil {
			firstErr = err
		}
		ch.q, ch.s, ch.data = nil, nil, nil
		head = (head + 1) % maxWindow
		n--
	}
	for done := uint64(0); done < nblocks && firstErr == nil; {
		if n == maxWindow {
			// The next entry is the oldest chunk, still in flight: its
			// command and buffer must stay until it is collected.
			collect()
			continue
		}
		cnt := min(per, nblocks-done)
		ch := &win[(head+n)%maxWindow]
		ns.fill(&ch.sqe, op, slba+done, cnt)
		ch.data = nil
		if data != nil {
			ch.data = data[done*bs : (done+cnt)*bs]
		}
		for {
			if c.tryStart(ch, dir, name) {
				n++
				break
			}
			if n == 0 {
				if err := c.ioSync(&ch.sqe, ch.data, dir, name); err != nil && firstErr == nil {
					firstErr = err
				}
				break
			}
			collect()
		}
		done += cnt
	}
	for n > 0 {
		collect()
	}
	return firstErr
}

// fill writes a Read, Write or Write Zeroes command.
func (ns *Namespace) fill(cdw *[64]byte, op nvme.IOOpcode, slba, nblocks uint64) {
	*cdw = [64]byte{}
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(op))
	s.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
	s.SetNSID(ns.nsid)
	rw := nvme.RWCommand{SQE: s}
	rw.SetSLBA(slba)
	rw.SetNLB(uint16(nblocks - 1))
}

// pickQueue returns the next I/O queue round robin, waiting while the
// controller reconnects or the queue is being replaced.
func (c *Controller) pickQueue() (*queue, error) {
	for {
		if State(c.state.Load()) == StateLive {
			a := c.cur.Load()
			if len(a.io) == 0 {
				return nil, fmt.Errorf("initiator: %s: no I/O queues", c.addr)
			}
			q := a.io[c.rr.Add(1)%uint32(len(a.io))].Load()
			if !q.closing.Load() {
				return q, nil
			}
			c.waitGone(q)
			continue
		}
		if c.mpath.Load() {
			return nil, errPathDown // another path takes it
		}
		if err := c.waitLive(nil, nil); err != nil {
			return nil, err
		}
	}
}

// waitGone waits until queue q has been replaced or its association torn
// down.
func (c *Controller) waitGone(q *queue) {
	select {
	case <-q.gone:
	case <-c.closing:
	case <-c.endCh:
	}
}

// tryStart submits ch on the next I/O queue if the controller is live and
// the queue has a free slot; it never blocks.
func (c *Controller) tryStart(ch *chunk, dir fabrics.DataDirection, name string) bool {
	if State(c.state.Load()) != StateLive {
		return false
	}
	a := c.cur.Load()
	if len(a.io) == 0 {
		return false
	}
	q := a.io[c.rr.Add(1)%uint32(len(a.io))].Load()
	if q.closing.Load() {
		return false
	}
	s := q.tryGet()
	if s == nil {
		return false
	}
	s.prep(&ch.sqe, ch.data, dir, name, c.cmdWait())
	if s.submit() != nil {
		return false
	}
	ch.q, ch.s = q, s
	return true
}

// ioCollect waits for a chunk started by tryStart; a chunk that must be
// retried (its queue went away, or a status without DNR) is redone with
// ioSync.
func (c *Controller) ioCollect(ch *chunk, dir fabrics.DataDirection, name string) error {
	s, q := ch.s, ch.q
	if err := s.wait(nil, nil); err != nil {
		return err
	}
	err := s.result(name)
	q.put(s)
	if err == nil {
		return nil
	}
	if c.mpath.Load() && (isReset(err) || isPathStatus(err)) {
		return err // failed over by the multipath layer
	}
	if isReset(err) {
		c.waitGone(q)
		return c.ioSync(&ch.sqe, ch.data, dir, name)
	}
	if retryable(err) {
		return c.ioSyncN(&ch.sqe, ch.data, dir, name, 1)
	}
	return err
}

// isPathStatus reports a path-related status (SCT 3) without DNR: on a
// multipath path it fails over instead of being retried on the same
// controller (nvme_decide_disposition).
func isPathStatus(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && !ce.Err.DNR && ce.Err.Status.SCT() == nvme.SCTPathRelated
}

// retryable reports a status error without DNR (nvme_decide_disposition).
func retryable(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && !ce.Err.DNR
}

// ioSync runs one I/O command to completion: it waits while the
// controller reconnects, redoes the command when its queue went away, and
// retries a status without DNR up to nvme_max_retries times. It allocates
// nothing when the command succeeds.
func (c *Controller) ioSync(sqe *[64]byte, data []byte, dir fabrics.DataDirection, name string) error {
	return c.ioSyncN(sqe, data, dir, name, 0)
}

// ioSyncN is ioSync with the retries already spent.
func (c *Controller) ioSyncN(sqe *[64]byte, data []byte, dir fabrics.DataDirection, name string, retries int) error {
	for {
		q, err := c.pickQueue()
		if err != nil {
			return err
		}
		mp := c.mpath.Load()
		s, err := q.get(context.Background())
		if err != nil {
			if mp {
				return errPathDown
			}
			c.waitGone(q)
			continue
		}
		s.prep(sqe, data, dir, name, c.cmdWait())
		if err := s.run(); err != nil {
			if !isReset(err) || mp {
				return err
			}
			c.waitGone(q)
			continue
		}
		err = s.result(name)
		q.put(s)
		switch {
		case err == nil:
			return nil
		case mp && (isReset(err) || isPathStatus(err)):
			return err // failed over by the multipath layer
		case isReset(err):
			c.waitGone(q)
		case retryable(err) && retries < maxRetries:
			retries++
		default:
			return err
		}
	}
}
