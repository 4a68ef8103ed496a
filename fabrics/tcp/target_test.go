package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// tgtHandler is a target stand-in: Connect succeeds, Read and Write move
// 512-byte blocks of an in-memory disk, anything else succeeds without
// data. It completes every other command from another goroutine.
type tgtHandler struct {
	mu       sync.Mutex
	disk     []byte
	n        int
	refused  []nvme.Status
	hold     bool // never complete the Connect
	closed   chan error
	closeErr error
}

func newTgtHandler() *tgtHandler {
	return &tgtHandler{disk: make([]byte, 16<<20), closed: make(chan error, 1)}
}

func (h *tgtHandler) HandleCommand(r *fabrics.Request) {
	h.mu.Lock()
	h.n++
	async := h.n%2 == 0
	if r.Refused.Status != 0 {
		h.refused = append(h.refused, r.Refused.Status)
		h.mu.Unlock()
		nvme.CQE(r.CQE[:]).SetStatusRaw(uint16(r.Refused.Status) << 1)
		r.Complete()
		return
	}
	if h.hold {
		h.mu.Unlock()
		return
	}
	cdw := func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(r.SQE[40+4*(i-10):])) }
	switch r.SQE[0] {
	case fabrics.OpcodeFabrics:
		nvme.CQE(r.CQE[:]).SetDW0(1)
	case byte(nvme.IORead), byte(nvme.IOWrite):
		off := int((cdw(10) | cdw(11)<<32) * 512)
		n := int(cdw(12)&0xffff+1) * 512
		if off+n > len(h.disk) || n != len(r.Data) {
			nvme.CQE(r.CQE[:]).SetStatusRaw(uint16(nvme.StatusLBAOutOfRange) << 1)
		} else if r.SQE[0] == byte(nvme.IORead) {
			copy(r.Data, h.disk[off:off+n])
		} else {
			copy(h.disk[off:off+n], r.Data)
		}
	}
	h.mu.Unlock()
	if async {
		go r.Complete()
		return
	}
	r.Complete()
}

func (h *tgtHandler) QueueClosed(err error) {
	h.mu.Lock()
	h.closeErr = err
	h.mu.Unlock()
	h.closed <- err
}

// target listens on addr and serves every queue with a new handler,
// which it sends on the returned channel.
func tgtStart(t *testing.T, addr string, mod func(*TargetConfig), hmod func(*tgtHandler)) (*Listener, <-chan *tgtHandler) {
	t.Helper()
	cfg := TargetConfig{Addr: netip.MustParseAddr(addr), Ephemeral: true, TOS: -1}
	if mod != nil {
		mod(&cfg)
	}
	l, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := make(chan *tgtHandler, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			q, err := l.Accept(ctx)
			if err != nil {
				return
			}
			h := newTgtHandler()
			if hmod != nil {
				hmod(h)
			}
			hs <- h
			q.Serve(h)
		}
	}()
	t.Cleanup(func() { cancel(); l.Close(); <-done })
	return l, hs
}

// tgtHost speaks NVMe/TCP PDUs by hand.
type tgtHost struct {
	t            *testing.T
	c            net.Conn
	hdgst, ddgst bool
	hpda         uint8
}

