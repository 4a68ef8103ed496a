package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Test fixtures: one target with one NVM subsystem on one loop port.
const (
	testSubNQN  = "nqn.2026-11.io.nvmeof:test"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	otherHost   = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
	testPortID  = 1
	testNSSize  = 8 << 20
)

var testHostID = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// syncWriter stops forwarding logs to t once the test is over.
type syncWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p[:len(p)-1]))
	}
	return len(p), nil
}

func testLogger(t testing.TB) hclog.Logger {
	level := hclog.Warn
	if os.Getenv("NVMEOF_TEST_DEBUG") != "" {
		level = hclog.Debug
	}
	w := &syncWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	var out io.Writer = w
	if _, ok := t.(*testing.B); ok {
		out = io.Discard
	}
	return hclog.New(&hclog.LoggerOptions{Output: out, Level: level})
}

// fixture is a running target with a memory namespace exported on a loop
// port.
type fixture struct {
	t    testing.TB
	tgt  *Target
	net  *loop.Network
	addr fabrics.Address
	mem  *bdev.Memory
}

type fixtureOpt func(*SubsystemConfig, *PortConfig)

func newFixture(t testing.TB, opts ...fixtureOpt) *fixture {
	t.Helper()
	return newFixtureWith(t, Options{Logger: testLogger(t)}, opts...)
}

// newFixtureWith is newFixture with target options topts.
func newFixtureWith(t testing.TB, topts Options, opts ...fixtureOpt) *fixture {
	t.Helper()
	f := &fixture{t: t, net: loop.NewNetwork()}
	f.addr = fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
	f.tgt = New(topts)
	scfg := SubsystemConfig{NQN: testSubNQN, Serial: "SN0001", Model: "test model", AllowedHosts: []string{testHostNQN}, IEEEOUI: 0x123456}
	pcfg := PortConfig{ID: testPortID, Address: f.addr, InlineDataSize: 8192, Subsystems: []string{testSubNQN}}
	for _, o := range opts {
		o(&scfg, &pcfg)
	}
	must(t, f.tgt.AddSubsystem(scfg))
	mem, err := bdev.NewMemory(testNSSize, 512)
	must(t, err)
	f.mem = mem
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 1, Device: mem,
		NGUID: [16]byte{0xaa, 1}, EUI64: [8]byte{0xbb, 2}, UUID: [16]byte{0xcc, 3}}))
	must(t, f.tgt.AddPort(pcfg))
	l, err := f.net.Listen(f.addr)
	must(t, err)
	f.serve(l)
	return f
}

