package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestTypeNames(t *testing.T) {
	tests := []struct {
		t    PDUType
		name string
		hlen int
	}{
		{TypeICReq, "ICReq", 128}, {TypeICResp, "ICResp", 128}, {TypeH2CTermReq, "H2CTermReq", 24},
		{TypeC2HTermReq, "C2HTermReq", 24}, {TypeCapsuleCmd, "CapsuleCmd", 72}, {TypeCapsuleResp, "CapsuleResp", 24},
		{TypeH2CData, "H2CData", 24}, {TypeC2HData, "C2HData", 24}, {TypeR2T, "R2T", 24}, {8, "PDU type 0x08", 0},
	}
	for _, tt := range tests {
		if tt.t.String() != tt.name || tt.t.HeaderLen() != tt.hlen {
			t.Errorf("%d: %q %d", tt.t, tt.t, tt.t.HeaderLen())
		}
	}
}

// The ICReq of frame 6 and the CapsuleResp of frame 11 of testdata/pcap/kernel-nvme-tcp.
func TestParseKernelPDUs(t *testing.T) {
	icreq := make([]byte, 128)
	copy(icreq, []byte{0, 0, 128, 0, 128, 0, 0, 0})
	p, err := Parse(icreq)
	if err != nil {
		t.Fatal(err)
	}
	q := p.ICReq()
	if p.Type() != TypeICReq || q.PFV() != 0 || q.HPDA() != 0 || q.DGST() != 0 || q.MaxR2T() != 0 || p.Data() != nil {
		t.Errorf("ICReq % x", []byte(p[:16]))
	}
	resp := New(TypeCapsuleResp, 0)
	cqe := resp.CapsuleResp().CQE()
	cqe[0], cqe[8] = 1, 1                      // dw0 = cntlid 1, sqhd 1
	p, err = Parse(append([]byte(resp), 0xaa)) // a byte of the next PDU
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 24 || p.Header().PLen() != 24 || p.Header().HLen() != 24 || p.Header().PDO() != 0 ||
		binary.LittleEndian.Uint32(p.CapsuleResp().CQE()) != 1 {
		t.Errorf("CapsuleResp % x", []byte(p))
	}
}

func TestRoundTrips(t *testing.T) {
	ic := New(TypeICResp, 0)
	r := ic.ICResp()
	r.SetPFV(0)
	r.SetCPDA(3)
	r.SetDGST(DGSTHeader | DGSTData)
	r.SetMaxH2CData(4194304)
	p, err := Parse(ic)
	if err != nil || p.ICResp().CPDA() != 3 || p.ICResp().DGST() != 3 || p.ICResp().MaxH2CData() != 4194304 || p.ICResp().PFV() != 0 {
		t.Errorf("ICResp: %v % x", err, []byte(ic[:16]))
	}
	iq := New(TypeICReq, 0).ICReq()
	iq.SetPFV(0)
	iq.SetHPDA(1)
	iq.SetDGST(DGSTData)
	iq.SetMaxR2T(7)
	if iq.HPDA() != 1 || iq.DGST() != DGSTData || iq.MaxR2T() != 7 {
		t.Error("ICReq setters")
	}

	data := bytes.Repeat([]byte{0x5a}, 4096)
	c2h := New(TypeC2HData, len(data))
	c2h.Header().SetFlags(FlagDataLast | FlagDataSuccess)
	d := c2h.DataPDU()
	d.SetCCCID(2)
	d.SetTTag(0)
	d.SetDataO(8192)
	d.SetDataL(uint32(len(data)))
	copy(c2h.Data(), data)
	p, err = Parse(c2h)
	if err != nil {
		t.Fatal(err)
	}
	if p.Header().PDO() != 24 || p.Header().PLen() != 4120 || p.DataPDU().CCCID() != 2 || p.DataPDU().DataO() != 8192 ||
		p.DataPDU().DataL() != 4096 || !bytes.Equal(p.Data(), data) || p.Header().Flags() != 0xc {
		t.Errorf("C2HData % x", []byte(p[:24]))
	}

	r2t := New(TypeR2T, 0).R2T()
	r2t.SetCCCID(116)
	r2t.SetTTag(3)
	r2t.SetR2TO(0)
	r2t.SetR2TL(65536)
	p, _ = Parse(PDU(r2t))
	if p.R2T().CCCID() != 116 || p.R2T().TTag() != 3 || p.R2T().R2TO() != 0 || p.R2T().R2TL() != 65536 {
		t.Errorf("R2T % x", []byte(p))
	}

	term := New(TypeC2HTermReq, 8)
	term.TermReq().SetFES(FESInvalidHeaderField)
	term.TermReq().SetFEI(2)
	copy(term.Data(), []byte{4, 0, 72, 72, 0, 0, 0, 0})
	p, err = Parse(term)
	if err != nil || p.TermReq().FES() != 1 || p.TermReq().FEI() != 2 || len(p.Data()) != 8 {
		t.Errorf("TermReq: %v % x", err, []byte(term))
	}
}

