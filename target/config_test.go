package target

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

const configV1 = `
port "p1" {
  transport        = "loop"
  address          = "127.0.0.1"
  inline_data_size = 4096
  portid           = 7
}

host "` + testHostNQN + `" {}

subsystem "` + testSubNQN + `" {
  ports         = ["p1"]
  allowed_hosts = ["` + testHostNQN + `"]
  serial        = "CFG0001"
  model         = "configured"
  version       = "1.4"
  namespace "1" {
    backend    = "memory"
    size       = "1MiB"
  }
  namespace "2" {
    backend    = "memory"
    size       = "2MiB"
    block_size = 4096
  }
}

subsystem "nqn.2026-11.io.nvmeof:gone" {
  ports          = ["p1"]
  allow_any_host = true
}
`

const configV2 = `
port "p1" {
  transport        = "loop"
  address          = "127.0.0.1"
  inline_data_size = 4096
  portid           = 7
}

port "p2" {
  transport = "loop"
  address   = "127.0.0.2"
}

host "` + testHostNQN + `" {}

subsystem "` + testSubNQN + `" {
  ports          = ["p1", "p2"]
  allow_any_host = true
  serial         = "CFG0001"
  model          = "configured"
  version        = "1.4"
  namespace "1" {
    backend    = "memory"
    size       = "1MiB"
    enabled    = false
  }
  namespace "2" {
    backend    = "memory"
    size       = "2MiB"
    block_size = 4096
  }
  namespace "3" {
    backend    = "memory"
    size       = "1MiB"
  }
`

// configV2Bad ends configV2 with a namespace whose file cannot be created
// (missing directories are made, but not under /dev/null).
const configV2Bad = `  namespace "4" {
    backend    = "file"
    path       = "/dev/null/dir/disk.img"
    size       = "1MiB"
  }
}
`

