package tcp

import (
	"encoding/binary"
	"testing"
)

// FuzzHostPDUHeader: the host reader's header check never panics, and a
// header it passes has a type a controller sends, the negotiated digest
// flags, and for C2HData a PLEN that is PDO + DATAL (+ the data digest).
func FuzzHostPDUHeader(f *testing.F) {
	hp := hostParams{maxH2CData: 1 << 20}
	c := &hostFakeConn{f: &hostFake{}}
	f.Add([]byte(c.pdu(TypeCapsuleResp, 0, nil, nil)), false, false)
	f.Add([]byte(c.pdu(TypeR2T, 0, nil, nil)), false, false)
	f.Add([]byte(c.pdu(TypeC2HData, FlagDataLast|FlagDataSuccess, []byte{1, 2, 3, 4}, func(p PDU) { p.DataPDU().SetDataL(4) })[:24]), false, false)
	c.hdgst, c.ddgst = true, true
	f.Add([]byte(c.pdu(TypeC2HData, FlagDataLast, []byte{1, 2, 3, 4}, func(p PDU) { p.DataPDU().SetDataL(4) })[:28]), true, true)
	f.Add([]byte(c.pdu(TypeCapsuleResp, 0, nil, nil)), true, false)
	f.Add([]byte(New(TypeC2HTermReq, 8)), false, false)
	f.Fuzz(func(t *testing.T, b []byte, hdgst, ddgst bool) {
		if len(b) > hostHdrRoom {
			b = b[:hostHdrRoom]
		}
		p := hp
		p.hdgst, p.ddgst = hdgst, ddgst
		if chk := checkHostPDUHeader(b, p); chk != nil {
			if chk.err == nil || chk.fes == 0 {
				t.Fatalf("a refusal without a reason: %+v", chk)
			}
			return
		}
		h := Header(b)
		t2 := h.Type()
		if t2 != TypeCapsuleResp && t2 != TypeC2HData && t2 != TypeR2T && t2 != TypeC2HTermReq {
			t.Fatalf("%s passed", t2)
		}
		if t2 == TypeC2HTermReq {
			if h.PLen() < TermReqHLen || h.PLen() > MaxTermReqLen {
				t.Fatalf("termination request of PLEN %d passed", h.PLen())
			}
			return
		}
		if (h.Flags()&FlagHDGST != 0) != hdgst {
			t.Fatalf("flags %#x passed with hdgst %v", h.Flags(), hdgst)
		}
		hd := 0
		if hdgst {
			hd = DigestLen
		}
		if t2 == TypeC2HData && len(b) >= DataHLen+hd {
			dd := uint64(0)
			if ddgst {
				dd = DigestLen
			}
			if uint64(h.PLen()) != uint64(h.PDO())+uint64(DataPDU(b).DataL())+dd || DataPDU(b).DataL() == 0 {
				t.Fatalf("C2HData PLEN %d PDO %d DATAL %d passed", h.PLen(), h.PDO(), DataPDU(b).DataL())
			}
		}
		if hd > 0 && len(b) >= t2.HeaderLen()+hd {
			hl := t2.HeaderLen()
			if binary.LittleEndian.Uint32(b[hl:]) != Digest(b[:hl]) {
				t.Fatal("a bad header digest passed")
			}
		}
	})
}

// FuzzParseICResp: the host's ICResp check never panics, and what it
// accepts has the digests asked for, CPDA <= 31 and a usable MAXH2CDATA.
func FuzzParseICResp(f *testing.F) {
	ok := New(TypeICResp, 0)
	ok.ICResp().SetMaxH2CData(1 << 22)
	f.Add([]byte(ok), false, false)
	ok.ICResp().SetDGST(DGSTHeader | DGSTData)
	f.Add([]byte(ok), true, true)
	f.Add([]byte(New(TypeC2HTermReq, 4)), false, false)
	f.Fuzz(func(t *testing.T, b []byte, hdgst, ddgst bool) {
		hp, err := parseICResp(b, hdgst, ddgst)
		if err != nil {
			return
		}
		if hp.hdgst != hdgst || hp.ddgst != ddgst || hp.cpda > 31 || hp.maxH2CData < MinMaxH2CData || hp.maxH2CData%4 != 0 {
			t.Fatalf("accepted %+v", hp)
		}
	})
}
