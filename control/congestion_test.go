package control

import "testing"

// TestPortCongestion: port.add and port.modify take a soft port's
// congestion control as one string, port.list gives it back the same
// way, "off" removes the block, and bad settings or a port without a
// soft device are refused.
func TestPortCongestion(t *testing.T) {
	e := start(t, baseConfig)
	e.call(t, "port.add", m{"id": "cc", "transport": "rdma", "provider": "soft", "address": "127.83.9.1",
		"congestion": "line_rate=25Gbit,ecn=ect1"}, nil)
	congestionOf := func() *string {
		t.Helper()
		var ports []Port
		e.call(t, "port.list", nil, &ports)
		for _, p := range ports {
			if p.ID == "cc" {
				return p.Congestion
			}
		}
		t.Fatal("port cc not listed")
		return nil
	}
	if c := congestionOf(); c == nil || *c != "enabled=true,ecn=ect1,line_rate=2.5e+10" {
		t.Fatalf("congestion %v", deref(c))
	}
	e.fails(t, "port.modify", m{"id": "cc", "congestion": "line_rate=fast"}, CodeInvalidParams, "congestion: ")
	e.call(t, "port.modify", m{"id": "cc", "congestion": "on"}, nil)
	if c := congestionOf(); c == nil || *c != "on" {
		t.Fatalf("after on: congestion %v", deref(c))
	}
	e.call(t, "port.modify", m{"id": "cc", "congestion": "off"}, nil)
	if c := congestionOf(); c != nil {
		t.Fatalf("after off: congestion %q", *c)
	}
	e.fails(t, "port.add", m{"id": "lp9", "transport": "loop", "congestion": "on"}, CodeInvalidConfig, "ports/lp9")
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