// serve serves the test port on l until the test ends, then closes the
// target (an error closing it fails the test).
func (f *fixture) serve(l fabrics.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.tgt.Serve(ctx, testPortID, l) }()
	f.t.Cleanup(func() {
		cancel()
		<-served
		if err := f.tgt.Close(); err != nil {
			f.t.Errorf("target Close: %v", err)
		}
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hq is a host queue with helpers that build and run commands.
type hq struct {
	t      testing.TB
	q      fabrics.HostQueue
	cntlid uint16
	qid    uint16
	// The tags of the commands outstanding (fabrics.HostCommand.Tag):
	// each takes the lowest free one.
	tagMu sync.Mutex
	busy  []bool
}

// takeTag returns the lowest free tag, false when every tag is taken.
func (h *hq) takeTag() (uint16, bool) {
	h.tagMu.Lock()
	defer h.tagMu.Unlock()
	if h.busy == nil {
		h.busy = make([]bool, h.q.Depth())
	}
	for i, b := range h.busy {
		if !b {
			h.busy[i] = true
			return uint16(i), true
		}
	}
	return 0, false
}

// freeTag frees tag.
func (h *hq) freeTag(tag uint16) {
	h.tagMu.Lock()
	h.busy[tag] = false
	h.tagMu.Unlock()
}

// result is a completed command.
type result struct {
	cqe  nvme.CQE
	data []byte
	err  error
}

func (r result) status() nvme.Status { return r.cqe.Status() }

// dial opens a queue to the fixture's port.
func (f *fixture) dial(qid uint16, depth int) *hq {
	f.t.Helper()
	q, err := loop.Dialer{Net: f.net}.Dial(context.Background(), f.addr, fabrics.QueueParams{QID: qid, SQSize: depth + 1})
	must(f.t, err)
	f.t.Cleanup(func() { q.Close() })
	return &hq{t: f.t, q: q, qid: qid}
}

// submit sends a command and returns a channel its completion arrives on.
func (h *hq) submit(sqe [64]byte, data []byte, dir fabrics.DataDirection) <-chan result {
	ch := make(chan result, 1)
	tag, ok := h.takeTag()
	if !ok {
		ch <- result{err: fmt.Errorf("all %d tags outstanding", len(h.busy))}
		return ch
	}
	cmd := &fabrics.HostCommand{SQE: sqe, Data: data, Direction: dir, Tag: tag}
	cmd.Done = func(c *fabrics.HostCommand) {
		h.freeTag(tag)
		ch <- result{cqe: nvme.CQE(c.CQE[:]), data: c.Data, err: c.Err}
	}
	if err := h.q.Submit(cmd); err != nil {
		h.freeTag(tag)
		ch <- result{err: err}
	}
	return ch
}

// wait waits for a completion.
func (h *hq) wait(ch <-chan result) result {
	h.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		h.t.Fatal("command timed out")
		return result{}
	}
}

// run submits a command and waits for it.
func (h *hq) run(sqe [64]byte, data []byte, dir fabrics.DataDirection) result {
	h.t.Helper()
	r := h.wait(h.submit(sqe, data, dir))
	if r.err != nil {
		h.t.Fatalf("transport error: %v", r.err)
	}
	return r
}

// expect checks a completion's status.
func expect(t testing.TB, r result, want nvme.Status, what string) {
	t.Helper()
	if got := r.status(); got != want {
		t.Fatalf("%s: status %s, want %s", what, fabrics.StatusString(got), fabrics.StatusString(want))
	}
}

// connectSQE builds a Connect command and its data.
func connectSQE(qid, sqsize uint16, kato uint32, cattr uint8, subnqn, hostnqn string, cntlid uint16) ([64]byte, []byte) {
	cmd := fabrics.NewCommand(fabrics.FCTypeConnect)
	c := cmd.Connect()
	c.SetQID(qid)
	c.SetSQSize(sqsize)
	c.SetKATO(kato)
	c.SetCAttr(cattr)
	d := fabrics.NewConnectData()
	// A Host ID is bound to one host NQN in a subsystem (admission.go):
	// hosts other than testHostNQN have their NQN's UUID.
	id := testHostID
	if u, ok := fabrics.UUIDFromNQN(hostnqn); ok && hostnqn != testHostNQN {
		id = u
	}
	d.SetHostID(id)
	d.SetCntlID(cntlid)
	_ = d.SetSubNQN(subnqn)
	_ = d.SetHostNQN(hostnqn)
	return [64]byte(cmd), d
}

// connectRaw runs a Connect and returns its completion.
func (h *hq) connectRaw(sqsize uint16, kato uint32, cattr uint8, subnqn, hostnqn string, cntlid uint16) result {
	h.t.Helper()
	sqe, d := connectSQE(h.qid, sqsize, kato, cattr, subnqn, hostnqn, cntlid)
	return h.run(sqe, d, fabrics.DirHostToCtrl)
}

// connectAdmin opens and connects an admin queue to subnqn.
func (f *fixture) connectAdmin(subnqn string, kato uint32) *hq {
	f.t.Helper()
	h := f.dial(0, 31)
	r := h.connectRaw(31, kato, 0, subnqn, testHostNQN, fabrics.CntlIDDynamic)
	expect(f.t, r, 0, "admin Connect")
	h.cntlid = uint16(r.cqe.DW0())
	return h
}

// connectIO opens and connects I/O queue qid of a controller.
func (f *fixture) connectIO(admin *hq, qid uint16, depth int) *hq {
	f.t.Helper()
	h := f.dial(qid, depth)
	r := h.connectRaw(uint16(depth), 0, 0, testSubNQN, testHostNQN, admin.cntlid)
	expect(f.t, r, 0, "I/O Connect")
	h.cntlid = admin.cntlid
	return h
}

func (h *hq) propGet(off uint32, size int) (uint64, result) {
	h.t.Helper()
	cmd := fabrics.NewCommand(fabrics.FCTypePropertyGet)
	p := cmd.PropertyGet()
	p.SetAttrib(fabrics.AttribForSize(size))
	p.SetOffset(off)
	r := h.run([64]byte(cmd), nil, fabrics.DirNone)
	return r.cqe.Result64(), r
}

func (h *hq) propSet(off uint32, v uint64) result {
	h.t.Helper()
	cmd := fabrics.NewCommand(fabrics.FCTypePropertySet)
	p := cmd.PropertySet()
	p.SetAttrib(fabrics.PropertyAttrib4)
	p.SetOffset(off)
	p.SetValue(v)
	return h.run([64]byte(cmd), nil, fabrics.DirNone)
}

// enableCC is the CC value the Linux host writes to enable a controller.
var enableCC = fabrics.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)

