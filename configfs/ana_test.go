package configfs

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// anaHCL is two ports with ANA groups (written out of order) and a
// subsystem exported on both with namespaces in groups 1, 2 and 3.
var anaHCL = lines(
	`port "gw1" {`, // 1
	`  transport = "loop"`,
	`  ana_group "2" { state = "non-optimized" }`, // 3
	`  ana_group "1" { state = "optimized" }`,
	`  ana_group "3" {}`, // 5
	`}`,
	`port "gw2" {`, // 7
	`  transport = "loop"`,
	`  service = 4421`,
	`  ana_group "1" { state = "inaccessible" }`, // 10
	`  ana_group "2" { state = "optimized" }`,
	`}`,
	`subsystem "`+nqnA+`" {`, // 13
	`  ports = ["gw1", "gw2"]`,
	`  allow_any_host = true`,
	`  namespace "1" {`, // 16
	`    backend = "null"`,
	`    size = "1MiB"`,
	`  }`,
	`  namespace "2" {`, // 20
	`    backend = "null"`,
	`    size = "1MiB"`,
	`    ana_grpid = 2`, // 23
	`  }`,
	`  namespace "3" {`, // 25
	`    backend = "null"`,
	`    size = "1MiB"`,
	`    ana_grpid = 3`, // 28
	`  }`,
	`}`,
)

func TestHCLANA(t *testing.T) {
	tree, err := ParseHCL([]byte(anaHCL), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	gw1, gw2 := tree.Port("gw1"), tree.Port("gw2")
	want1 := []ANAGroup{{1, ANAOptimized}, {2, ANANonOptimized}, {3, ANAOptimized}}
	if !reflect.DeepEqual(gw1.ANAGroups, want1) {
		t.Errorf("gw1 groups %+v, want %+v (sorted, state defaults to optimized)", gw1.ANAGroups, want1)
	}
	if gw2.ANAState(1) != ANAInaccessible || gw2.ANAState(2) != ANAOptimized || gw2.ANAState(3) != "" {
		t.Errorf("gw2 groups %+v", gw2.ANAGroups)
	}
	s := tree.Subsystem(nqnA)
	for nsid, want := range map[uint32]uint32{1: 1, 2: 2, 3: 3} {
		if got := s.Namespace(nsid).EffectiveANAGrpID(); got != want {
			t.Errorf("namespace %d: group %d, want %d", nsid, got, want)
		}
	}
	if s.Namespace(1).ANAGrpID != 0 {
		t.Errorf("namespace 1 without ana_grpid: ANAGrpID %d, want 0", s.Namespace(1).ANAGrpID)
	}
	// Group 3 is not on gw2: a warning at namespace 3's ana_grpid.
	ws := tree.Warnings()
	if len(ws) != 1 || !strings.HasPrefix(ws[0].Error(), `t.hcl:28:17: subsystems/`+nqnA+`/namespaces/3: ana_grpid: ANA group 3 is not on port gw2, which exports the subsystem`) {
		t.Errorf("warnings %v", ws)
	}
	// A port without ana_group blocks has group 1 optimized only.
	p := NewPort("p")
	if p.ANAState(DefaultANAGroup) != ANAOptimized || p.ANAState(2) != "" {
		t.Errorf("default port: group 1 %q, group 2 %q", p.ANAState(1), p.ANAState(2))
	}
}

func TestHCLANAErrors(t *testing.T) {
	port := func(body ...string) string {
		return lines(append(append([]string{`port "p" {`, `  transport = "loop"`}, body...), `}`)...)
	}
	ns := func(attr string) string {
		return lines(`subsystem "`+nqnA+`" {`, `  allow_any_host = true`, `  namespace "1" {`, `    backend = "null"`, `    size = 4096`, `    `+attr, `  }`, `}`)
	}
	tests := []struct {
		name string
		src  string
		want []string // one error each, as prefixes
	}{
		{"label not a number", port(`  ana_group "one" {}`),
			[]string{`t.hcl:3:13: ports/p/ana_groups/one: ana_group label "one" is not an ANA group ID (a decimal number from 1 to 128)`}},
		{"label signed", port(`  ana_group "+2" {}`), []string{`t.hcl:3:13: ports/p/ana_groups/+2: ana_group label "+2" is not an ANA group ID`}},
		{"group 0", port(`  ana_group "0" {}`), []string{`t.hcl:3:13: ports/p/ana_groups/0: ANA group ID 0 is not from 1 to 128`}},
		{"group 129", port(`  ana_group "129" {}`), []string{`t.hcl:3:13: ports/p/ana_groups/129: ANA group ID 129 is not from 1 to 128`}},
		{"group twice", port(`  ana_group "2" {}`, `  ana_group "02" { state = "inaccessible" }`),
			[]string{`t.hcl:4:13: ports/p/ana_groups/2: ana_group 2 declared twice`}},
		{"unknown state", port(`  ana_group "2" { state = "optimised" }`),
			[]string{`t.hcl:3:27: ports/p/ana_groups/2: state: unknown ANA state "optimised"; did you mean "optimized"? (want optimized, non-optimized, inaccessible, persistent-loss, change)`}},
		{"unknown state far off", port(`  ana_group "2" { state = "standby" }`),
			[]string{`t.hcl:3:27: ports/p/ana_groups/2: state: unknown ANA state "standby" (want optimized,`}},
		{"empty state", port(`  ana_group "2" { state = "" }`), []string{`t.hcl:3:27: ports/p/ana_groups/2: state: an ANA state is required (want optimized,`}},
		{"state not a string", port(`  ana_group "2" { state = [1] }`), []string{`t.hcl:3:27: ports/p/ana_groups/2: state: want a string, got tuple`}},
		{"unknown attribute", port(`  ana_group "2" { stat = "optimized" }`), []string{`t.hcl:3:19: Unsupported argument: An argument named "stat" is not expected here. Did you mean "state"?`}},
		{"no label", port(`  ana_group { state = "optimized" }`), []string{`t.hcl:3:`}},
		{"ana_grpid 0", ns(`ana_grpid = 0`), []string{`t.hcl:6:17: subsystems/` + nqnA + `/namespaces/1: ana_grpid: 0 is not a whole number from 1 to 128`}},
		{"ana_grpid 129", ns(`ana_grpid = 129`), []string{`t.hcl:6:17: subsystems/` + nqnA + `/namespaces/1: ana_grpid: 129 is not a whole number from 1 to 128`}},
		{"ana_grpid string", ns(`ana_grpid = "two"`), []string{`t.hcl:6:17: subsystems/` + nqnA + `/namespaces/1: ana_grpid: want a number`}},
		{"ana_grpid misspelt", ns(`ana_grp = 2`), []string{`t.hcl:6:5: Unsupported argument`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := ParseHCL([]byte(tt.src), "t.hcl")
			if err == nil {
				t.Fatalf("no error: %+v", tree)
			}
			errs := err.(Errors)
			if len(errs) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("error %d:\n%s\nwant prefix\n%s", i, errs[i], w)
				}
			}
		})
	}
}

