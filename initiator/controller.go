package initiator

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// startBackground starts keep-alive and the Asynchronous Event Request of
// association a.
func (c *Controller) startBackground(a *assoc) {
	if a.kato > 0 {
		a.wg.Add(1)
		go c.keepAlive(a)
	}
	if a.aen != 0 {
		if s := a.admin.tryGet(); s != nil {
			a.wg.Add(1)
			go c.asyncEvents(a, s) // reports a.missed first
			return
		}
	}
	if len(a.missed) > 0 {
		c.reportMissed(a.missed)
	}
}

// keepAlive sends Keep Alive every KATO/2 (KATO/4 with Traffic Based Keep
// Alive, skipping the command when other completions were seen), as
// nvme_keep_alive_work. A failure or a timeout of KATO starts recovery.
func (c *Controller) keepAlive(a *assoc) {
	defer a.wg.Done()
	period := a.kato / 2
	if a.tbkas {
		period /= 2
	}
	t := time.NewTimer(period)
	defer t.Stop()
	var cdw [64]byte
	nvme.SQE(cdw[:]).SetOpcode(uint8(nvme.AdminKeepAlive))
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if a.tbkas && c.compSeen.Swap(false) {
			t.Reset(period)
			continue
		}
		start := time.Now()
		_, err := c.adminExec(a.ctx, a, &cdw, nil, fabrics.DirNone, "Keep Alive", waitOpts{timeout: a.kato, noAbort: true})
		if a.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.startRecovery(a, fmt.Errorf("keep-alive failed: %w", err))
			return
		}
		c.compSeen.Store(false)
		next := period - time.Since(start)
		if next < 0 {
			c.log.Warn("long keep-alive RTT", "rtt", time.Since(start))
			next = 0
		}
		t.Reset(next)
	}
}

// asyncEvents keeps one Asynchronous Event Request outstanding on slot s
// and handles the events it reports.
func (c *Controller) asyncEvents(a *assoc, s *cmdSlot) {
	defer a.wg.Done()
	var sqe [64]byte
	sq := nvme.SQE(sqe[:])
	sq.SetOpcode(uint8(nvme.AdminAsyncEventRequest))
	sq.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
	if len(a.missed) > 0 {
		c.reportMissed(a.missed)
	}
	for {
		// No timeout: the controller answers when it has an event.
		s.prep(&sqe, nil, fabrics.DirNone, "Asynchronous Event Request", waitOpts{})
		if err := s.submit(); err != nil {
			return
		}
		if err := s.wait(a.ctx.Done(), a.ctx.Err); err != nil {
			return // abandoned: the queue's teardown frees the slot
		}
		if s.cmd.Err != nil {
			a.admin.put(s)
			return
		}
		cqe := nvme.CQE(s.cmd.CQE[:])
		if !cqe.Status().Success() {
			// nvme_complete_async_event: no new request after an error
			// (e.g. Abort SQ Deletion or AER limit exceeded).
			c.log.Debug("asynchronous event request failed", "status", cqe.Status())
			a.admin.put(s)
			return
		}
		c.handleEvent(a, nvme.AsyncEvent(cqe.DW0())) // the slot stays ours for the next request
	}
}

// handleEvent reacts to one asynchronous event (nvme_handle_aen_notice):
// a namespace attribute change re-reads the Changed Namespace List (which
// clears the event) and the namespaces. The user's callback runs last.
func (c *Controller) handleEvent(a *assoc, ev nvme.AsyncEvent) {
	c.log.Info("asynchronous event", "event", ev.String())
	out := AsyncEvent{Event: ev}
	if ev.Type() == nvme.AsyncEventNotice && ev.Info() == nvme.AsyncNoticeNamespaceChanged {
		buf := make([]byte, nvme.ChangedNSListLogSize)
		if err := c.getLogPage(a.ctx, a, nvme.LIDChangedNSList, nvme.NSIDAll, 0, false, buf); err != nil {
			c.log.Warn("reading the Changed Namespace List failed", "error", err)
		} else if ids, overflow, err := nvme.DecodeChangedNSList(buf); err == nil && !overflow {
			out.ChangedNSIDs = ids
		}
		if err := c.scan(a.ctx, a); err != nil {
			c.log.Warn("namespace rescan failed", "error", err)
		}
		c.notifyChange()
	}
	if ev.Type() == nvme.AsyncEventNotice && ev.Info() == nvme.AsyncNoticeANAChange {
		// nvme_handle_aen_notice: re-read the ANA log (which, read
		// without RAE, also clears the event).
		c.updateANA(a.ctx, a)
	}
	if f := c.opts.OnAsyncEvent; f != nil {
		f(out)
	}
}