func TestDigests(t *testing.T) {
	// CRC-32C check value.
	if got := Digest([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC-32C %#x", got)
	}
	// A CapsuleCmd with header and data digests: header 72, HDGST 4, PDO 76, 8 data bytes, DDGST 4.
	b := make([]byte, 72+4+8+4)
	h := Header(b)
	h.SetType(TypeCapsuleCmd)
	h.SetFlags(FlagHDGST | FlagDDGST)
	h.SetHLen(72)
	h.SetPDO(76)
	h.SetPLen(uint32(len(b)))
	copy(b[76:], "in-capsu")
	binary.LittleEndian.PutUint32(b[72:], Digest(b[:72]))
	binary.LittleEndian.PutUint32(b[84:], Digest(b[76:84]))
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Data()) != "in-capsu" || p.VerifyHeaderDigest() != nil || p.VerifyDataDigest() != nil {
		t.Errorf("data %q, %v %v", p.Data(), p.VerifyHeaderDigest(), p.VerifyDataDigest())
	}
	if _, ok := p.HeaderDigest(); !ok {
		t.Error("no header digest")
	}
	b[80] ^= 1
	if err := p.VerifyDataDigest(); !errors.Is(err, ErrDigest) {
		t.Errorf("corrupt data: %v", err)
	}
	b[10] ^= 1
	if err := p.VerifyHeaderDigest(); !errors.Is(err, ErrDigest) {
		t.Errorf("corrupt header: %v", err)
	}
	// No digests: both pass.
	q := New(TypeCapsuleResp, 0)
	if _, ok := q.DataDigest(); ok || q.VerifyHeaderDigest() != nil || q.VerifyDataDigest() != nil {
		t.Error("digests on a PDU without")
	}
}

func TestParseErrors(t *testing.T) {
	mk := func(typ PDUType, flags, hlen, pdo uint8, plen uint32, size int) []byte {
		b := make([]byte, size)
		h := Header(b[:8])
		h.SetType(typ)
		h.SetFlags(flags)
		h.SetHLen(hlen)
		h.SetPDO(pdo)
		h.SetPLen(plen)
		return b
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"7 bytes", make([]byte, 7)},
		{"unknown type", mk(8, 0, 24, 0, 24, 24)},
		{"type 0x0a", mk(10, 0, 24, 0, 24, 24)},
		{"wrong hlen", mk(TypeCapsuleCmd, 0, 24, 0, 72, 72)},
		{"plen below hlen", mk(TypeCapsuleResp, 0, 24, 0, 16, 24)},
		{"plen below hlen + hdgst", mk(TypeCapsuleResp, FlagHDGST, 24, 0, 24, 28)},
		{"short buffer", mk(TypeC2HData, 0, 24, 24, 4120, 4000)},
		{"pdo in header", mk(TypeC2HData, 0, 24, 8, 100, 100)},
		{"pdo past plen", mk(TypeC2HData, 0, 24, 200, 100, 100)},
		{"pdo in header digest", mk(TypeC2HData, FlagHDGST, 24, 26, 100, 100)},
		{"ICReq plen 200", mk(TypeICReq, 0, 128, 0, 200, 200)},
		{"huge plen", mk(TypeH2CData, 0, 24, 24, 0xffffffff, 64)},
	}
	for _, tt := range tests {
		if _, err := Parse(tt.b); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	if _, ok := Length(make([]byte, 7)); ok {
		t.Error("Length of 7 bytes")
	}
	if n, ok := Length(mk(TypeR2T, 0, 24, 0, 24, 24)); !ok || n != 24 {
		t.Errorf("Length %d %v", n, ok)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(New(TypeICReq, 0)))
	f.Add([]byte(New(TypeC2HData, 16)))
	f.Add([]byte(New(TypeCapsuleCmd, 1024)))
	f.Add([]byte(New(TypeR2T, 0)))
	f.Add([]byte(New(TypeH2CTermReq, 24)))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		h := p.Header()
		if int(h.PLen()) != len(p) || len(p) < int(h.HLen()) {
			t.Fatalf("PLEN %d, %d bytes", h.PLen(), len(p))
		}
		_, _ = p.HeaderDigest()
		_, _ = p.DataDigest()
		_ = p.VerifyHeaderDigest()
		_ = p.VerifyDataDigest()
		data := p.Data()
		if len(data) > len(p) {
			t.Fatal("data longer than the PDU")
		}
		switch p.Type() {
		case TypeICReq:
			q := p.ICReq()
			_, _, _, _ = q.PFV(), q.HPDA(), q.DGST(), q.MaxR2T()
		case TypeICResp:
			q := p.ICResp()
			_, _, _, _ = q.PFV(), q.CPDA(), q.DGST(), q.MaxH2CData()
		case TypeH2CTermReq, TypeC2HTermReq:
			_, _ = p.TermReq().FES(), p.TermReq().FEI()
		case TypeCapsuleCmd:
			if len(p.CapsuleCmd().SQE()) != 64 {
				t.Fatal("SQE")
			}
		case TypeCapsuleResp:
			if len(p.CapsuleResp().CQE()) != 16 {
				t.Fatal("CQE")
			}
		case TypeH2CData, TypeC2HData:
			d := p.DataPDU()
			n := New(p.Type(), len(data))
			n.Header().SetFlags(h.Flags() &^ (FlagHDGST | FlagDDGST))
			nd := n.DataPDU()
			nd.SetCCCID(d.CCCID())
			nd.SetTTag(d.TTag())
			nd.SetDataO(d.DataO())
			nd.SetDataL(d.DataL())
			copy(n.Data(), data)
			q, err := Parse(n)
			if err != nil || q.DataPDU().CCCID() != d.CCCID() || q.DataPDU().TTag() != d.TTag() ||
				q.DataPDU().DataO() != d.DataO() || q.DataPDU().DataL() != d.DataL() || !bytes.Equal(q.Data(), data) {
				t.Fatalf("decode(encode(x)) != x: %v", err)
			}
		case TypeR2T:
			r := p.R2T()
			n := New(TypeR2T, 0).R2T()
			n.SetCCCID(r.CCCID())
			n.SetTTag(r.TTag())
			n.SetR2TO(r.R2TO())
			n.SetR2TL(r.R2TL())
			if n.CCCID() != r.CCCID() || n.TTag() != r.TTag() || n.R2TO() != r.R2TO() || n.R2TL() != r.R2TL() {
				t.Fatal("R2T decode(encode(x)) != x")
			}
		}
	})
}
