package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// dialFake opens a queue of depth sqsize-1 to the fake.
func hostDialFake(t *testing.T, f *hostFake, cfg HostConfig, qid uint16, sqsize int) *hostQueue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hq, err := NewDialer(cfg).Dial(ctx, hostFakeAddr(f), fabrics.QueueParams{QID: qid, SQSize: sqsize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Close() })
	return hq.(*hostQueue)
}

func hostFakeAddr(f *hostFake) fabrics.Address {
	ap := netip.MustParseAddrPort(f.ln.Addr().String())
	return fabrics.Address{Transport: fabrics.TransportTCP, Addr: ap.Addr(), ServiceID: ap.Port()}
}

// ioCmd returns a read (0x02) or write (0x01) of data at block slba.
func hostIOCmd(op byte, slba uint64, data []byte, tag uint16) *fabrics.HostCommand {
	c := &fabrics.HostCommand{Data: data, Tag: tag, Direction: fabrics.DirCtrlToHost}
	if op == 0x01 {
		c.Direction = fabrics.DirHostToCtrl
	}
	c.SQE[0] = op
	binary.LittleEndian.PutUint64(c.SQE[40:], slba)
	return c
}

// run submits cmd and waits for its completion.
func hostRun(t *testing.T, q fabrics.HostQueue, cmd *fabrics.HostCommand) {
	t.Helper()
	done := make(chan struct{})
	cmd.Done = func(*fabrics.HostCommand) { close(done) }
	if err := q.Submit(cmd); err != nil {
		t.Fatalf("submit: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no completion within 10 s")
	}
}

func hostPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>9)
	}
	return b
}

