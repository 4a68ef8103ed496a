package initiator

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
)

// fakeTarget is a small NVMe-oF controller for tests: just the commands the
// initiator sends, over memory namespaces, with knobs to stall or fail.
type fakeTarget struct {
	t      testing.TB
	net    *loop.Network
	addr   fabrics.Address
	subnqn string
	bs     int

	mu        sync.Mutex
	l         *loop.Listener
	allowed   map[string]bool // nil: any host
	ns        map[uint32][]byte
	changed   []uint32
	nextCntl  uint16
	ctrls     map[uint16]*fakeCtrl
	queues    []fabrics.TargetQueue
	held      []*fabrics.Request
	counts    map[string]int
	discovery []fabrics.DiscoveryRecord
	genctr    uint64
	kasSeen   map[uint16]int

	// Raw data returned instead of the fake's own (fuzzing).
	rawIDCtrl []byte
	rawIDNS   []byte
	rawNSList []byte
	rawDisc   []byte
	// hostileDisc: the discovery log claims 65,536 records and its
	// GENCTR changes at every read (issue 22).
	hostileDisc bool

	mdts      uint8
	grantQ    uint32
	stallRead atomic.Bool           // Reads are never completed
	stallKA   atomic.Bool           // Keep Alives are never completed
	abortOK   atomic.Bool           // Abort completes the stalled command
	abortDone atomic.Bool           // Abort lets the stalled Reads complete with their data (not aborting them)
	stallAbrt atomic.Bool           // Aborts are never completed
	inflight  atomic.Int32          // delayed Reads (readDelay) in flight
	maxFlight atomic.Int32          // the most delayed Reads in flight at once
	retryIO   atomic.Int32          // that many Reads and Writes fail with a status without DNR
	readDelay atomic.Int64          // Reads complete after that many nanoseconds
	holdLogs  chan *fabrics.Request // under mu: Get Log Page requests, filled, go here uncompleted

	// ANA (multipath tests): with anaOn the controller reports ANA (CMIC
	// bit 3, ANA Change notices) with every namespace in group 1, whose
	// state is anaState; I/O in a state that cannot serve it gets the ANA
	// status. data, when set, is the target whose namespaces this one
	// serves too (a second port of the same subsystem). anatt is the
	// ANATT reported (0: none, the host's default applies).
	anaOn    bool
	anatt    uint8
	anaState atomic.Uint32
	anaChg   atomic.Uint64
	data     *fakeTarget
}

type fakeCtrl struct {
	cntlid uint16
	cc     uint32
	aers   []*fabrics.Request
}

type fakeQueue struct {
	ft   *fakeTarget
	tq   fabrics.TargetQueue
	qid  uint16
	ctrl *fakeCtrl
}

const fakeNQN = "nqn.2026-01.io.nvmeof:fake"

func newFakeTarget(t testing.TB, nsBytes int) *fakeTarget {
	ft := &fakeTarget{
		t:        t,
		net:      loop.NewNetwork(),
		addr:     fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420},
		subnqn:   fakeNQN,
		bs:       512,
		ns:       map[uint32][]byte{1: make([]byte, nsBytes)},
		nextCntl: 1,
		ctrls:    map[uint16]*fakeCtrl{},
		counts:   map[string]int{},
		kasSeen:  map[uint16]int{},
		mdts:     5, // 128 KiB with 4 KiB pages
		grantQ:   4,
	}
	ft.listen()
	t.Cleanup(ft.close)
	return ft
}

func (ft *fakeTarget) dialer() fabrics.Dialer { return loop.Dialer{Net: ft.net} }

func (ft *fakeTarget) listen() {
	l, err := ft.net.Listen(ft.addr)
	if err != nil {
		ft.t.Fatal(err)
	}
	ft.mu.Lock()
	ft.l = l
	ft.mu.Unlock()
	go func() {
		for {
			tq, err := l.Accept(context.Background())
			if err != nil {
				return
			}
			fq := &fakeQueue{ft: ft, tq: tq, qid: tq.Params().QID}
			ft.mu.Lock()
			ft.queues = append(ft.queues, tq)
			ft.mu.Unlock()
			tq.Serve(fq)
		}
	}()
}