func serveConfigured(t *testing.T, tgt *Target, net *loop.Network, starts []PortListener) {
	t.Helper()
	for _, p := range starts {
		l, err := net.Listen(p.Address)
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { tgt.Serve(ctx, p.ID, l); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

// configuredFixture returns a fixture on a new target with tree applied,
// its ports served on a loop network; the fixture dials the first.
func configuredFixture(t *testing.T, tree *configfs.Tree) *fixture {
	t.Helper()
	tgt := New(Options{Logger: testLogger(t)})
	t.Cleanup(func() { tgt.Close() })
	res, err := tgt.ApplyConfig(tree)
	must(t, err)
	net := loop.NewNetwork()
	serveConfigured(t, tgt, net, res.Start)
	return &fixture{t: t, tgt: tgt, net: net, addr: res.Start[0].Address}
}

func TestApplyConfig(t *testing.T) {
	tree1, err := configfs.ParseHCL([]byte(configV1), "v1.hcl")
	must(t, err)
	tgt := New(Options{Logger: testLogger(t)})
	t.Cleanup(func() { tgt.Close() })
	res, err := tgt.ApplyConfig(tree1)
	must(t, err)
	if len(res.Start) != 1 || res.Start[0].ID != 7 || res.Start[0].InlineDataSize != 4096 || res.Start[0].Name != "p1" {
		t.Fatalf("ports to start: %+v", res.Start)
	}
	net := loop.NewNetwork()
	serveConfigured(t, tgt, net, res.Start)
	f := &fixture{t: t, tgt: tgt, net: net, addr: res.Start[0].Address}

	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	id := nvme.IdentifyController(a.identify(nvme.CNSController, 0, 0).data)
	if id.SN() != "CFG0001" || id.MN() != "configured" || id.VER() != nvme.Version1_4 || id.IOCCSZ() != (64+4096)/16 {
		t.Errorf("Identify: SN %q MN %q VER %#x IOCCSZ %d", id.SN(), id.MN(), id.VER(), id.IOCCSZ())
	}
	r := a.identify(nvme.CNSNamespace, 2, 0)
	if ns := nvme.IdentifyNamespace(r.data); ns.LBADataSize() != 4096 || ns.NSZE() != 512 {
		t.Errorf("namespace 2: %d-byte blocks, NSZE %d", ns.LBADataSize(), ns.NSZE())
	}
	uuid, _, _ := tree1.Subsystem(testSubNQN).Namespace(1).IDs(testSubNQN)
	ds, _ := nvme.DecodeNSDescriptors(a.identify(nvme.CNSNSDescriptorList, 1, 0).data)
	if !slices.ContainsFunc(ds, func(d nvme.NSDescriptor) bool { return d.NIDT == nvme.NIDTUUID && [16]byte(d.NID) == uuid }) {
		t.Errorf("namespace 1 descriptors %v lack the derived UUID %v", ds, uuid)
	}
	d := f.connectDiscovery(testHostNQN, 0)
	l, _ := d.discoveryLog(4096, 0)
	if l.NumRec != 3 || l.Entries[1].PortID != 7 {
		t.Fatalf("discovery: %d records, port %d", l.NumRec, l.Entries[1].PortID)
	}
	aer := a.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)

	// A reload where namespace 4 cannot open applies nothing: the error
	// says where, and the target is as before.
	tree2bad, err := configfs.ParseHCL([]byte(configV2+configV2Bad), "v2.hcl")
	must(t, err)
	res, err = tgt.ApplyConfig(tree2bad)
	if err == nil {
		t.Fatal("reload with a namespace that cannot open: no error")
	}
	if want := "v2.hcl:38:18: subsystems/" + testSubNQN + "/namespaces/4: path: bdev: file"; !strings.Contains(err.Error(), want) {
		t.Errorf("reload error %q, want it to contain %q", err, want)
	}
	if len(res.Start) != 0 || len(res.Stopped) != 0 {
		t.Fatalf("refused reload: start %+v, stopped %v", res.Start, res.Stopped)
	}
	if na := (*NotAppliedError)(nil); !errors.As(err, &na) {
		t.Errorf("refused reload: %T is not a *NotAppliedError", err)
	}
	r = a.identify(nvme.CNSActiveNSList, 0, 0)
	if ids, _ := nvme.DecodeNSIDList(r.data); !slices.Equal(ids, []uint32{1, 2}) {
		t.Errorf("after a refused reload: active namespaces %v, want [1 2]", ids)
	}
	if l, _ := d.discoveryLog(4096, 0); l.NumRec != 3 {
		t.Errorf("after a refused reload: %d discovery records, want 3", l.NumRec)
	}
	if _, ok := tgt.Port(7); !ok {
		t.Error("after a refused reload: port 7 gone")
	}

	// Reload: namespace 1 disabled, 3 added; the second subsystem goes; a
	// port appears; any host allowed.
	tree2, err := configfs.ParseHCL([]byte(configV2+"}\n"), "v2.hcl")
	must(t, err)
	res, err = tgt.ApplyConfig(tree2)
	must(t, err)
	if len(res.Start) != 1 || res.Start[0].Name != "p2" || len(res.Stopped) != 0 {
		t.Fatalf("reload: start %+v, stopped %v", res.Start, res.Stopped)
	}
	serveConfigured(t, tgt, net, res.Start)

	expect(t, a.wait(aer), 0, "namespace change event")
	r = a.identify(nvme.CNSActiveNSList, 0, 0)
	if ids, _ := nvme.DecodeNSIDList(r.data); !slices.Equal(ids, []uint32{2, 3}) {
		t.Errorf("active namespaces %v, want [2 3]", ids)
	}
	l, _ = d.discoveryLog(4096, 0)
	if l.NumRec != 2 {
		t.Errorf("discovery after reload: %d records, want 2", l.NumRec)
	}
	// The controller survived the reload; a second host may connect now.
	f2 := &fixture{t: t, tgt: tgt, net: net, addr: fabrics.Address{Transport: fabrics.TransportLoop,
		Addr: netip.MustParseAddr("127.0.0.2"), ServiceID: 4420}}
	h := f2.dial(0, 8)
	expect(t, h.connectRaw(8, 0, 0, testSubNQN, otherHost, 0xffff), 0, "any host on the new port")

	// Applying the same tree again changes nothing.
	res, err = tgt.ApplyConfig(tree2)
	if err != nil || len(res.Start) != 0 || len(res.Stopped) != 0 {
		t.Fatalf("second reload: start %+v stopped %v err %v", res.Start, res.Stopped, err)
	}

	// Back to v1: p2 stops, the gone subsystem returns, namespace 3 goes.
	res, err = tgt.ApplyConfig(tree1)
	must(t, err)
	if len(res.Stopped) != 1 || res.Stopped[0] != "p2" {
		t.Fatalf("back to v1: stopped %v", res.Stopped)
	}
	r = a.identify(nvme.CNSActiveNSList, 0, 0)
	if ids, _ := nvme.DecodeNSIDList(r.data); !slices.Equal(ids, []uint32{1, 2}) {
		t.Errorf("active namespaces %v, want [1 2]", ids)
	}
}

// TestNonConformingNQNs serves names Linux nvmet accepts and nvmetcli
// examples use: a subsystem "testnqn" and a host "testhost" (named only in
// allowed_hosts) load with warnings and accept a Connect; unsafe names are
// still refused.
func TestNonConformingNQNs(t *testing.T) {
	tree, err := configfs.ParseHCL([]byte(`
port "p1" {
  transport = "loop"
  address   = "127.0.0.1"
}
subsystem "testnqn" {
  ports         = ["p1"]
  allowed_hosts = ["testhost"]
  namespace "1" {
    backend = "null"
    size    = "1MiB"
  }
}
`), "t.hcl")
	must(t, err)
	if ws := tree.Warnings(); len(ws) != 2 {
		t.Errorf("warnings %v, want one for the host and one for the subsystem", ws)
	}
	f := configuredFixture(t, tree)
	tgt := f.tgt
	h := f.dial(0, 31)
	expect(t, h.connectRaw(31, 0, 0, "testnqn", "testhost", fabrics.CntlIDDynamic), 0, "Connect to testnqn as testhost")
	h2 := f.dial(0, 31)
	expect(t, h2.connectRaw(31, 0, 0, "testnqn", testHostNQN, fabrics.CntlIDDynamic),
		fabrics.StatusConnectInvalidHost, "Connect by a host not allowed")

	for _, err := range []error{
		tgt.AddSubsystem(SubsystemConfig{NQN: "test nqn"}),
		tgt.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.nvmeof:x", AllowedHosts: []string{"nqn.2014-08.org.nvmexpress:uuid:zz"}}),
		tgt.AllowHost("testnqn", "host\n1"),
	} {
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, fabrics.ErrInvalidNQN) {
			t.Errorf("unsafe name: %v", err)
		}
	}
	must(t, tgt.AllowHost("testnqn", "otherhost"))
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want fabrics.VS
		ok   bool
	}{
		{"1.3", fabrics.VS13, true},
		{"2.0", fabrics.VS20, true},
		{"1.4.1", fabrics.MakeVS(1, 4, 1), true},
		{"1", 0, false},
		{"1.300", 0, false},
		{"a.b", 0, false},
	} {
		v, err := parseVersion(tc.in)
		if (err == nil) != tc.ok || v != tc.want {
			t.Errorf("parseVersion(%q) = %v, %v", tc.in, v, err)
		}
	}
}