// TestHostReadWrite writes and reads back patterns of several sizes over
// every combination the transport has: digests, in-capsule data or R2T,
// H2CData split at MAXH2CDATA, several R2Ts per command, C2HData in
// pieces, SUCCESS instead of a response, CPDA padding.
func TestHostReadWrite(t *testing.T) {
	tests := []struct {
		name               string
		hdgst, ddgst       bool
		cpda               uint8
		maxH2C             uint32
		inline             int
		r2tChunk, c2hChunk int
		success            bool
		sizes              []int
		depth              int
		concurrent         bool
	}{
		{name: "plain", inline: 8192, sizes: []int{512, 4096, 65536, 1 << 20}},
		{name: "digests", hdgst: true, ddgst: true, inline: 8192, sizes: []int{512, 4096, 131072}},
		{name: "header digest", hdgst: true, sizes: []int{4096, 131072}},
		{name: "data digest", ddgst: true, sizes: []int{4096, 131072}},
		{name: "no inline", sizes: []int{512, 4096, 65536}},
		{name: "split H2CData", maxH2C: 4096, sizes: []int{4096, 12288, 65536 + 512}},
		{name: "several R2Ts", r2tChunk: 8192, maxH2C: 4096, ddgst: true, sizes: []int{8192, 40960}},
		{name: "C2HData pieces", c2hChunk: 1024, hdgst: true, ddgst: true, sizes: []int{512, 4096, 10240}},
		{name: "success flag", success: true, c2hChunk: 4096, sizes: []int{512, 16384}},
		{name: "cpda 3", cpda: 3, hdgst: true, ddgst: true, inline: 4096, maxH2C: 8192, sizes: []int{512, 4096, 32768}},
		{name: "concurrent", ddgst: true, inline: 4096, maxH2C: 8192, r2tChunk: 16384, success: true, sizes: []int{4096, 65536}, depth: 32, concurrent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHostFake(t)
			f.cpda = tt.cpda
			if tt.maxH2C > 0 {
				f.maxH2CData = tt.maxH2C
			}
			if tt.r2tChunk > 0 {
				f.r2tChunk = tt.r2tChunk
			}
			if tt.c2hChunk > 0 {
				f.c2hChunk = tt.c2hChunk
			}
			f.success = tt.success
			depth := max(tt.depth, 4)
			q := hostDialFake(t, f, HostConfig{HeaderDigest: tt.hdgst, DataDigest: tt.ddgst}, 1, depth+1)
			q.SetInCapsuleDataSize(tt.inline)
			if got := q.InCapsuleDataSize(); got != tt.inline {
				t.Fatalf("in-capsule size %d, want %d", got, tt.inline)
			}
			if !tt.concurrent {
				for k, n := range tt.sizes {
					slba := uint64(k) * 8
					w := hostPattern(n, byte(k+1))
					hostRun(t, q, hostIOCmd(0x01, slba, w, uint16(k%depth)))
					r := make([]byte, n)
					rc := hostIOCmd(0x02, slba, r, uint16((k+1)%depth))
					hostRun(t, q, rc)
					if rc.Err != nil || nvme.CQE(rc.CQE[:]).StatusRaw() != 0 || !bytes.Equal(r, w) {
						t.Fatalf("%d bytes: err %v status %#x, data equal %v", n, rc.Err, nvme.CQE(rc.CQE[:]).StatusRaw(), bytes.Equal(r, w))
					}
					if got := nvme.CQE(rc.CQE[:]).CID(); fabrics.CIDTag(got) != rc.Tag || got != binary.LittleEndian.Uint16(rc.SQE[2:]) {
						t.Errorf("CQE CID %#x for the SQE's %#x", got, binary.LittleEndian.Uint16(rc.SQE[2:]))
					}
				}
				return
			}
			// All tags at once, writes then reads, each its own region.
			type io struct {
				cmd  *fabrics.HostCommand
				want []byte
			}
			ios := make([]io, depth)
			done := make(chan *fabrics.HostCommand, depth)
			for _, op := range []byte{0x01, 0x02} {
				for i := range ios {
					n := tt.sizes[i%len(tt.sizes)]
					if op == 0x01 {
						ios[i].want = hostPattern(n, byte(i))
						ios[i].cmd = hostIOCmd(op, uint64(i)*128, ios[i].want, uint16(i))
					} else {
						ios[i].cmd = hostIOCmd(op, uint64(i)*128, make([]byte, n), uint16(i))
					}
					ios[i].cmd.Done = func(c *fabrics.HostCommand) { done <- c }
					if err := q.Submit(ios[i].cmd); err != nil {
						t.Fatal(err)
					}
				}
				for range ios {
					select {
					case c := <-done:
						if c.Err != nil || nvme.CQE(c.CQE[:]).StatusRaw() != 0 {
							t.Fatalf("tag %d: %v status %#x", c.Tag, c.Err, nvme.CQE(c.CQE[:]).StatusRaw())
						}
					case <-time.After(10 * time.Second):
						t.Fatal("completions missing after 10 s")
					}
				}
			}
			for i := range ios {
				if !bytes.Equal(ios[i].cmd.Data, ios[i].want) {
					t.Errorf("tag %d: data read back differs", i)
				}
			}
		})
	}
}

// TestHostInlineSGL checks the data pointer of a write that fits in the
// capsule (offset 0 in the capsule) and of one that does not (a transport
// data block), and that the admin queue starts with 8 KiB of in-capsule
// data, the specification's.
func TestHostInlineSGL(t *testing.T) {
	f := newHostFake(t)
	sgls := make(chan [16]byte, 4)
	f.hook = func(c *hostFakeConn, sqe []byte) bool {
		var s [16]byte
		copy(s[:], sqe[24:40])
		sgls <- s
		c.resp(binary.LittleEndian.Uint16(sqe[2:]), 0)
		return true
	}
	q := hostDialFake(t, f, HostConfig{}, 0, 32)
	if q.InCapsuleDataSize() != AdminInCapsuleDataSize {
		t.Fatalf("admin in-capsule size %d", q.InCapsuleDataSize())
	}
	tests := []struct {
		n    int
		want fabrics.SGLType
		sub  uint8
	}{
		{1024, fabrics.SGLTypeDataBlock, fabrics.SGLSubtypeOffset},
		{8192, fabrics.SGLTypeDataBlock, fabrics.SGLSubtypeOffset},
		{8704, fabrics.SGLTypeTransportDataBlock, fabrics.SGLSubtypeTransportSpecific},
	}
	for _, tt := range tests {
		c := hostIOCmd(0x7f, 0, make([]byte, tt.n), 0)
		c.Direction = fabrics.DirHostToCtrl
		hostRun(t, q, c)
		s := <-sgls
		sg := fabrics.SGL(s[:])
		if sg.Type() != tt.want || sg.Subtype() != tt.sub || sg.Length() != uint32(tt.n) || sg.Address() != 0 {
			t.Errorf("%d bytes: SGL %v", tt.n, sg)
		}
	}
}

