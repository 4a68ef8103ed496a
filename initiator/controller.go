package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// State is a controller's connection state (Linux enum nvme_ctrl_state,
// simplified).
type State int32

// Controller states.
const (
	StateNew        State = iota // Connect in progress
	StateLive                    // connected: I/O flows
	StateResetting               // an error was seen; queues are being torn down
	StateConnecting              // reconnecting, every ReconnectDelay
	StateDeleting                // Disconnect in progress
	StateDead                    // CtrlLossTimeout expired, or the target refused the host for good
	StateDeleted                 // disconnected
)

// String returns the state's name as Linux shows it in sysfs.
func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateLive:
		return "live"
	case StateResetting:
		return "resetting"
	case StateConnecting:
		return "connecting"
	case StateDeleting:
		return "deleting"
	case StateDead:
		return "dead"
	case StateDeleted:
		return "deleted"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// assoc is one association with the controller: the admin queue, the I/O
// queues and what was learnt while connecting them. A reconnect builds a
// new one.
type assoc struct {
	gen    uint64
	ctx    context.Context // cancelled when the association is torn down
	cancel context.CancelFunc
	admin  *queue
	io     []atomic.Pointer[queue]
	cntlid uint16
	cap    fabrics.CAP
	vs     uint32
	cc     fabrics.CC
	id     nvme.IdentifyController
	sqsize int // I/O queue entries (1's based)
	// maxXfer is the largest I/O data transfer of one command in bytes
	// (MDTS and the transport); adminXfer the same for the admin queue.
	maxXfer   int
	adminXfer int
	kato      time.Duration
	tbkas     bool
	aen       uint32     // the AEN configuration enabled
	anatt     anattState // groups in the ANA change state (anatt.go)
	// missed lists the namespaces the rescan that made this association
	// (after a reset or reconnect) found changed, reported before the
	// first Asynchronous Event Request.
	missed   []uint32
	wg       sync.WaitGroup
	downOnce sync.Once
}

// Controller is a connection to an NVMe-oF controller: the admin queue,
// the I/O queues, keep-alive, asynchronous events and reconnection. Its
// methods are safe for concurrent use.
type Controller struct {
	dialer fabrics.Dialer
	addr   fabrics.Address
	opts   Options
	log    hclog.Logger

	state     atomic.Int32
	mu        sync.Mutex // guards the fields below and state transitions
	liveCh    chan struct{}
	endCh     chan struct{}
	endErr    error
	ended     bool
	closing   chan struct{}
	nextGen   uint64
	recovery  sync.WaitGroup
	disconned chan struct{}

	cur atomic.Pointer[assoc]
	rr  atomic.Uint32
	// plugged are the I/O queues Plug held (poll.go), under plugMu.
	plugMu   sync.Mutex
	plugged  []fabrics.Plugger
	compSeen atomic.Bool
	authTID  atomic.Uint32 // next DH-HMAC-CHAP transaction ID (ctrl->transaction)
	ff       failFast
	stats    hostStats // counters (stats.go)

	// Multipath (ana.go, multipath.go): the last ANA log read (nil
	// without ANA reporting), whether a re-read is pending after an ANA
	// status, the multipath layer's change hook, and whether the
	// controller is a path of a Multipath (its I/O then fails over
	// instead of waiting for this controller).
	ana        atomic.Pointer[anaInfo]
	anaPending atomic.Bool
	onChange   atomic.Pointer[func()]
	mpath      atomic.Bool

	scanMu sync.Mutex
	nsMu   sync.Mutex
	ns     map[uint32]*Namespace
}

