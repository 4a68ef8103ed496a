package configfs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// savedJSON has the shape `nvmetcli save` writes on a 6.x kernel (keys
// sorted, attribute values as strings), with NQNs our validator accepts.
const savedJSON = `{
  "hosts": [
    {
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e"
    }
  ],
  "ports": [
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "192.0.2.1",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "rdma",
        "tsas": "connected"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 2,
      "referrals": [],
      "subsystems": [
        "nqn.2026-11.io.nvmeof:a"
      ]
    },
    {
      "addr": {
        "adrfam": "",
        "traddr": "",
        "treq": "not specified",
        "trsvcid": "",
        "trtype": "loop"
      },
      "portid": 7,
      "referrals": [],
      "subsystems": []
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": [
        "nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e"
      ],
      "attr": {
        "allow_any_host": "0",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.1.0",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "d958dba9aa7f964f3163",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/dev/nullb0",
            "uuid": "26ffc8ce-73b4-321d-9685-7d7a9872c460"
          },
          "enable": 1,
          "nsid": 1
        },
        {
          "device": {
            "nguid": "5b722b05-e9b6-542d-ba80-62010b57775d",
            "path": "/srv/disk.img"
          },
          "enable": 0,
          "nsid": 2
        }
      ],
      "nqn": "nqn.2026-11.io.nvmeof:a"
    }
  ]
}
`

func TestParseNvmetcliJSON(t *testing.T) {
	tree, err := ParseNvmetcliJSON([]byte(savedJSON), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Hosts) != 1 || len(tree.Ports) != 2 || len(tree.Subsystems) != 1 {
		t.Fatalf("hosts %d ports %d subsystems %d", len(tree.Hosts), len(tree.Ports), len(tree.Subsystems))
	}
	p := tree.Port("2")
	if p == nil || p.PortID != 2 || p.Trtype != "rdma" || p.Traddr != "192.0.2.1" || p.Trsvcid != "4420" || p.Adrfam != "ipv4" ||
		p.InlineDataSize != -1 || p.Provider != ProviderAuto || p.TOS != -1 || len(p.Subsystems) != 1 {
		t.Errorf("port 2 = %+v", p)
	}
	if loop := tree.Port("7"); loop == nil || loop.Trtype != "loop" {
		t.Errorf("port 7 = %+v", loop)
	}
	s := tree.Subsystem(nqnA)
	if s.AllowAnyHost || s.Serial != "d958dba9aa7f964f3163" || s.Model != "Linux" || s.Firmware != "6.1.0" || s.Version != "1.3" ||
		s.CntlidMin != 1 || s.CntlidMax != 65519 || len(s.AllowedHosts) != 1 {
		t.Errorf("subsystem = %+v", s)
	}
	ns1, ns2 := s.Namespace(1), s.Namespace(2)
	if ns1.Backend != "block" || ns1.DevicePath != "/dev/nullb0" || !ns1.Enable || ns1.DeviceUUID.String() != "26ffc8ce-73b4-321d-9685-7d7a9872c460" || !ns1.DeviceNGUID.IsZero() {
		t.Errorf("namespace 1 = %+v", ns1)
	}
	if ns2.Backend != "file" || ns2.Enable || ns2.DeviceNGUID.String() != "5b722b05-e9b6-542d-ba80-62010b57775d" || !ns2.DeviceUUID.IsZero() {
		t.Errorf("namespace 2 = %+v", ns2)
	}
}