func tgtDial(t *testing.T, l *Listener) *tgtHost {
	t.Helper()
	a := l.Address()
	c, err := net.Dial("tcp", netip.AddrPortFrom(a.Addr, a.ServiceID).String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &tgtHost{t: t, c: c}
}

func (h *tgtHost) icreq(pfv uint16, hpda, dgst uint8) PDU {
	h.t.Helper()
	h.sendICReq(pfv, hpda, dgst)
	return h.read()
}

func (h *tgtHost) sendICReq(pfv uint16, hpda, dgst uint8) {
	h.t.Helper()
	p := New(TypeICReq, 0)
	r := p.ICReq()
	r.SetPFV(pfv)
	r.SetHPDA(hpda)
	r.SetDGST(dgst)
	h.write(p)
	h.hdgst, h.ddgst, h.hpda = dgst&DGSTHeader != 0, dgst&DGSTData != 0, hpda
}

func (h *tgtHost) write(b []byte) {
	h.t.Helper()
	if _, err := h.c.Write(b); err != nil {
		h.t.Fatal(err)
	}
}

// read returns the next PDU, or nil at EOF.
func (h *tgtHost) read() PDU {
	h.t.Helper()
	var hdr [8]byte
	if _, err := io.ReadFull(h.c, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || tgtIsReset(err) {
			return nil
		}
		h.t.Fatal(err)
	}
	p := make([]byte, Header(hdr[:]).PLen())
	copy(p, hdr[:])
	if _, err := io.ReadFull(h.c, p[8:]); err != nil {
		h.t.Fatal(err)
	}
	pdu, err := Parse(p)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := pdu.VerifyHeaderDigest(); err != nil {
		h.t.Fatal(err)
	}
	if err := pdu.VerifyDataDigest(); err != nil {
		h.t.Fatal(err)
	}
	return pdu
}

func tgtIsReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// seal adds the flags, digests and lengths of a PDU built with header
// length hlen and data (nil for none).
func (h *tgtHost) seal(hdr []byte, data []byte) []byte {
	hh := Header(hdr)
	hlen := len(hdr)
	hh.SetHLen(uint8(hlen))
	out := append([]byte(nil), hdr...)
	f := hh.Flags()
	if h.hdgst {
		f |= FlagHDGST
	}
	if len(data) > 0 && h.ddgst {
		f |= FlagDDGST
	}
	Header(out).SetFlags(f)
	if len(data) > 0 {
		Header(out).SetPDO(uint8(hlen + 4*tgtB2I(h.hdgst)))
	}
	plen := hlen + 4*tgtB2I(h.hdgst) + len(data) + 4*tgtB2I(len(data) > 0 && h.ddgst)
	Header(out).SetPLen(uint32(plen))
	if h.hdgst {
		out = binary.LittleEndian.AppendUint32(out, Digest(out[:hlen]))
	}
	out = append(out, data...)
	if len(data) > 0 && h.ddgst {
		out = binary.LittleEndian.AppendUint32(out, Digest(data))
	}
	return out
}

func tgtB2I(b bool) int {
	if b {
		return 1
	}
	return 0
}

// capsule builds a command capsule for sqe with in-capsule data.
func (h *tgtHost) capsule(sqe []byte, data []byte) []byte {
	hdr := make([]byte, CapsuleCmdHLen)
	Header(hdr).SetType(TypeCapsuleCmd)
	copy(hdr[8:], sqe)
	return h.seal(hdr, data)
}

func tgtConnectSQE(qid, sqsize uint16, cattr uint8, inCapsule bool) []byte {
	sqe := make([]byte, 64)
	sqe[0] = fabrics.OpcodeFabrics
	sqe[1] = 1 << 6
	sqe[4] = byte(fabrics.FCTypeConnect)
	c := fabrics.ConnectCommand(sqe)
	c.SetQID(qid)
	c.SetSQSize(sqsize)
	sqe[fabrics.ConnectOffCAttr] = cattr
	if inCapsule {
		fabrics.SGL(sqe[24:40]).PutInCapsule(0, fabrics.ConnectDataLen)
	} else {
		fabrics.SGL(sqe[24:40]).PutTransportDataBlock(fabrics.ConnectDataLen)
	}
	return sqe
}

func tgtIOSQE(op nvme.IOOpcode, cid uint16, slba uint64, blocks int, inCapsule bool) []byte {
	sqe := make([]byte, 64)
	sqe[0] = byte(op)
	sqe[1] = 1 << 6
	binary.LittleEndian.PutUint16(sqe[2:], cid)
	binary.LittleEndian.PutUint32(sqe[4:], 1)
	n := uint32(blocks * 512)
	if inCapsule {
		fabrics.SGL(sqe[24:40]).PutInCapsule(0, n)
	} else {
		fabrics.SGL(sqe[24:40]).PutTransportDataBlock(n)
	}
	binary.LittleEndian.PutUint64(sqe[40:], slba)
	binary.LittleEndian.PutUint32(sqe[48:], uint32(blocks-1))
	return sqe
}

// connect runs the ICReq exchange and an I/O queue Connect.
func (h *tgtHost) connect(dgst uint8, hpda uint8, cattr uint8) {
	h.t.Helper()
	resp := h.icreq(0, hpda, dgst)
	if resp == nil || resp.Type() != TypeICResp || resp.ICResp().DGST() != dgst || resp.ICResp().MaxH2CData() != MaxH2CData {
		h.t.Fatalf("ICResp % x", []byte(resp))
	}
	h.write(h.capsule(tgtConnectSQE(1, 63, cattr, true), make([]byte, fabrics.ConnectDataLen)))
	if st := h.expectResp(0); st != 0 {
		h.t.Fatalf("Connect status %#x", st)
	}
}

// expectResp reads a CapsuleResp for cid and returns its status.
func (h *tgtHost) expectResp(cid uint16) uint16 {
	h.t.Helper()
	p := h.read()
	if p == nil || p.Type() != TypeCapsuleResp {
		h.t.Fatalf("want CapsuleResp, got %v", p)
	}
	cqe := nvme.CQE(p.CapsuleResp().CQE())
	if cqe.CID() != cid || cqe.SQID() != 1 {
		h.t.Fatalf("CQE CID %#x SQID %d, want %#x 1", cqe.CID(), cqe.SQID(), cid)
	}
	return cqe.StatusRaw() >> 1
}

func tgtPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestTargetIO(t *testing.T) {
	tests := []struct {
		name  string
		dgst  uint8
		hpda  uint8
		cattr uint8
	}{
		{"plain", 0, 0, 0},
		{"digests", DGSTHeader | DGSTData, 0, 0},
		{"header digest, sqflow off", DGSTHeader, 0, 4},
		{"data digest, hpda 3, sqflow off", DGSTData, 3, 4},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, hs := tgtStart(t, netip.AddrFrom4([4]byte{127, 0, 41, byte(1 + i)}).String(), func(c *TargetConfig) { c.InlineDataSize = 8192; c.MaxTransfer = 1 << 20 }, nil)
			h := tgtDial(t, l)
			h.connect(tt.dgst, tt.hpda, tt.cattr)
			mh := <-hs

			// In-capsule write of 8 blocks, then a 64 KiB write through
			// R2T with three commands' R2Ts outstanding at once, the data
			// of each in three H2CData PDUs.
			small := tgtPattern(4096, 1)
			h.write(h.capsule(tgtIOSQE(nvme.IOWrite, 1, 0, 8, true), small))
			if st := h.expectResp(1); st != 0 {
				t.Fatalf("in-capsule write: status %#x", st)
			}
			big := [][]byte{tgtPattern(64<<10, 2), tgtPattern(64<<10, 3), tgtPattern(64<<10, 4)}
			for k := range big {
				h.write(h.capsule(tgtIOSQE(nvme.IOWrite, uint16(10+k), uint64(8+128*k), 128, false), nil))
			}
			r2ts := map[uint16]R2T{}
			for range big {
				p := h.read()
				if p == nil || p.Type() != TypeR2T {
					t.Fatalf("want R2T, got %v", p)
				}
				r := p.R2T()
				if r.R2TO() != 0 || r.R2TL() != 64<<10 {
					t.Fatalf("R2T offset %d length %d", r.R2TO(), r.R2TL())
				}
				r2ts[r.CCCID()] = r
			}
			for k := len(big) - 1; k >= 0; k-- {
				r := r2ts[uint16(10+k)]
				if r == nil {
					t.Fatalf("no R2T for CID %d", 10+k)
				}
				for _, cut := range [][2]int{{0, 4096}, {4096, 40000}, {40000, 64 << 10}} {
					hdr := make([]byte, DataHLen)
					Header(hdr).SetType(TypeH2CData)
					d := DataPDU(hdr)
					d.SetCCCID(r.CCCID())
					d.SetTTag(r.TTag())
					d.SetDataO(uint32(cut[0]))
					d.SetDataL(uint32(cut[1] - cut[0]))
					if cut[1] == 64<<10 {
						Header(hdr).SetFlags(FlagDataLast)
					}
					h.write(h.seal(hdr, big[k][cut[0]:cut[1]]))
				}
			}
			seen := map[uint16]bool{}
			for range big {
				p := h.read()
				if p == nil || p.Type() != TypeCapsuleResp {
					t.Fatalf("want CapsuleResp, got %v", p)
				}
				cqe := nvme.CQE(p.CapsuleResp().CQE())
				if cqe.StatusRaw()>>1 != 0 {
					t.Fatalf("R2T write CID %d: status %#x", cqe.CID(), cqe.StatusRaw()>>1)
				}
				seen[cqe.CID()] = true
			}
			if len(seen) != len(big) {
				t.Fatalf("responses for %v", seen)
			}

			// Read everything back.
			want := append(append([]byte(nil), small...), bytes.Join(big, nil)...)
			h.write(h.capsule(tgtIOSQE(nvme.IORead, 20, 0, len(want)/512, false), nil))
			p := h.read()
			if p == nil || p.Type() != TypeC2HData {
				t.Fatalf("want C2HData, got %v", p)
			}
			d := p.DataPDU()
			align := (int(tt.hpda) + 1) * 4
			if d.CCCID() != 20 || d.DataO() != 0 || int(d.DataL()) != len(want) || int(p.Header().PDO())%align != 0 {
				t.Fatalf("C2HData CID %d offset %d length %d PDO %d", d.CCCID(), d.DataO(), d.DataL(), p.Header().PDO())
			}
			if !bytes.Equal(p.Data(), want) {
				t.Fatal("read data differs from what was written")
			}
			success := p.Header().Flags()&FlagDataSuccess != 0
			if success != (tt.cattr&4 != 0) || p.Header().Flags()&FlagDataLast == 0 {
				t.Fatalf("C2HData flags %#x with CATTR %#x", p.Header().Flags(), tt.cattr)
			}
			if !success {
				if st := h.expectResp(20); st != 0 {
					t.Fatalf("read status %#x", st)
				}
			}
			// A read past the disk: no data, an error status.
			h.write(h.capsule(tgtIOSQE(nvme.IORead, 21, 1<<20, 8, false), nil))
			if st := h.expectResp(21); st != uint16(nvme.StatusLBAOutOfRange) {
				t.Fatalf("read past the end: status %#x", st)
			}
			h.c.Close()
			if err := <-mh.closed; !errors.Is(err, fabrics.ErrQueueClosed) {
				t.Fatalf("QueueClosed(%v), want ErrQueueClosed", err)
			}
		})
	}
}