// Connect opens an association with the controller of opts.SubsystemNQN at
// addr, as the Linux host does: the admin queue and its Connect, CAP, VS,
// CC.EN and CSTS.RDY, Identify Controller, Set Features Number of Queues,
// the I/O queues, the namespaces, asynchronous events and keep-alive.
func Connect(ctx context.Context, d fabrics.Dialer, addr fabrics.Address, opts Options) (*Controller, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		dialer:    d,
		addr:      addr,
		opts:      o,
		log:       o.Logger.Named("initiator").With("subnqn", o.SubsystemNQN, "addr", addr.String()),
		liveCh:    make(chan struct{}),
		endCh:     make(chan struct{}),
		closing:   make(chan struct{}),
		disconned: make(chan struct{}),
		ns:        map[uint32]*Namespace{},
	}
	a, err := c.establish(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.cur.Store(a)
	c.state.Store(int32(StateLive))
	close(c.liveCh)
	c.mu.Unlock()
	c.startBackground(a)
	if !o.isDiscovery() {
		if err := c.scan(ctx, a); err != nil {
			_ = c.Disconnect(context.Background())
			return nil, err
		}
		c.updateANA(ctx, a)
	}
	c.log.Info("connected", "cntlid", a.cntlid, "io_queues", len(a.io), "queue_size", a.sqsize, "kato", a.kato)
	return c, nil
}

// cmdWait returns the wait options of a normal command.
func (c *Controller) cmdWait() waitOpts { return waitOpts{timeout: c.opts.CommandTimeout} }

// setupWait returns the wait options of a command run while connecting:
// no Abort, a timeout fails the attempt.
func (c *Controller) setupWait() waitOpts {
	return waitOpts{timeout: c.opts.CommandTimeout, noAbort: true}
}

// dial opens one transport queue within the connect timeout. When that
// timeout, not ctx, ends the attempt, the error says so (a
// *ConnectTimeoutError, not ctx's deadline: "within 5s" printed after
// the 3 s of the connect timeout misled).
func (c *Controller) dial(ctx context.Context, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	hq, err := c.dialer.Dial(dctx, c.addr, p)
	if err != nil && ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
		return nil, &ConnectTimeoutError{QID: p.QID, After: c.opts.ConnectTimeout}
	}
	return hq, err
}

// establish builds a new association: admin queue, controller enable,
// Identify, I/O queues and AEN configuration.
func (c *Controller) establish(ctx context.Context) (*assoc, error) {
	o := &c.opts
	c.mu.Lock()
	c.nextGen++
	a := &assoc{gen: c.nextGen}
	c.mu.Unlock()
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if o.KeepAliveTimeout > 0 {
		a.kato = o.KeepAliveTimeout
	}

	hq, err := c.dial(ctx, fabrics.QueueParams{QID: 0, SQSize: AdminQueueSize, RQSize: AdminQueueSize})
	if err != nil {
		a.cancel()
		return nil, fmt.Errorf("initiator: connect %s: %w: %w", c.addr, ErrUnreachable, err)
	}
	a.admin = newQueue(c, a, 0, hq)
	ok := false
	defer func() {
		if !ok {
			c.teardown(a)
		}
	}()

	cntlid, err := c.connectQueue(ctx, a.admin, AdminQueueSize-1, nvme.KATOFromDuration(a.kato), fabrics.CntlIDDynamic)
	if err != nil {
		return nil, err
	}
	a.cntlid = cntlid
	v, err := c.propGet(ctx, a, fabrics.PropCAP)
	if err != nil {
		return nil, err
	}
	a.cap = fabrics.CAP(v)
	v, err = c.propGet(ctx, a, fabrics.PropVS)
	if err != nil {
		return nil, err
	}
	a.vs = uint32(v)
	if err := c.enable(ctx, a); err != nil {
		return nil, err
	}

	id := nvme.NewIdentifyController()
	if err := c.identify(ctx, a, nvme.CNSController, 0, id); err != nil {
		return nil, err
	}
	a.id = id
	a.tbkas = id.CTRATT()&nvme.CTRATTTBKAS != 0
	// nvme_init_identify's fabrics checks.
	if id.CNTLID() != a.cntlid {
		return nil, fmt.Errorf("initiator: connect %s: mismatching cntlid: Connect %d vs Identify %d", c.addr, a.cntlid, id.CNTLID())
	}
	if !o.isDiscovery() && id.KAS() == 0 {
		return nil, fmt.Errorf("initiator: connect %s: controller reports no keep-alive support (KAS 0), mandatory for fabrics", c.addr)
	}
	if c.addr.Transport == fabrics.TransportRDMA && id.SGLS()&nvme.SGLSKeyed == 0 {
		return nil, fmt.Errorf("initiator: connect %s: controller does not support keyed SGLs, mandatory for RDMA", c.addr)
	}
	mdts := int(id.MDTSBytes(4096 << a.cap.MPSMIN()))
	a.adminXfer = capXfer(mdts, a.admin.hq.MaxTransfer())
	if o.isDiscovery() {
		if t := id.CNTRLTYPE(); t != nvme.ControllerTypeNotReported && t != nvme.ControllerTypeDiscovery {
			c.log.Warn("discovery NQN answered by a controller that is not a discovery controller", "cntrltype", t)
		}
	} else {
		if err := c.setupIOQueues(ctx, a, mdts); err != nil {
			return nil, err
		}
	}
	c.configureAEN(ctx, a)
	ok = true
	return a, nil
}

