package configfs

import (
	"strings"
	"testing"
)

// TestDuplicateListenAddress: two ports of one transport on the same
// address and service fail validation, placed at the second port, for
// every transport (the second would otherwise fail at listen time); other
// transports, services or addresses do not conflict.
func TestDuplicateListenAddress(t *testing.T) {
	port := func(name, trtype, addr, svc string) string {
		s := "port \"" + name + "\" {\n  transport = \"" + trtype + "\"\n  address = \"" + addr + "\"\n"
		if svc != "" {
			s += "  service = " + svc + "\n"
		}
		return s + "}\n"
	}
	for _, tt := range []struct {
		name, ports, want string
	}{
		{"loop twice", port("a", "loop", "127.0.88.1", "") + port("b", "loop", "127.0.88.1", ""),
			`l.hcl:5:6: ports/b: service: loop 127.0.88.1 service 4420 is also used by ports/a`},
		{"loop default and explicit service", port("a", "loop", "127.0.88.1", "") + port("b", "loop", "127.0.88.1", "4420"),
			`ports/b: service: loop 127.0.88.1 service 4420 is also used by ports/a`},
		{"rdma twice", port("a", "rdma", "127.0.88.1", "4421") + port("b", "rdma", "127.0.88.1", "4421"),
			`ports/b: service: rdma 127.0.88.1 service 4421 is also used by ports/a`},
		{"rdma IPv4-mapped", port("a", "rdma", "127.0.88.1", "") + port("b", "rdma", "::ffff:127.0.88.1", ""),
			`ports/b: service: rdma ::ffff:127.0.88.1 service 4420 is also used by ports/a`},
		{"loop other service", port("a", "loop", "127.0.88.1", "") + port("b", "loop", "127.0.88.1", "4421"), ""},
		{"loop other address", port("a", "loop", "127.0.88.1", "") + port("b", "loop", "127.0.88.2", ""), ""},
		{"loop and rdma", port("a", "loop", "127.0.88.1", "") + port("b", "rdma", "127.0.88.1", ""), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHCL([]byte(tt.ports), "l.hcl")
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