// TestTargetRefusesBadCommands: commands the transport cannot carry out
// reach the handler refused, with the status nvmet-tcp gives.
func TestTargetRefusesBadCommands(t *testing.T) {
	l, hs := tgtStart(t, "127.0.41.10", func(c *TargetConfig) { c.InlineDataSize = 4096 }, nil)
	h := tgtDial(t, l)
	h.connect(0, 0, 0)
	mh := <-hs
	tests := []struct {
		name string
		sqe  func() []byte
		data []byte
		want nvme.Status
	}{
		{"PRP data pointer", func() []byte { s := tgtIOSQE(nvme.IORead, 1, 0, 1, false); s[1] = 0; return s }, nil, nvme.StatusInvalidField},
		{"in-capsule read", func() []byte { return tgtIOSQE(nvme.IORead, 2, 0, 1, true) }, make([]byte, 512), nvme.StatusInvalidField},
		{"in-capsule beyond the data", func() []byte { return tgtIOSQE(nvme.IOWrite, 3, 0, 8, true) }, make([]byte, 512), nvme.StatusDataSGLLengthInvalid},
		{"keyed SGL", func() []byte {
			s := tgtIOSQE(nvme.IORead, 4, 0, 1, false)
			fabrics.SGL(s[24:40]).PutKeyed(0, 512, 1, false)
			return s
		}, nil, nvme.StatusSGLDescriptorTypeInvalid},
		{"beyond MDTS", func() []byte { return tgtIOSQE(nvme.IORead, 5, 0, 1024, false) }, nil, nvme.StatusDataSGLLengthInvalid},
	}
	for i, tt := range tests {
		h.write(h.capsule(tt.sqe(), tt.data))
		if st := h.expectResp(uint16(i + 1)); st != uint16(tt.want) {
			t.Errorf("%s: status %#x, want %#x", tt.name, st, tt.want)
		}
	}
	mh.mu.Lock()
	n := len(mh.refused)
	mh.mu.Unlock()
	if n != len(tests) {
		t.Errorf("handler saw %d refused commands, want %d", n, len(tests))
	}
}