// capXfer returns the smaller of two transfer limits, 0 meaning none.
func capXfer(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// setupIOQueues sizes, asks for and connects the I/O queues
// (nvme_rdma_setup_ctrl and nvme_rdma_alloc_io_queues).
func (c *Controller) setupIOQueues(ctx context.Context, a *assoc, mdts int) error {
	o := &c.opts
	a.sqsize = o.QueueSize
	if mqes := int(a.cap.MQES()) + 1; a.sqsize > mqes {
		c.log.Warn("queue size capped by CAP.MQES", "queue_size", a.sqsize, "mqes", mqes)
		a.sqsize = mqes
	}
	if maxcmd := int(a.id.MAXCMD()); maxcmd > 0 && a.sqsize > maxcmd {
		c.log.Warn("queue size capped by MAXCMD", "queue_size", a.sqsize, "maxcmd", maxcmd)
		a.sqsize = maxcmd
	}
	if a.sqsize < 2 {
		return fmt.Errorf("initiator: connect %s: controller allows I/O queues of %d entries", c.addr, a.sqsize)
	}
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminSetFeatures))
	nvme.FeaturesCommand{SQE: s}.SetFID(nvme.FeatNumberOfQueues)
	s.SetCDW11(nvme.MakeNumQueues(uint32(o.NrIOQueues), uint32(o.NrIOQueues)))
	cqe, err := c.adminExec(ctx, a, &cdw, nil, fabrics.DirNone, "Set Features (Number of Queues)", c.setupWait())
	if err != nil {
		return fmt.Errorf("initiator: connect %s: could not set queue count: %w", c.addr, err)
	}
	nsq, ncq := nvme.NumQueues(nvme.CQE(cqe[:]).DW0())
	nr := min(o.NrIOQueues, int(min(nsq, ncq)))
	if nr < o.NrIOQueues {
		c.log.Info("controller granted fewer I/O queues", "asked", o.NrIOQueues, "granted", nr)
	}
	if nr <= 0 {
		return fmt.Errorf("initiator: connect %s: controller granted no I/O queues", c.addr)
	}
	a.io = make([]atomic.Pointer[queue], nr)
	for i := range nr {
		q, err := c.connectIOQueue(ctx, a, uint16(i+1))
		if err != nil {
			return err
		}
		a.io[i].Store(q)
		if i == 0 {
			a.maxXfer = capXfer(mdts, q.hq.MaxTransfer())
		}
	}
	return nil
}

// connectIOQueue dials and connects I/O queue qid of a.
func (c *Controller) connectIOQueue(ctx context.Context, a *assoc, qid uint16) (*queue, error) {
	hq, err := c.dial(ctx, fabrics.QueueParams{QID: qid, SQSize: a.sqsize, RQSize: a.sqsize, CntlID: a.cntlid})
	if err != nil {
		return nil, fmt.Errorf("initiator: connect %s qid %d: %w: %w", c.addr, qid, ErrUnreachable, err)
	}
	if n := int(a.id.IOCCSZ())*16 - nvme.SQESize; n > 0 {
		hq.SetInCapsuleDataSize(n)
	}
	q := newQueue(c, a, qid, hq)
	if _, err := c.connectQueue(ctx, q, uint16(a.sqsize-1), 0, a.cntlid); err != nil {
		q.close()
		q.retire()
		return nil, err
	}
	return q, nil
}

