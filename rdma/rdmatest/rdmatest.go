package rdmatest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Opener returns the two devices a conformance run uses: a is the
// requester's (and the connecting side's), b the responder's (and the
// listening side's). b may be a itself. The Opener registers the
// devices' Close with t.Cleanup, or skips t when the provider cannot run
// here.
type Opener func(t testing.TB) (a, b rdma.Device)

// Options tune a run to a provider and a machine. The zero value is the
// default for every field.
type Options struct {
	// LargeSize is the size of the multi-packet transfers ("Send/Large",
	// "Write/Large", "Read/Large"): several MiB by default
	// (DefaultLargeSize). A slow peer (rxe in an emulated guest) may
	// choose less, but at least a few hundred packets' worth.
	LargeSize int
	// Timeout bounds each wait for a completion, a connection event or a
	// connection-manager call (default DefaultTimeout).
	Timeout time.Duration
	// Port is the first RDMA_PS_TCP port the connection-manager tests
	// listen on (default DefaultPort); each test takes the next ones.
	Port uint16
	// KnownFailures maps a test name (as in Names) to the reason it is
	// skipped: a conformance failure of the provider that is known and
	// tracked elsewhere. Every entry shows up as a skip with its reason.
	KnownFailures map[string]string
}

// Defaults of Options.
const (
	DefaultLargeSize = 4<<20 + 4093 // 4 MiB and an odd tail: thousands of packets, a short last one
	DefaultTimeout   = 20 * time.Second
	DefaultPort      = 20480
)

// Run runs the whole suite against the devices open returns, with the
// default Options.
func Run(t *testing.T, open Opener) { RunOptions(t, open, Options{}) }

// RunOptions runs the whole suite with the given options: every test as
// a subtest of t, one after the other.
func RunOptions(t *testing.T, open Opener, o Options) {
	if o.LargeSize <= 0 {
		o.LargeSize = DefaultLargeSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	a, b := open(t)
	if a == nil || b == nil {
		t.Fatal("rdmatest: the opener returned no device")
	}
	e := &env{a: a, b: b, same: a == b, o: o}
	e.port.Store(uint32(o.Port))
	e.mtu = min(a.Port().ActiveMTU, b.Port().ActiveMTU)
	if !e.mtu.Valid() {
		t.Fatalf("rdmatest: active MTUs %v and %v: no valid path MTU", a.Port().ActiveMTU, b.Port().ActiveMTU)
	}
	e.rdAtomic = uint8(min(16, a.Attr().MaxQPRdAtom, a.Attr().MaxQPInitRdAtom, b.Attr().MaxQPRdAtom, b.Attr().MaxQPInitRdAtom))
	if e.rdAtomic == 0 {
		e.rdAtomic = 1
	}
	t.Logf("rdmatest: devices %s (%v) and %s (%v), same device %v, path MTU %v, rd_atomic %d, large transfers %d bytes",
		a.Name(), a.Addr(), b.Name(), b.Addr(), e.same, e.mtu, e.rdAtomic, o.LargeSize)
	for _, tc := range e.tests() {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := o.KnownFailures[tc.name]; ok {
				t.Skipf("known conformance failure of this provider: %s", why)
			}
			tc.run(t, e)
		})
	}
}

// Names returns the names of the suite's tests, in the order they run
// (with the default Options; the sizes in the names do not depend on
// the devices).
func Names() []string {
	e := &env{o: Options{LargeSize: DefaultLargeSize}, mtu: rdma.MTU1024}
	var n []string
	for _, tc := range e.tests() {
		n = append(n, tc.name)
	}
	return n
}

// test is one entry of the table.
type test struct {
	name string
	run  func(t *testing.T, e *env)
}

// env is what every test gets: the devices and the run's parameters.
type env struct {
	a, b     rdma.Device
	same     bool
	o        Options
	mtu      rdma.MTU // the path MTU of manually connected QPs
	rdAtomic uint8    // RDMA READs outstanding per QP, either way
	port     atomic.Uint32
}

// nextPort returns a CM port no earlier test of the run used.
func (e *env) nextPort() uint16 { return uint16(e.port.Add(1) - 1) }