// reportMissed tells the user of namespace changes a rescan after a reset
// or reconnect found, as the Namespace Attribute Changed notice the
// controller would have sent (AsyncEvent.Rescan set).
func (c *Controller) reportMissed(nsids []uint32) {
	c.log.Info("namespaces changed while disconnected", "nsids", nsids)
	c.notifyChange()
	if f := c.opts.OnAsyncEvent; f != nil {
		f(AsyncEvent{Event: nvme.AENNamespaceChanged, ChangedNSIDs: nsids, Rescan: true})
	}
}

// abort sends Abort for command cid of queue qid and reports whether the
// controller aborted it (DW0 bit 0 clear; Linux nvmet never does).
func (c *Controller) abort(a *assoc, qid, cid uint16, timeout time.Duration) (bool, error) {
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminAbort))
	ab := nvme.AbortCommand{SQE: s}
	ab.SetSQID(qid)
	ab.SetAbortCID(cid)
	cqe, err := c.adminExec(a.ctx, a, &cdw, nil, fabrics.DirNone, "Abort", waitOpts{timeout: timeout, noAbort: true})
	if err != nil {
		return false, err
	}
	return nvme.CQE(cqe[:]).DW0()&1 == 0, nil
}

// teardown stops association a's background work and closes its queues.
func (c *Controller) teardown(a *assoc) {
	a.stopANATT()
	a.downOnce.Do(func() {
		a.cancel()
		// The I/O queues close side by side, then the admin queue (as
		// nvme_rdma_teardown_io_queues comes first): a transport's close
		// may wait for a dead peer (fabrics/rdma: up to 5 s for the DREP)
		// before it fails the commands in flight, which a multipath path
		// then sends on another path. One after the other, the last
		// queue's commands waited that long once per queue (issue 24).
		var wg sync.WaitGroup
		for i := range a.io {
			if q := a.io[i].Load(); q != nil {
				wg.Go(func() {
					q.close()
					q.retire()
				})
			}
		}
		wg.Wait()
		if a.admin != nil {
			a.admin.close()
			a.admin.retire()
		}
	})
}

// startRecovery moves a live controller whose association a failed to
// resetting and starts reconnecting (nvme_rdma_error_recovery). It is
// called from transport goroutines and must not block.
func (c *Controller) startRecovery(a *assoc, reason error) {
	c.mu.Lock()
	if c.cur.Load() != a || State(c.state.Load()) != StateLive {
		c.mu.Unlock()
		return
	}
	c.leaveLive()
	c.mu.Unlock()
	c.stats.recoveries.Add(1)
	c.log.Error("controller failed, reconnecting", "reason", reason, "reconnect_delay", c.opts.ReconnectDelay)
	go c.reconnect(a)
}