// TestHostICResp: an ICResp the host cannot work with fails the dial with
// a clear error.
func TestHostICResp(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(ICResp)
		hdgst  bool
		ddgst  bool
		errSub string
	}{
		{"PFV 1", func(r ICResp) { r.SetPFV(1) }, false, false, "PDU format version 1"},
		{"header digest refused", func(r ICResp) { r.SetDGST(0) }, true, false, "header digest off, asked on"},
		{"data digest imposed", func(r ICResp) { r.SetDGST(DGSTData) }, false, false, "data digest on, asked off"},
		{"MAXH2CDATA small", func(r ICResp) { r.SetMaxH2CData(512) }, false, false, "MAXH2CDATA 512"},
		{"MAXH2CDATA odd", func(r ICResp) { r.SetMaxH2CData(8190) }, false, false, "MAXH2CDATA 8190"},
		{"CPDA 32", func(r ICResp) { r.SetCPDA(32) }, false, false, "CPDA 32"},
		{"not an ICResp", func(r ICResp) { r[0] = byte(TypeR2T) }, false, false, "R2T with HLEN 128, want 24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHostFake(t)
			f.icresp = tt.edit
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := NewDialer(HostConfig{HeaderDigest: tt.hdgst, DataDigest: tt.ddgst}).Dial(ctx, hostFakeAddr(f), fabrics.QueueParams{QID: 0, SQSize: 32})
			if err == nil || !strings.Contains(err.Error(), tt.errSub) {
				t.Fatalf("dial: %v, want an error with %q", err, tt.errSub)
			}
		})
	}
}

// TestHostICRespTimeout: a listener that accepts but never answers ICReq
// fails the dial when its context ends.
func TestHostICRespTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.76.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c) // until the host gives up
			c.Close()
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = NewDialer(HostConfig{}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportTCP, Addr: ap.Addr(), ServiceID: ap.Port()},
		fabrics.QueueParams{QID: 0, SQSize: 32})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial: %v, want the context's deadline", err)
	}
}

// TestHostDataDigestError: a C2HData whose data digest is wrong fails its
// command with Data Transfer Error, as Linux, and the queue goes on.
func TestHostDataDigestError(t *testing.T) {
	for _, success := range []bool{false, true} {
		f := newHostFake(t)
		f.success = success
		corrupt := true
		f.hook = func(c *hostFakeConn, sqe []byte) bool {
			if sqe[0] != 0x02 || !corrupt {
				return false
			}
			corrupt = false
			cid := binary.LittleEndian.Uint16(sqe[2:])
			fl := uint8(FlagDataLast)
			if success {
				fl |= FlagDataSuccess
			}
			p := c.pdu(TypeC2HData, fl, make([]byte, 512), func(p PDU) {
				p.DataPDU().SetCCCID(cid)
				p.DataPDU().SetDataL(512)
			})
			p[len(p)-1] ^= 0xff
			if c.send(p) != nil {
				return true
			}
			if !success {
				c.resp(cid, 0)
			}
			return true
		}
		q := hostDialFake(t, f, HostConfig{DataDigest: true}, 1, 5)
		rc := hostIOCmd(0x02, 0, make([]byte, 512), 0)
		hostRun(t, q, rc)
		if st := nvme.CQE(rc.CQE[:]).Status(); st != nvme.StatusDataTransferError || rc.Err != nil {
			t.Errorf("success %v: status %v, err %v; want Data Transfer Error", success, st, rc.Err)
		}
		rc = hostIOCmd(0x02, 0, make([]byte, 512), 0)
		hostRun(t, q, rc)
		if st := nvme.CQE(rc.CQE[:]).StatusRaw(); st != 0 || rc.Err != nil {
			t.Errorf("success %v: next read: status %#x, err %v", success, st, rc.Err)
		}
	}
}