// connectQueue sends the Fabrics Connect command on q
// (nvmf_connect_admin_queue, nvmf_connect_io_queue) and returns the
// controller ID.
func (c *Controller) connectQueue(ctx context.Context, q *queue, sqsize uint16, katoMS uint32, cntlid uint16) (uint16, error) {
	cmd := fabrics.NewCommand(fabrics.FCTypeConnect)
	cmd[1] = byte(nvme.PSDTSGLMPTRAddress) << 6
	cc := cmd.Connect()
	cc.SetRecFmt(0)
	cc.SetQID(q.qid)
	cc.SetSQSize(sqsize)
	cc.SetKATO(katoMS)
	data := fabrics.NewConnectData()
	data.SetHostID(c.opts.HostID)
	data.SetCntlID(cntlid)
	if err := data.SetSubNQN(c.opts.SubsystemNQN); err != nil {
		return 0, fmt.Errorf("initiator: subsystem NQN: %w", err)
	}
	if err := data.SetHostNQN(c.opts.HostNQN); err != nil {
		return 0, fmt.Errorf("initiator: host NQN: %w", err)
	}
	cqe, err := q.exec(ctx, (*[64]byte)(cmd), data, fabrics.DirHostToCtrl, "Connect", c.setupWait())
	var ce *CommandError
	if errors.As(err, &ce) {
		c := nvme.CQE(cqe[:])
		return 0, &ConnectError{
			Addr: q.c.addr, QID: q.qid, SubNQN: q.c.opts.SubsystemNQN, HostNQN: q.c.opts.HostNQN,
			Status: c.Status(),
			Param:  fabrics.ParseInvalidParam(c.DW0()),
			Err:    ce.Err,
		}
	}
	if err != nil {
		return 0, fmt.Errorf("initiator: connect %s qid %d: %w", c.addr, q.qid, err)
	}
	dw0 := nvme.CQE(cqe[:]).DW0()
	if ar := fabrics.ConnectResultAuthReq(dw0); ar != 0 {
		if err := c.authenticate(ctx, q, ar); err != nil {
			return 0, err
		}
	}
	return fabrics.ConnectResultCntlID(dw0), nil
}

// enable writes CC (EN, IOSQES 6, IOCQES 4, MPS, CSS) and waits for
// CSTS.RDY within CAP.TO (nvme_enable_ctrl).
func (c *Controller) enable(ctx context.Context, a *assoc) error {
	css := uint8(fabrics.CCCSSNVM)
	switch cs := a.cap.CSS(); {
	case cs&fabrics.CAPCSSNVM != 0:
	case cs&fabrics.CAPCSSIOCS != 0:
		css = fabrics.CCCSSAllIOCS
	case cs&fabrics.CAPCSSNoIOCS != 0:
		css = fabrics.CCCSSAdminOnly
	}
	// MPS 0 (4 KiB) as Linux; a controller whose minimum page is larger
	// gets its minimum (Fabrics moves no PRPs, so the value is moot).
	a.cc = fabrics.CC(0).WithCSS(css).WithMPS(a.cap.MPSMIN()).WithAMS(0).
		WithIOSQES(6).WithIOCQES(4).WithEN(true)
	if err := c.propSet(ctx, a, fabrics.PropCC, uint64(a.cc)); err != nil {
		return err
	}
	timeout := a.cap.Timeout() + 500*time.Millisecond
	return c.waitCSTS(ctx, a, timeout, "ready", func(s fabrics.CSTS) bool { return s.RDY() })
}