// unlisten stops accepting connections (dials are refused).
func (ft *fakeTarget) unlisten() {
	ft.mu.Lock()
	l := ft.l
	ft.l = nil
	ft.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
}

// killQueues closes every queue from the target side.
func (ft *fakeTarget) killQueues() {
	ft.mu.Lock()
	qs := ft.queues
	ft.queues = nil
	ft.mu.Unlock()
	for _, q := range qs {
		_ = q.Close()
	}
}

func (ft *fakeTarget) close() {
	ft.unlisten()
	ft.killQueues()
}

func (ft *fakeTarget) count(op string) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.counts[op]
}

// addNamespace adds a namespace and sends the controllers a Namespace
// Attribute Changed event.
func (ft *fakeTarget) addNamespace(nsid uint32, size int) {
	ft.mu.Lock()
	ft.ns[nsid] = make([]byte, size)
	ft.changed = append(ft.changed, nsid)
	var aers []*fabrics.Request
	for _, c := range ft.ctrls {
		if len(c.aers) > 0 {
			aers = append(aers, c.aers[0])
			c.aers = c.aers[1:]
		}
	}
	ft.mu.Unlock()
	for _, r := range aers {
		nvme.CQE(r.CQE[:]).SetDW0(uint32(nvme.AENNamespaceChanged))
		r.Complete()
	}
}

func (fq *fakeQueue) QueueClosed(error) {}

func (fq *fakeQueue) HandleCommand(r *fabrics.Request) {
	ft := fq.ft
	sqe := nvme.SQE(r.SQE[:])
	cqe := nvme.CQE(r.CQE[:])
	fail := func(s nvme.Status) {
		cqe.SetStatus(s)
		cqe.SetDNR(true)
		r.Complete()
	}
	if sqe.Opcode() == nvme.FabricsOpcode {
		fq.fabricsCmd(r)
		return
	}
	if fq.ctrl == nil {
		fail(nvme.StatusCommandSequenceError)
		return
	}
	if fq.qid == 0 {
		op := nvme.AdminOpcode(sqe.Opcode())
		ft.mu.Lock()
		ft.counts[op.String()]++
		ft.mu.Unlock()
		switch op {
		case nvme.AdminIdentify:
			fq.identify(r)
			return
		case nvme.AdminSetFeatures:
			switch (nvme.FeaturesCommand{SQE: sqe}).FID() {
			case nvme.FeatNumberOfQueues:
				nsq, _ := nvme.NumQueues(sqe.CDW11())
				g := min(nsq, ft.grantQ)
				cqe.SetDW0(nvme.MakeNumQueues(g, g))
			case nvme.FeatAsyncEventConfig:
			default:
				fail(nvme.StatusInvalidField)
				return
			}
		case nvme.AdminGetFeatures:
			cqe.SetDW0(0x1234)
		case nvme.AdminGetLogPage:
			fq.getLogPage(r)
			return
		case nvme.AdminKeepAlive:
			ft.mu.Lock()
			ft.kasSeen[fq.ctrl.cntlid]++
			ft.mu.Unlock()
			if ft.stallKA.Load() {
				return
			}
		case nvme.AdminAsyncEventRequest:
			ft.mu.Lock()
			fq.ctrl.aers = append(fq.ctrl.aers, r)
			ft.mu.Unlock()
			return
		case nvme.AdminAbort:
			if ft.stallAbrt.Load() {
				return
			}
			if ft.abortDone.Load() {
				ft.mu.Lock()
				held := ft.held
				ft.held = nil
				for _, h := range held {
					rw := nvme.RWCommand{SQE: nvme.SQE(h.SQE[:])}
					start := int(rw.SLBA()) * ft.bs
					copy(h.Data, ft.ns[1][start:])
				}
				ft.mu.Unlock()
				for _, h := range held {
					h.Complete()
				}
				cqe.SetDW0(1) // not aborted: it completed first
			} else if ft.abortOK.Load() {
				ft.mu.Lock()
				held := ft.held
				ft.held = nil
				ft.mu.Unlock()
				for _, h := range held {
					nvme.CQE(h.CQE[:]).SetStatus(nvme.StatusAbortRequested)
					h.Complete()
				}
			} else {
				cqe.SetDW0(1) // not aborted, as Linux nvmet
			}
		default:
			fail(nvme.StatusInvalidOpcode)
			return
		}
		r.Complete()
		return
	}
	fq.io(r)
}