// TestHostFatal: a PDU that breaks the protocol ends the connection with
// an H2CTermReq of the right FES, and the outstanding commands fail with
// ErrQueueClosed; later submissions are refused.
func TestHostFatal(t *testing.T) {
	tests := []struct {
		name  string
		hdgst bool
		send  func(c *hostFakeConn, cid uint16) PDU
		fes   uint16
	}{
		{"R2T for another command", false, func(c *hostFakeConn, cid uint16) PDU {
			return c.pdu(TypeR2T, 0, nil, func(p PDU) { p.R2T().SetCCCID(cid + 1); p.R2T().SetR2TL(512) })
		}, FESInvalidHeaderField},
		{"R2T past the data", false, func(c *hostFakeConn, cid uint16) PDU {
			return c.pdu(TypeR2T, 0, nil, func(p PDU) { p.R2T().SetCCCID(cid); p.R2T().SetR2TL(8192) })
		}, FESDataOutOfRange},
		{"R2T at a wrong offset", false, func(c *hostFakeConn, cid uint16) PDU {
			return c.pdu(TypeR2T, 0, nil, func(p PDU) { p.R2T().SetCCCID(cid); p.R2T().SetR2TO(512); p.R2T().SetR2TL(512) })
		}, FESDataOutOfRange},
		{"C2HData for a write", false, func(c *hostFakeConn, cid uint16) PDU {
			return c.pdu(TypeC2HData, FlagDataLast, make([]byte, 512), func(p PDU) { p.DataPDU().SetCCCID(cid); p.DataPDU().SetDataL(512) })
		}, FESInvalidHeaderField},
		{"bad header digest", true, func(c *hostFakeConn, cid uint16) PDU {
			p := c.pdu(TypeR2T, 0, nil, func(p PDU) { p.R2T().SetCCCID(cid); p.R2T().SetR2TL(4096) })
			p[len(p)-1] ^= 1
			return p
		}, FESHeaderDigestError},
		{"header digest missing", true, func(c *hostFakeConn, cid uint16) PDU {
			c.hdgst = false
			return c.pdu(TypeCapsuleResp, 0, nil, nil)
		}, FESInvalidHeaderField},
		{"a CapsuleCmd", false, func(c *hostFakeConn, cid uint16) PDU { return c.pdu(TypeCapsuleCmd, 0, nil, nil) }, FESInvalidHeaderField},
		{"unknown type", false, func(c *hostFakeConn, cid uint16) PDU {
			p := c.pdu(TypeR2T, 0, nil, nil)
			p[0] = 0x0b
			return p
		}, FESInvalidHeaderField},
		{"SUCCESS without LAST", false, func(c *hostFakeConn, cid uint16) PDU {
			return c.pdu(TypeC2HData, FlagDataSuccess, make([]byte, 4), func(p PDU) { p.DataPDU().SetDataL(4) })
		}, FESInvalidHeaderField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHostFake(t)
			f.hook = func(c *hostFakeConn, sqe []byte) bool {
				c.send(tt.send(c, binary.LittleEndian.Uint16(sqe[2:])))
				return true
			}
			q := hostDialFake(t, f, HostConfig{HeaderDigest: tt.hdgst}, 1, 5)
			wc := hostIOCmd(0x01, 0, make([]byte, 4096), 2)
			hostRun(t, q, wc)
			if !errors.Is(wc.Err, fabrics.ErrQueueClosed) {
				t.Errorf("outstanding command: %v, want ErrQueueClosed", wc.Err)
			}
			if tr := f.waitTerm(t); tr.FES() != tt.fes {
				t.Errorf("H2CTermReq FES %#x, want %#x", tr.FES(), tt.fes)
			}
			late := hostIOCmd(0x01, 0, nil, 0)
			late.Done = func(*fabrics.HostCommand) { t.Error("Done of a refused command") }
			if err := q.Submit(late); !errors.Is(err, fabrics.ErrQueueClosed) {
				t.Errorf("submit after the error: %v", err)
			}
		})
	}
}

