package wire_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

func TestServiceID(t *testing.T) {
	tests := []struct {
		port uint16
		id   uint64
	}{
		{4420, 0x0000000001061144},
		{0, 0x0000000001060000},
		{0xffff, 0x000000000106ffff},
	}
	for _, tt := range tests {
		if got := wire.ServiceID(tt.port); got != tt.id {
			t.Errorf("ServiceID(%d) = %#016x, want %#016x", tt.port, got, tt.id)
		}
		if p, ok := wire.PortFromServiceID(tt.id); !ok || p != tt.port {
			t.Errorf("PortFromServiceID(%#x) = %d, %t", tt.id, p, ok)
		}
	}
	for _, id := range []uint64{
		wire.ServiceIDFor(wire.RDMAPSUDP, 4420),
		wire.ServiceIDFor(wire.RDMAPSIB, 4420),
		0x0000000101061144, // bits above the port space
		0,
	} {
		if p, ok := wire.PortFromServiceID(id); ok {
			t.Errorf("PortFromServiceID(%#x) = %d, true", id, p)
		}
	}
}

func TestCMAHdrRoundTrip(t *testing.T) {
	tests := []struct {
		src, dst string
		ipver    uint8
	}{
		{"192.0.2.1", "192.0.2.2", 4},
		{"127.0.0.2", "127.0.0.1", 4},
		{"::ffff:127.0.0.2", "::ffff:127.0.0.1", 6},
		{"2001:db8::1", "fe80::2", 6},
	}
	for _, tt := range tests {
		b := make([]byte, wire.REQPrivateDataLen)
		for i := range b {
			b[i] = 0xa5 // garbage the setters must overwrite
		}
		h := wire.CMAHdr(b[:wire.CMAHdrLen])
		src, dst := netip.MustParseAddr(tt.src), netip.MustParseAddr(tt.dst)
		if err := h.SetAddrs(src, dst); err != nil {
			t.Fatal(err)
		}
		h.SetPort(54024)
		p, err := wire.ParseCMAHdr(b)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if p.Version() != 0 || p.IPVersion() != tt.ipver || p.Port() != 54024 ||
			p.SrcAddr() != src || p.DstAddr() != dst {
			t.Errorf("round trip of %s -> %s: %v", tt.src, tt.dst, p)
		}
		if tt.ipver == 4 {
			for i, x := range p.SrcAddrRaw()[:12] {
				if x != 0 || p.DstAddrRaw()[i] != 0 {
					t.Fatalf("IPv4 address padding not zero: % x", p.SrcAddrRaw())
				}
			}
		}
		if b[1]&0x0f != 0 {
			t.Errorf("IP version low nibble %#x", b[1])
		}
		if b[wire.CMAHdrLen] != 0xa5 {
			t.Error("setter wrote past the header")
		}
	}
	h := wire.CMAHdr(make([]byte, wire.CMAHdrLen))
	if err := h.SetAddrs(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")); err == nil {
		t.Error("SetAddrs accepted mixed families")
	}
	if err := h.SetAddrs(netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("192.0.2.2")); err == nil {
		t.Error("SetAddrs accepted an IPv4-mapped and an IPv4 address")
	}
	if err := h.SetAddrs(netip.Addr{}, netip.MustParseAddr("2001:db8::1")); err == nil {
		t.Error("SetAddrs accepted an invalid address")
	}
	h.SetVersion(1)
	h.SetIPVersion(4)
	if h.Version() != 1 || h.IPVersion() != 4 {
		t.Errorf("setters: %v", h)
	}
}

func TestParseCMAHdrErrors(t *testing.T) {
	good := make([]byte, wire.CMAHdrLen)
	good[1] = 0x40
	mod := func(f func([]byte)) []byte {
		c := append([]byte(nil), good...)
		f(c)
		return c
	}
	tests := []struct {
		name  string
		b     []byte
		short bool
	}{
		{"short", good[:wire.CMAHdrLen-1], true},
		{"version 1", mod(func(b []byte) { b[0] = 1 }), false},
		{"IP version 5", mod(func(b []byte) { b[1] = 0x50 }), false},
		{"IP version 0", mod(func(b []byte) { b[1] = 0 }), false},
	}
	for _, tt := range tests {
		_, err := wire.ParseCMAHdr(tt.b)
		if err == nil || errors.Is(err, wire.ErrShort) != tt.short {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if _, err := wire.ParseCMAHdr(good); err != nil {
		t.Error(err)
	}
}

func FuzzCMAHdr(f *testing.F) {
	seed := make([]byte, wire.CMAHdrLen)
	h := wire.CMAHdr(seed)
	_ = h.SetAddrs(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"))
	h.SetPort(49153)
	f.Add(seed)
	f.Add([]byte{0, 0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := wire.ParseCMAHdr(b)
		if err != nil {
			return
		}
		_ = h.String()
		out := wire.CMAHdr(make([]byte, wire.CMAHdrLen))
		if err := out.SetAddrs(h.SrcAddr(), h.DstAddr()); err != nil {
			t.Fatal(err)
		}
		out.SetPort(h.Port())
		g, err := wire.ParseCMAHdr(out)
		if err != nil {
			t.Fatal(err)
		}
		if g.Version() != h.Version() || g.IPVersion() != h.IPVersion() || g.Port() != h.Port() ||
			g.SrcAddr() != h.SrcAddr() || g.DstAddr() != h.DstAddr() {
			t.Fatalf("%v round-trips to %v", h, g)
		}
	})
}