// waitCSTS polls CSTS until done(csts), CFS, or the timeout.
func (c *Controller) waitCSTS(ctx context.Context, a *assoc, timeout time.Duration, what string, done func(fabrics.CSTS) bool) error {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		v, err := c.propGet(ctx, a, fabrics.PropCSTS)
		if err != nil {
			return err
		}
		s := fabrics.CSTS(v)
		if uint32(s) == 0xffffffff {
			return fmt.Errorf("initiator: %s: CSTS reads all ones", c.addr)
		}
		if done(s) {
			return nil
		}
		if s.CFS() {
			return fmt.Errorf("initiator: %s: controller fatal status (CSTS %#x) waiting for %s", c.addr, uint32(s), what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("initiator: %s: controller not %s after %v (CSTS %#x): %w", c.addr, what, timeout, uint32(s), ErrTimeout)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// adminExec runs an admin command on association a.
func (c *Controller) adminExec(ctx context.Context, a *assoc, sqe *[64]byte, data []byte, dir fabrics.DataDirection, op string, wo waitOpts) ([16]byte, error) {
	sqe[1] = sqe[1]&^0xc0 | byte(nvme.PSDTSGLMPTRAddress)<<6
	if a.adminXfer > 0 && len(data) > a.adminXfer {
		return [16]byte{}, fmt.Errorf("initiator: %s: %d-byte transfer exceeds the %d-byte limit", op, len(data), a.adminXfer)
	}
	cqe, err := a.admin.exec(ctx, sqe, data, dir, op, wo)
	if c.log.IsTrace() { // every admin command, keep-alives included: off the I/O path
		c.log.Trace("admin command", "op", op, "cntlid", a.cntlid, "nsid", nvme.SQE(sqe[:]).NSID(),
			"cdw10", fmt.Sprintf("%#x", nvme.SQE(sqe[:]).CDW10()), "data_len", len(data),
			"dw0", fmt.Sprintf("%#x", nvme.CQE(cqe[:]).DW0()), "error", err)
	}
	return cqe, err
}

// propGet reads a property (Fabrics Property Get).
func (c *Controller) propGet(ctx context.Context, a *assoc, off uint32) (uint64, error) {
	size, err := fabrics.PropertySize(off)
	if err != nil {
		return 0, err
	}
	cmd := fabrics.NewCommand(fabrics.FCTypePropertyGet)
	pg := cmd.PropertyGet()
	pg.SetAttrib(fabrics.AttribForSize(size))
	pg.SetOffset(off)
	op := "Property Get " + fabrics.PropertyName(off)
	cqe, err := c.adminExec(ctx, a, (*[64]byte)(cmd), nil, fabrics.DirNone, op, c.cmdWait())
	if err != nil {
		return 0, err
	}
	q := nvme.CQE(cqe[:])
	v := fabrics.PropertyGetValue(q.DW0(), q.DW1())
	if size == 4 {
		v &= 0xffffffff
	}
	return v, nil
}

// propSet writes a property (Fabrics Property Set).
func (c *Controller) propSet(ctx context.Context, a *assoc, off uint32, v uint64) error {
	size, err := fabrics.PropertySize(off)
	if err != nil {
		return err
	}
	cmd := fabrics.NewCommand(fabrics.FCTypePropertySet)
	ps := cmd.PropertySet()
	ps.SetAttrib(fabrics.AttribForSize(size))
	ps.SetOffset(off)
	ps.SetValue(v)
	_, err = c.adminExec(ctx, a, (*[64]byte)(cmd), nil, fabrics.DirNone, "Property Set "+fabrics.PropertyName(off), c.cmdWait())
	return err
}

// identify runs an Identify command into buf (4096 bytes).
func (c *Controller) identify(ctx context.Context, a *assoc, cns uint8, nsid uint32, buf []byte) error {
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminIdentify))
	s.SetNSID(nsid)
	nvme.IdentifyCommand{SQE: s}.SetCNS(cns)
	_, err := c.adminExec(ctx, a, &cdw, buf, fabrics.DirCtrlToHost, fmt.Sprintf("Identify (CNS %#02x)", cns), c.cmdWait())
	return err
}

// getLogPage reads a log page into buf, in pieces no larger than the admin
// transfer limit (Log Page Offset), with RAE set on all but the last piece
// unless rae.
func (c *Controller) getLogPage(ctx context.Context, a *assoc, lid nvme.LogPageID, nsid uint32, lsp uint8, rae bool, buf []byte) error {
	return c.getLogPageAt(ctx, a, lid, nsid, lsp, rae, 0, buf)
}

// getLogPageAt is getLogPage from byte lpo of the page on.
func (c *Controller) getLogPageAt(ctx context.Context, a *assoc, lid nvme.LogPageID, nsid uint32, lsp uint8, rae bool, lpo uint64, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 {
		return fmt.Errorf("initiator: Get Log Page %v: length %d is not a non-zero multiple of 4", lid, len(buf))
	}
	chunk := len(buf)
	if a.adminXfer > 0 && chunk > a.adminXfer {
		chunk = a.adminXfer &^ 3
	}
	op := fmt.Sprintf("Get Log Page (%v)", lid)
	for off := 0; off < len(buf); off += chunk {
		end := min(off+chunk, len(buf))
		var cdw [64]byte
		s := nvme.SQE(cdw[:])
		s.SetOpcode(uint8(nvme.AdminGetLogPage))
		s.SetNSID(nsid)
		g := nvme.GetLogPageCommand{SQE: s}
		g.SetLID(lid)
		g.SetLSP(lsp)
		g.SetRAE(rae || end < len(buf))
		if err := g.SetLength(uint64(end - off)); err != nil {
			return fmt.Errorf("initiator: %s: %w", op, err)
		}
		g.SetLPO(lpo + uint64(off))
		if _, err := c.adminExec(ctx, a, &cdw, buf[off:end], fabrics.DirCtrlToHost, op, c.cmdWait()); err != nil {
			return err
		}
	}
	return nil
}

// setFeature runs Set Features and returns the completion's DW0.
func (c *Controller) setFeature(ctx context.Context, a *assoc, fid nvme.FeatureID, nsid, cdw11 uint32, save bool) (uint32, error) {
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminSetFeatures))
	s.SetNSID(nsid)
	f := nvme.FeaturesCommand{SQE: s}
	f.SetFID(fid)
	f.SetSV(save)
	s.SetCDW11(cdw11)
	cqe, err := c.adminExec(ctx, a, &cdw, nil, fabrics.DirNone, fmt.Sprintf("Set Features (%v)", fid), c.cmdWait())
	return nvme.CQE(cqe[:]).DW0(), err
}