func (fq *fakeQueue) fabricsCmd(r *fabrics.Request) {
	ft := fq.ft
	cmd := fabrics.Command(r.SQE[:])
	cqe := nvme.CQE(r.CQE[:])
	ft.mu.Lock()
	ft.counts[cmd.FCType().String()]++
	ft.mu.Unlock()
	switch cmd.FCType() {
	case fabrics.FCTypeConnect:
		d, err := fabrics.ParseConnectData(r.Data)
		if err != nil {
			cqe.SetStatus(nvme.StatusInvalidField)
			break
		}
		ft.mu.Lock()
		_, disc := ft.discoveryNQN(d.SubNQN())
		switch {
		case d.SubNQN() != ft.subnqn && !disc:
			cqe.SetStatus(fabrics.StatusConnectInvalidParameters)
			cqe.SetDNR(true)
			cqe.SetDW0(fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffSubNQN}.DW0())
		case ft.allowed != nil && !ft.allowed[d.HostNQN()]:
			cqe.SetStatus(fabrics.StatusConnectInvalidHost)
			cqe.SetDNR(true)
		case fq.qid == 0:
			c := &fakeCtrl{cntlid: ft.nextCntl}
			ft.nextCntl++
			ft.ctrls[c.cntlid] = c
			fq.ctrl = c
			cqe.SetDW0(uint32(c.cntlid))
		default:
			c := ft.ctrls[d.CntlID()]
			if c == nil {
				cqe.SetStatus(fabrics.StatusConnectInvalidParameters)
				cqe.SetDW0(fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffCntlID}.DW0())
				break
			}
			fq.ctrl = c
			cqe.SetDW0(uint32(c.cntlid))
		}
		ft.mu.Unlock()
	case fabrics.FCTypePropertyGet:
		var v uint64
		switch cmd.PropertyGet().Offset() {
		case fabrics.PropCAP:
			v = uint64(fabrics.MakeCAP(fabrics.CAPFields{MQES: 127, CQR: true, TO: 2, CSS: fabrics.CAPCSSNVM}))
		case fabrics.PropVS:
			v = uint64(nvme.Version1_3)
		case fabrics.PropCC:
			v = uint64(fq.ctrl.cc)
		case fabrics.PropCSTS:
			cc := fabrics.CC(fq.ctrl.cc)
			s := fabrics.CSTS(0).WithRDY(cc.EN())
			if cc.SHN() != 0 {
				s = s.WithSHST(fabrics.SHSTComplete)
			}
			v = uint64(s)
		}
		cqe.SetResult64(v)
	case fabrics.FCTypePropertySet:
		if cmd.PropertySet().Offset() == fabrics.PropCC {
			fq.ctrl.cc = uint32(cmd.PropertySet().Value())
		}
	default:
		cqe.SetStatus(nvme.StatusInvalidOpcode)
	}
	r.Complete()
}

func (ft *fakeTarget) discoveryNQN(nqn string) (string, bool) {
	return nqn, nqn == fabrics.DiscoveryNQN
}