// tests returns the table.
func (e *env) tests() []test {
	mtu := e.mtu.Bytes()
	sizes := []struct {
		name string
		n    int
	}{
		{"0B", 0}, {"1B", 1}, {"MTU-1", mtu - 1}, {"MTU", mtu}, {"MTU+1", mtu + 1}, {"64KiB", 64 << 10}, {"Large", e.o.LargeSize},
	}
	var ts []test
	add := func(name string, f func(t *testing.T, e *env)) { ts = append(ts, test{name, f}) }

	add("Device/Attributes", testDeviceAttributes)
	add("Resources/Busy", testResourcesBusy)
	add("MR/Keys", testMRKeys)
	add("MR/InvalidateRekey", testMRInvalidateRekey)
	add("MR/Remap", testMRRemap)
	add("MR/RemapFence", testMRRemapFence)
	add("QP/StateMachine", testQPStateMachine)
	add("QP/MissingAttributes", testQPMissingAttributes)
	add("QP/SQD", testQPSQD)
	add("QP/ResetDropsWork", testQPResetDropsWork)

	for _, s := range sizes {
		add("Send/"+s.name, func(t *testing.T, e *env) { testSend(t, e, s.n) })
	}
	add("Send/MultiSGE", testSendMultiSGE)
	add("Send/WithImm", testSendWithImm)
	add("Send/Inline", testSendInline)
	add("Send/WithInvalidate", testSendWithInvalidate)
	add("Send/Signaling", testSendSignaling)
	add("Send/QueueWrap", testSendQueueWrap)
	for _, s := range sizes {
		add("Write/"+s.name, func(t *testing.T, e *env) { testWrite(t, e, s.n) })
	}
	add("Write/WithImm", testWriteWithImm)
	add("Read/1B", func(t *testing.T, e *env) { testRead(t, e, 1) })
	add("Read/MTU+1", func(t *testing.T, e *env) { testRead(t, e, mtu+1) })
	add("Read/64KiB", func(t *testing.T, e *env) { testRead(t, e, 64<<10) })
	add("Read/Large", func(t *testing.T, e *env) { testRead(t, e, e.o.LargeSize) })
	add("Read/Outstanding", testReadOutstanding)
	add("Mixed/Ordering", testMixedOrdering)
	add("LocalInv", testLocalInv)
	add("MW/ReadWrite", testMWReadWrite)
	add("MW/WrongDirection", testMWWrongDirection)
	add("MW/Outside", testMWOutside)
	add("MW/LocalInv", testMWLocalInv)
	add("MW/SendWithInvalidate", testMWSendWithInvalidate)
	add("MW/Rebind", testMWRebind)
	add("Atomic/FetchAdd", testAtomicFetchAdd)

	for _, c := range remoteAccessCases() {
		add("RemoteAccess/"+c.name, func(t *testing.T, e *env) { testRemoteAccess(t, e, c) })
	}
	add("LocalProtection/BadLKey", func(t *testing.T, e *env) { testLocalProtection(t, e, lpBadLKey) })
	add("LocalProtection/SGEPastEnd", func(t *testing.T, e *env) { testLocalProtection(t, e, lpPastEnd) })
	add("LocalProtection/ReadIntoReadOnly", func(t *testing.T, e *env) { testLocalProtection(t, e, lpReadOnly) })
	add("RecvTooSmall", testRecvTooSmall)
	add("FlushOnErr", testFlushOnErr)
	add("QueueFull/Send", testQueueFullSend)
	add("QueueFull/Recv", testQueueFullRecv)
	add("RNR/Recovers", testRNRRecovers)
	add("RNR/RetryExceeded", testRNRRetryExceeded)
	add("RetryExceeded", testRetryExceeded)

	add("CQ/PollWait", testCQPollWait)
	add("CQ/Notify", testCQNotify)
	add("CQ/DestroyWakesWait", testCQDestroyWakesWait)
	add("CQ/Handler", testCQHandler)

	add("CM/ConnectAccept", testCMConnectAccept)
	add("CM/DisconnectPassive", testCMDisconnectPassive)
	add("CM/Reject", testCMReject)
	add("CM/NoListener", testCMNoListener)
	add("CM/Listen", testCMListen)
	add("CM/PrivateDataLimits", testCMPrivateDataLimits)
	return ts
}