// configureAEN enables the asynchronous events the host handles, as
// nvme_enable_aen (namespace attribute, firmware activation, ANA and
// discovery log changes, as far as OAES has them), and reads the Changed
// Namespace List once so that an event pending from before is cleared.
func (c *Controller) configureAEN(ctx context.Context, a *assoc) {
	const supported = nvme.AECNamespaceAttribute | nvme.AECFirmwareActivation | nvme.AECANAChange | nvme.AECDiscoveryLogPageChange
	aen := a.id.OAES() & supported
	if aen == 0 {
		return
	}
	if _, err := c.setFeature(ctx, a, nvme.FeatAsyncEventConfig, 0, aen, false); err != nil {
		c.log.Warn("failed to configure AEN", "cfg", fmt.Sprintf("%#x", aen), "error", err)
	}
	a.aen = aen
	if aen&nvme.AECNamespaceAttribute != 0 {
		buf := make([]byte, nvme.ChangedNSListLogSize)
		if err := c.getLogPage(ctx, a, nvme.LIDChangedNSList, nvme.NSIDAll, 0, false, buf); err != nil {
			c.log.Debug("reading the Changed Namespace List failed", "error", err)
		}
	}
}

// Disconnect shuts the controller down and closes the association: it
// stops keep-alive, closes the I/O queues, sets CC.SHN to normal shutdown
// and waits (ShutdownTimeout at most) for CSTS.SHST complete, then closes
// the admin queue (nvme_rdma_shutdown_ctrl). Outstanding and later I/O
// fails with ErrClosed.
func (c *Controller) Disconnect(ctx context.Context) error {
	c.mu.Lock()
	st := State(c.state.Load())
	select {
	case <-c.closing:
		c.mu.Unlock()
		<-c.disconned
		return nil
	default:
	}
	close(c.closing)
	if !c.ended {
		c.state.Store(int32(StateDeleting))
	}
	a := c.cur.Load()
	c.mu.Unlock()
	defer close(c.disconned)
	if a != nil {
		a.stopANATT() // no ANATT reset of a controller being disconnected
	}
	c.recovery.Wait()
	var err error
	if st == StateLive && a != nil {
		a.cancel()
		a.wg.Wait()
		for i := range a.io {
			if q := a.io[i].Load(); q != nil {
				q.close()
			}
		}
		err = c.shutdown(ctx, a)
		c.teardown(a)
	} else if a != nil {
		c.teardown(a)
	}
	c.end(StateDeleted, fmt.Errorf("initiator: %s: %w", c.addr, ErrClosed))
	c.nsMu.Lock()
	for id, ns := range c.ns {
		ns.removed.Store(true)
		delete(c.ns, id)
	}
	c.nsMu.Unlock()
	c.log.Info("disconnected")
	return err
}