func (fq *fakeQueue) identify(r *fabrics.Request) {
	ft := fq.ft
	sqe := nvme.SQE(r.SQE[:])
	clear(r.Data)
	ft.mu.Lock()
	defer ft.mu.Unlock()
	switch (nvme.IdentifyCommand{SQE: sqe}).CNS() {
	case nvme.CNSController:
		id := nvme.IdentifyController(r.Data)
		_ = id.SetSN("FAKE0001")
		_ = id.SetMN("fake")
		id.SetVER(nvme.Version1_3)
		id.SetCNTLID(fq.ctrl.cntlid)
		id.SetMDTS(ft.mdts)
		id.SetAERL(3)
		id.SetKAS(1)
		id.SetOAES(nvme.AECNamespaceAttribute)
		if ft.anaOn {
			id.SetCMIC(nvme.CMICMultiPort | nvme.CMICMultiCtrl | nvme.CMICANAReporting)
			id.SetOAES(nvme.AECNamespaceAttribute | nvme.AECANAChange)
			id.SetANACAP(nvme.ANACAPOptimized | nvme.ANACAPNonOptimized | nvme.ANACAPInaccessible)
			id.SetANAGRPMAX(1)
			id.SetNANAGRPID(1)
			id.SetANATT(ft.anatt)
		}
		id.SetNN(1024)
		id.SetONCS(nvme.ONCSDatasetManagement | nvme.ONCSWriteZeroes)
		id.SetSGLS(nvme.SGLSSupported | nvme.SGLSKeyed | nvme.SGLSOffset)
		id.SetIOCCSZ((64 + 8192) / 16)
		id.SetIORCSZ(1)
		id.SetMAXCMD(128)
		id.SetCNTRLTYPE(nvme.ControllerTypeIO)
		_ = id.SetSUBNQN(ft.subnqn)
		if ft.rawIDCtrl != nil {
			copy(r.Data, ft.rawIDCtrl)
			id.SetCNTLID(fq.ctrl.cntlid)
		}
	case nvme.CNSNamespace:
		if ft.rawIDNS != nil {
			copy(r.Data, ft.rawIDNS)
			break
		}
		b, ok := ft.ns[sqe.NSID()]
		if ok {
			id := nvme.IdentifyNamespace(r.Data)
			n := uint64(len(b) / ft.bs)
			id.SetNSZE(n)
			id.SetNCAP(n)
			id.SetNUSE(n)
			id.SetLBAF(0, nvme.LBAFormat{LBADS: 9})
			id.SetNGUID([16]byte{0xaa, byte(sqe.NSID())})
			if ft.anaOn {
				id.SetANAGRPID(1)
			}
		}
	case nvme.CNSActiveNSList:
		if ft.rawNSList != nil {
			copy(r.Data, ft.rawNSList)
			break
		}
		var ids []uint32
		for i := uint32(1); i <= 1024; i++ {
			if _, ok := ft.ns[i]; ok && i > sqe.NSID() {
				ids = append(ids, i)
			}
		}
		_ = nvme.EncodeNSIDList(r.Data, ids)
	case nvme.CNSNSDescriptorList:
		u := [16]byte{0x55, byte(sqe.NSID())}
		_, _ = nvme.EncodeNSDescriptors(r.Data, []nvme.NSDescriptor{nvme.NSDescriptorUUID(u)})
	default:
		nvme.CQE(r.CQE[:]).SetStatus(nvme.StatusInvalidField)
	}
	r.Complete()
}