// TestHostC2HTermReq: the controller's termination request fails the
// outstanding command and closes the queue.
func TestHostC2HTermReq(t *testing.T) {
	f := newHostFake(t)
	f.hook = func(c *hostFakeConn, sqe []byte) bool {
		c.hdgst = false // termination requests carry no digests
		c.send(c.pdu(TypeC2HTermReq, 0, make([]byte, 24), func(p PDU) { p.TermReq().SetFES(FESPDUSequenceError) }))
		return true
	}
	q := hostDialFake(t, f, HostConfig{HeaderDigest: true}, 1, 5)
	rc := hostIOCmd(0x02, 0, make([]byte, 512), 1)
	hostRun(t, q, rc)
	if !errors.Is(rc.Err, ErrTerminated) || !errors.Is(rc.Err, fabrics.ErrQueueClosed) {
		t.Errorf("command error %v, want ErrTerminated and ErrQueueClosed", rc.Err)
	}
}

// TestHostStrayCQE: a response naming no outstanding command (an unknown
// tag, an earlier generation) is dropped and counted.
func TestHostStrayCQE(t *testing.T) {
	f := newHostFake(t)
	f.hook = func(c *hostFakeConn, sqe []byte) bool {
		cid := binary.LittleEndian.Uint16(sqe[2:])
		c.resp(cid+3, 0)                     // another tag
		c.resp(cid+1<<fabrics.CIDTagBits, 0) // a later generation
		c.resp(cid, 0)
		c.resp(cid, 0) // a repeat
		return true
	}
	q := hostDialFake(t, f, HostConfig{}, 1, 9)
	hostRun(t, q, hostIOCmd(0x00, 0, nil, 0))
	rc := hostIOCmd(0x00, 0, nil, 0)
	hostRun(t, q, rc) // the repeat of the first came before this one's response
	if rc.Err != nil {
		t.Fatal(rc.Err)
	}
	if n := q.StrayCompletions(); n < 5 {
		t.Errorf("%d stray completions counted, want at least 5", n)
	}
}

// TestHostSubmitRefused: Submit refuses what it cannot send, without
// calling Done.
func TestHostSubmitRefused(t *testing.T) {
	f := newHostFake(t)
	block := make(chan struct{})
	f.hook = func(c *hostFakeConn, sqe []byte) bool { <-block; return true }
	q := hostDialFake(t, f, HostConfig{MaxTransfer: 8192}, 1, 5)
	called := false
	done := func(*fabrics.HostCommand) { called = true }
	busy := hostIOCmd(0x00, 0, nil, 1)
	busyDone := make(chan struct{})
	busy.Done = func(*fabrics.HostCommand) { close(busyDone) }
	if err := q.Submit(busy); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cmd  *fabrics.HostCommand
	}{
		{"tag out of range", hostIOCmd(0x00, 0, nil, 4)},
		{"tag in use", hostIOCmd(0x00, 0, nil, 1)},
		{"too large", hostIOCmd(0x02, 0, make([]byte, 8193), 0)},
		{"no Done", hostIOCmd(0x00, 0, nil, 0)},
	}
	for _, tt := range tests {
		if tt.name != "no Done" {
			tt.cmd.Done = done
		}
		if err := q.Submit(tt.cmd); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	close(block)
	q.Close()
	<-busyDone // Close's teardown fails it (after Close returns, possibly)
	if !errors.Is(busy.Err, fabrics.ErrQueueClosed) {
		t.Errorf("outstanding command after Close: %v", busy.Err)
	}
	c := hostIOCmd(0x00, 0, nil, 0)
	c.Done = done
	if err := q.Submit(c); !errors.Is(err, fabrics.ErrQueueClosed) {
		t.Errorf("submit after Close: %v", err)
	}
	if called {
		t.Error("Done called for a refused command")
	}
}

