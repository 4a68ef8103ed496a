package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// hostFake is a small NVMe/TCP controller for the host's tests: it answers
// ICReq as configured, writes (opcode 0x01) store their data at SLBA*512
// in a memory namespace, reads (0x02) send it back, any other command
// succeeds. Data not in the capsule is asked for with R2Ts of r2tChunk
// bytes; reads go out in C2HData PDUs of c2hChunk bytes, the last with
// SUCCESS when success is set.
type hostFake struct {
	t  testing.TB
	ln net.Listener

	// ICResp.
	cpda       uint8
	maxH2CData uint32
	icresp     func(ICResp) // edits the ICResp before it goes

	r2tChunk, c2hChunk int
	success            bool
	// hook, when set, sees every capsule first and may act in place of
	// the fake (returning true).
	hook func(c *hostFakeConn, sqe []byte) bool

	mu    sync.Mutex
	mem   []byte
	conns []*hostFakeConn
	terms chan TermReq // H2CTermReqs received
	wg    sync.WaitGroup
}

// hostFakeConn is one connection of the fake.
type hostFakeConn struct {
	f            *hostFake
	c            net.Conn
	hdgst, ddgst bool
	wmu          sync.Mutex
	ch           [CommonHeaderLen]byte
	buf          []byte // the PDU last read (reused: no allocation per PDU)
	// held are capsules that came while the fake waited for the data of
	// another command: it carries commands out one at a time.
	held [][]byte
}

var hostFakeAddrs = struct {
	sync.Mutex
	next int
}{next: 1}

// newHostFake listens on a loopback address of its own.
func newHostFake(t testing.TB) *hostFake {
	t.Helper()
	hostFakeAddrs.Lock()
	n := hostFakeAddrs.next
	hostFakeAddrs.next++
	hostFakeAddrs.Unlock()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.%d.%d:0", 77+n/250, 1+n%250))
	if err != nil {
		t.Fatal(err)
	}
	f := &hostFake{t: t, ln: ln, maxH2CData: 1 << 20, r2tChunk: 1 << 20, c2hChunk: 1 << 20,
		mem: make([]byte, 4<<20), terms: make(chan TermReq, 4)}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *hostFake) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *hostFake) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		fc := &hostFakeConn{f: f, c: c}
		f.mu.Lock()
		f.conns = append(f.conns, fc)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			if err := fc.serve(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				f.t.Logf("fake target: %v", err)
			}
		}()
	}
}

// readPDU reads one whole PDU and checks its digests; the PDU stays valid
// until the next read.
func (c *hostFakeConn) readPDU() (PDU, error) {
	if _, err := io.ReadFull(c.c, c.ch[:]); err != nil {
		return nil, err
	}
	plen := Header(c.ch[:]).PLen()
	if plen < CommonHeaderLen || plen > 8<<20 {
		return nil, fmt.Errorf("PLEN %d", plen)
	}
	if uint32(cap(c.buf)) < plen {
		c.buf = make([]byte, plen)
	}
	b := c.buf[:plen]
	copy(b, c.ch[:])
	if _, err := io.ReadFull(c.c, b[CommonHeaderLen:]); err != nil {
		return nil, err
	}
	p, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if err := p.VerifyHeaderDigest(); err != nil {
		return nil, err
	}
	return p, p.VerifyDataDigest()
}

// pdu lays out a PDU of type t as the connection's digests want it; fill
// sets its PDU-specific header fields.
func (c *hostFakeConn) pdu(t PDUType, flags uint8, data []byte, fill func(PDU)) PDU {
	hlen := t.HeaderLen()
	hd, dd := 0, 0
	if c.hdgst {
		hd = DigestLen
		flags |= FlagHDGST
	}
	pdo := 0
	if len(data) > 0 {
		align := (int(c.f.cpda) + 1) * 4
		pdo = (hlen + hd + align - 1) / align * align
		if c.ddgst {
			dd = DigestLen
			flags |= FlagDDGST
		}
	}
	end := max(hlen+hd, pdo)
	p := make(PDU, end+len(data)+dd)
	h := p.Header()
	h.SetType(t)
	h.SetFlags(flags)
	h.SetHLen(uint8(hlen))
	h.SetPDO(uint8(pdo))
	h.SetPLen(uint32(len(p)))
	if fill != nil {
		fill(p)
	}
	if hd > 0 {
		binary.LittleEndian.PutUint32(p[hlen:], Digest(p[:hlen]))
	}
	copy(p[end:], data)
	if dd > 0 {
		binary.LittleEndian.PutUint32(p[end+len(data):], Digest(data))
	}
	return p
}

func (c *hostFakeConn) send(p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.c.Write(p)
	return err
}

// resp sends a CapsuleResp for cid with status (the CQE's status word).
func (c *hostFakeConn) resp(cid, status uint16) error {
	return c.send(c.pdu(TypeCapsuleResp, 0, nil, func(p PDU) {
		cqe := p.CapsuleResp().CQE()
		binary.LittleEndian.PutUint16(cqe[12:], cid)
		binary.LittleEndian.PutUint16(cqe[14:], status)
	}))
}

