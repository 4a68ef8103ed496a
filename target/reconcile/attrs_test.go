package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// anaLog reads c's ANA log page.
func anaLog(t *testing.T, c *initiator.Controller) nvme.ANALog {
	t.Helper()
	buf := make([]byte, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, c.GetLogPage(ctx, nvme.LIDANA, 0, buf))
	l, err := nvme.DecodeANALog(buf)
	must(t, err)
	return l
}

// TestApplyANA: ANA states and groups come from the configuration, and a
// reload that changes them applies them in place: the connected host
// keeps its controller and gets an ANA Change event.
func TestApplyANA(t *testing.T) {
	tree := parse(t, configV1, "v1.hcl")
	p := tree.Port("p1")
	p.ANAGroups = []configfs.ANAGroup{{GrpID: 1, State: configfs.ANAOptimized}, {GrpID: 2, State: configfs.ANANonOptimized}}
	tree.Subsystem(testSubNQN).Namespace(2).ANAGrpID = 2
	f := newFixture(t)
	c, events := f.hostOn(tree)
	l := anaLog(t, c)
	if len(l.Groups) != 2 || l.Groups[0].State != nvme.ANAOptimized || l.Groups[1].State != nvme.ANANonOptimized ||
		len(l.Groups[1].NSIDs) != 1 || l.Groups[1].NSIDs[0] != 2 {
		t.Fatalf("ANA log from the configuration: %+v", l.Groups)
	}

	next := tree.Clone()
	next.Port("p1").ANAGroups = []configfs.ANAGroup{{GrpID: 1, State: configfs.ANAInaccessible}, {GrpID: 2, State: configfs.ANAOptimized}}
	next.Subsystem(testSubNQN).Namespace(1).ANAGrpID = 2
	res, err := f.rc.Apply(next)
	must(t, err)
	if len(res.Start)+len(res.Stopped) != 0 {
		t.Fatalf("an ANA change restarted ports: %+v", res)
	}
	waitEvent(t, events, nvme.AENANAChange)
	l = anaLog(t, c)
	if len(l.Groups) != 2 || l.Groups[0].State != nvme.ANAInaccessible || l.Groups[1].State != nvme.ANAOptimized ||
		len(l.Groups[0].NSIDs) != 0 || len(l.Groups[1].NSIDs) != 2 {
		t.Fatalf("ANA log after the reload: %+v", l.Groups)
	}
	next2 := next.Clone()
	next2.Subsystem(testSubNQN).Namespace(1).ANAGrpID = 1
	_, err = f.rc.Apply(next2)
	must(t, err)
	if g := nvme.IdentifyNamespace(identify(t, c, nvme.CNSNamespace, 1)).ANAGRPID(); g != 1 {
		t.Fatalf("namespace 1 in ANA group %d, want 1", g)
	}
}

func authConfig(key string) string {
	return `
port "p1" {
  transport = "loop"
  address   = "127.0.0.1"
}

host "` + testHostNQN + `" {
  dhchap_key     = "` + key + `"
  dhchap_dhgroup = "ffdhe2048"
}

subsystem "` + testSubNQN + `" {
  ports         = ["p1"]
  allowed_hosts = ["` + testHostNQN + `"]
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`
}

// TestApplyHostAuth: the configuration's host keys reach the target, and
// a reload that changes a key applies to the next connection.
func TestApplyHostAuth(t *testing.T) {
	genKey := func() *auth.Key {
		k, err := auth.GenerateKey(auth.HashSHA256, 0, testHostNQN, nil)
		must(t, err)
		return k
	}
	k1, k2 := genKey(), genKey()
	f := newFixture(t)
	tree1 := parse(t, authConfig(k1.Encode()), "v1.hcl")
	addr := f.apply(tree1).Start[0].Address
	if _, err := f.connect(addr, initiator.Options{}); err == nil {
		t.Fatal("a host without a key connected: the configuration's key is not required")
	}
	if _, err := f.connect(addr, initiator.Options{HostKey: k1}); err != nil {
		t.Fatalf("key 1: %v", err)
	}
	tree2 := parse(t, authConfig(k2.Encode()), "v2.hcl")
	if ch := configfs.Diff(tree1, tree2); len(ch.HostsChanged) != 1 {
		t.Fatalf("Diff: %+v", ch)
	}
	_, err := f.rc.Apply(tree2)
	must(t, err)
	var ae *auth.Error
	if _, err := f.connect(addr, initiator.Options{HostKey: k1}); !errors.As(err, &ae) {
		t.Fatalf("old key after the reload: %v", err)
	}
	if _, err := f.connect(addr, initiator.Options{HostKey: k2}); err != nil {
		t.Fatalf("new key after the reload: %v", err)
	}
}

