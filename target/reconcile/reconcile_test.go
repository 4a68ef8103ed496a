package reconcile

import (
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
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
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

// TestApply builds a target from a tree, refuses a reload that cannot
// apply (nothing changes), applies one that adds, removes and disables
// while a host stays connected (it gets the namespace change event), and
// goes back.
func TestApply(t *testing.T) {
	f := newFixture(t)
	tree1 := parse(t, configV1, "v1.hcl")
	res, err := f.rc.Apply(tree1)
	must(t, err)
	if len(res.Start) != 1 || res.Start[0].ID != 7 || res.Start[0].InlineDataSize != 4096 || res.Start[0].Name != "p1" {
		t.Fatalf("ports to start: %+v", res.Start)
	}
	f.serve(res.Start)
	p1 := res.Start[0].Address

	opts := initiator.Options{}
	events := eventsTo(&opts)
	a, err := f.connect(p1, opts)
	must(t, err)
	id := a.IdentifyData()
	if id.SN() != "CFG0001" || id.MN() != "configured" || id.VER() != nvme.Version1_4 || id.IOCCSZ() != (64+4096)/16 {
		t.Errorf("Identify: SN %q MN %q VER %#x IOCCSZ %d", id.SN(), id.MN(), id.VER(), id.IOCCSZ())
	}
	if ns := nvme.IdentifyNamespace(identify(t, a, nvme.CNSNamespace, 2)); ns.LBADataSize() != 4096 || ns.NSZE() != 512 {
		t.Errorf("namespace 2: %d-byte blocks, NSZE %d", ns.LBADataSize(), ns.NSZE())
	}
	uuid, _, _ := tree1.Subsystem(testSubNQN).Namespace(1).IDs(testSubNQN)
	ds, _ := nvme.DecodeNSDescriptors(identify(t, a, nvme.CNSNSDescriptorList, 1))
	if !slices.ContainsFunc(ds, func(d nvme.NSDescriptor) bool { return d.NIDT == nvme.NIDTUUID && [16]byte(d.NID) == uuid }) {
		t.Errorf("namespace 1 descriptors %v lack the derived UUID %v", ds, uuid)
	}
	if l := f.discover(p1); len(l) != 3 || l[1].PortID != 7 {
		t.Fatalf("discovery: %d records %+v", len(l), l)
	}

	// A reload where namespace 4 cannot open applies nothing: the error
	// says where, and the target is as before.
	res, err = f.rc.Apply(parse(t, configV2+configV2Bad, "v2.hcl"))
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
	if ids := activeNSIDs(t, a); !slices.Equal(ids, []uint32{1, 2}) {
		t.Errorf("after a refused reload: active namespaces %v, want [1 2]", ids)
	}
	if l := f.discover(p1); len(l) != 3 {
		t.Errorf("after a refused reload: %d discovery records, want 3", len(l))
	}
	if _, ok := f.tgt.Port(7); !ok {
		t.Error("after a refused reload: port 7 gone")
	}

	// Reload: namespace 1 disabled, 3 added; the second subsystem goes; a
	// port appears; any host allowed.
	tree2 := parse(t, configV2+"}\n", "v2.hcl")
	res, err = f.rc.Apply(tree2)
	must(t, err)
	if len(res.Start) != 1 || res.Start[0].Name != "p2" || len(res.Stopped) != 0 {
		t.Fatalf("reload: start %+v, stopped %v", res.Start, res.Stopped)
	}
	f.serve(res.Start)
	waitEvent(t, events, nvme.AENNamespaceChanged)
	if ids := activeNSIDs(t, a); !slices.Equal(ids, []uint32{2, 3}) {
		t.Errorf("active namespaces %v, want [2 3]", ids)
	}
	if l := f.discover(p1); len(l) != 2 {
		t.Errorf("discovery after reload: %d records, want 2", len(l))
	}
	// The controller survived the reload; a second host may connect now.
	if a.State() != initiator.StateLive {
		t.Errorf("controller after the reload: %v", a.State())
	}
	p2 := fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.2"), ServiceID: 4420}
	if _, err := f.connect(p2, initiator.Options{HostNQN: otherHost}); err != nil {
		t.Errorf("any host on the new port: %v", err)
	}

	// Applying the same tree again changes nothing.
	res, err = f.rc.Apply(tree2)
	if err != nil || len(res.Start) != 0 || len(res.Stopped) != 0 {
		t.Fatalf("second reload: start %+v stopped %v err %v", res.Start, res.Stopped, err)
	}

	// Back to v1: p2 stops, the gone subsystem returns, namespace 3 goes.
	res, err = f.rc.Apply(tree1)
	must(t, err)
	if len(res.Stopped) != 1 || res.Stopped[0] != "p2" {
		t.Fatalf("back to v1: stopped %v", res.Stopped)
	}
	if ids := activeNSIDs(t, a); !slices.Equal(ids, []uint32{1, 2}) {
		t.Errorf("active namespaces %v, want [1 2]", ids)
	}
	if got := f.rc.Applied(); got.Subsystem("nqn.2026-11.io.nvmeof:gone") == nil || got.Port("p2") != nil {
		t.Errorf("Applied after going back: %+v", got)
	}
}

// TestNonConformingNQNs serves names Linux nvmet accepts and nvmetcli
// examples use: a subsystem "testnqn" and a host "testhost" (named only in
// allowed_hosts) load with warnings and accept a Connect.
func TestNonConformingNQNs(t *testing.T) {
	tree := parse(t, `
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
`, "t.hcl")
	if ws := tree.Warnings(); len(ws) != 2 {
		t.Errorf("warnings %v, want one for the host and one for the subsystem", ws)
	}
	f := newFixture(t)
	addr := f.apply(tree).Start[0].Address
	if _, err := f.connect(addr, initiator.Options{SubsystemNQN: "testnqn", HostNQN: "testhost"}); err != nil {
		t.Errorf("Connect to testnqn as testhost: %v", err)
	}
	if _, err := f.connect(addr, initiator.Options{SubsystemNQN: "testnqn"}); nvme.StatusOf(err) != fabrics.StatusConnectInvalidHost {
		t.Errorf("Connect by a host not allowed: %v", err)
	}
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

// TestApplyMemoryLimit: memory namespaces larger than the machine's
// memory, alone or together, are refused with the position of the size
// that goes over (one of 1000000 TiB used to kill the process), by
// CheckBackends and by Apply, which then changes nothing.
func TestApplyMemoryLimit(t *testing.T) {
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
			f := newFixture(t)
			if _, err := f.rc.Apply(tree); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Apply: %v, want %q", err, tt.want)
			}
			if err := f.tgt.AddSubsystem(target.SubsystemConfig{NQN: testSubNQN}); err != nil {
				t.Errorf("the refused configuration added its subsystem: %v", err)
			}
		})
	}
}