func TestNvmetcliJSONRoundTrip(t *testing.T) {
	for _, name := range []string{"example HCL", "nvmetcli JSON"} {
		t.Run(name, func(t *testing.T) {
			var tree *Tree
			var err error
			if name == "example HCL" {
				tree, err = LoadFile("../examples/nvmetd.hcl")
			} else {
				tree, err = ParseNvmetcliJSON([]byte(savedJSON), "config.json")
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := tree.NvmetcliJSON()
			if err != nil {
				t.Fatal(err)
			}
			// nvmetcli's shape: numbers for portid, nsid, enable; strings in
			// attribute groups.
			var raw map[string][]map[string]any
			if err := json.Unmarshal(out, &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["ports"][0]["portid"].(float64); !ok {
				t.Errorf("portid is not a number: %s", out)
			}
			sub := raw["subsystems"][0]
			if _, ok := sub["attr"].(map[string]any)["allow_any_host"].(string); !ok {
				t.Errorf("allow_any_host is not a string: %s", out)
			}
			ns := sub["namespaces"].([]any)[0].(map[string]any)
			if _, ok := ns["nsid"].(float64); !ok {
				t.Errorf("nsid is not a number: %s", out)
			}
			if _, ok := ns["device"].(map[string]any)["uuid"].(string); !ok {
				t.Errorf("device uuid missing: %s", out)
			}
			again, err := ParseNvmetcliJSON(out, "saved.json")
			if err != nil {
				t.Fatalf("saved JSON does not load: %v\n%s", err, out)
			}
			if c := Diff(tree, again); !c.Empty() {
				t.Errorf("round trip changed the tree: %+v\n%s", c, out)
			}
			// And through a file, by extension.
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, out, 0o600); err != nil {
				t.Fatal(err)
			}
			if fromFile, err := LoadFile(path); err != nil || !Equal(tree, fromFile) {
				t.Errorf("LoadFile(%s): %v", path, err)
			}
		})
	}
}

// TestNvmetcliJSONWarnings loads nvmetcli's own example names: accepted,
// with warnings that name the file.
func TestNvmetcliJSONWarnings(t *testing.T) {
	tree, err := ParseNvmetcliJSON([]byte(`{"hosts": [{"nqn": "hostnqn"}], "subsystems": [{"nqn": "testnqn", "allowed_hosts": ["hostnqn"]}]}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	ws := tree.Warnings()
	if len(ws) != 2 || !strings.HasPrefix(ws[0].Error(), `c.json: hosts/hostnqn: NQN "hostnqn": does not start with "nqn."`) ||
		!strings.HasPrefix(ws[1].Error(), `c.json: subsystems/testnqn: NQN "testnqn": does not start with "nqn."`) {
		t.Errorf("warnings %v", ws)
	}
}

func TestNvmetcliJSONErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"syntax error", "{\n  \"hosts\": [\n    {\"nqn\": }\n", []string{"c.json:3:13:", "invalid character"}},
		{"wrong type", `{"hosts": {"nqn": "x"}}`, []string{"c.json:1:", "cannot unmarshal"}},
		{"bad attr value", `{"subsystems": [{"nqn": "` + nqnA + `", "attr": {"serial": [1]}}]}`, []string{"not a string, number or boolean"}},
		{"bad NQN", `{"subsystems": [{"nqn": "test nqn", "attr": {"allow_any_host": "1"}}]}`, []string{`c.json: subsystems/test nqn: NQN "test nqn": character ' ' not allowed`}},
		{"missing nqn", `{"subsystems": [{"attr": {}}]}`, []string{"c.json: subsystems[0]: nqn: missing"}},
		{"bad allow_any_host", `{"subsystems": [{"nqn": "` + nqnA + `", "attr": {"allow_any_host": "perhaps"}}]}`, []string{"attr_allow_any_host: \"perhaps\" is not a boolean"}},
		{"serial too long", `{"subsystems": [{"nqn": "` + nqnA + `", "attr": {"serial": "123456789012345678901"}}]}`, []string{"c.json: subsystems/" + nqnA + ": attr_serial: ", "more than 20"}},
		{"cntlid zero", `{"subsystems": [{"nqn": "` + nqnA + `", "attr": {"cntlid_min": "0"}}]}`, []string{"attr_cntlid_min: \"0\" is not a number"}},
		{"nsid 0", `{"subsystems": [{"nqn": "` + nqnA + `", "namespaces": [{"nsid": 0, "device": {"path": "/x"}}]}]}`, []string{"namespaces/0: NSID 0"}},
		{"missing nsid", `{"subsystems": [{"nqn": "` + nqnA + `", "namespaces": [{"device": {"path": "/x"}}]}]}`, []string{"namespaces[0]: nsid: missing"}},
		{"bad uuid", `{"subsystems": [{"nqn": "` + nqnA + `", "namespaces": [{"nsid": 1, "device": {"path": "/x", "uuid": "zz"}}]}]}`, []string{"namespaces/1: device_uuid: \"zz\" is not a UUID"}},
		{"duplicate nsid", `{"subsystems": [{"nqn": "` + nqnA + `", "namespaces": [{"nsid": 1, "device": {"path": "/x"}}, {"nsid": 1, "device": {"path": "/y"}}]}]}`, []string{"namespace 1 declared twice"}},
		{"passthru", `{"subsystems": [{"nqn": "` + nqnA + `", "passthru": [{}]}]}`, []string{"passthru: passthru subsystems are not supported"}},
		{"missing portid", `{"ports": [{"addr": {"trtype": "loop"}}]}`, []string{"ports[0]: portid: missing"}},
		{"portid out of range", `{"ports": [{"portid": 70000, "addr": {"trtype": "loop"}}]}`, []string{"ports[0]: portid: 70000"}},
		{"referrals", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "referrals": [{"name": "r"}]}]}`, []string{"ports/1: referrals: referrals are not supported"}},
		{"bad traddr", `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "nowhere", "trsvcid": "4420"}}]}`, []string{"c.json: ports/1: addr_traddr: \"nowhere\" is not an IPv4 or IPv6 address"}},
		{"unknown subsystem", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "subsystems": ["` + nqnB + `"]}]}`, []string{"ports/1: subsystems: unknown subsystem"}},
		{"bad inline size", `{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "param": {"inline_data_size": "big"}}]}`, []string{"param_inline_data_size: \"big\" is not a number"}},
		{"tos out of range", `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"}, "nvmeof": {"tos": 300}}]}`, []string{"c.json: ports/1: tos: 300 is not from 0 to 255"}},
		{"device with soft", `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"}, "nvmeof": {"provider": "soft", "device": "rxe0"}}]}`, []string{"c.json: ports/1: device: device \"rxe0\" needs the ibverbs provider"}},
		{"unknown provider", `{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"}, "nvmeof": {"provider": "hw"}}]}`, []string{"c.json: ports/1: provider: unknown provider"}},
		{"unknown allowed host", `{"subsystems": [{"nqn": "` + nqnA + `", "allowed_hosts": ["` + hostA + `"]}]}`, []string{"allowed_hosts: unknown host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := ParseNvmetcliJSON([]byte(tt.src), "c.json")
			if err == nil {
				t.Fatalf("no error: %+v", tree)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}
