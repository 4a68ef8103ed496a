package initiator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/nvme"
)

// Native NVMe multipath (docs/multipath.md), after Linux
// drivers/nvme/host/multipath.c: a Multipath holds the controllers
// (paths) of one subsystem, and a MultipathNamespace is one namespace
// reached through all of them (the kernel's nvme_ns_head). I/O goes to
// an optimized path chosen by the I/O policy, to a non-optimized one only
// when no optimized path is usable; a command that fails for a path
// reason (the path went down or its queue away, a timeout, a path-related
// status without DNR) is sent again on another path without the caller
// seeing the error; while no path is usable but one may come back (it is
// reconnecting, or its ANA state is in transition) I/O waits, at most the
// queue timeout (the paths' ctrl-loss-tmo by default).

// IOPolicy is how a multipath namespace chooses among its optimized paths
// (Linux's iopolicy).
type IOPolicy int32

// I/O policies.
const (
	// IOPolicyNUMA keeps using one path (the first optimized one) until it
	// stops being usable or optimized; with no NUMA distances to weigh,
	// this is the kernel's numa policy on a single node.
	IOPolicyNUMA IOPolicy = iota
	// IOPolicyRoundRobin spreads I/O over the optimized paths in turn.
	IOPolicyRoundRobin
	// IOPolicyQueueDepth sends each I/O to the optimized path with the
	// fewest I/Os in flight.
	IOPolicyQueueDepth
)

// String returns the policy's name as Linux's sysfs iopolicy shows it.
func (p IOPolicy) String() string {
	switch p {
	case IOPolicyNUMA:
		return "numa"
	case IOPolicyRoundRobin:
		return "round-robin"
	case IOPolicyQueueDepth:
		return "queue-depth"
	}
	return fmt.Sprintf("IOPolicy(%d)", int32(p))
}

// ParseIOPolicy parses numa, round-robin or queue-depth.
func ParseIOPolicy(s string) (IOPolicy, error) {
	for _, p := range []IOPolicy{IOPolicyNUMA, IOPolicyRoundRobin, IOPolicyQueueDepth} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("initiator: unknown I/O policy %q (numa, round-robin or queue-depth)", s)
}

// ErrNoPath is wrapped by the error of multipath I/O when no path can
// carry it and none may come back (every path gave up, was disconnected
// or does not have the namespace), or the queue timeout expired.
var ErrNoPath = errors.New("no usable path")

// MultipathOptions configures a Multipath.
type MultipathOptions struct {
	// IOPolicy chooses among optimized paths (default numa).
	IOPolicy IOPolicy
	// QueueTimeout bounds how long an I/O waits while no path is usable
	// (Linux queues it until a path is back or none can come back). 0
	// takes the first path's CtrlLossTimeout; negative waits as long as
	// a path may come back.
	QueueTimeout time.Duration
	// Logger receives the multipath log; default: a null logger.
	Logger hclog.Logger
}

// Multipath is the set of paths (controllers) to one NVM subsystem and
// the namespaces reached through them. Its methods are safe for
// concurrent use.
type Multipath struct {
	nqn    string
	log    hclog.Logger
	policy atomic.Int32
	qtmo   atomic.Int64 // QueueTimeout; 0: not yet set from a path

	dirty atomic.Bool // the namespaces' path lists must be rebuilt
	gen   atomic.Uint64

	mu      sync.Mutex
	paths   []*Path
	ns      map[uint32]*MultipathNamespace
	changed chan struct{} // closed and replaced on every change
}

// ErrNotPath is wrapped by RemovePath's error for a controller that is
// not a path of the Multipath.
var ErrNotPath = errors.New("not a path of this subsystem")

// Path is one controller of a Multipath.
type Path struct {
	c      *Controller
	active atomic.Int32 // I/Os in flight through this path (queue-depth, RemovePath's drain)
	// removed is set by RemovePath: no new I/O starts on the path, and
	// the last I/O in flight closes drained.
	removed   atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once
}

