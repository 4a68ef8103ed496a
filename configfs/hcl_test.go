package configfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	badHost = "nqn.2014-08.org.nvmexpress:uuid:5a3c" // the UUID form without a UUID: an error, never a warning
	nqnA    = "nqn.2026-11.io.nvmeof:a"
	nqnB    = "nqn.2026-11.io.nvmeof:b"
	hostA   = "nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e"
)

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func TestLoadExample(t *testing.T) {
	tree, err := LoadFile("../examples/nvmetd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Ports) != 2 || len(tree.Subsystems) != 2 || len(tree.Hosts) != 1 {
		t.Fatalf("ports %d, subsystems %d, hosts %d", len(tree.Ports), len(tree.Subsystems), len(tree.Hosts))
	}
	p := tree.Port("rdma0")
	if p == nil || p.Trtype != "rdma" || p.Provider != "auto" || p.Device != "" || p.TOS != -1 || p.Traddr != "127.0.0.1" || p.Adrfam != "ipv4" ||
		p.Trsvcid != "4420" || p.InlineDataSize != 8192 || p.PortID != 1 || p.Treq != TreqNotSpecified {
		t.Errorf("port rdma0 = %+v", p)
	}
	if got := tree.PortsOf("nqn.2026-11.io.nvmeof:disk0"); len(got) != 2 {
		t.Errorf("disk0 exported on %d ports", len(got))
	}
	p6 := tree.Port("rdma6")
	if p6.Adrfam != "ipv6" || p6.Trsvcid != "4421" || p6.InlineDataSize != -1 || p6.EffectiveInlineDataSize() != DefaultInlineDataSize {
		t.Errorf("port rdma6 = %+v", p6)
	}
	if ids := tree.PortIDs(); ids["rdma0"] != 1 || ids["rdma6"] != 2 {
		t.Errorf("PortIDs = %v", ids)
	}
	s := tree.Subsystem("nqn.2026-11.io.nvmeof:disk0")
	if s.Serial != "NVMEOF0001" || s.Model != "nvmeof" || s.Firmware != "0.1" || s.AllowAnyHost || len(s.AllowedHosts) != 1 || len(s.Namespaces) != 3 {
		t.Errorf("subsystem = %+v", s)
	}
	ns := s.Namespace(1)
	if ns.Backend != "file" || ns.Size != 1<<30 || ns.BlockSize != 512 || !ns.Enable || ns.DeviceUUID.String() != "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27" || ns.DeviceEUI64.String() != "0225b3c4d5e6f708" {
		t.Errorf("namespace 1 = %+v", ns)
	}
	if ns2 := s.Namespace(2); ns2.Backend != "memory" || ns2.Size != 4<<30 || ns2.BlockSize != 4096 {
		t.Errorf("namespace 2 = %+v", ns2)
	}
	if ns3 := s.Namespace(3); ns3.Backend != "block" || ns3.Enable {
		t.Errorf("namespace 3 = %+v", ns3)
	}
}

