package target

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Persistent reservations (NVMe Base 2.0 §8.1.22; Linux nvmet pr.c).
// Registrants are hosts, named by the host identifier of their Connect:
// every controller of one host shares its registration and reservation.
// The state lives in memory, per namespace and per nvmetd process, and
// in the namespace's reservation file while the host asked for Persist
// Through Power Loss (reservation_ptpl.go); two gateways exporting one
// namespace do not share it (docs/reservations.md).

// rescapSupported is RESCAP: the six types and IEKEY as NVMe 1.3 defines
// it; PTPL is added for namespaces with a reservation file.
const rescapSupported = nvme.RESCAPWriteExclusive | nvme.RESCAPExclusiveAccess |
	nvme.RESCAPWriteExclusiveRegOnly | nvme.RESCAPExclusiveAccessRegOnly |
	nvme.RESCAPWriteExclusiveAllRegs | nvme.RESCAPExclusiveAccessAllRegs | nvme.RESCAPIEKEY13

// resvLogSlots bounds a controller's queue of reservation notifications
// (Linux NVMET_PR_LOG_QUEUE_SIZE); older ones beyond it are lost and
// counted.
const resvLogSlots = 64

// registrant is a host registered with a namespace.
type registrant struct {
	host [16]byte
	key  uint64
	nqn  string // the host NQN that registered: the Host ID is bound to it (admission.go)
}

// resvView is an immutable snapshot of a held reservation, read without
// locks by the I/O path.
type resvView struct {
	rtype  nvme.ReservationType
	holder [16]byte   // the holder (All Registrants types: any registrant)
	regs   [][16]byte // every registrant's host identifier
}

// reservations is the reservation state of a namespace.
type reservations struct {
	mu     sync.Mutex
	gen    uint32       // generation: bumped by registration changes and preemptions
	regs   []registrant // in registration order
	held   bool
	holder [16]byte
	rtype  nvme.ReservationType
	view   atomic.Pointer[resvView] // nil: no reservation held

	// Persist Through Power Loss (reservation_ptpl.go): file is where
	// the state is kept ("" : PTPL not supported), ptpl whether the host
	// turned it on, seq the last snapshot's number (all under mu); saved
	// the last written one (under saveMu).
	file   string
	ptpl   bool
	seq    uint64
	saveMu sync.Mutex
	saved  uint64
}

// rescap returns the namespace's Reservation Capabilities.
func (p *reservations) rescap() uint8 {
	if p.file != "" {
		return rescapSupported | nvme.RESCAPPTPL
	}
	return rescapSupported
}

// resvEvent is a notification to the controllers of one host.
type resvEvent struct {
	host [16]byte
	typ  nvme.ResvNotificationType
}

// isReadCmd and isWriteCmd are the command groups of the reservation
// access matrix (NVMe Base 2.0, "Command Behavior in the Presence of a
// Reservation").
func isReadCmd(op nvme.IOOpcode) bool {
	return op == nvme.IORead || op == nvme.IOCompare || op == nvme.IOVerify
}

func isWriteCmd(op nvme.IOOpcode) bool {
	switch op {
	case nvme.IOWrite, nvme.IOWriteZeroes, nvme.IODatasetManagement, nvme.IOFlush:
		return true
	}
	return false
}

// allows reports whether host may run op on the namespace. It allocates
// nothing and takes no lock.
func (p *reservations) allows(host [16]byte, op nvme.IOOpcode) bool {
	v := p.view.Load()
	if v == nil || v.holder == host {
		return true
	}
	read, write := isReadCmd(op), isWriteCmd(op)
	if !read && !write {
		return true
	}
	switch v.rtype {
	case nvme.ResvWriteExclusive:
		return !write
	case nvme.ResvExclusiveAccess:
		return false
	case nvme.ResvWriteExclusiveRegOnly, nvme.ResvWriteExclusiveAllRegs:
		return !write || v.registered(host)
	case nvme.ResvExclusiveAccessRegOnly, nvme.ResvExclusiveAccessAllRegs:
		return v.registered(host)
	}
	return true
}