// TestTargetFatalErrors: protocol errors end the connection, with a
// C2HTermReq where nvmet-tcp or the specification sends one.
func TestTargetFatalErrors(t *testing.T) {
	tests := []struct {
		name    string
		dgst    uint8
		run     func(h *tgtHost)
		fes     uint16 // 0: no termination request, the connection just ends
		fei     uint32
		wantErr error // of QueueClosed, nil when no queue was accepted
	}{
		{"ICReq PFV 1", 0, func(h *tgtHost) { h.sendICReq(1, 0, 0) }, FESInvalidHeaderField, 8, nil},
		{"ICReq HPDA 32", 0, func(h *tgtHost) { h.sendICReq(0, 32, 0) }, FESInvalidHeaderField, 10, nil},
		{"command before ICReq", 0, func(h *tgtHost) {
			h.write(h.capsule(tgtConnectSQE(0, 31, 0, true), make([]byte, 1024)))
		}, FESInvalidHeaderField, 0, nil},
		{"first capsule not a Connect", 0, func(h *tgtHost) {
			h.icreq(0, 0, 0)
			h.write(h.capsule(tgtIOSQE(nvme.IORead, 1, 0, 1, false), nil))
		}, FESPDUSequenceError, 0, nil},
		{"bad header digest", DGSTHeader, func(h *tgtHost) {
			h.connect(DGSTHeader, 0, 0)
			b := h.capsule(tgtIOSQE(nvme.IORead, 1, 0, 1, false), nil)
			b[CapsuleCmdHLen] ^= 1
			h.write(b)
		}, FESHeaderDigestError, 0, ErrDigest},
		{"bad data digest", DGSTData, func(h *tgtHost) {
			h.connect(DGSTData, 0, 0)
			b := h.capsule(tgtIOSQE(nvme.IOWrite, 1, 0, 1, true), make([]byte, 512))
			b[len(b)-1] ^= 1
			h.write(b)
		}, 0, 0, ErrDigest},
		{"header digest missing", DGSTHeader, func(h *tgtHost) {
			h.connect(DGSTHeader, 0, 0)
			h.hdgst = false
			h.write(h.capsule(tgtIOSQE(nvme.IORead, 1, 0, 1, false), nil))
		}, FESInvalidHeaderField, 1, errors.New("")},
		{"H2CData without R2T", 0, func(h *tgtHost) {
			h.connect(0, 0, 0)
			hdr := make([]byte, DataHLen)
			Header(hdr).SetType(TypeH2CData)
			DataPDU(hdr).SetTTag(3)
			DataPDU(hdr).SetDataL(512)
			h.write(h.seal(hdr, make([]byte, 512)))
		}, FESInvalidHeaderField, 10, errors.New("")},
		{"in-capsule data beyond the inline size", 0, func(h *tgtHost) {
			h.connect(0, 0, 0)
			h.write(h.capsule(tgtIOSQE(nvme.IOWrite, 1, 0, 17, true), make([]byte, 17*512)))
		}, FESDataLimitExceeded, 4, errors.New("")},
		{"C2H PDU type from the host", 0, func(h *tgtHost) {
			h.connect(0, 0, 0)
			hdr := make([]byte, CapsuleRespHLen)
			Header(hdr).SetType(TypeCapsuleResp)
			h.write(h.seal(hdr, nil))
		}, FESInvalidHeaderField, 0, errors.New("")},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, hs := tgtStart(t, netip.AddrFrom4([4]byte{127, 0, 42, byte(1 + i)}).String(), func(c *TargetConfig) { c.InlineDataSize = 8192 }, nil)
			h := tgtDial(t, l)
			tt.run(h)
			p := h.read()
			switch {
			case tt.fes == 0 && p != nil:
				t.Fatalf("got %s, want the connection closed", p.Type())
			case tt.fes != 0 && (p == nil || p.Type() != TypeC2HTermReq):
				t.Fatalf("got %v, want C2HTermReq", p)
			case tt.fes != 0 && (p.TermReq().FES() != tt.fes || p.TermReq().FEI() != tt.fei):
				t.Fatalf("C2HTermReq FES %d FEI %d, want %d %d", p.TermReq().FES(), p.TermReq().FEI(), tt.fes, tt.fei)
			}
			if p != nil && h.read() != nil {
				t.Fatal("the connection stays open after the C2HTermReq")
			}
			if tt.wantErr == nil {
				return
			}
			mh := <-hs
			err := <-mh.closed
			if errors.Is(err, fabrics.ErrQueueClosed) || err == nil {
				t.Fatalf("QueueClosed(%v), want a transport error", err)
			}
			if errors.Is(tt.wantErr, ErrDigest) && !errors.Is(err, ErrDigest) {
				t.Fatalf("QueueClosed(%v), want a digest error", err)
			}
		})
	}
}