// TestApplyConfigMemoryLimit: memory namespaces larger than the machine's
// memory, alone or together, are refused with the position of the size
// that goes over (one of 1000000 TiB used to kill the process), by
// CheckBackends and by ApplyConfig, which then changes nothing.
func TestApplyConfigMemoryLimit(t *testing.T) {
	ram := bdev.PhysicalMemory()
	half := (ram/2 + 1<<20) &^ (1<<20 - 1) // two of them exceed ram
	ns := func(nsid int, size string) string {
		return fmt.Sprintf("  namespace \"%d\" {\n    backend = \"memory\"\n    size    = %s\n  }\n", nsid, size)
	}
	cfg := func(nss ...string) string {
		return "subsystem \"" + testSubNQN + "\" {\n  allow_any_host = true\n" + strings.Join(nss, "") + "}\n"
	}
	tests := []struct {
		name, hcl, want string
	}{
		{"one too large", cfg(ns(1, `"1MiB"`), ns(2, `"1000000TiB"`)),
			"m.hcl:9:15: subsystems/" + testSubNQN + "/namespaces/2: size: bdev: memory: size"},
		{"together too large", cfg(ns(1, strconv.FormatInt(half, 10)), ns(2, strconv.FormatInt(half, 10))),
			"m.hcl:9:15: subsystems/" + testSubNQN + "/namespaces/2: size: bdev: memory: memory namespaces up to this one, together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := configfs.ParseHCL([]byte(tt.hcl), "m.hcl")
			must(t, err)
			if err := CheckBackends(tree); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckBackends: %v, want %q", err, tt.want)
			}
			tgt := New(Options{Logger: testLogger(t)})
			t.Cleanup(func() { tgt.Close() })
			if _, err := tgt.ApplyConfig(tree); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ApplyConfig: %v, want %q", err, tt.want)
			}
			if err := tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN}); err != nil {
				t.Errorf("the refused configuration added its subsystem: %v", err)
			}
		})
	}
}

