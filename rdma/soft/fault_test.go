package soft

import (
	"encoding/binary"
	"testing"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// TestMarkCE: the receive-side injector marks ECN-capable datagrams CE
// (IPv4 with its header checksum redone, IPv6), leaves Not-ECT ones alone
// unless CEMarkNotECT asks for it, and never touches the DSCP.
func TestMarkCE(t *testing.T) {
	v4 := func(tos byte) []byte {
		b := make([]byte, wire.IPv4HeaderLen+8)
		b[0], b[1], b[8], b[9] = 0x45, tos, 64, 17
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[10:], ipv4Checksum(b[:wire.IPv4HeaderLen]))
		return b
	}
	v6 := func(tclass byte) []byte {
		b := make([]byte, 48)
		b[0], b[1] = 0x60|tclass>>4, tclass<<4
		return b
	}
	for _, tc := range []struct {
		name          string
		b             []byte
		notECT, want  bool
		wantECN, dscp byte
	}{
		{"v4 ECT0", v4(0x68 | ecnECT0), false, true, ecnCE, 0x68},
		{"v4 ECT1", v4(ecnECT1), false, true, ecnCE, 0},
		{"v4 Not-ECT", v4(0x68), false, false, ecnNotECT, 0x68},
		{"v4 Not-ECT, marked anyway", v4(0x68), true, true, ecnCE, 0x68},
		{"v6 ECT0", v6(0xb8 | ecnECT0), false, true, ecnCE, 0xb8},
		{"v6 Not-ECT", v6(0xb8), false, false, ecnNotECT, 0xb8},
		{"v6 Not-ECT, marked anyway", v6(0xb8), true, true, ecnCE, 0xb8},
		{"short", []byte{0x45}, true, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := markCE(tc.b, tc.notECT); got != tc.want {
				t.Fatalf("markCE = %v, want %v", got, tc.want)
			}
			if len(tc.b) < 2 {
				return
			}
			tos := tc.b[1]
			if tc.b[0]>>4 == 6 {
				tos = tc.b[0]<<4 | tc.b[1]>>4
			}
			if ipECN(tc.b) != tc.wantECN || tos&^3 != tc.dscp {
				t.Fatalf("ECN %d DSCP bits %#x, want %d %#x", ipECN(tc.b), tos&^3, tc.wantECN, tc.dscp)
			}
			if tc.b[0]>>4 == 4 {
				h := append([]byte(nil), tc.b[:wire.IPv4HeaderLen]...)
				sum := binary.BigEndian.Uint16(h[10:])
				h[10], h[11] = 0, 0
				if want := ipv4Checksum(h); sum != want {
					t.Fatalf("IPv4 checksum %#x, want %#x", sum, want)
				}
			}
		})
	}
}
