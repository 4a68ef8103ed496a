package wire_test

import (
	"testing"

	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// oracleRoCE is the "roce" record of the decode oracle (testdata/pcap/ORACLE.md).
type oracleRoCE struct {
	Frame    int    `json:"frame"`
	UDPSport uint16 `json:"udp_sport"`
	BTH      struct {
		Opcode uint8  `json:"opcode"`
		Opname string `json:"opname"`
		SE     uint8  `json:"se"`
		M      uint8  `json:"m"`
		Pad    int    `json:"pad"`
		TVer   uint8  `json:"tver"`
		PKey   uint16 `json:"pkey"`
		FECN   uint8  `json:"fecn"`
		BECN   uint8  `json:"becn"`
		Resv6  uint8  `json:"resv6"`
		DQPN   uint32 `json:"dqpn"`
		AckReq uint8  `json:"ackreq"`
		Resv7  uint8  `json:"resv7"`
		PSN    uint32 `json:"psn"`
	} `json:"bth"`
	RETH *struct {
		VA     uint64 `json:"va"`
		RKey   uint32 `json:"rkey"`
		DMALen uint32 `json:"dmalen"`
	} `json:"reth"`
	AETH *struct {
		Syndrome uint8  `json:"syndrome"`
		MSN      uint32 `json:"msn"`
	} `json:"aeth"`
	DETH *struct {
		QKey uint32 `json:"qkey"`
		SQPN uint32 `json:"sqpn"`
	} `json:"deth"`
	IETH *struct {
		RKey uint32 `json:"rkey"`
	} `json:"ieth"`
	ImmDt      *uint32 `json:"immdt"`
	PayloadLen int     `json:"payload_len"`
	ICRC       uint32  `json:"icrc"`
	ICRCOK     bool    `json:"icrc_ok"`
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// TestGoldenHeaders parses every RoCEv2 frame of the kernel captures and
// compares every header field with the independent decode.
func TestGoldenHeaders(t *testing.T) {
	for _, name := range []string{"kernel-nvme-rdma-rxe", "rxe-icrc-probe"} {
		t.Run(name, func(t *testing.T) {
			frames, err := capture.Load(name + ".pcapng.gz")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := capture.LoadOracle(name + ".decoded.jsonl.gz")
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, r := range recs {
				if r.Kind != "roce" {
					continue
				}
				var o oracleRoCE
				if err := r.Decode(&o); err != nil {
					t.Fatal(err)
				}
				f := frames[o.Frame-1]
				var p wire.Packet
				if err := p.Parse(f.Payload); err != nil {
					t.Fatalf("frame %d: %v", o.Frame, err)
				}
				b := p.BTH
				type cmp struct {
					field     string
					got, want uint64
				}
				cs := []cmp{
					{"opcode", uint64(b.Opcode()), uint64(o.BTH.Opcode)},
					{"se", uint64(b2u(b.SE())), uint64(o.BTH.SE)},
					{"m", uint64(b2u(b.MigReq())), uint64(o.BTH.M)},
					{"pad", uint64(b.PadCount()), uint64(o.BTH.Pad)},
					{"tver", uint64(b.TVer()), uint64(o.BTH.TVer)},
					{"pkey", uint64(b.PKey()), uint64(o.BTH.PKey)},
					{"fecn", uint64(b2u(b.FECN())), uint64(o.BTH.FECN)},
					{"becn", uint64(b2u(b.BECN())), uint64(o.BTH.BECN)},
					{"resv6", uint64(b.Resv6()), uint64(o.BTH.Resv6)},
					{"dqpn", uint64(b.DestQP()), uint64(o.BTH.DQPN)},
					{"ackreq", uint64(b2u(b.AckReq())), uint64(o.BTH.AckReq)},
					{"resv7", uint64(b.Resv7()), uint64(o.BTH.Resv7)},
					{"psn", uint64(b.PSN()), uint64(o.BTH.PSN)},
					{"payload_len", uint64(len(p.Payload)), uint64(o.PayloadLen)},
					{"icrc", uint64(p.ICRCValue()), uint64(o.ICRC)},
					{"has_reth", uint64(b2u(p.RETH != nil)), uint64(b2u(o.RETH != nil))},
					{"has_aeth", uint64(b2u(p.AETH != nil)), uint64(b2u(o.AETH != nil))},
					{"has_deth", uint64(b2u(p.DETH != nil)), uint64(b2u(o.DETH != nil))},
					{"has_ieth", uint64(b2u(p.IETH != nil)), uint64(b2u(o.IETH != nil))},
					{"has_immdt", uint64(b2u(p.ImmDt != nil)), uint64(b2u(o.ImmDt != nil))},
				}
				if o.RETH != nil && p.RETH != nil {
					cs = append(cs, cmp{"reth.va", p.RETH.VA(), o.RETH.VA},
						cmp{"reth.rkey", uint64(p.RETH.RKey()), uint64(o.RETH.RKey)},
						cmp{"reth.dmalen", uint64(p.RETH.DMALen()), uint64(o.RETH.DMALen)})
				}
				if o.AETH != nil && p.AETH != nil {
					cs = append(cs, cmp{"aeth.syndrome", uint64(p.AETH.Syndrome()), uint64(o.AETH.Syndrome)},
						cmp{"aeth.msn", uint64(p.AETH.MSN()), uint64(o.AETH.MSN)})
				}
				if o.DETH != nil && p.DETH != nil {
					cs = append(cs, cmp{"deth.qkey", uint64(p.DETH.QKey()), uint64(o.DETH.QKey)},
						cmp{"deth.sqpn", uint64(p.DETH.SrcQP()), uint64(o.DETH.SQPN)})
				}
				if o.IETH != nil && p.IETH != nil {
					cs = append(cs, cmp{"ieth.rkey", uint64(p.InvalidateRKey()), uint64(o.IETH.RKey)})
				}
				if o.ImmDt != nil && p.ImmDt != nil {
					cs = append(cs, cmp{"immdt", uint64(p.Imm()), uint64(*o.ImmDt)})
				}
				for _, c := range cs {
					if c.got != c.want {
						t.Errorf("frame %d: %s = %#x, oracle %#x", o.Frame, c.field, c.got, c.want)
					}
				}
				if b.Opcode().String() != o.BTH.Opname {
					t.Errorf("frame %d: opcode name %q, oracle %q", o.Frame, b.Opcode(), o.BTH.Opname)
				}
				checked++
			}
			if checked == 0 {
				t.Fatal("no roce records")
			}
			t.Logf("%d RoCEv2 frames agree with the oracle", checked)
		})
	}
}

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		a, b uint32
		want int32
	}{
		{5, 3, 2}, {3, 5, -2}, {0, wire.PSNMask, 1}, {wire.PSNMask, 0, -1}, {1 << 23, 0, 1 << 23}, {0, 1<<23 + 1, 1<<23 - 1},
	}
	for _, tt := range tests {
		if got := wire.PSNDiff(tt.a, tt.b); got != tt.want {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	if got := wire.PSNAdd(wire.PSNMask, 2); got != 1 {
		t.Errorf("PSNAdd wrap = %d", got)
	}
}

func FuzzParsePacket(f *testing.F) {
	f.Add([]byte{0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4})
	f.Add([]byte{0x0c, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := p.Parse(b); err != nil {
			return
		}
		n := p.Opcode().HeaderLen() + len(p.Payload) + p.BTH.PadCount() + wire.ICRCLen
		if n != len(b) {
			t.Fatalf("parsed lengths add up to %d, packet is %d", n, len(b))
		}
	})
}