func (v *resvView) registered(host [16]byte) bool {
	for _, h := range v.regs {
		if h == host {
			return true
		}
	}
	return false
}

// publishLocked refreshes the snapshot the I/O path reads (p.mu held).
func (p *reservations) publishLocked() {
	if !p.held {
		p.view.Store(nil)
		return
	}
	v := &resvView{rtype: p.rtype, holder: p.holder, regs: make([][16]byte, len(p.regs))}
	for i, r := range p.regs {
		v.regs[i] = r.host
	}
	p.view.Store(v)
}

// find returns the index of host's registration, or -1.
func (p *reservations) find(host [16]byte) int {
	for i, r := range p.regs {
		if r.host == host {
			return i
		}
	}
	return -1
}

// isHolderLocked reports whether host holds the reservation.
func (p *reservations) isHolderLocked(host [16]byte) bool {
	if !p.held {
		return false
	}
	if p.rtype.AllRegistrants() {
		return p.find(host) >= 0
	}
	return p.holder == host
}

// releasedLocked queues Reservation Released for every registrant but
// host (a Registrants Only or All Registrants reservation ended or
// changed type; Linux nvmet_pr_resv_released).
func (p *reservations) releasedLocked(host [16]byte, ev []resvEvent) []resvEvent {
	for _, r := range p.regs {
		if r.host != host {
			ev = append(ev, resvEvent{r.host, nvme.ResvNotifReservationReleased})
		}
	}
	return ev
}

// unregisterLocked removes registration i; a holder leaving ends its
// reservation, except of an All Registrants type while registrants
// remain (Linux nvmet_pr_unregister_one).
func (p *reservations) unregisterLocked(i int, ev []resvEvent) []resvEvent {
	r := p.regs[i]
	p.regs = append(p.regs[:i], p.regs[i+1:]...)
	if !p.held || p.holder != r.host && !p.rtype.AllRegistrants() {
		return ev
	}
	if p.rtype.AllRegistrants() {
		if len(p.regs) == 0 {
			p.held = false
		} else if p.holder == r.host {
			p.holder = p.regs[0].host
		}
		return ev
	}
	p.held = false
	if p.rtype.RegistrantsOnly() {
		ev = p.releasedLocked(r.host, ev)
	}
	return ev
}

// unregisterKeyLocked removes every registrant with key (but except,
// when skipSelf), sending Registration Preempted to each other host. It
// reports whether one matched.
func (p *reservations) unregisterKeyLocked(key uint64, self [16]byte, skipSelf bool, ev []resvEvent) ([]resvEvent, bool) {
	found := false
	for i := 0; i < len(p.regs); {
		r := p.regs[i]
		if r.key != key || skipSelf && r.host == self {
			i++
			continue
		}
		found = true
		ev = p.unregisterLocked(i, ev)
		if r.host != self {
			ev = append(ev, resvEvent{r.host, nvme.ResvNotifRegistrationPreempted})
		}
	}
	return ev, found
}

// ownerOf returns the NQN a registrant with Host ID host registered with,
// when it is not nqn (admission.go).
func (p *reservations) ownerOf(host [16]byte, nqn string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.find(host); i >= 0 && p.regs[i].nqn != "" && p.regs[i].nqn != nqn {
		return p.regs[i].nqn, true
	}
	return "", false
}

