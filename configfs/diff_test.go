package configfs

import (
	"reflect"
	"testing"
)

func exampleTree(t *testing.T) *Tree {
	t.Helper()
	tree, err := LoadFile("../examples/nvmetd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func TestClone(t *testing.T) {
	a := exampleTree(t)
	b := a.Clone()
	if c := Diff(a, b); !c.Empty() {
		t.Fatalf("clone differs: %+v", c)
	}
	// Changing the clone leaves the original alone.
	b.Ports[0].Subsystems[0] = "changed"
	b.Subsystems[0].AllowedHosts[0] = "changed"
	b.Subsystems[0].Namespaces[0].Size = 1
	b.Hosts[0].NQN = "changed"
	b.Ports[0].Traddr = "changed"
	if a.Ports[0].Subsystems[0] == "changed" || a.Subsystems[0].AllowedHosts[0] == "changed" ||
		a.Subsystems[0].Namespaces[0].Size == 1 || a.Hosts[0].NQN == "changed" || a.Ports[0].Traddr == "changed" {
		t.Error("Clone shares memory with the original")
	}
	if (*Tree)(nil).Clone() != nil {
		t.Error("Clone of nil")
	}
}

func TestDiff(t *testing.T) {
	const disk0 = "nqn.2026-11.io.nvmeof:disk0"
	const scratch = "nqn.2026-11.io.nvmeof:scratch"
	tests := []struct {
		name string
		edit func(*Tree)
		want Changes
	}{
		{"nothing", func(*Tree) {}, Changes{}},
		{"log level", func(t *Tree) { t.LogLevel = "debug" }, Changes{LogLevel: true}},
		{"host added", func(t *Tree) { t.Hosts = append(t.Hosts, &Host{NQN: hostA + "x"}) }, Changes{HostsAdded: []string{hostA + "x"}}},
		{"port removed", func(t *Tree) { t.Ports = t.Ports[:1] }, Changes{PortsRemoved: []string{"rdma6"}}},
		{"port address", func(t *Tree) { t.Ports[0].Traddr = "127.0.0.2" }, Changes{Ports: []PortChanges{{ID: "rdma0", Listener: true}}}},
		{"port provider", func(t *Tree) { t.Ports[0].Provider = ProviderSoft }, Changes{Ports: []PortChanges{{ID: "rdma0", Listener: true}}}},
		{"port provider auto written as empty", func(t *Tree) { t.Ports[0].Provider = "" }, Changes{}},
		{"port device", func(t *Tree) { t.Ports[0].Device = "rxe0" }, Changes{Ports: []PortChanges{{ID: "rdma0", Listener: true}}}},
		{"port tos", func(t *Tree) { t.Ports[0].TOS = 106 }, Changes{Ports: []PortChanges{{ID: "rdma0", Listener: true}}}},
		{"port tos unset either way", func(t *Tree) { t.Ports[0].TOS = -7 }, Changes{}},
		{"port inline data default written out", func(t *Tree) { t.Port("rdma6").InlineDataSize = DefaultInlineDataSize }, Changes{}},
		{"port unlinks a subsystem", func(t *Tree) { t.Ports[0].Subsystems = t.Ports[0].Subsystems[:1] },
			Changes{Ports: []PortChanges{{ID: "rdma0", SubsystemsRemoved: []string{scratch}}}}},
		{"port link order", func(t *Tree) {
			s := t.Ports[0].Subsystems
			s[0], s[1] = s[1], s[0]
		}, Changes{}},
		{"subsystem removed", func(t *Tree) { t.Subsystems = t.Subsystems[:1] }, Changes{SubsystemsRemoved: []string{scratch}}},
		{"subsystem serial", func(t *Tree) { t.Subsystem(disk0).Serial = "X" }, Changes{Subsystems: []SubsystemChanges{{NQN: disk0, Attrs: true}}}},
		{"subsystem access", func(t *Tree) { t.Subsystem(scratch).AllowAnyHost = false }, Changes{Subsystems: []SubsystemChanges{{NQN: scratch, Access: true}}}},
		{"namespaces", func(t *Tree) {
			s := t.Subsystem(disk0)
			s.Namespaces[1].Enable = false          // nsid 2 changed
			s.Namespaces = append(s.Namespaces[:2], // nsid 3 removed
				&Namespace{NSID: 9, Backend: "null", Size: 4096}) // nsid 9 added
		}, Changes{Subsystems: []SubsystemChanges{{NQN: disk0, NamespacesAdded: []uint32{9}, NamespacesRemoved: []uint32{3}, NamespacesChanged: []uint32{2}}}}},
		{"derived id written out", func(t *Tree) {
			ns := t.Subsystem(disk0).Namespace(2)
			ns.DeviceUUID, ns.DeviceNGUID, ns.DeviceEUI64 = ns.IDs(disk0)
		}, Changes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := exampleTree(t)
			new := old.Clone()
			tt.edit(new)
			got := Diff(old, new)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff = %+v\nwant %+v", got, tt.want)
			}
			if got.Empty() != reflect.DeepEqual(tt.want, Changes{}) {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
	// From and to nothing.
	tree := exampleTree(t)
	if c := Diff(nil, tree); len(c.PortsAdded) != 2 || len(c.SubsystemsAdded) != 2 || len(c.HostsAdded) != 1 {
		t.Errorf("Diff(nil, tree) = %+v", c)
	}
	if c := Diff(tree, nil); len(c.PortsRemoved) != 2 || len(c.SubsystemsRemoved) != 2 || len(c.HostsRemoved) != 1 {
		t.Errorf("Diff(tree, nil) = %+v", c)
	}
}

func TestValidateBuiltTree(t *testing.T) {
	// A tree built in code validates without source positions.
	tree := &Tree{}
	p := NewPort("p0")
	p.Traddr = "192.0.2.1"
	p.Subsystems = []string{nqnA}
	s := NewSubsystem(nqnA)
	s.AllowAnyHost = true
	ns := NewNamespace(1)
	ns.Backend, ns.Size = BackendNull, 1<<20
	s.Namespaces = append(s.Namespaces, ns)
	tree.Ports, tree.Subsystems = []*Port{p}, []*Subsystem{s}
	if err := tree.Validate(); err != nil {
		t.Fatal(err)
	}
	ns.BlockSize = 3
	p.Trsvcid = "0"
	err := tree.Validate()
	errs, ok := err.(Errors)
	if !ok || len(errs) != 2 {
		t.Fatalf("Validate = %v", err)
	}
	want := []string{
		"subsystems/" + nqnA + "/namespaces/1: block_size: 3 is not a power of two from 512 to 65536",
		`ports/p0: addr_trsvcid: service "0" is not a port number from 1 to 65535`,
	}
	for i, e := range errs {
		if e.Range != nil || e.Error() != want[i] {
			t.Errorf("error %d = %q, want %q", i, e.Error(), want[i])
		}
	}
}
