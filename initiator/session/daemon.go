package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/blockdev"
	"github.com/nvmeof/nvmeof/nvme"
)

// Config says how a daemon maps its namespaces and when it gives up on a
// controller.
type Config struct {
	// None connects without mapping any namespace.
	None bool
	// Method is the blockdev method (MethodAuto: ublk, else NBD where the kernel has
	// it, FUSE + loop otherwise).
	Method blockdev.Method
	// UnmapTimeout bounds each wait of an unmap (blockdev's default when 0).
	UnmapTimeout time.Duration
	// GiveUpAfter, when positive, is how long the controller may stay
	// disconnected (resetting or reconnecting) before the daemon gives up
	// on it: it disconnects it, which fails the I/O still waiting, and
	// removes its devices as when the initiator itself gives up at
	// ctrl-loss-tmo. A watchdog for reconnect attempts that take longer
	// than ctrl-loss-tmo allows; callers set ctrl-loss-tmo plus the
	// reconnect delay plus a grace period.
	GiveUpAfter time.Duration
	// IOPolicy is the multipath I/O policy of the namespaces.
	IOPolicy initiator.IOPolicy
	// AddPath, when set, connects another path of the subsystem for an
	// OpAddPath request (spec is the request's Spec, the caller's
	// format): it returns the connected controller, the path's address
	// facts and the function that closes its transport.
	AddPath func(ctx context.Context, spec json.RawMessage) (*initiator.Controller, PathState, func() error, error)
	// RDMAStats, when set, reads the counters of the RDMA devices the
	// paths use, for an OpRDMAStats request (unset: the daemon has none,
	// as over TCP).
	RDMAStats func() ([]DeviceCounters, error)
}

// daemonPath is one controller (path) the daemon holds.
type daemonPath struct {
	name           string
	info           PathState
	ctrl           *initiator.Controller
	closeTransport func() error
}

// Timeouts of the daemon's own work.
const (
	requestTimeout    = 10 * time.Second // an Identify or log page for a client
	disconnectTimeout = 20 * time.Second // unmap + CC.SHN + queue teardown
	drainTimeout      = 10 * time.Second // a removed path's I/O in flight, before its disconnect fails it over
	mapTimeout        = 60 * time.Second // mapping a namespace found by an event
	pollInterval      = time.Second      // controller state polling
)

// Daemon holds one connected controller and the mappings of its
// namespaces, serves the control socket and keeps state.json current until
// a disconnect request (or, once the controller is lost and nothing holds
// its devices, by itself) ends it.
type Daemon struct {
	slot *Slot
	info State // connection facts from the caller
	mcfg Config
	log  hclog.Logger

	// ctrl is the first path's controller; mp holds every path and maps
	// the namespaces (a single path is a multipath of one, as the Linux
	// host's ns_head). pmu guards paths, and ctrl and info's address once
	// Serve runs (removing the first path makes the next one first).
	ctrl  *initiator.Controller
	mp    *initiator.Multipath
	pmu   sync.Mutex
	paths []*daemonPath
	nextP int

	events chan struct{} // namespace changes reported by the controller

	wmu       sync.Mutex // serializes writeState
	mu        sync.Mutex
	maps      map[uint32]*mapping
	lastState []byte
	ln        *net.UnixListener
	finished  bool
}

type mapping struct {
	m   *blockdev.Mapping
	err error // mapping failed
}

// NewDaemon prepares a daemon for slot. info carries what the caller knows
// about the connection (transport, addresses, NQNs); the rest of the State
// comes from the controller. Pass AsyncEvent as the controller's
// Options.OnAsyncEvent, then Attach the connected controller.
func NewDaemon(slot *Slot, info State, mcfg Config, log hclog.Logger) *Daemon {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	info.Name = slot.Name
	info.PID = os.Getpid()
	if info.Log == "" {
		info.Log = slot.LogPath()
	}
	if info.Started.IsZero() {
		info.Started = time.Now().UTC().Truncate(time.Second)
	}
	return &Daemon{slot: slot, info: info, mcfg: mcfg, log: log,
		events: make(chan struct{}, 1), maps: map[uint32]*mapping{}}
}