func (c *hostFakeConn) serve() error {
	p, err := c.readPDU()
	if err != nil {
		return err
	}
	if p.Type() != TypeICReq {
		return fmt.Errorf("first PDU %s", p.Type())
	}
	req := p.ICReq()
	c.hdgst, c.ddgst = req.DGST()&DGSTHeader != 0, req.DGST()&DGSTData != 0
	r := New(TypeICResp, 0)
	ir := r.ICResp()
	ir.SetCPDA(c.f.cpda)
	ir.SetDGST(req.DGST())
	ir.SetMaxH2CData(c.f.maxH2CData)
	if c.f.icresp != nil {
		c.f.icresp(ir)
	}
	if err := c.send(r); err != nil {
		return err
	}
	for {
		var p PDU
		if len(c.held) > 0 {
			p, c.held = c.held[0], c.held[1:]
		} else if p, err = c.readPDU(); err != nil {
			return err
		}
		switch p.Type() {
		case TypeCapsuleCmd:
			if err := c.command(p); err != nil {
				return err
			}
		case TypeH2CTermReq:
			c.f.terms <- p.TermReq()
			return nil
		default:
			return fmt.Errorf("unexpected %s", p.Type())
		}
	}
}

// command carries out one capsule.
func (c *hostFakeConn) command(p PDU) error {
	sqe := p.CapsuleCmd().SQE()
	if c.f.hook != nil && c.f.hook(c, sqe) {
		return nil
	}
	cid := binary.LittleEndian.Uint16(sqe[2:])
	off := int(binary.LittleEndian.Uint64(sqe[40:])) * 512
	n := int(binary.LittleEndian.Uint32(sqe[24+8:]))
	sglID := sqe[24+15]
	if off+n > len(c.f.mem) {
		return c.resp(cid, 0x80<<1) // LBA Out of Range
	}
	switch sqe[0] {
	case 0x01:
		if sglID == 0x01 { // in capsule
			if len(p.Data()) != n {
				return fmt.Errorf("capsule with %d data bytes, SGL %d", len(p.Data()), n)
			}
			c.f.mu.Lock()
			copy(c.f.mem[off:], p.Data())
			c.f.mu.Unlock()
			return c.resp(cid, 0)
		}
		if sglID != 0x5a {
			return fmt.Errorf("write with SGL identifier %#x", sglID)
		}
		for got := 0; got < n; {
			l := min(c.f.r2tChunk, n-got)
			ttag := uint16(got/512 + 7)
			err := c.send(c.pdu(TypeR2T, 0, nil, func(p PDU) {
				r := p.R2T()
				r.SetCCCID(cid)
				r.SetTTag(ttag)
				r.SetR2TO(uint32(got))
				r.SetR2TL(uint32(l))
			}))
			if err != nil {
				return err
			}
			for want := got + l; got < want; {
				d, err := c.readPDU()
				if err != nil {
					return err
				}
				if d.Type() == TypeCapsuleCmd {
					c.held = append(c.held, append([]byte(nil), d...))
					continue
				}
				dp := d.DataPDU()
				if d.Type() != TypeH2CData || dp.CCCID() != cid || dp.TTag() != ttag || int(dp.DataO()) != got ||
					int(dp.DataL()) != len(d.Data()) || got+len(d.Data()) > want || uint32(len(d.Data())) > c.f.maxH2CData {
					return fmt.Errorf("H2CData cccid %#x ttag %d datao %d datal %d (%d bytes), want %#x %d %d", dp.CCCID(), dp.TTag(), dp.DataO(), dp.DataL(), len(d.Data()), cid, ttag, got)
				}
				if last := d.Header().Flags()&FlagDataLast != 0; last != (got+len(d.Data()) == want) {
					return fmt.Errorf("H2CData LAST %v at %d of %d", last, got+len(d.Data()), want)
				}
				c.f.mu.Lock()
				copy(c.f.mem[off+got:], d.Data())
				c.f.mu.Unlock()
				got += len(d.Data())
			}
		}
		return c.resp(cid, 0)
	case 0x02:
		if sglID != 0x5a {
			return fmt.Errorf("read with SGL identifier %#x", sglID)
		}
		for sent := 0; sent < n; {
			l := min(c.f.c2hChunk, n-sent)
			var fl uint8
			if sent+l == n {
				fl = FlagDataLast
				if c.f.success {
					fl |= FlagDataSuccess
				}
			}
			c.f.mu.Lock()
			data := append([]byte(nil), c.f.mem[off+sent:off+sent+l]...)
			c.f.mu.Unlock()
			err := c.send(c.pdu(TypeC2HData, fl, data, func(p PDU) {
				d := p.DataPDU()
				d.SetCCCID(cid)
				d.SetDataO(uint32(sent))
				d.SetDataL(uint32(l))
			}))
			if err != nil {
				return err
			}
			sent += l
		}
		if c.f.success {
			return nil
		}
		return c.resp(cid, 0)
	default:
		return c.resp(cid, 0)
	}
}

// waitTerm returns the next H2CTermReq the fake receives.
func (f *hostFake) waitTerm(t *testing.T) TermReq {
	t.Helper()
	select {
	case tr := <-f.terms:
		return tr
	case <-time.After(10 * time.Second):
		t.Fatal("no H2CTermReq within 10 s")
		return nil
	}
}
