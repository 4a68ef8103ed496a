package tcp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
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

// FuzzHostStream feeds whatever a controller might send after ICResp to a
// host queue with a read and a write outstanding: the queue never panics
// or hangs, each command completes exactly once (with its CQE or an
// error), and Close returns.
func FuzzHostStream(f *testing.F) {
	resp := func(cid uint16) []byte {
		p := New(TypeCapsuleResp, 0)
		binary.LittleEndian.PutUint16(p.CapsuleResp().CQE()[12:], cid)
		return p
	}
	c2h := New(TypeC2HData, 4096)
	c2h.Header().SetFlags(FlagDataLast | FlagDataSuccess)
	c2h.DataPDU().SetCCCID(0x1000)
	c2h.DataPDU().SetDataL(4096)
	r2t := New(TypeR2T, 0)
	r2t.R2T().SetCCCID(0x1001)
	r2t.R2T().SetR2TL(8192)
	f.Add(append(append([]byte(c2h), r2t...), resp(0x1001)...))
	f.Add(append(resp(0x1000), resp(0x1001)...))
	f.Add([]byte(New(TypeC2HTermReq, 4)))
	f.Add([]byte{0x07, 0x0c, 0x18, 0x18, 0xff, 0xff, 0xff, 0xff})

	ln, err := net.Listen("tcp", "127.0.75.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	addr := fabrics.Address{Transport: fabrics.TransportTCP, Addr: ap.Addr(), ServiceID: ap.Port()}
	f.Fuzz(func(t *testing.T, stream []byte) {
		served := make(chan struct{})
		go func() {
			defer close(served)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			ic := make([]byte, ICReqLen)
			if _, err := io.ReadFull(c, ic); err != nil {
				return
			}
			r := New(TypeICResp, 0)
			r.ICResp().SetMaxH2CData(1 << 20)
			c.Write(r)
			// Both capsules first (no in-capsule data on an I/O
			// queue before SetInCapsuleDataSize), so that both
			// commands are outstanding when the stream comes.
			if _, err := io.ReadFull(c, make([]byte, 2*CapsuleCmdHLen)); err != nil {
				return
			}
			go io.Copy(io.Discard, c)
			c.Write(stream)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hq, err := NewDialer(HostConfig{}).Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		dones := map[uint16]int{}
		all := make(chan struct{}, 2)
		for i, dir := range []fabrics.DataDirection{fabrics.DirCtrlToHost, fabrics.DirHostToCtrl} {
			cmd := &fabrics.HostCommand{Data: make([]byte, 4096*(i+1)), Direction: dir, Tag: uint16(i)}
			cmd.Done = func(c *fabrics.HostCommand) {
				mu.Lock()
				dones[c.Tag]++
				mu.Unlock()
				all <- struct{}{}
			}
			if err := hq.Submit(cmd); err != nil {
				t.Fatal(err)
			}
		}
		// The stream ends with the connection: whatever it held, both
		// commands complete by then.
		for range 2 {
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				t.Fatal("a command never completed")
			}
		}
		hq.Close()
		<-served
		mu.Lock()
		defer mu.Unlock()
		if dones[0] != 1 || dones[1] != 1 {
			t.Fatalf("completions %v", dones)
		}
	})
}