// release ends one I/O's use of the path; the last one on a path being
// removed wakes RemovePath.
func (p *Path) release() {
	if p.active.Add(-1) == 0 && p.removed.Load() {
		p.drainOnce.Do(p.closeDrained)
	}
}

// closeDrained closes drained (once, through drainOnce).
func (p *Path) closeDrained() { close(p.drained) }

// Controller returns the path's controller.
func (p *Path) Controller() *Controller { return p.c }

// NewMultipath returns an empty Multipath for the subsystem nqn; AddPath
// gives it its controllers.
func NewMultipath(nqn string, o MultipathOptions) *Multipath {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	m := &Multipath{nqn: nqn, log: o.Logger.Named("multipath").With("subnqn", nqn),
		ns: map[uint32]*MultipathNamespace{}, changed: make(chan struct{})}
	m.policy.Store(int32(o.IOPolicy))
	if o.QueueTimeout != 0 {
		m.qtmo.Store(int64(o.QueueTimeout))
	}
	return m
}

// SubsystemNQN returns the subsystem's NQN.
func (m *Multipath) SubsystemNQN() string { return m.nqn }

// IOPolicy returns the I/O policy.
func (m *Multipath) IOPolicy() IOPolicy { return IOPolicy(m.policy.Load()) }

// SetIOPolicy changes the I/O policy.
func (m *Multipath) SetIOPolicy(p IOPolicy) {
	m.policy.Store(int32(p))
	m.notify()
}

// QueueTimeout returns how long I/O waits while no path is usable
// (negative: as long as a path may come back).
func (m *Multipath) QueueTimeout() time.Duration { return time.Duration(m.qtmo.Load()) }

// AddPath adds controller c (connected to the same subsystem) as a path.
// From then on c's own namespaces do not wait for c to reconnect: their
// I/O fails with the path error that makes the multipath layer use
// another path, so use the Multipath's namespaces, not c's.
func (m *Multipath) AddPath(c *Controller) error {
	if c.SubsystemNQN() != m.nqn {
		return fmt.Errorf("initiator: multipath %s: controller of %s is not a path of this subsystem", m.nqn, c.SubsystemNQN())
	}
	m.mu.Lock()
	for _, p := range m.paths {
		if p.c == c {
			m.mu.Unlock()
			return nil
		}
		if p.c.State() == StateLive && c.State() == StateLive && p.c.CntlID() == c.CntlID() && p.c.Address() == c.Address() {
			m.mu.Unlock()
			return fmt.Errorf("initiator: multipath %s: controller %d at %s is already a path", m.nqn, c.CntlID(), c.Address())
		}
	}
	m.paths = append(m.paths, &Path{c: c, drained: make(chan struct{})})
	m.qtmo.CompareAndSwap(0, int64(c.opts.CtrlLossTimeout))
	m.mu.Unlock()
	c.mpath.Store(true)
	c.setOnChange(m.notify)
	m.log.Info("path added", "addr", c.Address().String(), "cntlid", c.CntlID(), "ana", c.ANAReporting())
	m.notify()
	m.refresh()
	return nil
}