func (fq *fakeQueue) getLogPage(r *fabrics.Request) {
	ft := fq.ft
	g := nvme.GetLogPageCommand{SQE: nvme.SQE(r.SQE[:])}
	clear(r.Data)
	var page []byte
	ft.mu.Lock()
	switch g.LID() {
	case nvme.LIDChangedNSList:
		page = make([]byte, nvme.ChangedNSListLogSize)
		_ = nvme.EncodeChangedNSList(page, ft.changed)
		if !g.RAE() {
			ft.changed = nil
		}
	case nvme.LIDSMART:
		page = make([]byte, nvme.SMARTLogSize)
		nvme.SMARTLog(page).SetCompositeTemperature(300)
	case nvme.LIDANA:
		var ids []uint32
		for id := range ft.ns {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		l := nvme.ANALog{ChangeCount: ft.anaChg.Load(), Groups: []nvme.ANAGroup{{GroupID: 1, ChangeCount: ft.anaChg.Load(), State: nvme.ANAState(ft.anaState.Load()), NSIDs: ids}}}
		page, _ = l.AppendBinary(nil)
	case nvme.LIDDiscovery:
		if ft.hostileDisc {
			// Written in place: the fake allocates nothing for it.
			ft.genctr++
			if g.LPO() == 0 && len(r.Data) >= 16 {
				h := fabrics.DiscoveryHeader(r.Data)
				h.SetGenCtr(ft.genctr)
				h.SetNumRec(1 << 16)
			}
			ft.mu.Unlock()
			r.Complete()
			return
		}
		l := fabrics.DiscoveryLog{GenCtr: ft.genctr, Entries: ft.discovery}
		page, _ = l.Encode()
		if ft.rawDisc != nil {
			page = ft.rawDisc
		}
	default:
		ft.mu.Unlock()
		nvme.CQE(r.CQE[:]).SetStatus(nvme.StatusInvalidLogPage)
		r.Complete()
		return
	}
	hold := ft.holdLogs
	ft.mu.Unlock()
	if off := int(g.LPO()); off < len(page) {
		copy(r.Data, page[off:])
	}
	if hold != nil {
		hold <- r
		return
	}
	r.Complete()
}

// dataTarget returns the target whose namespace data this one serves.
func (ft *fakeTarget) dataTarget() *fakeTarget {
	if ft.data != nil {
		return ft.data
	}
	return ft
}

// anaStatus returns the status of I/O in the current ANA state.
func (ft *fakeTarget) anaStatus() nvme.Status {
	switch nvme.ANAState(ft.anaState.Load()) {
	case nvme.ANAInaccessible:
		return nvme.StatusANAInaccessible
	case nvme.ANAPersistentLoss:
		return nvme.StatusANAPersistentLoss
	case nvme.ANAChange:
		return nvme.StatusANATransition
	}
	return nvme.StatusSuccess
}

// setANA changes group 1's state; with notify the controllers get an ANA
// Change notice.
func (ft *fakeTarget) setANA(s nvme.ANAState, notify bool) {
	ft.anaState.Store(uint32(s))
	ft.anaChg.Add(1)
	if !notify {
		return
	}
	ft.mu.Lock()
	var aers []*fabrics.Request
	for _, c := range ft.ctrls {
		if len(c.aers) > 0 {
			aers = append(aers, c.aers[0])
			c.aers = c.aers[1:]
		}
	}
	ft.mu.Unlock()
	for _, r := range aers {
		nvme.CQE(r.CQE[:]).SetDW0(uint32(nvme.AENANAChange))
		r.Complete()
	}
}

// newFakePeer returns a second port of ft's subsystem at addr on ft's
// network, serving ft's namespaces, with ANA reporting in state s (ft
// gets ANA reporting in optimized state unless it has it already).
func newFakePeer(t testing.TB, ft *fakeTarget, addr string, s nvme.ANAState) *fakeTarget {
	if !ft.anaOn {
		ft.anaOn = true
		ft.anaState.Store(uint32(nvme.ANAOptimized))
	}
	p := &fakeTarget{
		t:        t,
		net:      ft.net,
		addr:     fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr(addr), ServiceID: 4420},
		subnqn:   ft.subnqn,
		bs:       ft.bs,
		ns:       ft.ns,
		nextCntl: 1000,
		ctrls:    map[uint16]*fakeCtrl{},
		counts:   map[string]int{},
		kasSeen:  map[uint16]int{},
		mdts:     ft.mdts,
		grantQ:   ft.grantQ,
		anaOn:    true,
		anatt:    ft.anatt,
		data:     ft,
	}
	p.anaState.Store(uint32(s))
	p.listen()
	t.Cleanup(p.close)
	return p
}