// AsyncEvent is meant for initiator.Options.OnAsyncEvent: a namespace
// change makes the daemon map new namespaces and unmap removed ones.
func (d *Daemon) AsyncEvent(ev initiator.AsyncEvent) {
	if ev.Event.Type() != nvme.AsyncEventNotice {
		return
	}
	select {
	case d.events <- struct{}{}:
	default:
	}
}

// Attach gives the daemon its connected controller (its first path) and
// the function that closes the transport after the controller is
// disconnected.
func (d *Daemon) Attach(c *initiator.Controller, closeTransport func() error) {
	d.pmu.Lock()
	d.ctrl = c
	d.pmu.Unlock()
	d.mp = initiator.NewMultipath(c.SubsystemNQN(), initiator.MultipathOptions{IOPolicy: d.mcfg.IOPolicy, Logger: d.log})
	info := PathState{Transport: d.info.Transport, Traddr: d.info.Traddr, Trsvcid: d.info.Trsvcid, HostTraddr: d.info.HostTraddr}
	_ = d.addPath(c, info, closeTransport)
}

// addPath adds a connected controller as a path.
func (d *Daemon) addPath(c *initiator.Controller, info PathState, closeTransport func() error) error {
	if err := d.mp.AddPath(c); err != nil {
		return err
	}
	d.pmu.Lock()
	// The first path is the daemon's own name (nvmeof0, as without
	// multipath); the others are nvmeof0c1, nvmeof0c2, ... (as the
	// kernel's nvme0c1n1: subsystem 0, controller 1).
	name := d.slot.Name
	if d.nextP > 0 {
		name = fmt.Sprintf("%sc%d", d.slot.Name, d.nextP)
	}
	p := &daemonPath{name: name, info: info, ctrl: c, closeTransport: closeTransport}
	d.nextP++
	d.paths = append(d.paths, p)
	d.pmu.Unlock()
	d.log.Info("path added", "path", p.name, "traddr", info.Traddr, "trsvcid", info.Trsvcid, "cntlid", c.CntlID())
	return nil
}

// allPaths returns the daemon's paths.
func (d *Daemon) allPaths() []*daemonPath {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	return append([]*daemonPath(nil), d.paths...)
}

// first returns the first path's controller and the connection facts
// (its address among them).
func (d *Daemon) first() (*initiator.Controller, State) {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	return d.ctrl, d.info
}

// adminCtrl returns the controller admin requests go to: the first live
// path, else the first path.
func (d *Daemon) adminCtrl() *initiator.Controller {
	for _, p := range d.allPaths() {
		if p.ctrl.State() == initiator.StateLive {
			return p.ctrl
		}
	}
	c, _ := d.first()
	return c
}

// pathCtrl returns the controller admin request req goes to: its Path's,
// else adminCtrl's.
func (d *Daemon) pathCtrl(req Request) (*initiator.Controller, error) {
	if req.Path == "" {
		return d.adminCtrl(), nil
	}
	for _, p := range d.allPaths() {
		if p.name == req.Path {
			return p.ctrl, nil
		}
	}
	return nil, fmt.Errorf("no path %q (see nvmeof list-subsys)", req.Path)
}

// state returns the subsystem's state over its paths: live when a path
// is, else resetting or connecting when one is, else the first path's.
func (d *Daemon) state() initiator.State {
	var best initiator.State = -1
	for _, p := range d.allPaths() {
		switch st := p.ctrl.State(); st {
		case initiator.StateLive:
			return st
		case initiator.StateResetting, initiator.StateConnecting, initiator.StateNew:
			best = st
		default:
			if best < 0 {
				best = st
			}
		}
	}
	if best < 0 {
		c, _ := d.first()
		return c.State()
	}
	return best
}