// RemovePath removes controller c from the paths without disconnecting
// it (the multipath side of Linux's nvme_delete_ctrl): no new I/O goes to
// c, and RemovePath waits until the I/O in flight through c has ended
// (an I/O that fails there for a path reason is sent again on another
// path, as on any path loss) or ctx is done. Either way c is no longer a
// path when it returns: when ctx ended first it returns ctx's error and
// the I/O still on c completes there, or fails over when the caller
// disconnects c. Afterwards c's own namespaces wait for its reconnects
// again. A controller that is not a path gives an error wrapping
// ErrNotPath.
func (m *Multipath) RemovePath(ctx context.Context, c *Controller) error {
	m.mu.Lock()
	var p *Path
	for i, q := range m.paths {
		if q.c == c {
			p = q
			m.paths = append(m.paths[:i:i], m.paths[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("initiator: multipath %s: controller %d at %s: %w", m.nqn, c.CntlID(), c.Address(), ErrNotPath)
	}
	// removed before the change is seen: an I/O that chose p from a list
	// not yet rebuilt sees it after counting itself in active (path), so
	// either it takes another path or this waits for it.
	p.removed.Store(true)
	m.notify()
	m.refresh()
	if p.active.Load() == 0 {
		p.drainOnce.Do(p.closeDrained)
	}
	var err error
	select {
	case <-p.drained:
	case <-ctx.Done():
		err = fmt.Errorf("initiator: multipath %s: removing path %s: %d I/O(s) still in flight: %w",
			m.nqn, c.Address(), p.active.Load(), ctx.Err())
	}
	c.setOnChange(nil)
	c.mpath.Store(false)
	m.log.Info("path removed", "addr", c.Address().String(), "cntlid", c.CntlID(), "drained", err == nil)
	return err
}

// Paths returns the paths' controllers in the order they were added.
func (m *Multipath) Paths() []*Controller {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Controller, len(m.paths))
	for i, p := range m.paths {
		out[i] = p.c
	}
	return out
}

// Close disconnects every path.
func (m *Multipath) Close() error {
	var errs []error
	for _, c := range m.Paths() {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// notify is the controllers' change hook: it marks the namespaces' path
// lists stale and wakes the I/O waiting for a path. It must not block
// nor take a controller's locks (it runs under them).
func (m *Multipath) notify() {
	m.dirty.Store(true)
	m.gen.Add(1)
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// changedCh returns the channel the next change closes.
func (m *Multipath) changedCh() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// refresh rebuilds every namespace's path list when a change made it
// stale (nvme_mpath_set_live, nvme_find_ns_head matching the IDs).
func (m *Multipath) refresh() {
	if !m.dirty.Swap(false) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lists := map[uint32][]nsPath{}
	for _, p := range m.paths {
		for _, ns := range p.c.Namespaces() {
			mn := m.ns[ns.NSID()]
			if mn == nil {
				mn = &MultipathNamespace{m: m, nsid: ns.NSID()}
				mn.nguid, mn.uuid, mn.eui64 = ns.NGUID(), ns.UUID(), ns.EUI64()
				mn.last.Store(ns)
				m.ns[ns.NSID()] = mn
				m.log.Info("namespace", "nsid", ns.NSID(), "nguid", fmt.Sprintf("%x", mn.nguid))
			}
			if !mn.sameIDs(ns) {
				m.log.Error("namespace IDs differ between paths: path not used for it", "nsid", ns.NSID(), "addr", p.c.Address().String(), "cntlid", p.c.CntlID())
				continue
			}
			lists[ns.NSID()] = append(lists[ns.NSID()], nsPath{p: p, ns: ns})
		}
	}
	for nsid, mn := range m.ns {
		l := lists[nsid]
		mn.paths.Store(&l)
		if len(l) > 0 {
			mn.last.Store(l[0].ns)
		}
	}
}

// Namespaces returns the namespaces reached through at least one path, by
// NSID.
func (m *Multipath) Namespaces() []*MultipathNamespace {
	m.refresh()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*MultipathNamespace
	for _, mn := range m.ns {
		if l := mn.paths.Load(); l != nil && len(*l) > 0 {
			out = append(out, mn)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].nsid < out[j].nsid })
	return out
}

// Namespace returns namespace nsid.
func (m *Multipath) Namespace(nsid uint32) (*MultipathNamespace, error) {
	m.refresh()
	m.mu.Lock()
	mn := m.ns[nsid]
	m.mu.Unlock()
	if mn == nil {
		return nil, fmt.Errorf("initiator: multipath %s: namespace %d: %w", m.nqn, nsid, ErrNoNamespace)
	}
	return mn, nil
}

// nsPath is a namespace as one path reaches it.
type nsPath struct {
	p  *Path
	ns *Namespace
}

// MultipathNamespace is one namespace of a Multipath, reached through all
// its paths, used as a block device like a Namespace (ReadAt, WriteAt,
// WriteZeroes, Trim, Flush move whole blocks).
type MultipathNamespace struct {
	m    *Multipath
	nsid uint32

	nguid [16]byte
	uuid  [16]byte
	eui64 [8]byte

	paths atomic.Pointer[[]nsPath]
	last  atomic.Pointer[Namespace] // for the size and identity when no path is listed
	cur   atomic.Pointer[curPath]   // the numa policy's current path
	rr    atomic.Uint32
}

// curPath is the numa policy's cached path and the change generation it
// was chosen at (nvme_mpath_clear_current_path on changes).
type curPath struct {
	np  nsPath
	gen uint64
}

// sameIDs reports whether ns has the identifiers this namespace has
// (each one compared when both sides report it).
func (mn *MultipathNamespace) sameIDs(ns *Namespace) bool {
	var z16 [16]byte
	var z8 [8]byte
	if g := ns.NGUID(); g != z16 && mn.nguid != z16 && g != mn.nguid {
		return false
	}
	if u := ns.UUID(); u != z16 && mn.uuid != z16 && u != mn.uuid {
		return false
	}
	if e := ns.EUI64(); e != z8 && mn.eui64 != z8 && e != mn.eui64 {
		return false
	}
	return true
}

// NSID returns the namespace ID.
func (mn *MultipathNamespace) NSID() uint32 { return mn.nsid }

// Multipath returns the multipath the namespace belongs to.
func (mn *MultipathNamespace) Multipath() *Multipath { return mn.m }

// BlockSize returns the logical block size in bytes.
func (mn *MultipathNamespace) BlockSize() int { return mn.last.Load().BlockSize() }

// Blocks returns the size in logical blocks.
func (mn *MultipathNamespace) Blocks() uint64 { return mn.last.Load().Blocks() }

// Size returns the size in bytes.
func (mn *MultipathNamespace) Size() int64 { return mn.last.Load().Size() }

// Identify returns a copy of the Identify Namespace data (of a path).
func (mn *MultipathNamespace) Identify() nvme.IdentifyNamespace { return mn.last.Load().Identify() }

// NGUID returns the namespace's NGUID (zero if none).
func (mn *MultipathNamespace) NGUID() [16]byte { return mn.nguid }

// UUID returns the namespace's UUID (zero if none).
func (mn *MultipathNamespace) UUID() [16]byte { return mn.uuid }

// EUI64 returns the namespace's EUI-64 (zero if none).
func (mn *MultipathNamespace) EUI64() [8]byte { return mn.eui64 }

// PathInfo is the state of one path of a namespace.
type PathInfo struct {
	Controller *Controller
	ANAState   nvme.ANAState
	// Usable says the path can take I/O now (live, its ANA state
	// optimized or non-optimized, no ANA log read pending).
	Usable bool
	// Current says the policy would send the next I/O there (numa: the
	// current path; the others: any usable path of the best state).
	Current bool
	// Inflight is the number of I/Os in flight through the path.
	Inflight int
}

// Paths returns the namespace's paths, in the order they were added.
func (mn *MultipathNamespace) Paths() []PathInfo {
	mn.m.refresh()
	l := mn.paths.Load()
	if l == nil {
		return nil
	}
	best := nvme.ANAState(0)
	for _, np := range *l {
		if np.usable() && (best == 0 || np.ns.ANAState() == nvme.ANAOptimized) {
			best = np.ns.ANAState()
		}
	}
	cur := mn.cur.Load()
	out := make([]PathInfo, 0, len(*l))
	for _, np := range *l {
		pi := PathInfo{Controller: np.p.c, ANAState: np.ns.ANAState(), Usable: np.usable(), Inflight: int(np.p.active.Load())}
		if mn.m.IOPolicy() == IOPolicyNUMA {
			pi.Current = cur != nil && cur.np == np && cur.gen == mn.m.gen.Load() && pi.Usable
		} else {
			pi.Current = pi.Usable && pi.ANAState == best
		}
		out = append(out, pi)
	}
	return out
}

// usable reports whether the path can take I/O for the namespace
// (nvme_path_is_disabled and the ANA states __nvme_find_path accepts).
func (np nsPath) usable() bool {
	c := np.p.c
	if State(c.state.Load()) != StateLive || c.anaPending.Load() || np.ns.removed.Load() || np.p.removed.Load() {
		return false
	}
	s := np.ns.ANAState()
	return s == nvme.ANAOptimized || s == nvme.ANANonOptimized
}

// mayReturn reports whether the path, though not usable now, may become
// usable without the host's help (nvme_available_path: the controller is
// reconnecting and fast_io_fail_tmo has not expired; or it is live and
// the namespace is in an ANA transition or inaccessible).
func (np nsPath) mayReturn() bool {
	c := np.p.c
	if np.p.removed.Load() {
		return false
	}
	switch State(c.state.Load()) {
	case StateNew, StateResetting, StateConnecting:
		_, expired := c.failFastState()
		return !expired
	case StateLive:
		return !np.ns.removed.Load() && np.ns.ANAState() != nvme.ANAPersistentLoss
	}
	return false
}

// find chooses the path for the next I/O by the policy, or reports false.
func (mn *MultipathNamespace) find() (nsPath, bool) {
	if mn.m.dirty.Load() {
		mn.m.refresh()
	}
	lp := mn.paths.Load()
	if lp == nil || len(*lp) == 0 {
		return nsPath{}, false
	}
	l := *lp
	switch IOPolicy(mn.m.policy.Load()) {
	case IOPolicyRoundRobin:
		// nvme_round_robin_path: the next optimized path after the
		// last one, else a non-optimized one.
		start := int(mn.rr.Add(1))
		var fallback nsPath
		found := false
		for i := range l {
			np := l[(start+i)%len(l)]
			if !np.usable() {
				continue
			}
			if np.ns.ANAState() == nvme.ANAOptimized {
				return np, true
			}
			if !found {
				fallback, found = np, true
			}
		}
		return fallback, found
	case IOPolicyQueueDepth:
		// nvme_queue_depth_path: the fewest in flight among the
		// optimized paths, else among the non-optimized ones.
		var best, fallback nsPath
		bestN, fbN := int32(-1), int32(-1)
		for _, np := range l {
			if !np.usable() {
				continue
			}
			n := np.p.active.Load()
			if np.ns.ANAState() == nvme.ANAOptimized {
				if bestN < 0 || n < bestN {
					best, bestN = np, n
				}
			} else if fbN < 0 || n < fbN {
				fallback, fbN = np, n
			}
		}
		if bestN >= 0 {
			return best, true
		}
		return fallback, fbN >= 0
	default:
		// nvme_find_path for numa: keep the current path while it is
		// optimized and nothing changed, else the first optimized path,
		// else the first non-optimized one.
		gen := mn.m.gen.Load()
		if cur := mn.cur.Load(); cur != nil && cur.gen == gen && cur.np.usable() && cur.np.ns.ANAState() == nvme.ANAOptimized {
			return cur.np, true
		}
		var fallback nsPath
		found := false
		for _, np := range l {
			if !np.usable() {
				continue
			}
			if np.ns.ANAState() == nvme.ANAOptimized {
				mn.cur.Store(&curPath{np: np, gen: gen})
				return np, true
			}
			if !found {
				fallback, found = np, true
			}
		}
		if found {
			mn.cur.Store(&curPath{np: fallback, gen: gen})
		}
		return fallback, found
	}
}

// available reports whether some path may carry I/O later.
func (mn *MultipathNamespace) available() bool {
	lp := mn.paths.Load()
	if lp != nil {
		for _, np := range *lp {
			if np.usable() || np.mayReturn() {
				return true
			}
		}
	}
	// A controller reconnecting may bring the namespace back.
	for _, c := range mn.m.Paths() {
		switch c.State() {
		case StateNew, StateResetting, StateConnecting:
			if _, expired := c.failFastState(); !expired {
				return true
			}
		}
	}
	return false
}

// pathWait is the state of one I/O's wait for a path, on its stack.
type pathWait struct {
	deadline  time.Time
	started   bool
	failovers int
	lastErr   error
}

// maxFailoverRounds bounds how often one I/O fails over through every
// path without a change of state before it waits for one.
const maxFailoverRounds = 2

// failoverBackoff is how long an I/O that failed over on every path
// waits for a change before it tries again.
const failoverBackoff = 50 * time.Millisecond

// path returns the path for the next attempt of an I/O, waiting while no
// path is usable but one may come back (queue_if_no_path), at most the
// queue timeout.
func (mn *MultipathNamespace) path(w *pathWait, op string) (nsPath, error) {
	for {
		ch := mn.m.changedCh()
		if np, ok := mn.find(); ok {
			if w.failovers <= maxFailoverRounds*mn.npaths() {
				np.p.active.Add(1)
				if np.p.removed.Load() {
					// RemovePath took it meanwhile: choose again.
					np.p.release()
					continue
				}
				return np, nil
			}
			// Every path failed it again and again: wait for a change
			// (or a while) before the next round.
			w.failovers = 0
			if err := mn.wait(w, ch, failoverBackoff, op); err != nil {
				return nsPath{}, err
			}
			continue
		}
		if !mn.available() {
			return nsPath{}, mn.noPath(op, w.lastErr)
		}
		if err := mn.wait(w, ch, 0, op); err != nil {
			return nsPath{}, err
		}
	}
}

// npaths returns the number of paths of the namespace.
func (mn *MultipathNamespace) npaths() int {
	if lp := mn.paths.Load(); lp != nil {
		return max(len(*lp), 1)
	}
	return 1
}

// wait waits for a change of the paths (or d, when positive), within the
// I/O's queue deadline.
func (mn *MultipathNamespace) wait(w *pathWait, ch <-chan struct{}, d time.Duration, op string) error {
	if !w.started {
		w.started = true
		if qt := mn.m.QueueTimeout(); qt > 0 {
			w.deadline = time.Now().Add(qt)
		}
		mn.m.log.Debug("I/O waiting for a path", "op", op, "nsid", mn.nsid)
	}
	var tc <-chan time.Time
	if !w.deadline.IsZero() {
		left := time.Until(w.deadline)
		if left <= 0 {
			return mn.noPath(op, fmt.Errorf("queue timeout %v expired: %w", mn.m.QueueTimeout(), lastOr(w.lastErr)))
		}
		if d <= 0 || left < d {
			d = left
		}
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-ch:
	case <-tc:
	}
	return nil
}

// lastOr returns err, or a generic error when nil.
func lastOr(err error) error {
	if err == nil {
		return errors.New("no path became usable")
	}
	return err
}

// noPath is the error of an I/O no path can carry.
func (mn *MultipathNamespace) noPath(op string, last error) error {
	var states []string
	if lp := mn.paths.Load(); lp != nil {
		for _, np := range *lp {
			states = append(states, fmt.Sprintf("%s %s %s", np.p.c.Address(), np.p.c.State(), np.ns.ANAState()))
		}
	}
	if last != nil {
		return fmt.Errorf("initiator: %s nsid %d: %w (paths: %s): %v", op, mn.nsid, ErrNoPath, strings.Join(states, "; "), last)
	}
	return fmt.Errorf("initiator: %s nsid %d: %w (paths: %s)", op, mn.nsid, ErrNoPath, strings.Join(states, "; "))
}

// failover reports whether err, from path np, must be retried on another
// path; it records the error for the final report.
func (mn *MultipathNamespace) failover(np nsPath, w *pathWait, err error, op string) bool {
	np.p.release()
	if err == nil || !np.p.c.pathFailure(err) {
		return false
	}
	w.failovers++
	w.lastErr = err
	mn.m.log.Warn("path failed, failing over", "op", op, "nsid", mn.nsid, "addr", np.p.c.Address().String(), "cntlid", np.p.c.CntlID(), "error", err)
	return true
}

// ReadAt reads len(p) bytes at byte offset off (io.ReaderAt), on the path
// the policy chooses, failing over as needed.
func (mn *MultipathNamespace) ReadAt(p []byte, off int64) (int, error) {
	var w pathWait
	for {
		np, err := mn.path(&w, "Read")
		if err != nil {
			return 0, err
		}
		n, err := np.ns.ReadAt(p, off)
		if !mn.failover(np, &w, err, "Read") {
			return n, err
		}
	}
}

// WriteAt writes len(p) bytes at byte offset off (io.WriterAt).
func (mn *MultipathNamespace) WriteAt(p []byte, off int64) (int, error) {
	var w pathWait
	for {
		np, err := mn.path(&w, "Write")
		if err != nil {
			return 0, err
		}
		n, err := np.ns.WriteAt(p, off)
		if !mn.failover(np, &w, err, "Write") {
			return n, err
		}
	}
}

// WriteZeroes zeroes length bytes at off (Write Zeroes).
func (mn *MultipathNamespace) WriteZeroes(off, length int64) error {
	var w pathWait
	for {
		np, err := mn.path(&w, "Write Zeroes")
		if err != nil {
			return err
		}
		err = np.ns.WriteZeroes(off, length)
		if !mn.failover(np, &w, err, "Write Zeroes") {
			return err
		}
	}
}

// Trim deallocates length bytes at off (Dataset Management).
func (mn *MultipathNamespace) Trim(off, length int64) error {
	var w pathWait
	for {
		np, err := mn.path(&w, "Dataset Management")
		if err != nil {
			return err
		}
		err = np.ns.Trim(off, length)
		if !mn.failover(np, &w, err, "Dataset Management") {
			return err
		}
	}
}

// Flush commits the volatile write cache (Flush) through one path.
func (mn *MultipathNamespace) Flush() error {
	var w pathWait
	for {
		np, err := mn.path(&w, "Flush")
		if err != nil {
			return err
		}
		err = np.ns.Flush()
		if !mn.failover(np, &w, err, "Flush") {
			return err
		}
	}
}

// Start starts io and returns without waiting for it, as Namespace.Start;
// io.Done is called exactly once. It runs the synchronous method on a
// goroutine (unlike Namespace.Start, it allocates).
func (mn *MultipathNamespace) Start(io *IO) {
	io.N, io.Err = 0, nil
	go func() {
		switch io.Op {
		case OpRead:
			io.N, io.Err = mn.ReadAt(io.Buf, io.Off)
		case OpWrite:
			io.N, io.Err = mn.WriteAt(io.Buf, io.Off)
		case OpWriteZeroes:
			io.Err = mn.WriteZeroes(io.Off, io.Len)
		case OpTrim:
			io.Err = mn.Trim(io.Off, io.Len)
		case OpFlush:
			io.Err = mn.Flush()
		default:
			io.Err = fmt.Errorf("initiator: nsid %d: unknown I/O operation %v", mn.nsid, io.Op)
		}
		io.Done(io)
	}()
}

// Rescan re-reads the namespaces of every live path.
func (m *Multipath) Rescan(ctx context.Context) error {
	var errs []error
	for _, c := range m.Paths() {
		if c.State() != StateLive {
			continue
		}
		if err := c.Rescan(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.notify()
	return errors.Join(errs...)
}