// Close is Disconnect without a context, for io.Closer.
func (c *Controller) Close() error { return c.Disconnect(context.Background()) }

// shutdown writes CC.SHN = normal and waits for CSTS.SHST = complete.
func (c *Controller) shutdown(ctx context.Context, a *assoc) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ShutdownTimeout)
	defer cancel()
	if err := c.propSet(ctx, a, fabrics.PropCC, uint64(a.cc.WithSHN(fabrics.SHNNormal))); err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	err := c.waitCSTS(ctx, a, c.opts.ShutdownTimeout, "shut down", func(s fabrics.CSTS) bool { return s.SHST() == fabrics.SHSTComplete })
	if err != nil {
		return fmt.Errorf("initiator: shutdown: %w", err)
	}
	return nil
}

// State returns the controller's connection state.
func (c *Controller) State() State { return State(c.state.Load()) }

// Address returns the address the controller was connected at.
func (c *Controller) Address() fabrics.Address { return c.addr }

// SubsystemNQN returns the NQN of the controller's subsystem.
func (c *Controller) SubsystemNQN() string { return c.opts.SubsystemNQN }

// HostNQN returns the NQN the host connected with.
func (c *Controller) HostNQN() string { return c.opts.HostNQN }

// HostID returns the host identifier the host connected with.
func (c *Controller) HostID() [16]byte { return c.opts.HostID }

// CntlID returns the controller ID of the current association.
func (c *Controller) CntlID() uint16 { return c.cur.Load().cntlid }

// CAP returns the Controller Capabilities read while connecting.
func (c *Controller) CAP() fabrics.CAP { return c.cur.Load().cap }

// VS returns the controller's version (VS property).
func (c *Controller) VS() uint32 { return c.cur.Load().vs }

// IdentifyData returns a copy of the Identify Controller data read while
// connecting.
func (c *Controller) IdentifyData() nvme.IdentifyController {
	return append(nvme.IdentifyController(nil), c.cur.Load().id...)
}

// NumIOQueues returns the number of connected I/O queues.
func (c *Controller) NumIOQueues() int { return len(c.cur.Load().io) }

// QueueSize returns the I/O queue size in entries.
func (c *Controller) QueueSize() int { return c.cur.Load().sqsize }

// MaxTransfer returns the largest data transfer of one I/O command in
// bytes (MDTS and the transport's limit), 0 for no limit.
func (c *Controller) MaxTransfer() int { return c.cur.Load().maxXfer }

// KeepAliveTimeout returns the keep-alive timeout in use (0: none).
func (c *Controller) KeepAliveTimeout() time.Duration { return c.cur.Load().kato }
