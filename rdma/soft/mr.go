package soft

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma"
)

// Memory regions. A key is (table index << 8 | 8-bit key), as in rxe: the
// index finds the region, the key byte must match. The lkey stays fixed;
// Rekey advances the rkey's key byte. Each device hands out virtual
// addresses from its own range (vaBase upwards, 4 KiB aligned, never
// reused), so an (rkey, address) pair names at most one region.
//
// Fencing. Invalidate, Rekey, Remap, Deregister and the invalidations a
// peer (SEND with Invalidate) or a LOCAL_INV work request asks for end
// remote access under the current rkey, also for operations in progress:
// an RDMA WRITE names its rkey in its FIRST packet only, and an RDMA READ
// is answered by many packets. Each such change advances the region's
// generation (gen) by two, to an odd value while it runs, and waits for
// the accesses to buf under way (users) to finish before it touches buf
// or the key; a remote operation records the generation it was checked
// under and makes every later access with enter(gen), which fails once
// the region changed (the responder then NAKs with Remote Access Error,
// as rxe does by looking the key up again for every packet). Two atomic
// adds a packet instead of a lock; users and gen are sequentially
// consistent, so either the access sees the new generation or the change
// sees the access and waits for it.

// mr is a registered memory region; it implements rdma.MR.
type mr struct {
	dev    *Device
	pd     *pd
	buf    []byte // written only by a change, with users at zero (see fence)
	span   int    // the length registered: Remap binds at most this much
	addr   uint64
	access rdma.Access
	index  uint32
	lkey   uint32

	rkey      atomic.Uint32
	rkeyValid atomic.Bool
	valid     atomic.Bool // registered

	mu    sync.Mutex    // serializes changes (fence)
	gen   atomic.Uint64 // generation: odd while a change runs
	users atomic.Int32  // accesses to buf in progress
}

// fence runs change, which may rewrite buf, the key and the valid flags,
// with no access to the region in progress; accesses checked under an
// earlier generation fail from then on. m.mu is held.
func (m *mr) fence(change func()) {
	m.gen.Add(1)
	for m.users.Load() != 0 {
		runtime.Gosched() // an access copies at most one packet
	}
	change()
	m.gen.Add(1)
}

// enter begins an access to buf for an operation checked under
// generation g; it reports false, and begins nothing, when the region
// changed since. leave ends the access.
func (m *mr) enter(g uint64) bool {
	m.users.Add(1)
	if m.gen.Load() != g {
		m.users.Add(-1)
		return false
	}
	return true
}

func (m *mr) leave() { m.users.Add(-1) }

// enterLocal begins a local access (by lkey, which no change revokes but
// Deregister): it waits out a change in progress.
func (m *mr) enterLocal() {
	for {
		m.users.Add(1)
		if m.gen.Load()&1 == 0 {
			return
		}
		m.users.Add(-1)
		runtime.Gosched()
	}
}

var _ rdma.RemappableMR = (*mr)(nil)

// mrTable indexes a device's regions by key.
type mrTable struct {
	mu     sync.RWMutex
	slots  []*mr // index 0 unused
	free   []uint32
	nextVA uint64
	key    uint8
}

// vaBase is where a device's virtual addresses start; the device address
// picks a 1 TiB window so that two devices' addresses differ.
const vaBase = 0x10_0000_0000_0000

func (t *mrTable) init(addr [4]byte) {
	t.slots = make([]*mr, 1, 64)
	t.nextVA = vaBase + uint64(addr[3])<<40
	t.key = addr[3] ^ addr[2]
}

// RegMR registers buf.
func (p *pd) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	d := p.dev
	if len(buf) == 0 {
		return nil, fmt.Errorf("soft: register empty buffer: %w", rdma.ErrInvalidArgument)
	}
	if access&(rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic) != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("soft: register with %s without LocalWrite: %w", access, rdma.ErrInvalidArgument)
	}
	if d.isClosed() {
		return nil, fmt.Errorf("soft: %s: %w", d.name, rdma.ErrClosed)
	}
	if err := p.use(true); err != nil {
		return nil, err
	}
	m := &mr{dev: d, pd: p, buf: buf, span: len(buf), access: access}
	t := &d.mrs
	t.mu.Lock()
	if n := len(t.free); n > 0 {
		m.index = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		m.index = uint32(len(t.slots))
		t.slots = append(t.slots, nil)
	}
	if m.index >= 1<<24 {
		t.mu.Unlock()
		p.release(true)
		return nil, fmt.Errorf("soft: too many memory regions: %w", rdma.ErrInvalidArgument)
	}
	t.key++
	m.lkey = m.index<<8 | uint32(t.key)
	m.rkey.Store(m.lkey)
	m.addr = t.nextVA
	t.nextVA += (uint64(len(buf)) + 2*4096 - 1) &^ 4095 // a guard page between regions
	m.rkeyValid.Store(true)
	m.valid.Store(true)
	t.slots[m.index] = m
	t.mu.Unlock()
	return m, nil
}