// enable sets CC.EN and checks CSTS.RDY.
func (h *hq) enable() {
	h.t.Helper()
	expect(h.t, h.propSet(fabrics.PropCC, uint64(enableCC)), 0, "Property Set CC")
	v, r := h.propGet(fabrics.PropCSTS, 4)
	expect(h.t, r, 0, "Property Get CSTS")
	if !fabrics.CSTS(v).RDY() {
		h.t.Fatalf("CSTS %#x: not ready", v)
	}
}

// adminSQE builds an admin (or I/O) command with a CID the transport sets.
func newSQE(op uint8, nsid uint32) [64]byte {
	var b [64]byte
	s := nvme.SQE(b[:])
	s.SetOpcode(op)
	s.SetNSID(nsid)
	s.SetPSDT(nvme.PSDTSGLMPTRAddress)
	return b
}

func (h *hq) identify(cns uint8, nsid uint32, csi uint8) result {
	h.t.Helper()
	sqe := newSQE(uint8(nvme.AdminIdentify), nsid)
	c := nvme.IdentifyCommand{SQE: nvme.SQE(sqe[:])}
	c.SetCNS(cns)
	c.SetCSI(csi)
	return h.run(sqe, make([]byte, nvme.IdentifyDataSize), fabrics.DirCtrlToHost)
}

func logSQE(lid nvme.LogPageID, nsid uint32, n int, off uint64, rae bool) [64]byte {
	sqe := newSQE(uint8(nvme.AdminGetLogPage), nsid)
	c := nvme.GetLogPageCommand{SQE: nvme.SQE(sqe[:])}
	c.SetLID(lid)
	if err := c.SetLength(uint64(n)); err != nil {
		panic(err)
	}
	c.SetLPO(off)
	c.SetRAE(rae)
	return sqe
}

func (h *hq) getLog(lid nvme.LogPageID, nsid uint32, n int, off uint64, rae bool) result {
	h.t.Helper()
	return h.run(logSQE(lid, nsid, n, off, rae), make([]byte, n), fabrics.DirCtrlToHost)
}

func featSQE(set bool, fid nvme.FeatureID, cdw11 uint32) [64]byte {
	op := nvme.AdminGetFeatures
	if set {
		op = nvme.AdminSetFeatures
	}
	sqe := newSQE(uint8(op), 0)
	c := nvme.FeaturesCommand{SQE: nvme.SQE(sqe[:])}
	c.SetFID(fid)
	c.SetCDW11(cdw11)
	return sqe
}

func (h *hq) setFeature(fid nvme.FeatureID, cdw11 uint32) result {
	h.t.Helper()
	return h.run(featSQE(true, fid, cdw11), nil, fabrics.DirNone)
}

func (h *hq) getFeature(fid nvme.FeatureID, cdw11 uint32) result {
	h.t.Helper()
	return h.run(featSQE(false, fid, cdw11), nil, fabrics.DirNone)
}

// rwSQE builds a Read, Write, Compare or Write Zeroes command.
func rwSQE(op nvme.IOOpcode, nsid uint32, slba uint64, blocks uint32) [64]byte {
	sqe := newSQE(uint8(op), nsid)
	c := nvme.RWCommand{SQE: nvme.SQE(sqe[:])}
	c.SetSLBA(slba)
	if err := c.SetBlocks(blocks); err != nil {
		panic(err)
	}
	return sqe
}

func (h *hq) write(nsid uint32, slba uint64, data []byte) result {
	h.t.Helper()
	return h.run(rwSQE(nvme.IOWrite, nsid, slba, uint32(len(data)/512)), data, fabrics.DirHostToCtrl)
}

func (h *hq) read(nsid uint32, slba uint64, blocks int) result {
	h.t.Helper()
	return h.run(rwSQE(nvme.IORead, nsid, slba, uint32(blocks)), make([]byte, blocks*512), fabrics.DirCtrlToHost)
}

// session is a connected, enabled controller with one I/O queue.
type session struct {
	f     *fixture
	admin *hq
	io    *hq
}

func (f *fixture) session() *session {
	f.t.Helper()
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	return &session{f: f, admin: a, io: f.connectIO(a, 1, 32)}
}

// waitClosed waits until a host queue refuses commands: the target
// closes queues on its own goroutines (in a synctest bubble, call
// synctest.Wait first and within may be 0: one look).
func waitClosed(t testing.TB, h *hq, within time.Duration) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("queue %d closed", h.qid), within, func() bool {
		r := h.wait(h.submit(newSQE(uint8(nvme.AdminKeepAlive), 0), nil, fabrics.DirNone))
		return errors.Is(r.err, fabrics.ErrQueueClosed)
	})
}

// waitUntil polls cond every millisecond, for at most within (0: one
// look), for a state the target reaches on the transport's goroutines.
func waitUntil(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	if within <= 0 {
		t.Fatalf("%s: not so", what)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(within)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}