func TestANAWarnings(t *testing.T) {
	src := func(gw2Groups, grpid string) string {
		return lines(
			`port "gw1" {`, `  transport = "loop"`, `  ana_group "2" {}`, `}`,
			`port "gw2" {`, `  transport = "loop"`, `  service = 4421`, gw2Groups, `}`,
			`port "gw3" {`, `  transport = "loop"`, `  service = 4422`, `}`,
			`subsystem "`+nqnA+`" {`, `  ports = ["gw1", "gw2", "gw3"]`, `  allow_any_host = true`,
			`  namespace "1" {`, `    backend = "null"`, `    size = 4096`, `    `+grpid, `  }`, `}`,
			`subsystem "`+nqnB+`" {`, `  allow_any_host = true`,
			`  namespace "1" {`, `    backend = "null"`, `    size = 4096`, `    ana_grpid = 9`, `  }`, `}`,
		)
	}
	tests := []struct {
		name, gw2, grpid string
		want             string // "" for no warning
	}{
		{"group 1 is on every port", ``, `ana_grpid = 1`, ""},
		{"default group", ``, `enabled = true`, ""},
		{"group 2 missing on two ports", ``, `ana_grpid = 2`,
			`t.hcl:20:17: subsystems/` + nqnA + `/namespaces/1: ana_grpid: ANA group 2 is not on ports gw2, gw3, which export the subsystem: the group is inaccessible there`},
		{"group 2 missing on one port", `  ana_group "2" { state = "inaccessible" }`, `ana_grpid = 2`,
			`t.hcl:20:17: subsystems/` + nqnA + `/namespaces/1: ana_grpid: ANA group 2 is not on port gw3, which exports the subsystem:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := ParseHCL([]byte(src(tt.gw2, tt.grpid)), "t.hcl")
			if err != nil {
				t.Fatal(err)
			}
			ws := tree.Warnings()
			switch {
			case tt.want == "" && len(ws) > 0:
				t.Errorf("unexpected warnings %v", ws)
			case tt.want != "" && (len(ws) != 1 || !strings.HasPrefix(ws[0].Error(), tt.want)):
				t.Errorf("warnings %v\nwant one starting %q", ws, tt.want)
			}
		})
	}
}

func TestHCLANARoundTrip(t *testing.T) {
	tree, err := ParseHCL([]byte(anaHCL), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out := tree.HCL()
	again, err := ParseHCL(out, "saved.hcl")
	if err != nil {
		t.Fatalf("saved HCL does not load: %v\n%s", err, out)
	}
	if !Equal(tree, again) || !reflect.DeepEqual(tree.Port("gw1").ANAGroups, again.Port("gw1").ANAGroups) {
		t.Errorf("round trip changed the tree:\n%s", out)
	}
	if out2 := again.HCL(); string(out2) != string(out) {
		t.Errorf("second save differs:\n%s\n---\n%s", out, out2)
	}
	// Defaults are left out: group 1 optimized alone, ana_grpid 1.
	def := lines(
		`port "p" {`, `  transport = "loop"`, `  ana_group "1" { state = "optimized" }`, `}`,
		`subsystem "`+nqnA+`" {`, `  ports = ["p"]`, `  allow_any_host = true`,
		`  namespace "1" {`, `    backend = "null"`, `    size = 4096`, `    ana_grpid = 1`, `  }`, `}`,
	)
	tree, err = ParseHCL([]byte(def), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out = tree.HCL()
	if strings.Contains(string(out), "ana_") {
		t.Errorf("defaults written out:\n%s", out)
	}
	// Group 1 optimized is written when other groups are.
	tree.Ports[0].ANAGroups = []ANAGroup{{3, ANAChange}, {1, ANAOptimized}}
	out = tree.HCL()
	if i, j := strings.Index(string(out), `ana_group "1"`), strings.Index(string(out), `ana_group "3"`); i < 0 || j < i {
		t.Errorf("groups 1 and 3 not written in order:\n%s", out)
	}
	if again, err := ParseHCL(out, "saved.hcl"); err != nil || !Equal(tree, again) {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestDiffANA: ANA states change without the listener; ana_grpid changes
// the namespace; defaults written out change nothing.
func TestDiffANA(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Tree)
		want Changes
	}{
		{"nothing", func(*Tree) {}, Changes{}},
		{"state", func(t *Tree) { t.Port("gw1").ANAGroups[1].State = ANAInaccessible },
			Changes{Ports: []PortChanges{{ID: "gw1", ANA: true}}}},
		{"group added", func(t *Tree) { t.Port("gw2").ANAGroups = append(t.Port("gw2").ANAGroups, ANAGroup{3, ANANonOptimized}) },
			Changes{Ports: []PortChanges{{ID: "gw2", ANA: true}}}},
		{"group removed", func(t *Tree) { t.Port("gw1").ANAGroups = t.Port("gw1").ANAGroups[:2] },
			Changes{Ports: []PortChanges{{ID: "gw1", ANA: true}}}},
		{"group 1 optimized dropped", func(t *Tree) { t.Port("gw1").ANAGroups = t.Port("gw1").ANAGroups[1:] }, Changes{}},
		{"group 1 inaccessible dropped", func(t *Tree) { t.Port("gw2").ANAGroups = t.Port("gw2").ANAGroups[1:] },
			Changes{Ports: []PortChanges{{ID: "gw2", ANA: true}}}},
		{"order", func(t *Tree) { slices.Reverse(t.Port("gw1").ANAGroups) }, Changes{}},
		{"state and inline data size", func(t *Tree) {
			p := t.Port("gw1")
			p.ANAGroups[0].State = ANAChange
			p.InlineDataSize = 4096
		}, Changes{Ports: []PortChanges{{ID: "gw1", Listener: true, ANA: true}}}},
		{"ana_grpid", func(t *Tree) { t.Subsystem(nqnA).Namespace(2).ANAGrpID = 3 },
			Changes{Subsystems: []SubsystemChanges{{NQN: nqnA, NamespacesChanged: []uint32{2}}}}},
		{"ana_grpid 1 written out", func(t *Tree) { t.Subsystem(nqnA).Namespace(1).ANAGrpID = 1 }, Changes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, err := ParseHCL([]byte(anaHCL), "t.hcl")
			if err != nil {
				t.Fatal(err)
			}
			new := old.Clone()
			tt.edit(new)
			got := Diff(old, new)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff = %+v\nwant %+v", got, tt.want)
			}
			if got.Empty() != reflect.DeepEqual(tt.want, Changes{}) {
				t.Errorf("Empty() = %v", got.Empty())
			}
			// Clone copies the groups: the edit left the old tree alone.
			if again, _ := ParseHCL([]byte(anaHCL), "t.hcl"); !Equal(old, again) {
				t.Error("editing the clone changed the original")
			}
		})
	}
}

// TestValidateANABuiltTree: trees built in code get the same checks,
// without positions.
func TestValidateANABuiltTree(t *testing.T) {
	tree := &Tree{}
	p := NewPort("p0")
	p.Trtype = TransportLoop
	p.ANAGroups = []ANAGroup{{1, ANAOptimized}, {2, "nonoptimized"}, {2, ANAOptimized}, {0, ANAOptimized}, {5, ""}}
	s := NewSubsystem(nqnA)
	s.AllowAnyHost = true
	ns := NewNamespace(1)
	ns.Backend, ns.Size, ns.ANAGrpID = BackendNull, 4096, 200
	s.Namespaces = []*Namespace{ns}
	tree.Ports, tree.Subsystems = []*Port{p}, []*Subsystem{s}
	err := tree.Validate()
	errs, ok := err.(Errors)
	want := []string{
		"subsystems/" + nqnA + "/namespaces/1: ana_grpid: ANA group 200 is not from 1 to 128",
		`ports/p0/ana_groups/2: ana_state: unknown ANA state "nonoptimized"; did you mean "non-optimized"?`,
		"ports/p0/ana_groups/2: ANA group 2 listed twice",
		"ports/p0/ana_groups/0: ANA group ID 0 is not from 1 to 128",
		"ports/p0/ana_groups/5: ana_state: an ANA state is required",
	}
	if !ok || len(errs) != len(want) {
		t.Fatalf("Validate = %v", err)
	}
	for i, e := range errs {
		if e.Range != nil || !strings.HasPrefix(e.Error(), want[i]) {
			t.Errorf("error %d = %q, want %q…", i, e.Error(), want[i])
		}
	}
}

// TestNvmetcliJSONANA: ANA groups and namespaces' groups load from and
// save to nvmetcli's shape, and back.
func TestNvmetcliJSONANA(t *testing.T) {
	tree, err := ParseHCL([]byte(anaHCL), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Ports []struct {
			ANAGroups []map[string]any `json:"ana_groups"`
		}
		Subsystems []struct {
			Namespaces []map[string]any
		}
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatal(err)
	}
	// gw1: groups 1, 2, 3 as nvmetcli writes them.
	wantGW1 := []map[string]any{
		{"ana": map[string]any{"state": "optimized"}, "grpid": 1.0},
		{"ana": map[string]any{"state": "non-optimized"}, "grpid": 2.0},
		{"ana": map[string]any{"state": "optimized"}, "grpid": 3.0},
	}
	if !reflect.DeepEqual(raw.Ports[0].ANAGroups, wantGW1) {
		t.Errorf("gw1 ana_groups %v\nwant %v", raw.Ports[0].ANAGroups, wantGW1)
	}
	ns := raw.Subsystems[0].Namespaces
	if ns[0]["ana_grpid"] != 1.0 || ns[1]["ana_grpid"] != 2.0 || !reflect.DeepEqual(ns[1]["ana"], map[string]any{"grpid": "2"}) {
		t.Errorf("namespaces %v", ns)
	}
	again, err := ParseNvmetcliJSON(out, "saved.json")
	if err != nil {
		t.Fatalf("saved JSON does not load: %v\n%s", err, out)
	}
	if c := Diff(tree, again); !c.Empty() {
		t.Errorf("round trip changed the tree: %+v\n%s", c, out)
	}
	if w := again.Warnings(); len(w) != 1 { // group 3 is not on gw2, as in the HCL
		t.Errorf("warnings %v", w)
	}

	// A port without groups is saved with group 1, as nvmetcli saves
	// every port.
	plain := &Tree{Ports: []*Port{NewPort("1")}}
	plain.Ports[0].Trtype = TransportLoop
	out, err = plain.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ]`) {
		t.Errorf("port without groups:\n%s", out)
	}

	// Errors in nvmetcli's ANA values.
	for _, tt := range []struct{ name, src, want string }{
		{"grpid missing", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"ana": {"state": "optimized"}}]}]}`,
			"c.json: ports/1/ana_groups[0]: grpid: missing"},
		{"grpid 0", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"grpid": 0}]}]}`,
			"c.json: ports/1/ana_groups[0]: grpid: ANA group ID 0 is not from 1 to 128"},
		{"grpid 1024", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"grpid": 1024}]}]}`,
			"c.json: ports/1/ana_groups[0]: grpid: ANA group ID 1024 is not from 1 to 128"},
		{"grpid twice", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"grpid": 2}, {"grpid": "2"}]}]}`,
			"c.json: ports/1/ana_groups/2: ANA group 2 listed twice"},
		{"state unknown", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"grpid": 2, "ana": {"state": "persistent_loss"}}]}]}`,
			`c.json: ports/1/ana_groups/2: ana_state: unknown ANA state "persistent_loss"; did you mean "persistent-loss"?`},
		{"ns grpid not a number", `{"subsystems": [{"nqn": "` + nqnA + `", "namespaces": [{"nsid": 1, "device": {"path": "/x"}, "ana": {"grpid": "two"}}]}]}`,
			`c.json: subsystems/` + nqnA + `/namespaces/1: ana_grpid: "two" is not a number`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNvmetcliJSON([]byte(tt.src), "c.json")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}