// reconnect tears association a down and reconnects every ReconnectDelay
// until it succeeds, CtrlLossTimeout expires (nvmf_should_reconnect), the
// target refuses the host with DNR, or Disconnect is called.
func (c *Controller) reconnect(a *assoc) {
	defer c.recovery.Done()
	c.teardown(a)
	a.wg.Wait()
	maxRec := c.opts.maxReconnects()
	t := time.NewTimer(c.opts.ReconnectDelay)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-c.closing:
			return
		case <-t.C:
		}
		c.state.CompareAndSwap(int32(StateResetting), int32(StateConnecting))
		na, err := c.reassociate(context.Background(), "reconnect")
		if err == nil {
			if !c.goLive(na) {
				return
			}
			c.stats.reconnects.Add(1)
			c.log.Info("reconnected", "attempt", n, "cntlid", na.cntlid, "io_queues", len(na.io))
			return
		}
		select {
		case <-c.closing:
			return
		default:
		}
		var ce *ConnectError
		permanent := errors.As(err, &ce) && ce.Err.DNR
		c.stats.recFails.Add(1)
		c.log.Warn("reconnect failed", "attempt", n, "max", maxRec, "error", err)
		if permanent || (maxRec >= 0 && n >= maxRec) {
			c.end(StateDead, fmt.Errorf("initiator: %s: %w (last error: %v)", c.addr, ErrControllerLost, err))
			c.log.Error("giving up on the controller", "attempts", n)
			return
		}
		t.Reset(c.opts.ReconnectDelay)
	}
}

// end moves the controller to a final state and releases every waiter.
func (c *Controller) end(s State, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	c.state.Store(int32(s))
	c.endErr = err
	close(c.endCh)
	c.disarmFailFast()
	c.notifyChange()
}

// waitLive waits until the controller is live, or returns why it never
// will be.
func (c *Controller) waitLive(ctxDone <-chan struct{}, ctxErr func() error) error {
	for {
		if State(c.state.Load()) == StateLive {
			return nil
		}
		c.mu.Lock()
		st, live, end, endErr := State(c.state.Load()), c.liveCh, c.endCh, c.endErr
		c.mu.Unlock()
		switch st {
		case StateLive:
			return nil
		case StateDead, StateDeleted:
			return endErr
		case StateDeleting:
			return fmt.Errorf("initiator: %s: %w", c.addr, ErrClosed)
		}
		failed, expired := c.failFastState()
		if expired {
			return fmt.Errorf("initiator: %s: %w", c.addr, ErrFastIOFail)
		}
		select {
		case <-failed:
		case <-live:
		case <-end:
		case <-c.closing:
		case <-ctxDone:
			return ctxErr()
		}
	}
}

// liveAssoc returns the current association once the controller is live.
func (c *Controller) liveAssoc(ctx context.Context) (*assoc, error) {
	if err := c.waitLive(ctx.Done(), ctx.Err); err != nil {
		return nil, err
	}
	return c.cur.Load(), nil
}

// resetIOQueue closes I/O queue q at once (so that no late completion
// touches the buffers of commands that timed out) and connects a new queue
// with the same QID in its place in the background; if that fails the
// whole association is recovered.
func (c *Controller) resetIOQueue(q *queue, reason error) {
	a := q.a
	idx := int(q.qid) - 1
	if idx < 0 || idx >= len(a.io) || a.io[idx].Load() != q || a.ctx.Err() != nil {
		return
	}
	if c.cur.Load() != a || State(c.state.Load()) != StateLive {
		return // the association is being recovered: its teardown closes q
	}
	if !q.resetting.CompareAndSwap(false, true) {
		return
	}
	c.stats.queueResets.Add(1)
	c.log.Warn("resetting I/O queue", "qid", q.qid, "reason", reason)
	q.close()
	go c.replaceIOQueue(a, idx, q)
}

// replaceIOQueue connects a new I/O queue in the place of q, which has
// been closed.
func (c *Controller) replaceIOQueue(a *assoc, idx int, q *queue) {
	var nq *queue
	var err error
	for attempt := range 3 {
		ctx, cancel := context.WithTimeout(a.ctx, c.opts.CommandTimeout)
		nq, err = c.connectIOQueue(ctx, a, q.qid)
		cancel()
		if err == nil || a.ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
	if err != nil {
		c.startRecovery(a, fmt.Errorf("reset of queue %d failed: %w", q.qid, err))
		q.retire()
		return
	}
	a.io[idx].Store(nq)
	q.retire()
	if a.ctx.Err() != nil {
		nq.close()
		nq.retire()
		return
	}
	c.log.Info("I/O queue reconnected", "qid", q.qid)
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

// Namespace returns the handle of an active namespace.
func (c *Controller) Namespace(nsid uint32) (*Namespace, error) {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	ns := c.ns[nsid]
	if ns == nil {
		return nil, fmt.Errorf("initiator: %s: namespace %d: %w", c.opts.SubsystemNQN, nsid, ErrNoNamespace)
	}
	return ns, nil
}

// Namespaces returns the active namespaces in NSID order.
func (c *Controller) Namespaces() []*Namespace {
	c.nsMu.Lock()
	out := make([]*Namespace, 0, len(c.ns))
	for _, ns := range c.ns {
		out = append(out, ns)
	}
	c.nsMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].nsid < out[j].nsid })
	return out
}