// TestTargetConnectTimeout: a queue whose Connect does not succeed in
// time is closed.
func TestTargetConnectTimeout(t *testing.T) {
	l, hs := tgtStart(t, "127.0.41.20", func(c *TargetConfig) { c.ConnectTimeout = 2 * time.Second },
		func(h *tgtHandler) { h.hold = true })
	h := tgtDial(t, l)
	h.icreq(0, 0, 0)
	h.write(h.capsule(tgtConnectSQE(0, 31, 0, true), make([]byte, 1024)))
	mh := <-hs
	if err := <-mh.closed; !errors.Is(err, ErrConnectTimeout) {
		t.Fatalf("QueueClosed(%v), want ErrConnectTimeout", err)
	}
	if p := h.read(); p != nil {
		t.Fatalf("got %s after the timeout", p.Type())
	}
}

// TestTargetConnectThroughR2T: the Connect's data may come through an
// R2T too, and before the Connect succeeds the target reads no further
// command (one slot only).
func TestTargetConnectThroughR2T(t *testing.T) {
	l, hs := tgtStart(t, "127.0.41.21", nil, nil)
	h := tgtDial(t, l)
	h.icreq(0, 0, DGSTHeader|DGSTData)
	h.write(h.capsule(tgtConnectSQE(0, 31, 0, false), nil))
	p := h.read()
	if p == nil || p.Type() != TypeR2T || p.R2T().R2TL() != 1024 {
		t.Fatalf("want an R2T of 1024 bytes, got %v", p)
	}
	hdr := make([]byte, DataHLen)
	Header(hdr).SetType(TypeH2CData)
	Header(hdr).SetFlags(FlagDataLast)
	DataPDU(hdr).SetTTag(p.R2T().TTag())
	DataPDU(hdr).SetDataL(1024)
	h.write(h.seal(hdr, make([]byte, 1024)))
	p = h.read()
	if p == nil || p.Type() != TypeCapsuleResp || nvme.CQE(p.CapsuleResp().CQE()).StatusRaw() != 0 {
		t.Fatalf("want the Connect's response, got %v", p)
	}
	<-hs
}

