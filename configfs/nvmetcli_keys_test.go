package configfs

import (
	"reflect"
	"strings"
	"testing"
)

// TestNvmetcliJSONKeys: every key the loader does not apply is an error or
// a warning naming its JSON path and line:col; kernel defaults that
// `nvmetcli save` writes for every object pass silently.
func TestNvmetcliJSONKeys(t *testing.T) {
	sub := func(attr string) string {
		return "{\"subsystems\": [{\"nqn\": \"" + nqnA + "\",\n \"attr\": {" + attr + "}}]}"
	}
	port := func(fields string) string {
		return "{\"ports\": [{\"portid\": 1, \"addr\": {\"trtype\": \"loop\"},\n " + fields + "}]}"
	}
	ns := func(fields string) string {
		return "{\"subsystems\": [{\"nqn\": \"" + nqnA + "\", \"namespaces\": [\n{\"nsid\": 1, \"device\": {\"path\": \"/x\"}, " + fields + "}]}]}"
	}
	tests := []struct {
		name      string
		src       string
		wantErr   string // "" for none
		wantWarn  string // "" for none
		wantApply func(*Tree) bool
	}{
		{name: "typo with suggestion", src: sub(`"alow_any_host": "1"`),
			wantErr: `c.json:2:28: subsystems[0].attr: alow_any_host: unknown key, not applied; did you mean "allow_any_host"?`},
		{name: "unknown top-level key", src: `{"hosts": [], "subsystem": []}`,
			wantErr: `c.json:1:28: subsystem: unknown key, not applied; did you mean "subsystems"?`},
		{name: "unknown key without suggestion", src: `{"zzz": 1}`,
			wantErr: `c.json:1:9: zzz: unknown key, not applied (known here: hosts, ports, subsystems)`},
		{name: "subsystem pi_enable on", src: sub(`"pi_enable": "1"`),
			wantErr: `c.json:2:24: subsystems[0].attr: pi_enable: "1": end-to-end protection information (attr_pi_enable) is not supported`},
		{name: "subsystem pi_enable off", src: sub(`"pi_enable": "0"`)},
		{name: "pi_enable not a boolean", src: sub(`"pi_enable": "maybe"`), wantErr: `pi_enable: "maybe" is not a boolean`},
		{name: "ieee_oui default", src: sub(`"ieee_oui": "0x000000"`)},
		{name: "ieee_oui set", src: sub(`"ieee_oui": "0x0025b3"`),
			wantWarn: `c.json:2:23: subsystems[0].attr: ieee_oui: "0x0025b3" ignored: nvmetd reports IEEE OUI 0`},
		{name: "qid_max applied", src: sub(`"qid_max": "4"`), wantApply: func(t *Tree) bool { return t.Subsystems[0].QIDMax == 4 }},
		{name: "port pi_enable on", src: port(`"param": {"pi_enable": true}`), wantErr: `ports[0].param: pi_enable: "1": end-to-end protection information (param_pi_enable)`},
		{name: "max_queue_size default", src: port(`"param": {"max_queue_size": "-1"}`)},
		{name: "max_queue_size set", src: port(`"param": {"max_queue_size": 32}`), wantWarn: `c.json:2:30: ports[0].param: max_queue_size: "32" ignored`},
		{name: "ana group 1 optimized", src: port(`"ana_groups": [{"ana": {"state": "optimized"}, "grpid": 1}]`)},
		{name: "ana group 2 applied", src: port(`"ana_groups": [{"ana": {"state": "non-optimized"}, "grpid": 2}]`),
			wantApply: func(t *Tree) bool { return t.Ports[0].ANAState(2) == ANANonOptimized }},
		{name: "ana state inaccessible applied", src: port(`"ana_groups": [{"ana": {"state": "inaccessible"}, "grpid": 1}]`),
			wantApply: func(t *Tree) bool { return t.Ports[0].ANAState(1) == ANAInaccessible }},
		{name: "ana state typo", src: port(`"ana_groups": [{"ana": {"state": "optimised"}, "grpid": 1}]`),
			wantErr: `c.json: ports/1/ana_groups/1: ana_state: unknown ANA state "optimised"; did you mean "optimized"?`},
		{name: "ana state key typo", src: port(`"ana_groups": [{"ana": {"stat": "optimized"}, "grpid": 1}]`),
			wantErr: `ports[0].ana_groups[0].ana: stat: unknown key, not applied; did you mean "state"?`},
		{name: "ana group typo", src: port(`"ana_groups": [{"grpdi": 1}]`), wantErr: `ports[0].ana_groups[0]: grpdi: unknown key, not applied; did you mean "grpid"?`},
		{name: "tsas connected", src: port(`"addr": {"trtype": "loop", "tsas": "connected"}`)},
		{name: "tsas datagram", src: port(`"addr": {"trtype": "loop", "tsas": "datagram"}`), wantErr: `ports[0].addr: tsas: "datagram": nvmetd serves RDMA reliable connected queue pairs (tsas "connected") and TCP without TLS`},
		{name: "tsas tls1.3", src: port(`"addr": {"trtype": "tcp", "tsas": "tls1.3"}`), wantErr: `tsas: "tls1.3": nvmetd serves NVMe/TCP without TLS only`},
		{name: "nvmeof port typo", src: port(`"nvmeof": {"provder": "soft"}`), wantErr: `ports[0].nvmeof: provder: unknown key, not applied; did you mean "provider"?`},
		{name: "ns ana_grpid 1", src: ns(`"ana_grpid": 1, "ana": {"grpid": "1"}`)},
		{name: "ns ana_grpid 3 applied", src: ns(`"ana_grpid": 3`), wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].ANAGrpID == 3 }},
		{name: "ns ana grpid only", src: ns(`"ana": {"grpid": "4"}`), wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].ANAGrpID == 4 }},
		{name: "ns ana_grpid wins", src: ns(`"ana_grpid": 2, "ana": {"grpid": "3"}`),
			wantWarn:  `c.json:2:72: subsystems[0].namespaces[0].ana: grpid: "3" ignored: ana_grpid 2 wins`,
			wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].ANAGrpID == 2 }},
		{name: "ns ana_grpid 0 (kernel without ANA)", src: ns(`"ana_grpid": 0`),
			wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].EffectiveANAGrpID() == DefaultANAGroup }},
		{name: "ns ana_grpid 129", src: ns(`"ana_grpid": 129`), wantErr: `c.json: subsystems/` + nqnA + `/namespaces/1: ana_grpid: ANA group 129 is not from 1 to 128`},
		{name: "ns resv on", src: ns(`"resv": {"enable": "1"}`), wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].ResvEnable }},
		{name: "ns resv off", src: ns(`"resv": {"enable": "0"}`), wantApply: func(t *Tree) bool { return !t.Subsystems[0].Namespaces[0].ResvEnable }},
		{name: "ns resv bad", src: ns(`"resv": {"enable": "maybe"}`), wantErr: `resv_enable`},
		{name: "ns device typo", src: ns(`"device": {"path": "/x", "uid": "26ffc8ce-73b4-321d-9685-7d7a9872c460"}`),
			wantErr: `subsystems[0].namespaces[0].device: uid: unknown key, not applied; did you mean "uuid"?`},
		{name: "ns enable typo", src: ns(`"enabel": 1`), wantErr: `subsystems[0].namespaces[0]: enabel: unknown key, not applied; did you mean "enable"?`},
		{name: "nvmeof ns eui64 applied", src: ns(`"nvmeof": {"eui64": "0225b3c4d5e6f708"}`),
			wantApply: func(t *Tree) bool { return t.Subsystems[0].Namespaces[0].DeviceEUI64.String() == "0225b3c4d5e6f708" }},
		{name: "host dhchap group applied", src: `{"hosts": [{"nqn": "` + hostA + `", "dhchap": {"hash": "hmac(sha384)", "dhgroup": "ffdhe2048"}}]}`,
			wantApply: func(t *Tree) bool {
				return t.Hosts[0].DHCHAPHash == "hmac(sha384)" && t.Hosts[0].DHCHAPDHGroup == "ffdhe2048"
			}},
		{name: "host attr typo", src: `{"hosts": [{"nqn": "` + hostA + `", "attr": {"dhchap_kye": "x"}}]}`,
			wantErr: `hosts[0].attr: dhchap_kye: unknown key, not applied; did you mean "dhchap_key"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := ParseNvmetcliJSON([]byte(tt.src), "c.json")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v\nwant it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			ws := tree.Warnings()
			switch {
			case tt.wantWarn == "" && len(ws) > 0:
				t.Errorf("unexpected warnings: %v", ws)
			case tt.wantWarn != "" && (len(ws) != 1 || !strings.Contains(ws[0].Error(), tt.wantWarn)):
				t.Errorf("warnings %v\nwant one containing %q", ws, tt.wantWarn)
			}
			if tt.wantApply != nil && !tt.wantApply(tree) {
				t.Errorf("not applied: %+v %+v", tree.Subsystems, tree.Hosts)
			}
			// Clone keeps the warnings: the target logs them on apply.
			if got := len(tree.Clone().Warnings()); got != len(ws) {
				t.Errorf("clone has %d warnings, want %d", got, len(ws))
			}
		})
	}
}

// TestNvmetcliJSONKeysSaved: what nvmetd itself saves loads without a
// word: no key of NvmetcliJSON's output is unknown.
func TestNvmetcliJSONKeysSaved(t *testing.T) {
	tree, err := LoadFile("../examples/nvmetd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	errs, warns := checkNvmetcliKeys(out, "saved.json")
	if len(errs)+len(warns) > 0 {
		t.Errorf("keys reported in nvmetd's own JSON: %v %v\n%s", errs, warns, out)
	}
}

// TestNvmetcliKeysCoverStructs: every field the typed decoder reads has a
// rule, so that a field added to the JSON structures is not reported as an
// unknown key (and a rule without a field would be caught by the typed
// decoder's tests).
func TestNvmetcliKeysCoverStructs(t *testing.T) {
	for _, tt := range []struct {
		name  string
		v     any
		rules map[string]keyRule
	}{
		{"nvmeof namespace", nvmeofNamespace{}, nvmeofNSKeys},
		{"nvmeof port", nvmeofPort{}, nvmeofPortKeys},
		{"namespace", nvmetcliNamespace{}, nsKeys},
		{"subsystem", nvmetcliSubsystem{}, subsysKeys},
		{"port", nvmetcliPort{}, portKeys},
		{"ANA group", nvmetcliANAGroup{}, anaGroupKeys},
		{"host", nvmetcliHost{}, hostKeys},
		{"root", nvmetcliConfig{}, rootKeys},
	} {
		typ := reflect.TypeOf(tt.v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if _, ok := tt.rules[name]; !ok {
				t.Errorf("%s: JSON key %q (field %s) has no rule in nvmetcli_keys.go", tt.name, name, typ.Field(i).Name)
			}
		}
	}
}

func TestResvPTPLFileConfig(t *testing.T) {
	tree, err := ParseNvmetcliJSON([]byte(`{"hosts": [], "ports": [], "subsystems": [{"allowed_hosts": [], "attr": {"allow_any_host": "1"},
  "namespaces": [{"device": {"path": "/x"}, "enable": 1, "nsid": 1, "resv": {"enable": "1"}, "nvmeof": {"resv_ptpl_file": "/var/lib/nvmetd/ns1.resv"}}],
  "nqn": "nqn.2026-11.io.nvmeof:r"}]}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	ns := tree.Subsystems[0].Namespaces[0]
	if !ns.ResvEnable || ns.ResvPTPLFile != "/var/lib/nvmetd/ns1.resv" {
		t.Fatalf("namespace %+v", ns)
	}
	// HCL round trip.
	b := tree.HCL()
	back, err := ParseHCL(b, "r.hcl")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if n := back.Subsystems[0].Namespaces[0]; !n.ResvEnable || n.ResvPTPLFile != ns.ResvPTPLFile {
		t.Fatalf("HCL round trip %+v\n%s", n, b)
	}
	// JSON round trip.
	j, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err = ParseNvmetcliJSON(j, "back.json")
	if err != nil {
		t.Fatal(err)
	}
	if n := back.Subsystems[0].Namespaces[0]; !n.ResvEnable || n.ResvPTPLFile != ns.ResvPTPLFile {
		t.Fatalf("JSON round trip %+v\n%s", n, j)
	}
	// A file without resv_enable is refused at the attribute.
	_, err = ParseHCL([]byte(`subsystem "nqn.2026-11.io.nvmeof:r" {
  allow_any_host = true
  namespace "1" {
    backend        = "memory"
    size           = "1MiB"
    resv_ptpl_file = "/tmp/x"
  }
}
`), "bad.hcl")
	if err == nil || !strings.Contains(err.Error(), "bad.hcl:6") || !strings.Contains(err.Error(), "resv_enable") {
		t.Fatalf("resv_ptpl_file without resv_enable: %v", err)
	}
}