// register runs Reservation Register for host, whose NQN is nqn.
func (p *reservations) register(host [16]byte, nqn string, cmd nvme.ReservationCommand, d nvme.ReservationData) (nvme.Error, uint16, []resvEvent) {
	cptpl := cmd.CPTPL()
	if cptpl == 1 || cptpl == nvme.CPTPLSet && p.file == "" { // 01b reserved; 11b needs a file
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.find(host)
	var ev []resvEvent
	switch cmd.Action() {
	case nvme.ResvRegister:
		if i >= 0 {
			// Registering again with the same key is a no-op (IEKEY is
			// ignored for this action).
			if p.regs[i].key != d.NRKEY() {
				return dnr(nvme.StatusReservationConflict), noLoc, nil
			}
			if p.regs[i].nqn == "" {
				p.regs[i].nqn = nqn // restored from a file that did not keep it
			}
		} else {
			p.regs = append(p.regs, registrant{host: host, key: d.NRKEY(), nqn: nqn})
		}
	case nvme.ResvUnregister:
		if i < 0 || !cmd.IEKEY() && p.regs[i].key != d.CRKEY() {
			return dnr(nvme.StatusReservationConflict), noLoc, nil
		}
		ev = p.unregisterLocked(i, ev)
	case nvme.ResvReplace:
		if i < 0 || !cmd.IEKEY() && p.regs[i].key != d.CRKEY() {
			return dnr(nvme.StatusReservationConflict), noLoc, nil
		}
		p.regs[i].key = d.NRKEY()
	default:
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	if cptpl != nvme.CPTPLNoChange {
		p.setPTPLLocked(cptpl == nvme.CPTPLSet)
	}
	p.gen++
	p.publishLocked()
	return nvme.Error{}, noLoc, ev
}

// acquire runs Reservation Acquire for host. Preempt and Abort preempts
// and aborts nothing: commands already started run to completion.
func (p *reservations) acquire(host [16]byte, cmd nvme.ReservationCommand, d nvme.ReservationData) (nvme.Error, uint16, []resvEvent) {
	rtype := cmd.RTYPE()
	if cmd.IEKEY() || !rtype.Valid() {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	act := cmd.Action()
	if act > nvme.ResvPreemptAndAbort {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.find(host)
	if i < 0 || p.regs[i].key != d.CRKEY() {
		return dnr(nvme.StatusReservationConflict), noLoc, nil
	}
	if act == nvme.ResvAcquire {
		switch {
		case !p.held:
			p.held, p.holder, p.rtype = true, host, rtype
			p.publishLocked()
		case !p.isHolderLocked(host) || p.rtype != rtype:
			return dnr(nvme.StatusReservationConflict), noLoc, nil
		}
		return nvme.Error{}, noLoc, nil
	}
	s, loc, ev := p.preemptLocked(host, rtype, d.PRKEY())
	if s.Status.Success() {
		p.gen++
	}
	p.publishLocked()
	return s, loc, ev
}

// preemptLocked is the Preempt action (Linux nvmet_pr_preempt).
func (p *reservations) preemptLocked(host [16]byte, rtype nvme.ReservationType, prkey uint64) (nvme.Error, uint16, []resvEvent) {
	var ev []resvEvent
	conflict := dnr(nvme.StatusReservationConflict)
	if !p.held {
		ev, found := p.unregisterKeyLocked(prkey, host, false, ev)
		if !found {
			return conflict, noLoc, nil
		}
		return nvme.Error{}, noLoc, ev
	}
	if p.rtype.AllRegistrants() {
		if prkey == 0 {
			// Take the reservation first, then drop everyone else.
			p.holder, p.rtype = host, rtype
			for i := 0; i < len(p.regs); {
				if r := p.regs[i]; r.host != host {
					ev = p.unregisterLocked(i, ev)
					ev = append(ev, resvEvent{r.host, nvme.ResvNotifRegistrationPreempted})
					continue
				}
				i++
			}
			return nvme.Error{}, noLoc, ev
		}
		ev, found := p.unregisterKeyLocked(prkey, host, false, ev)
		if !found {
			return conflict, noLoc, nil
		}
		return nvme.Error{}, noLoc, ev
	}
	if p.holder == host {
		// The holder changing its own reservation's type.
		old := p.rtype
		p.rtype = rtype
		if old != rtype {
			ev = p.releasedLocked(host, ev)
		}
		return nvme.Error{}, noLoc, ev
	}
	hk := p.regs[p.find(p.holder)].key
	if prkey == hk {
		old := p.rtype
		p.holder, p.rtype = host, rtype
		ev, _ = p.unregisterKeyLocked(prkey, host, true, ev)
		if old != rtype {
			ev = p.releasedLocked(host, ev)
		}
		return nvme.Error{}, noLoc, ev
	}
	if prkey == 0 {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	ev, found := p.unregisterKeyLocked(prkey, host, false, ev)
	if !found {
		return conflict, noLoc, nil
	}
	return nvme.Error{}, noLoc, ev
}

// release runs Reservation Release for host.
func (p *reservations) release(host [16]byte, cmd nvme.ReservationCommand, d nvme.ReservationData) (nvme.Error, uint16, []resvEvent) {
	if cmd.IEKEY() {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	act := cmd.Action()
	if act > nvme.ResvClear {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.find(host)
	if i < 0 || p.regs[i].key != d.CRKEY() {
		return dnr(nvme.StatusReservationConflict), noLoc, nil
	}
	var ev []resvEvent
	if act == nvme.ResvClear {
		for _, r := range p.regs {
			if r.host != host {
				ev = append(ev, resvEvent{r.host, nvme.ResvNotifReservationPreempted})
			}
		}
		p.regs = p.regs[:0]
		p.held = false
		p.gen++
		p.publishLocked()
		return nvme.Error{}, noLoc, ev
	}
	if !p.isHolderLocked(host) {
		return nvme.Error{}, noLoc, nil // nothing to release: success
	}
	if p.rtype != cmd.RTYPE() {
		return dnr(nvme.StatusInvalidField), locCDW10, nil
	}
	p.held = false
	if p.rtype != nvme.ResvWriteExclusive && p.rtype != nvme.ResvExclusiveAccess {
		ev = p.releasedLocked(host, ev)
	}
	p.publishLocked()
	return nvme.Error{}, noLoc, ev
}

// status returns the Reservation Status data structure.
func (p *reservations) status() nvme.ReservationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := nvme.ReservationStatus{Generation: p.gen, Registrants: len(p.regs), PTPLS: p.ptpl}
	if p.held {
		s.Type = p.rtype
	}
	for _, r := range p.regs {
		s.Controllers = append(s.Controllers, nvme.RegisteredController{
			CNTLID: 0xffff, // dynamic controller model: the host, not one controller
			Holder: p.isHolderLocked(r.host),
			HostID: r.host,
			RKEY:   r.key,
		})
	}
	return s
}

// reservationCommand runs a reservation command on ns; it works on memory
// only and never blocks.
func (c *controller) reservationCommand(q *queue, r *fabrics.Request, ns *namespace, op nvme.IOOpcode) {
	p := ns.pr
	sqe := nvme.SQE(r.SQE[:])
	if op == nvme.IOReservationReport {
		c.reservationReport(q, r, p)
		return
	}
	cmd := nvme.ReservationCommand{SQE: sqe}
	want := nvme.ResvRegisterDataSize
	if op == nvme.IOReservationRelease {
		want = nvme.ResvReleaseDataSize
	}
	if !q.checkLen(r, want) {
		return
	}
	d := nvme.ReservationData(r.Data)
	var (
		s   nvme.Error
		loc uint16
		ev  []resvEvent
	)
	switch op {
	case nvme.IOReservationRegister:
		s, loc, ev = p.register(c.hostID, c.hostNQN, cmd, d)
	case nvme.IOReservationAcquire:
		s, loc, ev = p.acquire(c.hostID, cmd, d)
	default:
		s, loc, ev = p.release(c.hostID, cmd, d)
	}
	c.log.Debug("reservation command", "nsid", ns.nsid, "op", op.String(), "action", cmd.Action(),
		"rtype", uint8(cmd.RTYPE()), "status", s.Status.String())
	if len(ev) > 0 {
		c.subsys.resvNotify(ns.nsid, ev)
	}
	var snap *resvSnapshot
	if s.Status.Success() && p.file != "" {
		p.mu.Lock()
		snap = p.snapshotLocked()
		p.mu.Unlock()
	}
	c.finishSaved(q, r, p, snap, s, loc)
}

// reservationReport runs Reservation Report. Fabrics host identifiers
// are 128-bit: the 64-bit layout (EDS clear) is Host Identifier
// Inconsistent Format, as Linux nvmet answers.
func (c *controller) reservationReport(q *queue, r *fabrics.Request, p *reservations) {
	cmd := nvme.ReservationReportCommand{SQE: nvme.SQE(r.SQE[:])}
	if uint64(len(r.Data)) != cmd.Length() {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	if !cmd.EDS() {
		q.complete(r, dnr(nvme.StatusHostIdentifierInconsistentFormat), locCDW11, 0)
		return
	}
	if len(r.Data) < nvme.ResvStatusExtHeaderSize {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	page := p.status().AppendBinary(nil, true)
	n := copy(r.Data, page)
	clear(r.Data[n:])
	q.ok(r)
}

// resvNotify delivers reservation notifications about namespace nsid to
// the controllers of each event's host.
func (s *Subsystem) resvNotify(nsid uint32, ev []resvEvent) {
	s.t.mu.RLock()
	ctrls := s.controllersLocked()
	s.t.mu.RUnlock()
	for _, e := range ev {
		for _, c := range ctrls {
			if c.hostID == e.host {
				c.resvNotice(nsid, e.typ)
			}
		}
	}
}

// resvNote is a queued entry of the Reservation Notification log.
type resvNote struct {
	count uint64
	typ   nvme.ResvNotificationType
	nsid  uint32
}

// resvNotice queues a reservation notification, unless the host masked
// its type for the namespace, and raises the Reservation Log Page
// Available event.
func (c *controller) resvNotice(nsid uint32, typ nvme.ResvNotificationType) {
	c.mu.Lock()
	if c.dead || c.resv.mask[nsid]&(1<<typ) != 0 {
		c.mu.Unlock()
		return
	}
	r := &c.resv
	r.count++
	if r.count == 0 {
		r.count = 1 // the count skips 0 when it wraps
	}
	if len(r.log) == resvLogSlots {
		r.log = r.log[1:] // the oldest is lost: the counts show the gap
	}
	r.log = append(r.log, resvNote{count: r.count, typ: typ, nsid: nsid})
	// One event per notification, as Linux sends (hosts do not read the
	// log before asking for the next event), but not twice undelivered.
	if !slices.Contains(c.events, resvAENResult) {
		c.events = append(c.events, resvAENResult)
	}
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}

// resvLogPage returns the next Reservation Notification log page and
// takes it off the queue (an empty page when none waits). With rae, the
// entry stays.
func (c *controller) resvLogPage(rae bool) []byte {
	page := make([]byte, nvme.ResvNotificationLogSize)
	l := nvme.ResvNotificationLog(page)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &c.resv
	if len(r.log) == 0 {
		return page
	}
	n := r.log[0]
	l.SetCount(n.count)
	l.SetType(n.typ)
	l.SetNSID(n.nsid)
	l.SetAvailable(uint8(min(len(r.log)-1, 255)))
	if !rae {
		r.log = r.log[1:]
	}
	return page
}

// ctrlResv is a controller's reservation notification state (c.mu).
type ctrlResv struct {
	mask  map[uint32]uint32 // Reservation Notification Mask by NSID
	count uint64            // Log Page Count of the last notification
	log   []resvNote        // notifications not read yet, oldest first
}

// resvAENResult is the AER completion dword 0 of a reservation
// notification: I/O Command Specific Status, Reservation Log Page
// Available, log page 80h.
const resvAENResult = uint32(nvme.AERTypeIOCommandSpecific | nvme.AERInfoResvLogAvailable<<8 | uint32(nvme.LIDReservationNotification)<<16)

// resvFeature reports whether fid is one of the reservation features
// (namespace specific; features.go hands them here).
func resvFeature(fid nvme.FeatureID) bool {
	return fid == nvme.FeatReservationNotifMask || fid == nvme.FeatReservationPersistence
}

// resvNamespace returns the namespace nsid with reservations enabled, or
// the status to fail the command with.
func (c *controller) resvNamespace(nsid uint32) (*namespace, nvme.Error) {
	ns := c.subsys.activeNamespace(nsid)
	if ns == nil {
		return nil, dnr(nvme.StatusInvalidNamespaceOrFormat)
	}
	if ns.pr == nil {
		return nil, dnr(nvme.StatusInvalidField)
	}
	return ns, nvme.Error{}
}

// setResvFeature runs Set Features Reservation Notification Mask (82h;
// NSID FFFFFFFFh: every namespace with reservations) or Reservation
// Persistence (83h; PTPL is not supported, so only 0 is taken).
func (c *controller) setResvFeature(q *queue, r *fabrics.Request, cmd nvme.FeaturesCommand) {
	nsid, v := cmd.NSID(), cmd.CDW11()
	if cmd.FID() == nvme.FeatReservationPersistence {
		c.setPTPLFeature(q, r, nsid, v&nvme.ResvPersistencePTPL != 0)
		return
	}
	if v&^nvme.ResvMaskAll != 0 {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
		return
	}
	var nss []uint32
	if nsid == nvme.NSIDAll {
		for _, ns := range c.subsys.table().active {
			if ns.pr != nil {
				nss = append(nss, ns.nsid)
			}
		}
	} else {
		if _, s := c.resvNamespace(nsid); !s.Status.Success() {
			q.complete(r, s, locNSID, 0)
			return
		}
		nss = []uint32{nsid}
	}
	c.mu.Lock()
	if c.resv.mask == nil {
		c.resv.mask = make(map[uint32]uint32)
	}
	for _, id := range nss {
		c.resv.mask[id] = v
	}
	c.mu.Unlock()
	nvme.CQE(r.CQE[:]).SetDW0(v)
	q.ok(r)
}

// setPTPLFeature runs Set Features Reservation Persistence: PTPL on or
// off for namespace nsid (FFFFFFFFh: every namespace with reservations);
// on needs a reservation file. It completes once the files are written.
func (c *controller) setPTPLFeature(q *queue, r *fabrics.Request, nsid uint32, on bool) {
	var nss []*namespace
	if nsid == nvme.NSIDAll {
		for _, ns := range c.subsys.table().active {
			if ns.pr != nil {
				nss = append(nss, ns)
			}
		}
	} else {
		ns, s := c.resvNamespace(nsid)
		if !s.Status.Success() {
			q.complete(r, s, locNSID, 0)
			return
		}
		nss = []*namespace{ns}
	}
	for _, ns := range nss {
		if on && ns.pr.file == "" {
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
	}
	type pending struct {
		p    *reservations
		snap *resvSnapshot
	}
	var todo []pending
	for _, ns := range nss {
		p := ns.pr
		p.mu.Lock()
		p.setPTPLLocked(on)
		if snap := p.snapshotLocked(); snap != nil {
			todo = append(todo, pending{p, snap})
		}
		p.mu.Unlock()
	}
	if len(todo) == 0 {
		q.ok(r)
		return
	}
	go func() {
		for _, t := range todo {
			if err := t.p.save(t.snap); err != nil {
				c.log.Error("reservation state not persisted", "err", err)
				q.complete(r, st(nvme.StatusInternalError), noLoc, 0)
				return
			}
		}
		q.ok(r)
	}()
}

// getResvFeature runs Get Features of a reservation feature: the current
// mask, or 0 (defaults; PTPL off).
func (c *controller) getResvFeature(q *queue, r *fabrics.Request, cmd nvme.FeaturesCommand) {
	if _, s := c.resvNamespace(cmd.NSID()); !s.Status.Success() {
		q.complete(r, s, locNSID, 0)
		return
	}
	ns, _ := c.resvNamespace(cmd.NSID())
	var v uint32
	switch {
	case cmd.SEL() != nvme.SelectCurrent:
	case cmd.FID() == nvme.FeatReservationNotifMask:
		c.mu.Lock()
		v = c.resv.mask[cmd.NSID()]
		c.mu.Unlock()
	default:
		ns.pr.mu.Lock()
		if ns.pr.ptpl {
			v = nvme.ResvPersistencePTPL
		}
		ns.pr.mu.Unlock()
	}
	nvme.CQE(r.CQE[:]).SetDW0(v)
	q.ok(r)
}
