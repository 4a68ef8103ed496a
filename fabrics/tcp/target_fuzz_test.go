package tcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// FuzzCheckICReq: any 128 bytes give an HPDA the target can align to, or
// an error naming a field of the ICReq; the C2HTermReq that reports it
// parses.
func FuzzCheckICReq(f *testing.F) {
	ok := New(TypeICReq, 0)
	f.Add([]byte(ok))
	bad := New(TypeICReq, 0)
	bad.ICReq().SetPFV(1)
	f.Add([]byte(bad))
	f.Fuzz(func(t *testing.T, b []byte) {
		hpda, fei, err := CheckICReq(ICReq(b))
		if err != nil {
			if fei >= ICReqLen {
				t.Fatalf("FEI %d outside the ICReq", fei)
			}
			p, perr := Parse(AppendTermReq(nil, TypeC2HTermReq, FESInvalidHeaderField, fei, b))
			if perr != nil || p.TermReq().FEI() != fei || len(p.Data()) > MaxTermReqLen-TermReqHLen {
				t.Fatalf("C2HTermReq: %v", perr)
			}
			return
		}
		if hpda > 31 {
			t.Fatalf("HPDA %d accepted", hpda)
		}
	})
}

// FuzzTargetHeader: the target's check of a PDU header (type, HLEN,
// digest flags, PDO and PLEN) never panics, and what it accepts leaves a
// data length that fits PLEN.
func FuzzTargetHeader(f *testing.F) {
	for _, t := range []PDUType{TypeCapsuleCmd, TypeH2CData, TypeH2CTermReq, TypeCapsuleResp} {
		p := New(t, 512)
		f.Add([]byte(p[:CommonHeaderLen]), false, false)
		f.Add([]byte(p[:CommonHeaderLen]), true, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, hdgst, ddgst bool) {
		if len(b) < CommonHeaderLen {
			return
		}
		q := &TargetQueue{hdgst: hdgst, ddgst: ddgst}
		h := Header(b[:CommonHeaderLen])
		hlen, err := q.checkHeader(h)
		if err != nil {
			var fe *targetFatalError
			if !errors.As(err, &fe) || fe.fei >= CommonHeaderLen {
				t.Fatalf("%v: not a fatal error with an FEI in the common header", err)
			}
			return
		}
		if hlen != h.Type().HeaderLen() || h.Type() == TypeH2CTermReq {
			return
		}
		pad, n, err := q.dataLayout(h)
		if err != nil {
			return
		}
		hend := hlen + 4*tgtB2I(hdgst)
		if pad < 0 || n < 0 || hend+pad+n+4*tgtB2I(ddgst && n > 0) > int(h.PLen()) {
			t.Fatalf("pad %d data %d in PLEN %d", pad, n, h.PLen())
		}
	})
}

// FuzzTargetStream feeds a connected queue arbitrary PDUs: the queue
// ends (the handler's QueueClosed) or keeps serving; it never panics or
// hangs.
func FuzzTargetStream(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	h := &tgtHost{hdgst: true, ddgst: true}
	f.Add(h.capsule(tgtIOSQE(0x02, 1, 0, 1, false), nil), uint8(3))
	f.Add((&tgtHost{}).capsule(tgtIOSQE(0x01, 1, 0, 2, true), make([]byte, 1024)), uint8(0))
	hdr := make([]byte, DataHLen)
	Header(hdr).SetType(TypeH2CData)
	f.Add((&tgtHost{}).seal(hdr, make([]byte, 64)), uint8(0))
	l, err := Listen(TargetConfig{Addr: netip.MustParseAddr("127.0.41.40"), Ephemeral: true, TOS: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	f.Fuzz(func(t *testing.T, b []byte, dgst uint8) {
		dgst &= DGSTHeader | DGSTData
		c := tgtDial(t, l)
		c.connectAsync(dgst)
		q, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mh := newTgtHandler()
		q.Serve(mh)
		c.c.Write(b)
		c.c.(*net.TCPConn).CloseWrite()
		select {
		case <-mh.closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the queue did not end after the host's EOF")
		}
	})
}

// connectAsync sends an ICReq and a Connect and reads the ICResp, leaving
// the Connect's response unread.
func (h *tgtHost) connectAsync(dgst uint8) {
	h.t.Helper()
	if p := h.icreq(0, 0, dgst); p == nil || p.Type() != TypeICResp {
		h.t.Fatalf("ICResp: %v", p)
	}
	h.write(h.capsule(tgtConnectSQE(1, 31, 4, true), make([]byte, fabrics.ConnectDataLen)))
}
