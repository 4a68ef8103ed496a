package configfs

import (
	"testing"
)

func TestParseIDs(t *testing.T) {
	u, err := ParseUUID("2A7E4E3C-61f1-4f0d-8b1e-8d9f0c6a1b27")
	if err != nil || u.String() != "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27" {
		t.Errorf("ParseUUID = %v, %v", u, err)
	}
	for _, bad := range []string{"", "2a7e4e3c61f14f0d8b1e8d9f0c6a1b27", "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b2", "2a7e4e3c-61f1-4f0d-8b1e_8d9f0c6a1b27", "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b2g"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", bad)
		}
	}
	want := NGUID{0x6e, 0x1b, 0x0d, 0x2c, 0x4f, 0x5a, 0x4b, 0x3c, 0x9d, 0x8e, 0x7f, 0x6a, 0x5b, 0x4c, 0x3d, 0x2e}
	for _, s := range []string{"6e1b0d2c4f5a4b3c9d8e7f6a5b4c3d2e", "6e1b0d2c-4f5a-4b3c-9d8e-7f6a5b4c3d2e", "6e:1b:0d:2c:4f:5a:4b:3c:9d:8e:7f:6a:5b:4c:3d:2e"} {
		if g, err := ParseNGUID(s); err != nil || g != want {
			t.Errorf("ParseNGUID(%q) = %v, %v", s, g, err)
		}
	}
	for _, bad := range []string{"", "6e1b", "6e1b0d2c4f5a4b3c9d8e7f6a5b4c3d2e00", "6e1b0d2c4f5a4b3c9d8e7f6a5b4c3d2-", "6e--1b0d2c4f5a4b3c9d8e7f6a5b4c3d2e"} {
		if _, err := ParseNGUID(bad); err == nil {
			t.Errorf("ParseNGUID(%q) succeeded", bad)
		}
	}
	e, err := ParseEUI64("eui.0225b3c4d5e6f708")
	if err != nil || e.String() != "0225b3c4d5e6f708" {
		t.Errorf("ParseEUI64 = %v, %v", e, err)
	}
	if _, err := ParseEUI64("0225b3c4d5e6f7"); err == nil {
		t.Error("short EUI-64 accepted")
	}
}

func TestDerivedIDs(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:disk0"
	u1, g1, e1 := NewNamespace(1).IDs(nqn)
	u1b, g1b, e1b := NewNamespace(1).IDs(nqn)
	if u1 != u1b || g1 != g1b || e1 != e1b {
		t.Fatal("derived IDs are not deterministic")
	}
	u2, g2, e2 := NewNamespace(2).IDs(nqn)
	u3, g3, e3 := NewNamespace(1).IDs(nqn + "x")
	if u1 == u2 || g1 == g2 || e1 == e2 || u1 == u3 || g1 == g3 || e1 == e3 {
		t.Error("derived IDs collide across NSIDs or subsystems")
	}
	if u1[6]>>4 != 5 || u1[8]&0xc0 != 0x80 {
		t.Errorf("derived UUID %s is not an RFC 9562 version 5 UUID", u1)
	}
	if e1[0]&0x03 != 0x02 {
		t.Errorf("derived EUI-64 %s is not locally administered unicast", e1)
	}
	if u1.IsZero() || g1.IsZero() || e1.IsZero() {
		t.Error("derived ID is zero")
	}
	// Configured IDs win.
	ns := NewNamespace(1)
	ns.DeviceUUID = UUID{1}
	if u, _, _ := ns.IDs(nqn); u != (UUID{1}) {
		t.Errorf("configured UUID replaced: %s", u)
	}
}