// TestApplyConfigPrepareFails: an error from the prepare step (an RDMA
// device that does not open, in the server) applies nothing and closes
// the backends opened for it.
func TestApplyConfigPrepareFails(t *testing.T) {
	dir := t.TempDir()
	tree, err := configfs.ParseHCL([]byte(`
port "p1" {
  transport = "loop"
  address   = "127.0.0.1"
}
subsystem "`+testSubNQN+`" {
  ports          = ["p1"]
  allow_any_host = true
  namespace "1" {
    path = "`+filepath.Join(dir, "disk.img")+`"
    size = "1MiB"
  }
}
`), "p.hcl")
	must(t, err)
	tgt := New(Options{Logger: testLogger(t)})
	t.Cleanup(func() { tgt.Close() })
	boom := errors.New("device does not open")
	var plan ConfigChanges
	res, err := tgt.ApplyConfigWith(tree, func(ch ConfigChanges) error { plan = ch; return boom })
	if !errors.Is(err, boom) || len(res.Start) != 0 {
		t.Fatalf("ApplyConfigWith = %+v, %v; want nothing started and %v", res, err, boom)
	}
	if len(plan.Start) != 1 || plan.Start[0].Name != "p1" {
		t.Errorf("prepare got %+v, want port p1 to start", plan)
	}
	if _, ok := tgt.Port(plan.Start[0].ID); ok {
		t.Error("refused configuration added its port")
	}
	// Applied again without the failure, everything comes up: the file
	// opened the first time was closed, not leaked.
	res, err = tgt.ApplyConfig(tree)
	must(t, err)
	if len(res.Start) != 1 {
		t.Errorf("start %+v", res.Start)
	}
}

// TestApplyConfigBlockReload: a reload that changes a block namespace's
// attributes applies: the running namespace holds the device exclusively
// (O_EXCL), so it is reopened once the old one is gone, not prepared.
func TestApplyConfigBlockReload(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("needs losetup (util-linux)")
	}
	img := filepath.Join(t.TempDir(), "loop.img")
	must(t, os.WriteFile(img, nil, 0o600))
	must(t, os.Truncate(img, 4<<20))
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	cfg := func(buffered bool) *configfs.Tree {
		tree, err := configfs.ParseHCL([]byte(fmt.Sprintf(`
subsystem "%s" {
  allow_any_host = true
  namespace "1" {
    path        = "%s"
    buffered_io = %t
  }
}
`, testSubNQN, dev, buffered)), "b.hcl")
		must(t, err)
		return tree
	}
	tgt := New(Options{Logger: testLogger(t)})
	t.Cleanup(func() { tgt.Close() })
	_, err = tgt.ApplyConfig(cfg(false))
	must(t, err)
	_, err = tgt.ApplyConfig(cfg(true))
	must(t, err)
	if err := tgt.RemoveNamespace(testSubNQN, 1); err != nil {
		t.Errorf("namespace 1 after the reload: %v", err)
	}
}