// TestApplyPrepareFails: an error from the prepare step (an RDMA
// device that does not open, in the server) applies nothing and closes
// the backends opened for it.
func TestApplyPrepareFails(t *testing.T) {
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
	f := newFixture(t)
	boom := errors.New("device does not open")
	var plan Changes
	res, err := f.rc.ApplyWith(tree, func(ch Changes) error { plan = ch; return boom })
	if !errors.Is(err, boom) || len(res.Start) != 0 {
		t.Fatalf("ApplyWith = %+v, %v; want nothing started and %v", res, err, boom)
	}
	if len(plan.Start) != 1 || plan.Start[0].Name != "p1" {
		t.Errorf("prepare got %+v, want port p1 to start", plan)
	}
	if _, ok := f.tgt.Port(plan.Start[0].ID); ok {
		t.Error("refused configuration added its port")
	}
	// Applied again without the failure, everything comes up: the file
	// opened the first time was closed, not leaked.
	res, err = f.rc.Apply(tree)
	must(t, err)
	if len(res.Start) != 1 {
		t.Errorf("start %+v", res.Start)
	}
}

// TestApplyBlockReload: a reload that changes a block namespace's
// attributes applies: the running namespace holds the device exclusively
// (O_EXCL), so it is reopened once the old one is gone, not prepared.
func TestApplyBlockReload(t *testing.T) {
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
	f := newFixture(t)
	_, err = f.rc.Apply(cfg(false))
	must(t, err)
	_, err = f.rc.Apply(cfg(true))
	must(t, err)
	if err := f.tgt.RemoveNamespace(testSubNQN, 1); err != nil {
		t.Errorf("namespace 1 after the reload: %v", err)
	}
}
