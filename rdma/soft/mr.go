package soft

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma"
)

// Memory regions. A key is (table index << 8 | 8-bit key), as in rxe: the
// index finds the region, the key byte must match. The lkey stays fixed;
// Rekey advances the rkey's key byte. Each device hands out virtual
// addresses from its own range (vaBase upwards, 4 KiB aligned, never
// reused), so an (rkey, address) pair names at most one region.

// mr is a registered memory region; it implements rdma.MR.
type mr struct {
	dev    *Device
	pd     *pd
	buf    []byte
	span   int // the length registered: Remap binds at most this much
	addr   uint64
	access rdma.Access
	index  uint32
	lkey   uint32

	rkey      atomic.Uint32
	rkeyValid atomic.Bool
	valid     atomic.Bool // registered
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
func (m *mr) Invalidate() error {
	if !m.valid.Load() {
		return fmt.Errorf("soft: invalidate MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	m.rkeyValid.Store(false)
	return nil
}

// Rekey assigns a new valid rkey.
func (m *mr) Rekey() (uint32, error) {
	t := &m.dev.mrs
	t.mu.Lock()
	defer t.mu.Unlock()
	if !m.valid.Load() {
		return 0, fmt.Errorf("soft: rekey MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	return m.nextRKeyLocked(), nil
}

// Remap implements rdma.RemappableMR: buf replaces the region's buffer
// and the rkey advances. Remote accesses check the key before they touch
// the buffer, and the table lock orders this write before any access
// that carries the new key.
func (m *mr) Remap(buf []byte) (uint32, error) {
	if len(buf) == 0 || len(buf) > m.span {
		return 0, fmt.Errorf("soft: remap MR %#x of %d bytes to %d bytes: %w", m.lkey, m.span, len(buf), rdma.ErrInvalidArgument)
	}
	t := &m.dev.mrs
	t.mu.Lock()
	defer t.mu.Unlock()
	if !m.valid.Load() {
		return 0, fmt.Errorf("soft: remap MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	m.buf = buf
	return m.nextRKeyLocked(), nil
}

// nextRKeyLocked advances the rkey's key byte and makes it valid for
// remote access; the table lock is held.
func (m *mr) nextRKeyLocked() uint32 {
	k := m.rkey.Load()
	k = k&^0xff | (k+1)&0xff
	m.rkey.Store(k)
	m.rkeyValid.Store(true)
	return k
}

// Deregister releases the region.
func (m *mr) Deregister() error {
	t := &m.dev.mrs
	t.mu.Lock()
	if !m.valid.Load() {
		t.mu.Unlock()
		return fmt.Errorf("soft: deregister MR %#x: %w", m.lkey, rdma.ErrClosed)
	}
	m.valid.Store(false)
	m.rkeyValid.Store(false)
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

// lookupRemote returns the region of a remote key if the key is valid, or nil.
func (t *mrTable) lookupRemote(rkey uint32) *mr {
	i := rkey >> 8
	t.mu.RLock()
	var m *mr
	if int(i) < len(t.slots) {
		m = t.slots[i]
	}
	t.mu.RUnlock()
	if m == nil || m.rkey.Load() != rkey || !m.rkeyValid.Load() || !m.valid.Load() {
		return nil
	}
	return m
}

// checkRemote checks a remote access of n > 0 bytes at va with rkey from
// a QP of protection domain p needing the access right need, and returns
// the region and the offset of va in it.
func (t *mrTable) checkRemote(p *pd, rkey uint32, va uint64, n uint32, need rdma.Access) (*mr, int, bool) {
	m := t.lookupRemote(rkey)
	if m == nil || m.pd != p || m.access&need != need {
		return nil, 0, false
	}
	if va < m.addr || va-m.addr > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-(va-m.addr) {
		return nil, 0, false
	}
	return m, int(va - m.addr), true
}

// invalidateRemote invalidates rkey of a region in protection domain p,
// as a SEND with Invalidate asks; it reports whether the key was valid.
func (t *mrTable) invalidateRemote(p *pd, rkey uint32) bool {
	m := t.lookupRemote(rkey)
	if m == nil || m.pd != p {
		return false
	}
	m.rkeyValid.Store(false)
	return true
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
	if s.Addr < m.addr || s.Addr-m.addr > uint64(len(m.buf)) || uint64(s.Length) > uint64(len(m.buf))-(s.Addr-m.addr) {
		return seg{}, false
	}
	return seg{m: m, off: int(s.Addr - m.addr), n: int(s.Length)}, true
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
		if !s.m.valid.Load() {
			return false
		}
		c := copy(dst, s.m.buf[s.off+off:s.off+s.n])
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
		if off+n > s.n || !s.m.valid.Load() {
			return nil, false
		}
		return s.m.buf[s.off+off : s.off+off+n], true
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
		if !s.m.valid.Load() {
			return false
		}
		c := copy(s.m.buf[s.off+off:s.off+s.n], src)
		src = src[c:]
		off = 0
	}
	return true
}

// invalidateLocal invalidates rkey of a region in protection domain p,
// for a LOCAL_INV work request; an rkey that was already invalidated may
// be invalidated again. It reports whether rkey names such a region.
func (t *mrTable) invalidateLocal(p *pd, rkey uint32) bool {
	i := rkey >> 8
	t.mu.RLock()
	var m *mr
	if int(i) < len(t.slots) {
		m = t.slots[i]
	}
	t.mu.RUnlock()
	if m == nil || m.pd != p || m.rkey.Load() != rkey || !m.valid.Load() {
		return false
	}
	m.rkeyValid.Store(false)
	return true
}