// disconnectAll disconnects every path.
func (d *Daemon) disconnectAll(ctx context.Context) error {
	var errs []error
	for _, p := range d.allPaths() {
		if err := p.ctrl.Disconnect(ctx); err != nil && !errors.Is(err, initiator.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}

// Multipath returns the daemon's multipath (nil before Attach).
func (d *Daemon) Multipath() *initiator.Multipath { return d.mp }

// addPathRequest connects and adds the path an OpAddPath request asks for.
func (d *Daemon) addPathRequest(req Request) Response {
	if d.mcfg.AddPath == nil {
		return Response{Error: "this daemon cannot add paths"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), mapTimeout)
	defer cancel()
	c, info, closeT, err := d.mcfg.AddPath(ctx, req.Spec)
	if err != nil {
		return Response{Error: describe(err)}
	}
	if err := d.addPath(c, info, closeT); err != nil {
		_ = c.Close()
		if closeT != nil {
			_ = closeT()
		}
		return Response{Error: describe(err)}
	}
	if req.IOPolicy != "" {
		pol, err := initiator.ParseIOPolicy(req.IOPolicy)
		if err == nil {
			d.mp.SetIOPolicy(pol)
		}
	}
	// The serving loop maps what only the new path has (reconcile runs
	// there alone).
	select {
	case d.events <- struct{}{}:
	default:
	}
	if err := d.writeState(); err != nil {
		d.log.Warn("state file not written", "error", err)
	}
	return Response{State: d.Snapshot()}
}

// removePath disconnects the path named name, when it is not the last
// one (last reports that it is: the caller disconnects the whole
// subsystem then). The path takes no new I/O, the I/O in flight on it
// ends there (at most drainTimeout, after which its disconnect sends what
// is left to the other paths), then its controller is shut down (CC.SHN)
// and its reconnects stop; namespaces only it reached are unmapped. Run
// by the serving loop, as a whole disconnect is.
func (d *Daemon) removePath(name string) (resp Response, last bool) {
	paths := d.allPaths()
	var p *daemonPath
	names := make([]string, 0, len(paths))
	for _, q := range paths {
		names = append(names, q.name)
		if q.name == name {
			p = q
		}
	}
	if p == nil {
		return Response{Error: fmt.Sprintf("%s has no path %s (paths: %s)", d.slot.Name, name, strings.Join(names, ", "))}, false
	}
	if len(paths) == 1 {
		return Response{}, true
	}
	if err := d.checkSolePathMounted(p); err != nil {
		return Response{Error: err.Error()}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, drainTimeout)
	err := d.mp.RemovePath(dctx, p.ctrl)
	dcancel()
	if err != nil {
		d.log.Warn("path removed with I/O in flight: its disconnect sends it on the other paths", "path", p.name, "error", err)
	}
	d.pmu.Lock()
	for i, q := range d.paths {
		if q == p {
			d.paths = append(d.paths[:i:i], d.paths[i+1:]...)
			break
		}
	}
	if d.ctrl == p.ctrl {
		// The next path is the first now: the state's address and
		// controller facts are its own (the daemon keeps its name).
		n := d.paths[0]
		d.ctrl = n.ctrl
		d.info.Transport, d.info.Traddr, d.info.Trsvcid, d.info.HostTraddr = n.info.Transport, n.info.Traddr, n.info.Trsvcid, n.info.HostTraddr
	}
	d.pmu.Unlock()
	if err := p.ctrl.Disconnect(ctx); err != nil && !errors.Is(err, initiator.ErrClosed) {
		d.log.Warn("controller shutdown incomplete", "path", p.name, "error", err)
	}
	if p.closeTransport != nil {
		if err := p.closeTransport(); err != nil {
			d.log.Warn("closing the transport", "path", p.name, "error", err)
		}
	}
	d.log.Info("path disconnected", "path", p.name, "traddr", p.info.Traddr, "trsvcid", p.info.Trsvcid, "cntlid", p.ctrl.CntlID())
	d.reconcile() // unmaps the namespaces only that path reached
	if err := d.writeState(); err != nil {
		d.log.Warn("state file not written", "error", err)
	}
	return Response{State: d.Snapshot()}, false
}

// checkSolePathMounted returns an error when a namespace reached only
// through path p has a mounted device: removing p would take it away.
func (d *Daemon) checkSolePathMounted(p *daemonPath) error {
	for _, ns := range d.mp.Namespaces() {
		pis := ns.Paths()
		if len(pis) != 1 || pis[0].Controller != p.ctrl {
			continue
		}
		d.mu.Lock()
		mp := d.maps[ns.NSID()]
		d.mu.Unlock()
		if mp == nil || mp.m == nil {
			continue
		}
		if mps, err := MountPointsOf(mp.m.Path()); err == nil && len(mps) > 0 {
			return fmt.Errorf("%s (%sn%d) is reached only through %s and is mounted on %s: unmount it first",
				mp.m.Path(), d.slot.Name, ns.NSID(), p.name, strings.Join(mps, ", "))
		}
	}
	return nil
}

// MapAll maps every active namespace (unless Config.None). On error the
// namespaces mapped so far are unmapped again.
func (d *Daemon) MapAll(ctx context.Context) error {
	if d.mcfg.None {
		return nil
	}
	for _, ns := range d.mp.Namespaces() {
		m, err := d.mapOne(ctx, ns)
		if err != nil {
			d.unmapAll(context.Background())
			return fmt.Errorf("mapping namespace %d: %w", ns.NSID(), err)
		}
		d.mu.Lock()
		d.maps[ns.NSID()] = &mapping{m: m}
		d.mu.Unlock()
		d.log.Info("namespace mapped", "nsid", ns.NSID(), "device", m.Path(), "method", m.Method())
	}
	return nil
}

func (d *Daemon) mapOne(ctx context.Context, ns *initiator.MultipathNamespace) (*blockdev.Mapping, error) {
	return blockdev.Map(ctx, ns, &blockdev.Options{
		Method:       d.mcfg.Method,
		Name:         fmt.Sprintf("n%d", ns.NSID()),
		RunDir:       d.slot.Dir,
		UnmapTimeout: d.mcfg.UnmapTimeout,
		Logger:       d.log.Named("blockdev"),
	})
}

// Start writes the state file and opens the control socket. After Start
// the daemon is visible to the nvmeof commands.
func (d *Daemon) Start() error {
	ln, err := Listen(d.slot.SocketPath())
	if err != nil {
		return err
	}
	d.ln = ln
	if err := d.writeState(); err != nil {
		ln.Close()
		return err
	}
	return nil
}

// Snapshot returns the current state.
func (d *Daemon) Snapshot() *State {
	c, s := d.first()
	if c == nil {
		s.State = "new"
		return &s
	}
	s.State = d.state().String()
	s.CntlID = c.CntlID()
	id := c.IdentifyData()
	if len(id) > 0 {
		s.Serial = strings.TrimSpace(id.SN())
		s.Model = strings.TrimSpace(id.MN())
		s.Firmware = strings.TrimSpace(id.FR())
	}
	s.IOQueues = c.NumIOQueues()
	s.QueueSize = c.QueueSize()
	s.KATO = int(c.KeepAliveTimeout() / time.Second)
	hid := c.HostID()
	s.HostID = fabrics.FormatUUID(hid)
	s.HostNQN = c.HostNQN()
	s.IOPolicy = d.mp.IOPolicy().String()
	names := map[*initiator.Controller]string{}
	nss := d.mp.Namespaces()
	for _, p := range d.allPaths() {
		names[p.ctrl] = p.name
		ps := p.info
		ps.Name = p.name
		ps.State = p.ctrl.State().String()
		ps.CntlID = p.ctrl.CntlID()
		ps.ANAState = "optimized" // no namespace, or no ANA reporting
		if len(nss) > 0 {
			for _, pi := range nss[0].Paths() {
				if pi.Controller == p.ctrl {
					ps.ANAState = pi.ANAState.String()
				}
			}
		}
		s.Paths = append(s.Paths, ps)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[uint32]bool{}
	for _, ns := range nss {
		seen[ns.NSID()] = true
		idns := ns.Identify()
		n := Namespace{
			NSID:      ns.NSID(),
			Generic:   fmt.Sprintf("%sn%d", d.slot.Name, ns.NSID()),
			BlockSize: ns.BlockSize(),
			NSZE:      ns.Blocks(),
		}
		if len(idns) > 0 {
			n.NUSE = idns.NUSE()
			n.MetaSize = int(idns.CurrentLBAFormat().MS)
		}
		for _, pi := range ns.Paths() {
			n.Paths = append(n.Paths, NamespacePath{Path: names[pi.Controller], ANAState: pi.ANAState.String(), Current: pi.Current})
		}
		d.fillMapping(&n)
		s.Namespaces = append(s.Namespaces, n)
	}
	for nsid := range d.maps {
		if !seen[nsid] { // removed from the controller, still mapped
			n := Namespace{NSID: nsid, Generic: fmt.Sprintf("%sn%d", d.slot.Name, nsid)}
			d.fillMapping(&n)
			s.Namespaces = append(s.Namespaces, n)
		}
	}
	return &s
}

// fillMapping copies a namespace's mapping into n; d.mu is held.
func (d *Daemon) fillMapping(n *Namespace) {
	mp := d.maps[n.NSID]
	switch {
	case mp == nil:
	case mp.m != nil:
		n.Device = mp.m.Path()
		n.Method = mp.m.Method().String()
	case mp.err != nil:
		n.MapError = mp.err.Error()
	}
}

// writeState writes state.json when the state changed. Writers are
// serialized from the snapshot on (the serving loop and add-path run
// concurrently): an older snapshot never lands after a newer one.
func (d *Daemon) writeState() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	s := d.Snapshot()
	b, _ := json.Marshal(s)
	d.mu.Lock()
	same := bytes.Equal(b, d.lastState)
	d.lastState = b
	d.mu.Unlock()
	if same {
		return nil
	}
	return WriteState(d.slot.StatePath(), s)
}

// handle answers a control request other than a disconnect.
func (d *Daemon) handle(req Request) Response {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	d.log.Trace("control request", "op", req.Op, "nsid", req.NSID, "data_len", req.DataLen)
	switch req.Op {
	case OpState:
		return Response{State: d.Snapshot()}
	case OpIdentify:
		ctrl, err := d.pathCtrl(req)
		if err != nil {
			return Response{Error: err.Error()}
		}
		if req.NSID == 0 {
			id, err := ctrl.IdentifyController(ctx)
			if err != nil {
				return Response{Error: describe(err)}
			}
			return Response{Data: []byte(id)}
		}
		id, err := ctrl.IdentifyNamespace(ctx, req.NSID)
		if err != nil {
			return Response{Error: describe(err)}
		}
		return Response{Data: []byte(id)}
	case OpSMARTLog:
		ctrl, err := d.pathCtrl(req)
		if err != nil {
			return Response{Error: err.Error()}
		}
		l, err := ctrl.SMARTLog(ctx)
		if err != nil {
			return Response{Error: describe(err)}
		}
		return Response{Data: []byte(l)}
	case OpAdmin:
		return d.admin(ctx, req)
	case OpReset:
		return d.reset()
	case OpAddPath:
		return d.addPathRequest(req)
	case OpReservation:
		return d.reservation(req)
	case OpRDMAStats:
		if d.mcfg.RDMAStats == nil {
			return Response{Error: "no RDMA device: the controller's transport is " + d.info.Transport}
		}
		st, err := d.mcfg.RDMAStats()
		if err != nil {
			return Response{Error: describe(err)}
		}
		return Response{RDMA: st}
	}
	return Response{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// describe makes an error one line without the package prefixes.
func describe(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "initiator: ", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

// loopReq is a request the serving loop runs (a disconnect or a path
// removal: they change what the loop watches).
type loopReq struct {
	req   Request
	reply chan Response
}

// Serve runs the daemon until it is disconnected: by a disconnect request
// (or the removal of its last path), a signal on stop (refused, like a
// request, while a device is mounted), or by itself once the controller
// is lost (ctrl-loss-tmo expired) and its devices could be unmapped.
// Path removals run in its loop too. Everything but the slot is released
// when it returns; the caller then releases the slot.
func (d *Daemon) Serve(stop <-chan os.Signal) error {
	reqs := make(chan loopReq)
	loopDone := make(chan struct{})
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		_ = Serve(d.ln, requestTimeout, func(req Request) Response {
			if req.Op != OpDisconnect && req.Op != OpRemovePath {
				return d.handle(req)
			}
			r := loopReq{req: req, reply: make(chan Response, 1)}
			select {
			case reqs <- r:
			case <-loopDone:
				return Response{Error: "daemon is exiting"}
			}
			return <-r.reply // the loop answers every request it takes
		})
	}()
	// exit stops the loop and waits (bounded) for the control server to
	// have written its responses, the disconnect's included.
	exit := func(err error) error {
		close(loopDone)
		d.finish(context.Background()) // closes the listener if still open
		select {
		case <-serveDone:
		case <-time.After(requestTimeout + time.Second):
		}
		return err
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var lostSince, downSince time.Time
	var lastBusy string
	gaveUp := false
	for {
		select {
		case r := <-reqs:
			if r.req.Op == OpRemovePath {
				resp, last := d.removePath(r.req.Path)
				if !last {
					r.reply <- resp
					continue
				}
				d.log.Info("last path removed: disconnecting", "path", r.req.Path)
			}
			if err := d.shutdown(true); err != nil {
				r.reply <- Response{Error: err.Error()}
				continue
			}
			r.reply <- Response{}
			return exit(nil)
		case sig := <-stop:
			d.log.Info("signal received, disconnecting", "signal", sig.String())
			if err := d.shutdown(true); err != nil {
				d.log.Error("not disconnecting", "error", err)
				continue
			}
			return exit(nil)
		case <-d.events:
			d.reconcile()
		case <-tick.C:
			st := d.state()
			switch st {
			case initiator.StateResetting, initiator.StateConnecting:
				if downSince.IsZero() {
					downSince = time.Now()
				}
				if d.mcfg.GiveUpAfter > 0 && !gaveUp && time.Since(downSince) > d.mcfg.GiveUpAfter {
					gaveUp = true
					d.log.Error("controller not back within ctrl-loss-tmo: giving up on it",
						"down_for", time.Since(downSince).Round(time.Second))
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
						defer cancel()
						_ = d.disconnectAll(ctx) // fails the waiting I/O
					}()
				}
			case initiator.StateLive:
				downSince = time.Time{}
			}
			if st == initiator.StateDead || (gaveUp && st == initiator.StateDeleted) {
				if lostSince.IsZero() {
					lostSince = time.Now()
					d.log.Error("controller lost (ctrl-loss-tmo expired): removing its devices")
				}
				if err := d.shutdown(false); err != nil {
					if msg := err.Error(); msg != lastBusy {
						d.log.Warn("cannot remove the devices of the lost controller yet", "error", err)
						lastBusy = msg
					}
				} else {
					return exit(initiator.ErrControllerLost)
				}
			}
		}
		if err := d.writeState(); err != nil {
			d.log.Warn("state file not written", "error", err)
		}
	}
}

// shutdown unmaps every namespace, disconnects the controller, closes the
// transport and removes the state file and socket. While a device is
// mounted (checked first) or in use it changes nothing that is in use and
// returns why. checkMounts false skips the up-front mount check (the lost
// controller case, where Unmap's own busy check suffices).
func (d *Daemon) shutdown(checkMounts bool) error {
	if checkMounts {
		if err := d.checkMounted(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
	defer cancel()
	if st := d.state(); st == initiator.StateResetting || st == initiator.StateConnecting {
		// I/O waiting for the controller would keep the devices busy:
		// disconnecting fails it, as deleting a Linux controller does.
		d.log.Info("disconnecting the controller before unmapping: it is not connected", "state", st.String())
		if err := d.disconnectAll(ctx); err != nil {
			d.log.Warn("controller disconnect", "error", err)
		}
	}
	if err := d.unmapAll(ctx); err != nil {
		return err
	}
	d.finish(ctx)
	return nil
}

// checkMounted returns an error naming the first mapped device that is
// mounted.
func (d *Daemon) checkMounted() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for nsid, mp := range d.maps {
		if mp.m == nil {
			continue
		}
		mps, err := MountPointsOf(mp.m.Path())
		if err == nil && len(mps) > 0 {
			return fmt.Errorf("%s (%sn%d) is mounted on %s: unmount it first",
				mp.m.Path(), d.slot.Name, nsid, strings.Join(mps, ", "))
		}
	}
	return nil
}

// unmapAll unmaps every mapped namespace; it stops at the first that is
// busy.
func (d *Daemon) unmapAll(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for nsid, mp := range d.maps {
		if mp.m != nil {
			if err := mp.m.Unmap(ctx); err != nil && !errors.Is(err, blockdev.ErrUnmapped) {
				if errors.Is(err, blockdev.ErrBusy) {
					return fmt.Errorf("%s (%sn%d) is in use (mounted, or held open by a process): release it first",
						mp.m.Path(), d.slot.Name, nsid)
				}
				return fmt.Errorf("unmapping %s: %w", mp.m.Path(), err)
			}
			d.log.Info("namespace unmapped", "nsid", nsid, "device", mp.m.Path())
		}
		delete(d.maps, nsid)
	}
	return nil
}

// finish disconnects the controller (CC.SHN) and releases the transport,
// the socket and the state file.
func (d *Daemon) finish(ctx context.Context) {
	d.mu.Lock()
	if d.finished {
		d.mu.Unlock()
		return
	}
	d.finished = true
	d.mu.Unlock()
	paths := d.allPaths()
	for _, p := range paths {
		if err := p.ctrl.Disconnect(ctx); err != nil && !errors.Is(err, initiator.ErrClosed) {
			d.log.Warn("controller shutdown incomplete", "path", p.name, "error", err)
		} else {
			d.log.Info("controller disconnected", "path", p.name)
		}
	}
	// Paths may share a transport (one RDMA device per host address):
	// close them once every path is down.
	for _, p := range paths {
		if p.closeTransport != nil {
			if err := p.closeTransport(); err != nil {
				d.log.Warn("closing the transport", "path", p.name, "error", err)
			}
		}
	}
	os.Remove(d.slot.StatePath())
	if d.ln != nil {
		d.ln.Close()
	}
	os.Remove(d.slot.SocketPath())
}

// Abort undoes a start that failed before Serve: it unmaps what was mapped
// and disconnects the controller.
func (d *Daemon) Abort() {
	ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
	defer cancel()
	if err := d.unmapAll(ctx); err != nil {
		d.log.Error("abort: unmap failed", "error", err)
	}
	d.finish(ctx)
}

// resize gives a mapped namespace's block device the namespace's new
// size, as the Linux host does on a Namespace Attribute Changed event, so
// that resize2fs or xfs_growfs work without a reconnect.
func (d *Daemon) resize(ctx context.Context, nsid uint32, m *blockdev.Mapping, size int64) {
	old := m.Size()
	if size == old || size <= 0 {
		return
	}
	if err := m.Resize(ctx, size); err != nil {
		if errors.Is(err, blockdev.ErrResizeUnsupported) {
			d.log.Warn("namespace resized; its block device cannot follow", "nsid", nsid, "device", m.Path(), "old_size", old, "size", size, "error", err)
			return
		}
		d.log.Error("namespace resized; resizing its block device failed", "nsid", nsid, "device", m.Path(), "old_size", old, "size", size, "error", err)
		return
	}
	d.log.Info("namespace resized", "nsid", nsid, "device", m.Path(), "old_size", old, "size", size)
}

// reconcile maps namespaces that appeared, resizes the devices of those
// whose size changed, and unmaps those that are gone (when nothing holds
// them; otherwise they stay until released).
func (d *Daemon) reconcile() {
	if d.mcfg.None {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), mapTimeout)
	defer cancel()
	active := map[uint32]bool{}
	for _, ns := range d.mp.Namespaces() {
		active[ns.NSID()] = true
		d.mu.Lock()
		mp, have := d.maps[ns.NSID()]
		d.mu.Unlock()
		if have {
			if mp.m != nil {
				d.resize(ctx, ns.NSID(), mp.m, ns.Size())
			}
			continue
		}
		m, err := d.mapOne(ctx, ns)
		d.mu.Lock()
		if err != nil {
			d.maps[ns.NSID()] = &mapping{err: err}
			d.log.Error("new namespace not mapped", "nsid", ns.NSID(), "error", err)
		} else {
			d.maps[ns.NSID()] = &mapping{m: m}
			d.log.Info("new namespace mapped", "nsid", ns.NSID(), "device", m.Path())
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for nsid, mp := range d.maps {
		if active[nsid] {
			continue
		}
		if mp.m != nil {
			if err := mp.m.Unmap(ctx); err != nil && !errors.Is(err, blockdev.ErrUnmapped) {
				d.log.Warn("removed namespace still in use; its I/O fails", "nsid", nsid, "device", mp.m.Path(), "error", err)
				continue
			}
			d.log.Info("removed namespace unmapped", "nsid", nsid, "device", mp.m.Path())
		}
		delete(d.maps, nsid)
	}
}