// syncHandler completes every command at once, without data movement.
type syncHandler struct{ closed chan error }

func (h *syncHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabrics.OpcodeFabrics {
		nvme.CQE(r.CQE[:]).SetDW0(1)
	}
	r.Complete()
}
func (h *syncHandler) QueueClosed(err error) { h.closed <- err }

// TestTargetAllocs: once every slot has its buffer, the transport
// allocates nothing per command (reads with C2HData, in-capsule writes,
// writes through R2T and H2CData), with both digests on.
func TestTargetAllocs(t *testing.T) {
	l, err := Listen(TargetConfig{Addr: netip.MustParseAddr("127.0.41.30"), Ephemeral: true, TOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := &syncHandler{closed: make(chan error, 1)}
	go func() {
		q, err := l.Accept(context.Background())
		if err == nil {
			q.Serve(h)
		}
	}()
	c := tgtDial(t, l)
	c.connect(DGSTHeader|DGSTData, 0, 4)
	read := c.capsule(tgtIOSQE(nvme.IORead, 1, 0, 8, false), nil)
	write := c.capsule(tgtIOSQE(nvme.IOWrite, 2, 0, 8, true), make([]byte, 4096))
	r2tWrite := c.capsule(tgtIOSQE(nvme.IOWrite, 3, 0, 16, false), nil)
	hdr := make([]byte, DataHLen)
	Header(hdr).SetType(TypeH2CData)
	Header(hdr).SetFlags(FlagDataLast)
	DataPDU(hdr).SetCCCID(3)
	DataPDU(hdr).SetDataL(8192)
	var h2c []byte // its TTAG is set from the R2T
	in := make([]byte, 64<<10)
	readPDU := func() PDU {
		if _, err := io.ReadFull(c.c, in[:8]); err != nil {
			t.Fatal(err)
		}
		n := int(Header(in).PLen())
		if _, err := io.ReadFull(c.c, in[8:n]); err != nil {
			t.Fatal(err)
		}
		return PDU(in[:n])
	}
	round := func() {
		c.c.Write(read)
		if p := readPDU(); p.Type() != TypeC2HData || p.Header().Flags()&FlagDataSuccess == 0 {
			t.Fatalf("read: %s flags %#x", p.Type(), p.Header().Flags())
		}
		c.c.Write(write)
		if p := readPDU(); p.Type() != TypeCapsuleResp {
			t.Fatalf("write: %s", p.Type())
		}
		c.c.Write(r2tWrite)
		p := readPDU()
		if p.Type() != TypeR2T {
			t.Fatalf("R2T write: %s % x", p.Type(), []byte(p))
		}
		if h2c == nil {
			h2c = c.seal(hdr, make([]byte, 8192))
		}
		DataPDU(h2c).SetTTag(p.R2T().TTag()) // the slot the command got
		binary.LittleEndian.PutUint32(h2c[DataHLen:], Digest(h2c[:DataHLen]))
		c.c.Write(h2c)
		if p := readPDU(); p.Type() != TypeCapsuleResp {
			t.Fatalf("R2T write: %s", p.Type())
		}
	}
	// Warm-up: the slots in use get (and grow) their buffers.
	for range 3 * 64 {
		round()
	}
	if a := testing.AllocsPerRun(100, round); a > 0 {
		t.Errorf("%.2f allocations per round of three commands", a)
	}
}

// TestTargetTOS: a port's tos reaches the sockets of its connections
// (accepted sockets inherit IP_TOS from the listening one).
func TestTargetTOS(t *testing.T) {
	l, err := Listen(TargetConfig{Addr: netip.MustParseAddr("127.0.41.50"), Ephemeral: true, TOS: 0x28})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := tgtDial(t, l)
	h.connectAsync(0)
	q, err := l.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rc, err := q.(*TargetQueue).c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var tos int
	var serr error
	if err := rc.Control(func(fd uintptr) { tos, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if tos != 0x28 {
		t.Fatalf("IP_TOS %#x, want 0x28", tos)
	}
}

// TestTargetMaxPending: beyond max_pending connections in their
// handshake, new connections are closed at once; the pending one still
// completes its handshake.
func TestTargetMaxPending(t *testing.T) {
	l, err := Listen(TargetConfig{Addr: netip.MustParseAddr("127.0.41.51"), Ephemeral: true, TOS: -1, MaxPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := tgtDial(t, l)
	second := tgtDial(t, l) // accepted after first, which holds the only token
	if p := second.read(); p != nil {
		t.Fatalf("second connection got %s, want it closed", p.Type())
	}
	if p := first.icreq(0, 0, 0); p == nil || p.Type() != TypeICResp {
		t.Fatalf("first connection: %v", p)
	}
	// Close ends the handshake still waiting for its Connect.
	start := time.Now()
	l.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a connection in its handshake", d)
	}
	if p := first.read(); p != nil {
		t.Fatalf("first connection got %s after Close", p.Type())
	}
}