// LKey returns the local key.
func (m *mr) LKey() uint32 { return m.lkey }

// RKey returns the current remote key.
func (m *mr) RKey() uint32 { return m.rkey.Load() }

// Addr returns the region's virtual address.
func (m *mr) Addr() uint64 { return m.addr }

// Len returns the region's length.
func (m *mr) Len() int { return len(m.buf) }

// Bytes returns the registered buffer.
func (m *mr) Bytes() []byte { return m.buf }

// Access returns the access rights.
func (m *mr) Access() rdma.Access { return m.access }

// RKeyValid reports whether the rkey accepts remote access.
func (m *mr) RKeyValid() bool { return m.valid.Load() && m.rkeyValid.Load() }

// Invalidate invalidates the current rkey.
// Remote operations under it that are under way fail from the next
// packet on; when Invalidate returns, none touches the buffer any more.
func (m *mr) Invalidate() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid.Load() {
		return fmt.Errorf("soft: invalidate MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	m.fence(func() { m.rkeyValid.Store(false) })
	return nil
}

// Rekey assigns a new valid rkey.
// Remote operations under the old one are fenced as by Invalidate.
func (m *mr) Rekey() (uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid.Load() {
		return 0, fmt.Errorf("soft: rekey MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	var k uint32
	m.fence(func() { k = m.nextRKey() })
	return k, nil
}

// Remap implements rdma.RemappableMR: buf replaces the region's buffer
// and the rkey advances. Remote operations under the old key are fenced
// as by Invalidate: they fail, and none touches buf.
func (m *mr) Remap(buf []byte) (uint32, error) {
	if len(buf) == 0 || len(buf) > m.span {
		return 0, fmt.Errorf("soft: remap MR %#x of %d bytes to %d bytes: %w", m.lkey, m.span, len(buf), rdma.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid.Load() {
		return 0, fmt.Errorf("soft: remap MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	var k uint32
	m.fence(func() {
		m.buf = buf
		k = m.nextRKey()
	})
	return k, nil
}

// nextRKey advances the rkey's key byte and makes it valid for remote
// access; it runs in a fence.
func (m *mr) nextRKey() uint32 {
	k := rdma.IncRKey(m.rkey.Load())
	m.rkey.Store(k)
	m.rkeyValid.Store(true)
	return k
}

// Deregister releases the region.
func (m *mr) Deregister() error {
	m.mu.Lock()
	if !m.valid.Load() {
		m.mu.Unlock()
		return fmt.Errorf("soft: deregister MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	m.fence(func() {
		m.valid.Store(false)
		m.rkeyValid.Store(false)
	})
	m.mu.Unlock()
	t := &m.dev.mrs
	t.mu.Lock()
	t.slots[m.index] = nil
	t.free = append(t.free, m.index)
	t.mu.Unlock()
	m.pd.release(true)
	return nil
}

// lookupLocal returns the region of a local key, or nil.
func (t *mrTable) lookupLocal(lkey uint32) *mr {
	i := lkey >> 8
	t.mu.RLock()
	var m *mr
	if int(i) < len(t.slots) {
		m = t.slots[i]
	}
	t.mu.RUnlock()
	if m == nil || m.lkey != lkey || !m.valid.Load() {
		return nil
	}
	return m
}

// lookupKey returns the region a key's index names, or nil; the key
// itself is not checked.
func (t *mrTable) lookupKey(key uint32) *mr {
	i := key >> 8
	t.mu.RLock()
	var m *mr
	if int(i) < len(t.slots) {
		m = t.slots[i]
	}
	t.mu.RUnlock()
	return m
}

// remoteOK reports whether rkey is m's current, valid rkey.
func (m *mr) remoteOK(rkey uint32) bool {
	return m.rkey.Load() == rkey && m.rkeyValid.Load() && m.valid.Load()
}

// checkRemote checks a remote access of n > 0 bytes at va with rkey from
// a QP of protection domain p needing the access right need, and returns
// the region, the offset of va in it and the generation the check holds
// for: the access's reads and writes of the buffer use enter with it.
func (t *mrTable) checkRemote(p *pd, rkey uint32, va uint64, n uint32, need rdma.Access) (*mr, int, uint64, bool) {
	m := t.lookupKey(rkey)
	if m == nil || m.pd != p || m.access&need != need {
		return nil, 0, 0, false
	}
	g := m.gen.Load()
	if g&1 != 0 || !m.enter(g) {
		return nil, 0, 0, false // the key is being changed
	}
	ok := m.remoteOK(rkey) && va >= m.addr && va-m.addr <= uint64(len(m.buf)) && uint64(n) <= uint64(len(m.buf))-(va-m.addr)
	m.leave()
	if !ok {
		return nil, 0, 0, false
	}
	return m, int(va - m.addr), g, true
}

// seg is a resolved scatter/gather element: n bytes at offset off of m.buf.
type seg struct {
	m   *mr
	off int
	n   int
}

// resolveSGE checks a local SGE of a QP in protection domain p that needs
// access right need (0 or LocalWrite).
func (t *mrTable) resolveSGE(p *pd, s rdma.SGE, need rdma.Access) (seg, bool) {
	if s.Length == 0 {
		return seg{}, true
	}
	m := t.lookupLocal(s.LKey)
	if m == nil || m.pd != p || m.access&need != need {
		return seg{}, false
	}
	m.enterLocal()
	ok := s.Addr >= m.addr && s.Addr-m.addr <= uint64(len(m.buf)) && uint64(s.Length) <= uint64(len(m.buf))-(s.Addr-m.addr)
	m.leave()
	if !ok {
		return seg{}, false
	}
	return seg{m: m, off: int(s.Addr - m.addr), n: int(s.Length)}, true
}

// enter begins a local access to the segment and returns its bytes (leave
// with s.m.leave); it reports false, and begins nothing, when the region
// was deregistered or remapped to a buffer too short for the segment
// since it was resolved.
func (s seg) enter() ([]byte, bool) {
	s.m.enterLocal()
	if !s.m.valid.Load() || s.off+s.n > len(s.m.buf) {
		s.m.leave()
		return nil, false
	}
	return s.m.buf[s.off : s.off+s.n], true
}

// gather copies len(dst) bytes starting at offset off of the message
// described by segs into dst; it reports false when a region was
// deregistered.
func gather(dst []byte, segs []seg, off int) bool {
	for _, s := range segs {
		if len(dst) == 0 {
			break
		}
		if off >= s.n {
			off -= s.n
			continue
		}
		b, ok := s.enter()
		if !ok {
			return false
		}
		c := copy(dst, b[off:])
		s.m.leave()
		dst = dst[c:]
		off = 0
	}
	return true
}

// zeroCopyMin is the smallest payload a packet sends in place from its
// memory region (txPkt.ext) rather than copied into the packet: below
// it, the copy costs less than the two extra iovecs.
const zeroCopyMin = 1024

// inPlace returns the n bytes at offset off of the message buffer
// described by segs if they lie in one valid region and n is at least
// zeroCopyMin.
func inPlace(segs []seg, off, n int) ([]byte, bool) {
	if n < zeroCopyMin {
		return nil, false
	}
	for _, s := range segs {
		if off >= s.n {
			off -= s.n
			continue
		}
		if off+n > s.n {
			return nil, false
		}
		b, ok := s.enter()
		if !ok {
			return nil, false
		}
		s.m.leave()
		return b[off : off+n], true
	}
	return nil, false
}

// scatter copies src to offset off of the message buffer described by
// segs; the caller checked that it fits. It reports false when a region
// was deregistered.
func scatter(segs []seg, off int, src []byte) bool {
	for _, s := range segs {
		if len(src) == 0 {
			break
		}
		if off >= s.n {
			off -= s.n
			continue
		}
		b, ok := s.enter()
		if !ok {
			return false
		}
		c := copy(b[off:], src)
		s.m.leave()
		src = src[c:]
		off = 0
	}
	return true
}

// invalidate invalidates rkey of a region in protection domain p,
// fencing the operations under it, and reports whether rkey names such a
// region: a SEND with Invalidate (local false) needs the key valid; a
// LOCAL_INV work request (local true) may invalidate an rkey that was
// already invalidated again.
func (t *mrTable) invalidate(p *pd, rkey uint32, local bool) bool {
	m := t.lookupKey(rkey)
	if m == nil || m.pd != p {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rkey.Load() != rkey || !m.valid.Load() || !local && !m.rkeyValid.Load() {
		return false
	}
	m.fence(func() { m.rkeyValid.Store(false) })
	return true
}