func TestHCLDefaults(t *testing.T) {
	tree, err := ParseHCL([]byte(lines(
		`port "p0" {`,
		`  address = "192.0.2.1"`,
		`}`,
		`subsystem "`+nqnA+`" {`,
		`  ports = ["p0"]`,
		`  namespace "1" {`,
		`    path = "/dev/sdz"`,
		`  }`,
		`  namespace "2" {`,
		`    path = "disk.img"`,
		`  }`,
		`}`,
	)), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	p := tree.Ports[0]
	if p.Trtype != "rdma" || p.Provider != ProviderAuto || p.Device != "" || p.TOS != -1 || p.Trsvcid != "4420" || p.Adrfam != "ipv4" || p.EffectiveInlineDataSize() != 8192 {
		t.Errorf("port defaults: %+v", p)
	}
	s := tree.Subsystems[0]
	if s.AllowAnyHost || s.EffectiveVersion() != "1.3" || s.CntlidMin != 1 || s.CntlidMax != 0xffef {
		t.Errorf("subsystem defaults: %+v", s)
	}
	if s.Namespaces[0].Backend != "block" || s.Namespaces[1].Backend != "file" || !s.Namespaces[0].Enable {
		t.Errorf("namespace defaults: %+v %+v", s.Namespaces[0], s.Namespaces[1])
	}
	if tree.LogLevel != "info" {
		t.Errorf("log level %q", tree.LogLevel)
	}
}

// TestHCLErrors has one entry per error path; each checks the file:line of
// the message and the attribute named.
func TestHCLErrors(t *testing.T) {
	// A valid configuration the cases below break one line of.
	base := func(edit func([]string) []string) string {
		ls := []string{
			`port "p0" {`,                         // 1
			`  address = "127.0.0.1"`,             // 2
			`}`,                                   // 3
			`host "` + hostA + `" {}`,             // 4
			`subsystem "` + nqnA + `" {`,          // 5
			`  ports = ["p0"]`,                    // 6
			`  allowed_hosts = ["` + hostA + `"]`, // 7
			`  namespace "1" {`,                   // 8
			`    backend = "memory"`,              // 9
			`    size = "1MiB"`,                   // 10
			`  }`,                                 // 11
			`}`,                                   // 12
		}
		if edit != nil {
			ls = edit(ls)
		}
		return lines(ls...)
	}
	set := func(line int, text string) func([]string) []string {
		return func(ls []string) []string { ls[line-1] = text; return ls }
	}
	insert := func(line int, text ...string) func([]string) []string {
		return func(ls []string) []string {
			return append(ls[:line-1], append(text, ls[line-1:]...)...)
		}
	}
	if _, err := ParseHCL([]byte(base(nil)), "t.hcl"); err != nil {
		t.Fatalf("base config: %v", err)
	}

	tests := []struct {
		name string
		src  string
		want []string // substrings of one error each: "t.hcl:LINE:" prefix and more
	}{
		{"syntax error", base(set(2, `  address = "127.0.0.1`)), []string{"t.hcl:2:"}},
		{"syntax error: missing brace", base(set(12, ``)), []string{"t.hcl:"}},
		{"unknown attribute", base(set(2, `  adress = "127.0.0.1"`)), []string{`t.hcl:2:3: Unsupported argument: An argument named "adress" is not expected here`}},
		{"unknown attribute in namespace", base(insert(10, `    colour = "blue"`)), []string{`t.hcl:10:5:`, `"colour"`}},
		{"unknown block", base(insert(4, `target "x" {}`)), []string{`t.hcl:4:1: Unsupported block type`, `"target"`}},
		{"unknown top-level attribute", base(insert(1, `verbose = true`)), []string{`t.hcl:1:1:`, `"verbose"`}},
		{"attribute twice", base(insert(3, `  address = "127.0.0.2"`)), []string{`t.hcl:3:`, `address`}},
		{"missing label", base(set(8, `  namespace {`)), []string{`t.hcl:8:`, `namespace`}},
		{"variable reference", base(set(2, `  address = var.addr`)), []string{`t.hcl:2:`, `Variables not allowed`}},
		{"function call", base(set(10, `    size = upper("1mib")`)), []string{`t.hcl:10:`, `Function calls not allowed`}},
		{"null value", base(set(2, `  address = null`)), []string{`t.hcl:2:13: ports/p0: address: must not be null`}},
		{"wrong type", base(insert(7, `  allow_any_host = "maybe"`)), []string{`t.hcl:7:20: subsystems/` + nqnA + `: allow_any_host: want true or false`}},
		{"list expected", base(set(6, `  ports = "p0"`)), []string{`t.hcl:6:11:`, `ports: want a list of strings`}},
		{"bad log level", base(insert(1, `log_level = "loud"`)), []string{`t.hcl:1:13: log_level: unknown level "loud"`}},

		{"bad subsystem NQN", base(set(5, `subsystem "test nqn" {`)), []string{`t.hcl:5:11: subsystems/test nqn: NQN "test nqn": character ' ' not allowed`}},
		{"subsystem NQN with a slash", base(set(5, `subsystem "nqn.2026-11.io.nvmeof:a/b" {`)), []string{`t.hcl:5:11:`, `character '/' not allowed`}},
		{"NQN too long", base(set(5, `subsystem "nqn.2026-11.io.nvmeof:`+strings.Repeat("x", 220)+`" {`)), []string{`t.hcl:5:11:`, `more than 223`}},
		{"discovery NQN", base(set(5, `subsystem "`+DiscoveryNQN+`" {`)), []string{`t.hcl:5:11:`, `discovery NQN`}},
		{"duplicate subsystem", base(insert(13, `subsystem "`+nqnA+`" {`, `  allow_any_host = true`, `}`)), []string{`t.hcl:13:11: subsystems/` + nqnA + `: subsystem declared twice`}},
		{"bad host NQN", base(set(4, `host "`+badHost+`" {}`)), []string{`t.hcl:4:6: hosts/` + badHost + `: NQN "` + badHost + `": "5a3c" is not a UUID`}},
		{"bad allowed host NQN", base(set(7, `  allowed_hosts = ["`+badHost+`"]`)), []string{`t.hcl:7:19: subsystems/` + nqnA + `: allowed_hosts: NQN "` + badHost + `": "5a3c" is not a UUID`}},
		{"allowed host with a space", base(set(7, `  allowed_hosts = ["host 1"]`)), []string{`t.hcl:7:19:`, `allowed_hosts: NQN "host 1": character ' ' not allowed`}},
		{"duplicate host", base(insert(5, `host "`+hostA+`" {}`)), []string{`t.hcl:5:6:`, `host declared twice`}},
		{"allowed host twice", base(set(7, `  allowed_hosts = ["`+hostA+`", "`+hostA+`"]`)), []string{`t.hcl:7:19:`, `listed twice`}},
		{"allow_any_host with allowed hosts", base(insert(7, `  allow_any_host = true`)), []string{`t.hcl:8:19: subsystems/` + nqnA + `: allowed_hosts: cannot list allowed hosts when allow_any_host is set`}},
		{"serial too long", base(insert(7, `  serial = "123456789012345678901"`)), []string{`t.hcl:7:12: subsystems/` + nqnA + `: serial: "123456789012345678901" is 21 bytes long, more than 20`}},
		{"serial not ASCII", base(insert(7, `  serial = "sériel"`)), []string{`t.hcl:7:12:`, `serial: `, `printable ASCII`}},
		{"model too long", base(insert(7, `  model = "`+strings.Repeat("m", 41)+`"`)), []string{`t.hcl:7:11:`, `model: `, `more than 40`}},
		{"firmware too long", base(insert(7, `  firmware = "123456789"`)), []string{`t.hcl:7:14:`, `firmware: `, `more than 8`}},
		{"bad version", base(insert(7, `  version = "1.3.x"`)), []string{`t.hcl:7:13:`, `version: `}},
		{"version out of range", base(insert(7, `  version = "1.256"`)), []string{`t.hcl:7:13:`, `version: `}},
		{"cntlid_min zero", base(insert(7, `  cntlid_min = 0`)), []string{`t.hcl:7:16:`, `cntlid_min: 0 is not a whole number from 1 to 65519`}},
		{"cntlid_max too large", base(insert(7, `  cntlid_max = 65520`)), []string{`t.hcl:7:16:`, `cntlid_max: `}},
		{"cntlid_min above max", base(insert(7, `  cntlid_min = 100`, `  cntlid_max = 10`)), []string{`t.hcl:7:16:`, `cntlid_min: 100 is more than cntlid_max 10`}},
		{"subsystem references unknown port", base(set(6, `  ports = ["p1"]`)), []string{`t.hcl:6:11: subsystems/` + nqnA + `: ports: unknown port "p1"`}},

		{"nsid 0", base(set(8, `  namespace "0" {`)), []string{`t.hcl:8:13: subsystems/` + nqnA + `/namespaces/0: NSID 0 is not from 1 to 4294967294`}},
		{"nsid all", base(set(8, `  namespace "4294967295" {`)), []string{`t.hcl:8:13:`, `NSID 4294967295`}},
		{"nsid not a number", base(set(8, `  namespace "one" {`)), []string{`t.hcl:8:13:`, `namespace label "one" is not an NSID`}},
		{"nsid too large", base(set(8, `  namespace "99999999999" {`)), []string{`t.hcl:8:13:`, `is not an NSID`}},
		{"duplicate nsid", base(insert(12, `  namespace "1" {`, `    backend = "null"`, `    size = 4096`, `  }`)), []string{`t.hcl:12:13: subsystems/` + nqnA + `/namespaces/1: namespace 1 declared twice`}},
		{"unknown backend", base(set(9, `    backend = "tape"`)), []string{`t.hcl:9:15: subsystems/` + nqnA + `/namespaces/1: backend: unknown backend "tape"`}},
		{"no backend or path", base(set(9, ``)), []string{`t.hcl:8:13:`, `backend: a backend is required`}},
		{"bad size string", base(set(10, `    size = "1 gigabyte"`)), []string{`t.hcl:10:12: subsystems/` + nqnA + `/namespaces/1: size: size "1 gigabyte": unknown unit`}},
		{"negative size", base(set(10, `    size = -4096`)), []string{`t.hcl:10:12:`, `size: `, `non-negative`}},
		{"fractional size", base(set(10, `    size = 1.5`)), []string{`t.hcl:10:12:`, `size: `}},
		{"size type", base(set(10, `    size = ["1MiB"]`)), []string{`t.hcl:10:12:`, `size: want a number of bytes or a string`}},
		{"memory without size", base(set(10, ``)), []string{`t.hcl:8:13:`, `size: a size is required for backend memory`}},
		{"memory with path", base(insert(10, `    path = "/tmp/x"`)), []string{`t.hcl:10:12:`, `path: backend memory takes no path`}},
		{"file without path", base(set(9, `    backend = "file"`)), []string{`t.hcl:8:13:`, `path: a path is required for backend file`}},
		{"rbd without pool", base(func(ls []string) []string {
			ls[8], ls[9] = `    backend = "rbd"`, `    image = "img1"`
			return ls
		}), []string{`t.hcl:8:13: subsystems/` + nqnA + `/namespaces/1: pool: a pool is required for backend rbd`}},
		{"rbd without image", base(func(ls []string) []string {
			ls[8], ls[9] = `    backend = "rbd"`, `    pool = "rbd"`
			return ls
		}), []string{`t.hcl:8:13:`, `image: an image is required for backend rbd`}},
		{"rbd with path", base(func(ls []string) []string {
			ls[8], ls[9] = `    backend = "rbd"`, `    path = "/tmp/x"`
			return insert(10, `    pool = "rbd"`, `    image = "i"`)(ls)
		}), []string{`t.hcl:12:12:`, `path: backend rbd takes no path`}},
		{"pool on a memory backend", base(insert(10, `    pool = "rbd"`)), []string{`t.hcl:10:12:`, `pool: only backend rbd takes pool`}},
		{"keyring on a memory backend", base(insert(10, `    keyring = "/etc/ceph/k"`)), []string{`t.hcl:10:15:`, `keyring: only backend rbd takes keyring`}},
		{"block size not power of two", base(insert(10, `    block_size = 1000`)), []string{`t.hcl:10:18: subsystems/` + nqnA + `/namespaces/1: block_size: 1000 is not a power of two from 512 to 65536`}},
		{"block size too large", base(insert(10, `    block_size = 131072`)), []string{`t.hcl:10:18:`, `block_size: `}},
		{"size not multiple of block size", base(set(10, `    size = 1000`)), []string{`t.hcl:10:12:`, `size: 1000 bytes is not a multiple of the block size 512`}},
		{"bad uuid", base(insert(10, `    uuid = "1234"`)), []string{`t.hcl:10:12:`, `uuid: "1234" is not a UUID`}},
		{"bad nguid", base(insert(10, `    nguid = "xyz"`)), []string{`t.hcl:10:13:`, `nguid: `}},
		{"bad eui64", base(insert(10, `    eui64 = "0011"`)), []string{`t.hcl:10:13:`, `eui64: `}},
		{"duplicate uuid", base(insert(12,
			`  namespace "2" {`, `    backend = "null"`, `    size = 4096`, `    uuid = "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27"`, `  }`,
			`  namespace "3" {`, `    backend = "null"`, `    size = 4096`, `    uuid = "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27"`, `  }`)),
			[]string{`t.hcl:20:12:`, `uuid: UUID 2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27 is also used by subsystems/` + nqnA + `/namespaces/2`}},

		{"bad IP", base(set(2, `  address = "127.0.0.256"`)), []string{`t.hcl:2:13: ports/p0: address: "127.0.0.256" is not an IPv4 or IPv6 address`}},
		{"hostname instead of IP", base(set(2, `  address = "localhost"`)), []string{`t.hcl:2:13:`, `not an IPv4 or IPv6 address`}},
		{"missing address", base(set(2, ``)), []string{`t.hcl:1:6: ports/p0: address: an IP address is required`}},
		{"IPv6 zone", base(set(2, `  address = "fe80::1%eth0"`)), []string{`t.hcl:2:13:`, `zones are not allowed`}},
		{"address family mismatch", base(insert(3, `  address_family = "ipv6"`)), []string{`t.hcl:3:20:`, `address_family: "ipv6" does not match address 127.0.0.1`}},
		{"service out of range", base(insert(3, `  service = 70000`)), []string{`t.hcl:3:13: ports/p0: service: service "70000" is not a port number from 1 to 65535`}},
		{"service zero", base(insert(3, `  service = 0`)), []string{`t.hcl:3:13:`, `service: `}},
		{"service not a number", base(insert(3, `  service = "nvme"`)), []string{`t.hcl:3:13:`, `service: `}},
		{"unknown transport", base(insert(3, `  transport = "fc"`)), []string{`t.hcl:3:15:`, `transport: unknown transport "fc"`}},
		{"device on a tcp port", base(insert(3, `  transport = "tcp"`, `  device = "mlx5_0"`)), []string{`t.hcl:4:12:`, `device: an RDMA device needs transport rdma`}},
		{"provider on a tcp port", base(insert(3, `  transport = "tcp"`, `  provider = "soft"`)), []string{`t.hcl:4:14:`, `provider: provider "soft" needs transport rdma`}},
		{"srq_size on a tcp port", base(insert(3, `  transport = "tcp"`, `  srq_size = 64`)), []string{`t.hcl:4:14:`, `srq_size: srq_size needs transport rdma`}},
		{"tcp port without address", base(func(ls []string) []string { return insert(3, `  transport = "tcp"`)(set(2, ``)(ls)) }), []string{`ports/p0: address: an IP address is required for transport tcp`}},
		{"unknown provider", base(insert(3, `  provider = "hw"`)), []string{`t.hcl:3:14:`, `provider: unknown provider "hw" (want auto, soft or ibverbs)`}},
		{"provider not a string", base(insert(3, `  provider = ["soft"]`)), []string{`t.hcl:3:14:`, `provider: want a string`}},
		{"device with soft", base(insert(3, `  provider = "soft"`, `  device = "mlx5_0"`)), []string{`t.hcl:4:12: ports/p0: device: device "mlx5_0" needs the ibverbs provider (or auto), not soft`}},
		{"bad device name", base(insert(3, `  device = "mlx5 0"`)), []string{`t.hcl:3:12:`, `device: "mlx5 0" is not an RDMA device name`}},
		{"device on a loop port", base(insert(3, `  transport = "loop"`, `  device = "rxe0"`)), []string{`t.hcl:4:12:`, `device: an RDMA device needs transport rdma`}},
		{"tos too large", base(insert(3, `  tos = 256`)), []string{`t.hcl:3:9: ports/p0: tos: 256 is not a whole number from 0 to 255`}},
		{"tos negative", base(insert(3, `  tos = -1`)), []string{`t.hcl:3:9:`, `tos: -1 is not a whole number from 0 to 255`}},
		{"tos not a number", base(insert(3, `  tos = "af31"`)), []string{`t.hcl:3:9:`, `tos: want a number`}},
		{"tos on a loop port", base(insert(3, `  transport = "loop"`, `  tos = 106`)), []string{`t.hcl:4:9:`, `tos: tos needs transport rdma`}},
		{"bad treq", base(insert(3, `  treq = "maybe"`)), []string{`t.hcl:3:10:`, `treq: unknown value "maybe"`}},
		{"inline data too large", base(insert(3, `  inline_data_size = 16400`)), []string{`t.hcl:3:22:`, `inline_data_size: 16400 is not a whole number from 0 to 16384`}},
		{"bad port name", base(set(1, `port "p 0" {`)), []string{`t.hcl:1:6: ports/p 0: port name "p 0"`, `t.hcl:6:11:`}},
		{"duplicate port", base(insert(4, `port "p0" {`, `  address = "127.0.0.2"`, `}`)), []string{`t.hcl:4:6: ports/p0: port declared twice`}},
		{"duplicate portid", base(insert(4, `port "p1" {`, `  address = "127.0.0.2"`, `  portid = 5`, `}`, `port "p2" {`, `  address = "127.0.0.3"`, `  portid = 5`, `}`)), []string{`t.hcl:10:12: ports/p2: portid: port ID 5 is also used by ports/p1`}},
		{"duplicate listen address", base(insert(4, `port "p1" {`, `  address = "127.0.0.1"`, `}`)), []string{`t.hcl:4:6: ports/p1: service: rdma 127.0.0.1 service 4420 is also used by ports/p0`}},
		{"port references unknown subsystem", base(insert(3, `  subsystems = ["`+nqnB+`"]`)), []string{`t.hcl:3:16: ports/p0: subsystems: unknown subsystem "` + nqnB + `"`}},

		{"several errors at once", base(func(ls []string) []string {
			ls[1] = `  address = "bad"`
			ls[9] = `    size = "huge"`
			return ls
		}), []string{`t.hcl:2:13:`, `t.hcl:10:12:`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := ParseHCL([]byte(tt.src), "t.hcl")
			if err == nil {
				t.Fatalf("no error; tree %+v\n%s", tree, tt.src)
			}
			if tree != nil {
				t.Error("a tree returned with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want Errors", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
			for _, e := range errs {
				if e.Range == nil {
					t.Errorf("error without position: %v", e)
				}
			}
		})
	}
}

// TestHCLImplicitHosts loads allowed_hosts without host blocks (the shape
// of docs/design.md §5's example): the loader creates the hosts configfs needs,
// Tree.HCL leaves them implied, and explicit host blocks still work.
func TestHCLImplicitHosts(t *testing.T) {
	const hostB = "nqn.2014-08.org.nvmexpress:uuid:0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5"
	src := lines(
		`host "`+hostA+`" {}`, // explicit, and listed
		`host "`+hostB+`" {}`, // explicit, not listed
		`subsystem "`+nqnA+`" {`,
		`  allowed_hosts = ["`+hostA+`", "testhost"]`,
		`}`,
		`subsystem "`+nqnB+`" {`,
		`  allowed_hosts = ["testhost", "nqn.2014-08.com.example:h3"]`,
		`}`,
	)
	tree, err := ParseHCL([]byte(src), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range tree.Hosts {
		got = append(got, h.NQN)
	}
	if want := []string{hostA, hostB, "testhost", "nqn.2014-08.com.example:h3"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("hosts %q, want %q", got, want)
	}
	// One warning for the non-conforming host name, at its first listing.
	ws := tree.Warnings()
	if len(ws) != 1 || ws[0].Error() != `t.hcl:4:19: hosts/testhost: NQN "testhost": does not start with "nqn." (want nqn.yyyy-mm.reverse.domain:name); accepted as the Linux target accepts it, but hosts that check NQNs may refuse it` {
		t.Errorf("warnings %v", ws)
	}
	// Saved HCL keeps the explicit host blocks only, and loads the same.
	out := string(tree.HCL())
	if strings.Count(out, "host \"") != 2 || !strings.Contains(out, `host "`+hostA+`"`) || !strings.Contains(out, `host "`+hostB+`"`) {
		t.Errorf("saved hosts:\n%s", out)
	}
	again, err := ParseHCL([]byte(out), "saved.hcl")
	if err != nil || !Equal(tree, again) || string(again.HCL()) != out {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	// nvmetcli JSON lists every host, as the kernel's tree has them.
	data, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	js, err := ParseNvmetcliJSON(data, "c.json")
	if err != nil || len(js.Hosts) != 4 || !Equal(tree, js) {
		t.Errorf("nvmetcli JSON: %v\n%s", err, data)
	}
	// A bad name in allowed_hosts is reported once, at allowed_hosts (not
	// again at the host created for it).
	_, err = ParseHCL([]byte(lines(`subsystem "`+nqnA+`" {`, `  allowed_hosts = ["`+badHost+`"]`, `}`)), "t.hcl")
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Error(), `t.hcl:2:19: subsystems/`+nqnA+`: allowed_hosts: NQN "`+badHost+`"`) {
		t.Errorf("bad allowed host: %v", err)
	}
	// A tree built in code must still declare its hosts, as configfs does.
	tree.Hosts = tree.Hosts[:1]
	if err := tree.Validate(); err == nil || !strings.Contains(err.Error(), `subsystems/`+nqnA+`: allowed_hosts: unknown host "testhost"`) {
		t.Errorf("host missing from a tree: %v", err)
	}
}

// TestHCLWarnings loads names the Linux target accepts but that are not
// conforming NQNs: they load, with warnings.
func TestHCLWarnings(t *testing.T) {
	tree, err := ParseHCL([]byte(lines(
		`host "hostnqn" {}`,
		`subsystem "testnqn" {`,
		`  allowed_hosts = ["hostnqn"]`,
		`}`,
		`subsystem "`+nqnA+`" {`,
		`  allow_any_host = true`,
		`}`,
	)), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	ws := tree.Warnings()
	want := []string{
		`t.hcl:1:6: hosts/hostnqn: NQN "hostnqn": does not start with "nqn."`,
		`t.hcl:2:11: subsystems/testnqn: NQN "testnqn": does not start with "nqn."`,
	}
	if len(ws) != len(want) {
		t.Fatalf("warnings %v", ws)
	}
	for i, w := range want {
		if !strings.HasPrefix(ws[i].Error(), w) {
			t.Errorf("warning %d = %q, want %q…", i, ws[i], w)
		}
	}
	if err := tree.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// A conforming tree has none.
	conforming := tree.Clone()
	conforming.Subsystems, conforming.Hosts = conforming.Subsystems[1:], nil
	if w := conforming.Warnings(); w != nil {
		t.Errorf("conforming tree: warnings %v", w)
	}
}

func TestHCLRoundTrip(t *testing.T) {
	tree, err := LoadFile("../examples/nvmetd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out := tree.HCL()
	again, err := ParseHCL(out, "saved.hcl")
	if err != nil {
		t.Fatalf("saved HCL does not load: %v\n%s", err, out)
	}
	if c := Diff(tree, again); !c.Empty() {
		t.Errorf("round trip changed the tree: %+v\n%s", c, out)
	}
	if again.Port("rdma0").PortID != 1 || again.Subsystem("nqn.2026-11.io.nvmeof:disk0").Namespace(1).DeviceEUI64 != tree.Subsystem("nqn.2026-11.io.nvmeof:disk0").Namespace(1).DeviceEUI64 {
		t.Error("round trip lost attributes")
	}
	// Saving is stable.
	if out2 := again.HCL(); string(out2) != string(out) {
		t.Errorf("second save differs:\n%s\n---\n%s", out, out2)
	}
	// A port-side link to a subsystem survives as the subsystem's ports.
	src := lines(
		`port "p0" {`,
		`  transport = "loop"`,
		`  subsystems = ["`+nqnA+`"]`,
		`}`,
		`subsystem "`+nqnA+`" {`,
		`  allow_any_host = true`,
		`}`,
	)
	t1, err := ParseHCL([]byte(src), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := ParseHCL(t1.HCL(), "t2.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(t1, t2) || len(t2.PortsOf(nqnA)) != 1 {
		t.Errorf("port-side link lost:\n%s", t1.HCL())
	}
}

// TestLoaderCheckProvider loads ports through a Loader whose
// CheckProvider refuses ibverbs, as in a binary built without it: the
// error has the position of the attribute that asks for ibverbs.
func TestLoaderCheckProvider(t *testing.T) {
	noIBVerbs := func(provider, device string) error {
		switch {
		case provider == ProviderIBVerbs:
			return errors.New("the ibverbs RDMA provider is not built into this binary")
		case provider == ProviderAuto && device != "":
			return fmt.Errorf("device %q needs the ibverbs provider", device)
		}
		return nil
	}
	port := func(attrs ...string) string {
		return lines(append(append([]string{`port "p0" {`, `  address = "127.0.0.1"`}, attrs...), `}`)...)
	}
	tests := []struct {
		name string
		src  string
		want string // "" : loads
	}{
		{"default provider", port(), ""},
		{"soft", port(`  provider = "soft"`), ""},
		{"auto", port(`  provider = "auto"`, `  tos = 106`), ""},
		{"ibverbs", port(`  provider = "ibverbs"`), `t.hcl:3:14: ports/p0: provider: the ibverbs RDMA provider is not built into this binary`},
		{"ibverbs with a device", port(`  device = "mlx5_0"`, `  provider = "ibverbs"`), `t.hcl:4:14: ports/p0: provider: the ibverbs`},
		{"auto with a device", port(`  device = "mlx5_0"`), `t.hcl:3:12: ports/p0: device: device "mlx5_0" needs the ibverbs provider`},
		{"explicit auto with a device", port(`  device = "mlx5_0"`, `  provider = "auto"`), `t.hcl:4:14: ports/p0: provider: device "mlx5_0" needs`},
		{"loop port: not asked", lines(`port "p0" {`, `  transport = "loop"`, `}`), ""},
		{"soft with a device: one error", port(`  provider = "soft"`, `  device = "mlx5_0"`), `t.hcl:4:12: ports/p0: device: device "mlx5_0" needs the ibverbs provider (or auto), not soft`},
	}
	l := Loader{CheckProvider: noIBVerbs}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := l.ParseHCL([]byte(tc.src), "t.hcl")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error: %v", err)
				}
				if err := l.Validate(tree); err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("error %v, want one", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			// The zero Loader does not ask.
			if _, err := ParseHCL([]byte(tc.src), "t.hcl"); err != nil && !strings.Contains(tc.name, "soft with a device") {
				t.Errorf("zero Loader: %v", err)
			}
		})
	}
	// nvmetcli JSON: the error names the file.
	_, err := l.ParseNvmetcliJSON([]byte(`{"ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"}, "nvmeof": {"provider": "ibverbs"}}]}`), "c.json")
	if err == nil || !strings.HasPrefix(err.Error(), "c.json: ports/1: provider: the ibverbs RDMA provider is not built") {
		t.Errorf("JSON: %v", err)
	}
}

// TestHCLRoundTripRDMAOptions saves and loads provider, device and tos.
func TestHCLRoundTripRDMAOptions(t *testing.T) {
	src := lines(
		`port "p0" {`,
		`  provider = "ibverbs"`,
		`  device   = "mlx5_0"`,
		`  tos      = 106`,
		`  address  = "192.0.2.1"`,
		`}`,
		`port "p1" {`,
		`  address  = "192.0.2.2"`,
		`  tos      = 0`,
		`}`,
	)
	tree, err := ParseHCL([]byte(src), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := tree.Port("p0"), tree.Port("p1")
	if p0.Provider != ProviderIBVerbs || p0.Device != "mlx5_0" || p0.TOS != 106 || p1.Provider != ProviderAuto || p1.TOS != 0 {
		t.Fatalf("ports %+v %+v", p0, p1)
	}
	out := tree.HCL()
	norm := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{`provider = "ibverbs"`, `device = "mlx5_0"`, `tos = 106`, `tos = 0`} {
		if !strings.Contains(norm, want) {
			t.Errorf("saved HCL lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(string(out), "provider") != 1 {
		t.Errorf("saved HCL writes the default provider:\n%s", out)
	}
	again, err := ParseHCL(out, "saved.hcl")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !Equal(tree, again) {
		t.Errorf("HCL round trip changed the tree:\n%s", out)
	}
	js, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"nvmeof": {`) || !strings.Contains(string(js), `"device": "mlx5_0"`) || !strings.Contains(string(js), `"tos": 106`) {
		t.Errorf("JSON lacks the nvmeof port options:\n%s", js)
	}
	fromJSON, err := ParseNvmetcliJSON(js, "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(tree, fromJSON) {
		t.Errorf("JSON round trip changed the tree:\n%s", js)
	}
}

func TestLoadFileErrors(t *testing.T) {
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.hcl")); err == nil {
		t.Error("missing file loaded")
	}
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("port \"p\" {\n  nope = 1\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(bad)
	if err == nil || !strings.Contains(err.Error(), bad+":2:3:") {
		t.Errorf("LoadFile error = %v, want position %s:2:3", err, bad)
	}
}

func FuzzParseHCL(f *testing.F) {
	example, err := os.ReadFile("../examples/nvmetd.hcl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(anaHCL))
	for _, s := range []string{
		"",
		`port "p" { address = "::1" service = 1 }`,
		"subsystem \"" + nqnA + "\" {\n namespace \"1\" { size = 1e400 }\n}\n",
		"subsystem \"" + nqnA + "\" {\n namespace \"1\" { block_size = -1e30 }\n}\n",
		"subsystem \"x\" { ports = [null, 1, true] }",
		`log_level = "${"a"}${1 + 2}"`,
		`log_level = ""`,
		`port "p" { inline_data_size = 1.0000000000000000001 }`,
		"port \"p\" {\n",
		`host "h" { x = 1 }`,
		"port \"p\" {\n transport = \"loop\"\n ana_group \"1\" { state = \"optimised\" }\n ana_group \"01\" {}\n ana_group \"x\" {}\n}\n",
		"subsystem \"" + nqnA + "\" {\n namespace \"1\" { ana_grpid = 2.5 }\n}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		tree, err := ParseHCL(src, "fuzz.hcl")
		if err != nil {
			if tree != nil {
				t.Fatal("tree returned with an error")
			}
			_ = err.Error()
			return
		}
		// What loads must save and load back the same.
		again, err := ParseHCL(tree.HCL(), "saved.hcl")
		if err != nil {
			t.Fatalf("saved tree does not load: %v\n%s", err, tree.HCL())
		}
		if !Equal(tree, again) {
			t.Fatalf("round trip changed the tree:\n%s", tree.HCL())
		}
	})
}
