package rdma

import (
	"sync"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/rdma"
)

// Zero-copy READs: a command's data goes out by RDMA WRITE straight from
// the backend's memory (fabrics.Request.Gather), each region registered
// once in the port's PD, on devices where registering costs nothing until
// used (rdma.DeviceAttr.LazyMR).

// maxGatherSGE is the most pieces one RDMA WRITE gathers; a backend lends
// one per mapping a transfer spans (bdev.Memory: 64 MiB), so more is a
// surprise, answered by a copy into the staging buffer.
const maxGatherSGE = 4

// regionMRs are the port's registrations of lent regions.
type regionMRs struct {
	m      sync.Map // *region.Region -> rdma.MR
	mu     sync.Mutex
	closed bool
}

// lookup returns the MR of r in pd, registering r first if need be. The
// caller holds a reference on r, so r cannot go while this runs.
func (rm *regionMRs) lookup(pd rdma.PD, r *region.Region) (rdma.MR, error) {
	if v, ok := rm.m.Load(r); ok {
		return v.(rdma.MR), nil
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if v, ok := rm.m.Load(r); ok {
		return v.(rdma.MR), nil
	}
	if rm.closed {
		return nil, fabrics.ErrQueueClosed
	}
	mr, err := pd.RegMR(r.Bytes(), 0)
	if err != nil {
		return nil, err
	}
	rm.m.Store(r, mr)
	r.OnRelease(func() { rm.drop(r) })
	return mr, nil
}

// drop deregisters r when it goes (its OnRelease hook).
func (rm *regionMRs) drop(r *region.Region) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if v, ok := rm.m.LoadAndDelete(r); ok && !rm.closed {
		_ = v.(rdma.MR).Deregister()
	}
}

// close deregisters every region, before the PD goes; hooks that run
// later find nothing to do.
func (rm *regionMRs) close() {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.closed = true
	rm.m.Range(func(k, v any) bool {
		_ = v.(rdma.MR).Deregister()
		rm.m.Delete(k)
		return true
	})
}

// SendsGather reports whether the queue sends a READ's data from the
// backend's memory (fabrics.GatherSender).
func (q *targetQueue) SendsGather() bool { return q.l.gather }

// gatherSGL points the slot's RDMA WRITE at the pieces of r.Gather and
// reports whether it could; if not (a registration failed, too many
// pieces), the caller copies them into the staging buffer.
func (q *targetQueue) gatherSGL(s *targetSlot, r *fabrics.Request) bool {
	if len(r.Gather) > len(s.writeSGE) || region.Len(r.Gather) != s.dataLen {
		return false
	}
	for i, g := range r.Gather {
		mr, err := q.l.regionMRs.lookup(q.l.pd, g.Region)
		if err != nil {
			q.log.Debug("zero-copy READ falls back to a copy", "error", err)
			return false
		}
		s.writeSGE[i] = rdma.SGE{Addr: mr.Addr() + uint64(g.Off), Length: uint32(g.Len), LKey: mr.LKey()}
	}
	s.writeWR.SGL = s.writeSGE[:len(r.Gather)]
	return true
}

// copyGather copies r.Gather into the slot's staging buffer and releases
// it: the RDMA WRITE then goes out of the buffer as for any backend.
func copyGather(s *targetSlot, r *fabrics.Request) {
	n := 0
	for _, g := range r.Gather {
		n += copy(s.dataBuf[n:], g.Bytes())
	}
	r.Gather = region.ReleaseAll(r.Gather)
}