// TestHostPlug: commands submitted while plugged go out at Unplug.
func TestHostPlug(t *testing.T) {
	f := newHostFake(t)
	q := hostDialFake(t, f, HostConfig{}, 1, 9)
	done := make(chan *fabrics.HostCommand, 8)
	q.Plug()
	for i := range 8 {
		c := hostIOCmd(0x01, uint64(i), hostPattern(512, byte(i)), uint16(i))
		c.Done = func(c *fabrics.HostCommand) { done <- c }
		if err := q.Submit(c); err != nil {
			t.Fatal(err)
		}
	}
	q.Unplug()
	for range 8 {
		select {
		case c := <-done:
			if c.Err != nil {
				t.Fatal(c.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("plugged commands not sent")
		}
	}
}

// TestHostAllocs: a read at QD1 allocates nothing in the host transport
// (the fake target's allocations are counted too, so it runs a hook that
// allocates nothing: a prebuilt C2HData with SUCCESS).
func TestHostAllocs(t *testing.T) {
	f := newHostFake(t)
	var pdu PDU
	f.hook = func(c *hostFakeConn, sqe []byte) bool {
		if pdu == nil {
			pdu = c.pdu(TypeC2HData, FlagDataLast|FlagDataSuccess, make([]byte, 4096), func(p PDU) { p.DataPDU().SetDataL(4096) })
		}
		copy(pdu[8:10], sqe[2:4])
		c.c.Write(pdu)
		return true
	}
	q := hostDialFake(t, f, HostConfig{}, 1, 3)
	cmd := hostIOCmd(0x02, 0, make([]byte, 4096), 0)
	done := make(chan struct{}, 1)
	cmd.Done = func(*fabrics.HostCommand) { done <- struct{}{} }
	one := func() {
		if err := q.Submit(cmd); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	one()
	if n := testing.AllocsPerRun(200, one); n > 0 {
		t.Errorf("%.1f allocations per read", n)
	}
}

// TestHostSocketOptions: the source address and the IP TOS of HostConfig
// reach the connection.
func TestHostSocketOptions(t *testing.T) {
	f := newHostFake(t)
	q := hostDialFake(t, f, HostConfig{LocalAddr: netip.MustParseAddr("127.0.76.9"), TOS: 0x28, SetTOS: true}, 1, 3)
	sa, err := syscall.Getsockname(q.sock.fd)
	if err != nil {
		t.Fatal(err)
	}
	if in4, ok := sa.(*syscall.SockaddrInet4); !ok || netip.AddrFrom4(in4.Addr) != netip.MustParseAddr("127.0.76.9") {
		t.Errorf("local address %#v", sa)
	}
	tos, err := syscall.GetsockoptInt(q.sock.fd, syscall.IPPROTO_IP, syscall.IP_TOS)
	if err != nil {
		t.Fatal(err)
	}
	if tos != 0x28 {
		t.Errorf("IP_TOS %#x, want 0x28", tos)
	}
	hostRun(t, q, hostIOCmd(0x01, 0, make([]byte, 512), 0))
}