// TestApplyQueueDepth: a file namespace opens with its queue_depth, and a
// new queue_depth (or buffered_io) applied reopens it with the new one.
func TestApplyQueueDepth(t *testing.T) {
	img := filepath.Join(t.TempDir(), "qd.img")
	cfg := func(extra string) *configfs.Tree {
		src := fmt.Sprintf("subsystem %q {\n  allow_any_host = true\n  namespace \"1\" {\n    backend = \"file\"\n    path = %q\n    size = \"1MiB\"\n%s  }\n}\n", testSubNQN, img, extra)
		return parse(t, src, "qd.hcl")
	}
	f := newFixture(t)
	tests := []struct {
		extra    string
		depth    int
		buffered bool
	}{
		{"", bdev.DefaultQueueDepth, false},
		{"    queue_depth = 16\n", 16, false},
		{"    queue_depth = 16\n    buffered_io = true\n", 16, true},
		{"    queue_depth = 300\n", 300, false},
	}
	for _, tc := range tests {
		f.apply(cfg(tc.extra))
		d, ok := f.tgt.NamespaceDevice(testSubNQN, 1).(*bdev.File)
		if !ok {
			t.Fatalf("%q: namespace 1 is not a file backend", tc.extra)
		}
		if !d.AsyncReady() {
			t.Skip("no io_uring here")
		}
		if d.QueueDepth() != tc.depth || d.Direct() == tc.buffered {
			t.Fatalf("%q: queue depth %d, direct %v; want %d, %v", tc.extra, d.QueueDepth(), d.Direct(), tc.depth, !tc.buffered)
		}
	}
}

// TestSubsystemLimitsFromConfig: the configuration's qid_max and
// max_controllers reach the subsystem, the port's connection limits its
// listener.
func TestSubsystemLimitsFromConfig(t *testing.T) {
	c := subsystemConfig(&configfs.Subsystem{NQN: testSubNQN, QIDMax: 4, MaxControllers: 2, MaxControllersPerHost: 1})
	if c.MaxIOQueues != 4 || c.MaxControllers != 2 || c.MaxControllersPerHost != 1 {
		t.Fatalf("MaxIOQueues %d, MaxControllers %d, MaxControllersPerHost %d, want 4, 2 and 1", c.MaxIOQueues, c.MaxControllers, c.MaxControllersPerHost)
	}
	pl := portListener(&configfs.Port{ID: "rdma0", ConnectTimeout: 3, MaxPending: 20, MaxPendingPerHost: 10}, target.PortConfig{})
	if pl.ConnectTimeout != 3*time.Second || pl.MaxPending != 20 || pl.MaxPendingPerHost != 10 {
		t.Fatalf("port listener %+v, want connect timeout 3s, pending limits 20 and 10", pl)
	}
}

// TestReservationConfig: resv_enable and resv_ptpl_file from the
// configuration reach the namespace (its RESCAP: 0xff with the Persist
// Through Power Loss file, 0xfe without), and toggling resv_enable on a
// reload replaces it.
func TestReservationConfig(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(t.TempDir(), "ns1.resv")
	hcl := func(extra string) *configfs.Tree {
		return parse(t, `port "p1" {
  transport = "loop"
  address   = "127.0.0.1"
}
subsystem "`+testSubNQN+`" {
  ports          = ["p1"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
`+extra+`
  }
}
`, "r.hcl")
	}
	addr := f.apply(hcl("")).Start[0].Address
	c, err := f.connect(addr, initiator.Options{})
	must(t, err)
	rescap := func() uint8 {
		return nvme.IdentifyNamespace(identify(t, c, nvme.CNSNamespace, 1)).RESCAP()
	}
	dev := f.tgt.NamespaceDevice(testSubNQN, 1)
	for _, tc := range []struct {
		extra    string
		rescap   uint8
		replaced bool
	}{
		{"", 0, false},
		{"resv_enable = true\nresv_ptpl_file = \"" + file + "\"", 0xff, true},
		{"resv_enable = true", 0xfe, true},
		{"", 0, true},
	} {
		f.apply(hcl(tc.extra))
		if got := rescap(); got != tc.rescap {
			t.Errorf("%q: RESCAP %#x, want %#x", tc.extra, got, tc.rescap)
		}
		now := f.tgt.NamespaceDevice(testSubNQN, 1)
		if (now != dev) != tc.replaced {
			t.Errorf("%q: namespace replaced %v, want %v", tc.extra, now != dev, tc.replaced)
		}
		dev = now
	}
}
