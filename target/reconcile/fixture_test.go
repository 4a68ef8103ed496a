package reconcile

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
)

const (
	testSubNQN  = "nqn.2026-11.io.nvmeof:reconcile-test"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	otherHost   = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
)

// fixture is a target with a reconciler; the ports Apply starts are
// served on a loop network, where hosts (the initiator) connect.
type fixture struct {
	t   *testing.T
	tgt *target.Target
	rc  *Reconciler
	net *loop.Network
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	tgt := target.New(target.Options{})
	t.Cleanup(func() { tgt.Close() })
	return &fixture{t: t, tgt: tgt, rc: New(tgt, nil), net: loop.NewNetwork()}
}

// apply applies tree, which must apply, and serves the ports it starts.
func (f *fixture) apply(tree *configfs.Tree) Changes {
	f.t.Helper()
	ch, err := f.rc.Apply(tree)
	must(f.t, err)
	f.serve(ch.Start)
	return ch
}

// serve serves ports until the test ends.
func (f *fixture) serve(starts []PortListener) {
	f.t.Helper()
	for _, p := range starts {
		l, err := f.net.Listen(p.Address)
		must(f.t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { f.tgt.Serve(ctx, p.ID, l); close(done) }()
		f.t.Cleanup(func() { cancel(); <-done })
	}
}

// connect connects a host to subsystem opts.SubsystemNQN (testSubNQN if
// empty) through addr, as testHostNQN unless opts names another host.
func (f *fixture) connect(addr fabrics.Address, opts initiator.Options) (*initiator.Controller, error) {
	f.t.Helper()
	if opts.SubsystemNQN == "" {
		opts.SubsystemNQN = testSubNQN
	}
	if opts.HostNQN == "" {
		opts.HostNQN = testHostNQN
	}
	if opts.HostID == ([16]byte{}) { // one per host NQN: the target refuses a Host ID two NQNs share
		h := sha256.Sum256([]byte(opts.HostNQN))
		opts.HostID = [16]byte(h[:16])
	}
	if opts.NrIOQueues == 0 {
		opts.NrIOQueues = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := initiator.Connect(ctx, loop.Dialer{Net: f.net}, addr, opts)
	if err == nil {
		f.t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// discover reads the discovery log through addr as testHostNQN.
func (f *fixture) discover(addr fabrics.Address) []initiator.DiscoveryEntry {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := initiator.Discover(ctx, loop.Dialer{Net: f.net}, addr, initiator.Options{HostNQN: testHostNQN})
	must(f.t, err)
	return es
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func parse(t *testing.T, src, name string) *configfs.Tree {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(src), name)
	must(t, err)
	return tree
}

// identify runs Identify (cns, nsid) on c's admin queue.
func identify(t *testing.T, c *initiator.Controller, cns uint8, nsid uint32) []byte {
	t.Helper()
	var sqe [64]byte
	s := nvme.SQE(sqe[:])
	s.SetOpcode(uint8(nvme.AdminIdentify))
	s.SetNSID(nsid)
	nvme.IdentifyCommand{SQE: s}.SetCNS(cns)
	data := make([]byte, nvme.IdentifyDataSize)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.AdminCommand(ctx, sqe, data, fabrics.DirCtrlToHost)
	must(t, err)
	return data
}

// activeNSIDs is c's Active Namespace ID list.
func activeNSIDs(t *testing.T, c *initiator.Controller) []uint32 {
	t.Helper()
	ids, err := nvme.DecodeNSIDList(identify(t, c, nvme.CNSActiveNSList, 0))
	must(t, err)
	return ids
}

// nsze is namespace nsid's size in blocks as c's Identify Namespace says.
func nsze(t *testing.T, c *initiator.Controller, nsid uint32) uint64 {
	t.Helper()
	return nvme.IdentifyNamespace(identify(t, c, nvme.CNSNamespace, nsid)).NSZE()
}

// waitEvent waits for an asynchronous event of kind want.
func waitEvent(t *testing.T, events <-chan initiator.AsyncEvent, want nvme.AsyncEvent) initiator.AsyncEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Event == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event %v", want)
		}
	}
}

// noEvent fails when an event is queued.
func noEvent(t *testing.T, events <-chan initiator.AsyncEvent) {
	t.Helper()
	select {
	case ev := <-events:
		t.Fatalf("event %v without a change", ev.Event)
	default:
	}
}

// hostOn applies tree, serves its ports and connects a host to the
// first port started; the channel gets the host's asynchronous events.
func (f *fixture) hostOn(tree *configfs.Tree) (*initiator.Controller, <-chan initiator.AsyncEvent) {
	f.t.Helper()
	opts := initiator.Options{}
	events := eventsTo(&opts)
	c, err := f.connect(f.apply(tree).Start[0].Address, opts)
	must(f.t, err)
	return c, events
}

// eventsTo returns a channel the initiator's OnAsyncEvent feeds.
func eventsTo(opts *initiator.Options) <-chan initiator.AsyncEvent {
	ch := make(chan initiator.AsyncEvent, 16)
	opts.OnAsyncEvent = func(ev initiator.AsyncEvent) {
		select {
		case ch <- ev:
		default: // the tests wait for a few events at most
		}
	}
	return ch
}

// ctxT is a context that ends with the test, or after 10 s.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