// takeRetry reports whether this I/O is one of those retryIO fails.
func (ft *fakeTarget) takeRetry() bool {
	for {
		n := ft.retryIO.Load()
		if n <= 0 {
			return false
		}
		if ft.retryIO.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (fq *fakeQueue) io(r *fabrics.Request) {
	ft := fq.ft
	sqe := nvme.SQE(r.SQE[:])
	cqe := nvme.CQE(r.CQE[:])
	op := nvme.IOOpcode(sqe.Opcode())
	ft.mu.Lock()
	ft.counts[op.String()]++
	ft.mu.Unlock()
	if ft.anaOn {
		if st := ft.anaStatus(); st != nvme.StatusSuccess {
			cqe.SetStatus(st)
			r.Complete()
			return
		}
	}
	ft = ft.dataTarget()
	ft.mu.Lock()
	b, ok := ft.ns[sqe.NSID()]
	ft.mu.Unlock()
	if !ok {
		cqe.SetStatus(nvme.StatusInvalidNamespaceOrFormat)
		cqe.SetDNR(true)
		r.Complete()
		return
	}
	if (op == nvme.IORead || op == nvme.IOWrite) && ft.takeRetry() {
		cqe.SetStatus(nvme.StatusNamespaceNotReady) // without DNR: retried
		r.Complete()
		return
	}
	rw := nvme.RWCommand{SQE: sqe}
	start, n := int(rw.SLBA())*ft.bs, int(rw.NLB()+1)*ft.bs
	inRange := start+n <= len(b)
	switch op {
	case nvme.IORead:
		if ft.stallRead.Load() {
			ft.mu.Lock()
			ft.held = append(ft.held, r)
			ft.mu.Unlock()
			return
		}
		if !inRange || len(r.Data) != n {
			cqe.SetStatus(nvme.StatusLBAOutOfRange)
			cqe.SetDNR(true)
			break
		}
		ft.mu.Lock()
		copy(r.Data, b[start:start+n])
		ft.mu.Unlock()
		if d := ft.readDelay.Load(); d > 0 {
			n := ft.inflight.Add(1)
			for m := ft.maxFlight.Load(); n > m && !ft.maxFlight.CompareAndSwap(m, n); m = ft.maxFlight.Load() {
			}
			time.AfterFunc(time.Duration(d), func() {
				ft.inflight.Add(-1)
				r.Complete()
			})
			return
		}
	case nvme.IOWrite:
		if !inRange || len(r.Data) != n {
			cqe.SetStatus(nvme.StatusLBAOutOfRange)
			cqe.SetDNR(true)
			break
		}
		ft.mu.Lock()
		copy(b[start:], r.Data)
		ft.mu.Unlock()
	case nvme.IOWriteZeroes:
		if !inRange {
			cqe.SetStatus(nvme.StatusLBAOutOfRange)
			cqe.SetDNR(true)
			break
		}
		ft.mu.Lock()
		clear(b[start : start+n])
		ft.mu.Unlock()
	case nvme.IOFlush:
	case nvme.IODatasetManagement:
		d := nvme.DSMCommand{SQE: sqe}
		rs, err := nvme.DecodeDSMRanges(r.Data, d.Ranges())
		if err != nil {
			cqe.SetStatus(nvme.StatusInvalidField)
			break
		}
		ft.mu.Lock()
		for _, x := range rs {
			s, e := int(x.SLBA())*ft.bs, int(x.SLBA()+uint64(x.Length()))*ft.bs
			if e <= len(b) && d.AD() {
				clear(b[s:e])
			}
		}
		ft.mu.Unlock()
	default:
		cqe.SetStatus(nvme.StatusInvalidOpcode)
	}
	r.Complete()
}