// Rescan re-reads the active namespace list and every namespace.
func (c *Controller) Rescan(ctx context.Context) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.scan(ctx, a)
}

// AdminCommand runs an admin command (a passthrough): the SQE as given
// (the transport sets CID and SGL) with data moving in direction dir. It
// returns the completion; a status other than success also comes back as
// a *CommandError.
func (c *Controller) AdminCommand(ctx context.Context, sqe [64]byte, data []byte, dir fabrics.DataDirection) ([16]byte, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	op := nvme.AdminOpcode(sqe[0]).String()
	return c.adminExec(ctx, a, &sqe, data, dir, op, c.cmdWait())
}

// IdentifyController reads the Identify Controller data.
func (c *Controller) IdentifyController(ctx context.Context) (nvme.IdentifyController, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	id := nvme.NewIdentifyController()
	if err := c.identify(ctx, a, nvme.CNSController, 0, id); err != nil {
		return nil, err
	}
	return id, nil
}

// IdentifyNamespace reads the Identify Namespace data of nsid.
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (nvme.IdentifyNamespace, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	id := nvme.NewIdentifyNamespace()
	if err := c.identify(ctx, a, nvme.CNSNamespace, nsid, id); err != nil {
		return nil, err
	}
	return id, nil
}

// GetLogPage reads log page lid of namespace nsid (nvme.NSIDAll for the
// controller) into buf, whose length must be a multiple of 4; a page
// larger than the transfer limit is read in pieces.
func (c *Controller) GetLogPage(ctx context.Context, lid nvme.LogPageID, nsid uint32, buf []byte) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.getLogPage(ctx, a, lid, nsid, 0, false, buf)
}

// SMARTLog reads the controller's SMART / Health Information log page.
func (c *Controller) SMARTLog(ctx context.Context) (nvme.SMARTLog, error) {
	buf := make([]byte, nvme.SMARTLogSize)
	if err := c.GetLogPage(ctx, nvme.LIDSMART, nvme.NSIDAll, buf); err != nil {
		return nil, err
	}
	return nvme.ParseSMARTLog(buf)
}

// GetFeature reads the current value of feature fid (Get Features, SEL
// current, CDW11 as given) and returns the completion's DW0.
func (c *Controller) GetFeature(ctx context.Context, fid nvme.FeatureID, cdw11 uint32) (uint32, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminGetFeatures))
	nvme.FeaturesCommand{SQE: s}.SetFID(fid)
	s.SetCDW11(cdw11)
	cqe, err := c.adminExec(ctx, a, &cdw, nil, fabrics.DirNone, fmt.Sprintf("Get Features (%v)", fid), c.cmdWait())
	return nvme.CQE(cqe[:]).DW0(), err
}

// SetFeature sets feature fid to cdw11 (saved across resets if save) and
// returns the completion's DW0.
func (c *Controller) SetFeature(ctx context.Context, fid nvme.FeatureID, cdw11 uint32, save bool) (uint32, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	return c.setFeature(ctx, a, fid, 0, cdw11, save)
}

// PropertyGet reads the controller property at offset off
// (fabrics.PropCAP, PropVS, PropCC, PropCSTS).
func (c *Controller) PropertyGet(ctx context.Context, off uint32) (uint64, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	return c.propGet(ctx, a, off)
}

// PropertySet writes the controller property at offset off.
func (c *Controller) PropertySet(ctx context.Context, off uint32, v uint64) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.propSet(ctx, a, off, v)
}
