package soft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// lockedBuffer is a bytes.Buffer safe for the device's goroutines and the
// test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.b.Bytes())
}

// reqPkt is a request packet the test plays the requester's part with.
type reqPkt struct {
	op     wire.Opcode
	psn    uint32
	ackReq bool
	va     uint64 // RETH: offset in the test's region
	rkey   uint32 // RETH: 0 for the region's rkey
	dmaLen uint32 // RETH
	ieth   uint32
	imm    uint32
	n      int // payload bytes
}

// badKey is an rkey and lkey no region has.
const badKey = 0xdead00

// The outcomes, as strings that show in a failure: a packet the
// responder sent, a receive completion.
func ack(psn uint32) string { return sentAck(ackSyndrome, psn) }
func nak(code uint8, psn uint32) string {
	return sentAck(wire.Syndrome(wire.SyndromeNAK|code), psn)
}
func rnr(timer uint8, psn uint32) string {
	return sentAck(wire.Syndrome(wire.SyndromeRNR|timer), psn)
}
func sentAck(s wire.Syndrome, psn uint32) string { return fmt.Sprintf("%s psn %d", s, psn) }
func resp(op wire.Opcode, psn uint32) string     { return fmt.Sprintf("%s psn %d", op, psn) }
func wcOK(op rdma.WCOpcode, n uint32) string {
	return wcString(rdma.WorkCompletion{Opcode: op, ByteLen: n})
}
func wcErr(s rdma.WCStatus) string { return wcString(rdma.WorkCompletion{Status: s}) }
func wcString(wc rdma.WorkCompletion) string {
	if wc.Status != rdma.Success {
		return wc.Status.String()
	}
	s := fmt.Sprintf("%s %d bytes", wc.Opcode, wc.ByteLen)
	if wc.Flags&rdma.WCWithImm != 0 {
		s += fmt.Sprintf(" imm %#x", wc.Imm)
	}
	return s
}

// TestResponderRules plays request packets to an RC QP, one receive
// batch each, and checks what each rule of the responder's chain makes
// of them (respchain.go): the ACKs, NAKs and READ responses sent, the
// receive completions and the QP's state.
func TestResponderRules(t *testing.T) {
	capB := &lockedBuffer{}
	_, b := openPair(t, Config{AckDelay: -1}, Config{AckDelay: -1, Pcap: capB})
	const psn0, peerQPN = 100, 0xabcdef
	rw := rdma.AccessRemoteRead | rdma.AccessRemoteWrite
	mtu := 1024
	cases := []struct {
		name   string
		access rdma.Access // of the QP (0: remote read and write)
		cqe    int         // receive CQ entries (0: 64)
		recvs  []int       // receives posted, by length (-1: a bad lkey)
		dereg  bool        // the receives' region deregistered after the post
		pkts   []reqPkt
		sent   []string
		wcs    []string
		state  rdma.QPState
	}{
		{name: "send", recvs: []int{2048},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, ackReq: true, n: 10}},
			sent:  []string{ack(100)},
			wcs:   []string{wcOK(rdma.WCRecv, 10)},
			state: rdma.QPSRTS},
		{name: "multi-packet send", recvs: []int{4096},
			pkts: []reqPkt{{op: wire.RCSendFirst, psn: 100, n: mtu}, {op: wire.RCSendMiddle, psn: 101, n: mtu},
				{op: wire.RCSendLast, psn: 102, ackReq: true, n: 7}},
			sent:  []string{ack(102)},
			wcs:   []string{wcOK(rdma.WCRecv, uint32(2*mtu+7))},
			state: rdma.QPSRTS},
		{name: "PSN gap NAKed once", recvs: []int{2048},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 101, ackReq: true, n: 10}, {op: wire.RCSendOnly, psn: 102, ackReq: true, n: 10}},
			sent:  []string{nak(wire.NAKPSNSequenceError, 100)},
			state: rdma.QPSRTS},
		{name: "gap NAKed again after an in-order packet", recvs: []int{2048, 2048},
			pkts: []reqPkt{{op: wire.RCSendOnly, psn: 101, n: 10}, {op: wire.RCSendOnly, psn: 100, ackReq: true, n: 10},
				{op: wire.RCSendOnly, psn: 102, n: 10}},
			sent:  []string{nak(wire.NAKPSNSequenceError, 100), ack(100), nak(wire.NAKPSNSequenceError, 101)},
			wcs:   []string{wcOK(rdma.WCRecv, 10)},
			state: rdma.QPSRTS},
		{name: "duplicate send ACKed again", recvs: []int{2048, 2048},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, ackReq: true, n: 10}, {op: wire.RCSendOnly, psn: 100, ackReq: true, n: 10}},
			sent:  []string{ack(100), ack(100)},
			wcs:   []string{wcOK(rdma.WCRecv, 10)},
			state: rdma.QPSRTS},
		{name: "middle without first", recvs: []int{2048},
			pkts:  []reqPkt{{op: wire.RCSendMiddle, psn: 100, n: mtu}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			wcs:   []string{wcErr(rdma.WRFlushError)},
			state: rdma.QPSErr},
		{name: "write inside a send", recvs: []int{4096},
			pkts:  []reqPkt{{op: wire.RCSendFirst, psn: 100, n: mtu}, {op: wire.RCRDMAWriteOnly, psn: 101, dmaLen: 8, n: 8}},
			sent:  []string{nak(wire.NAKInvalidRequest, 101)},
			wcs:   []string{wcErr(rdma.RemoteInvalidRequestError)},
			state: rdma.QPSErr},
		{name: "send first inside a send", recvs: []int{4096},
			pkts:  []reqPkt{{op: wire.RCSendFirst, psn: 100, n: mtu}, {op: wire.RCSendFirst, psn: 101, n: mtu}},
			sent:  []string{nak(wire.NAKInvalidRequest, 101)},
			wcs:   []string{wcErr(rdma.RemoteInvalidRequestError)},
			state: rdma.QPSErr},
		{name: "send inside a write",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteFirst, psn: 100, dmaLen: 3000, n: mtu}, {op: wire.RCSendOnly, psn: 101, n: 8}},
			sent:  []string{nak(wire.NAKInvalidRequest, 101)},
			state: rdma.QPSErr},
		{name: "atomic",
			pkts:  []reqPkt{{op: wire.RCCompareSwap, psn: 100}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "write without remote write", access: rdma.AccessRemoteRead,
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnly, psn: 100, dmaLen: 8, n: 8}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "read without remote read", access: rdma.AccessRemoteWrite,
			pkts:  []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 8}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "no receive: RNR NAK",
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, ackReq: true, n: 10}},
			sent:  []string{rnr(12, 100)},
			state: rdma.QPSRTS},
		{name: "write with immediate needs a receive",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnlyWithImmed, psn: 100, dmaLen: 8, n: 8}},
			sent:  []string{rnr(12, 100)},
			state: rdma.QPSRTS},
		{name: "first shorter than the MTU", recvs: []int{4096},
			pkts:  []reqPkt{{op: wire.RCSendFirst, psn: 100, n: 100}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			wcs:   []string{wcErr(rdma.RemoteInvalidRequestError)},
			state: rdma.QPSErr},
		{name: "empty last", recvs: []int{4096},
			pkts:  []reqPkt{{op: wire.RCSendFirst, psn: 100, n: mtu}, {op: wire.RCSendLast, psn: 101}},
			sent:  []string{nak(wire.NAKInvalidRequest, 101)},
			wcs:   []string{wcErr(rdma.RemoteInvalidRequestError)},
			state: rdma.QPSErr},
		{name: "only beyond the MTU",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnly, psn: 100, dmaLen: 1028, n: 1028}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "RETH length beyond 2^31",
			pkts:  []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 1<<31 + 1}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "write with a bad rkey",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnly, psn: 100, rkey: badKey, dmaLen: 8, n: 8}},
			sent:  []string{nak(wire.NAKRemoteAccessError, 100)},
			state: rdma.QPSErr},
		{name: "write beyond the region",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnly, psn: 100, va: 8190, dmaLen: 8, n: 8}},
			sent:  []string{nak(wire.NAKRemoteAccessError, 100)},
			state: rdma.QPSErr},
		{name: "write with a bad rkey and an immediate", recvs: []int{64},
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnlyWithImmed, psn: 100, rkey: badKey, dmaLen: 8, n: 8}},
			sent:  []string{nak(wire.NAKRemoteAccessError, 100)},
			wcs:   []string{wcErr(rdma.RemoteAccessError)},
			state: rdma.QPSErr},
		{name: "write payload beyond its RETH",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnly, psn: 100, dmaLen: 8, n: 12}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			state: rdma.QPSErr},
		{name: "write last short of its RETH",
			pkts:  []reqPkt{{op: wire.RCRDMAWriteFirst, psn: 100, dmaLen: 3000, n: mtu}, {op: wire.RCRDMAWriteLast, psn: 101, n: 100}},
			sent:  []string{nak(wire.NAKInvalidRequest, 101)},
			state: rdma.QPSErr},
		{name: "write", recvs: []int{64},
			pkts: []reqPkt{{op: wire.RCRDMAWriteFirst, psn: 100, dmaLen: 2000, n: mtu},
				{op: wire.RCRDMAWriteLast, psn: 101, ackReq: true, n: 2000 - mtu}},
			sent:  []string{ack(101)},
			state: rdma.QPSRTS},
		{name: "write with immediate", recvs: []int{64},
			pkts:  []reqPkt{{op: wire.RCRDMAWriteOnlyWithImmed, psn: 100, ackReq: true, dmaLen: 8, n: 8, imm: 0x1234}},
			sent:  []string{ack(100)},
			wcs:   []string{wcString(rdma.WorkCompletion{Opcode: rdma.WCRecvRDMAWithImm, ByteLen: 8, Flags: rdma.WCWithImm, Imm: 0x1234})},
			state: rdma.QPSRTS},
		{name: "send longer than its receive", recvs: []int{16},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, n: 32}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			wcs:   []string{wcErr(rdma.LocalLengthError)},
			state: rdma.QPSErr},
		{name: "receive with a bad lkey", recvs: []int{-1},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, n: 8}},
			sent:  []string{nak(wire.NAKRemoteOperationalErr, 100)},
			wcs:   []string{wcErr(rdma.LocalProtectionError)},
			state: rdma.QPSErr},
		{name: "receive whose region is gone", recvs: []int{64}, dereg: true,
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, n: 8}},
			sent:  []string{nak(wire.NAKRemoteOperationalErr, 100)},
			wcs:   []string{wcErr(rdma.LocalProtectionError)},
			state: rdma.QPSErr},
		{name: "invalidate of an unknown rkey", recvs: []int{64},
			pkts:  []reqPkt{{op: wire.RCSendOnlyWithInvalidate, psn: 100, ieth: badKey, n: 8}},
			sent:  []string{nak(wire.NAKInvalidRequest, 100)},
			wcs:   []string{wcErr(rdma.RemoteInvalidRequestError)},
			state: rdma.QPSErr},
		{name: "read", recvs: []int{64},
			pkts: []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 2100},
				{op: wire.RCSendOnly, psn: 103, ackReq: true, n: 4}},
			sent: []string{resp(wire.RCRDMAReadResponseFirst, 100), resp(wire.RCRDMAReadResponseMiddle, 101),
				resp(wire.RCRDMAReadResponseLast, 102), ack(103)},
			wcs:   []string{wcOK(rdma.WCRecv, 4)},
			state: rdma.QPSRTS},
		{name: "zero-length read needs no rkey",
			pkts:  []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, rkey: badKey}},
			sent:  []string{resp(wire.RCRDMAReadResponseOnly, 100)},
			state: rdma.QPSRTS},
		{name: "read with a bad rkey",
			pkts:  []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, rkey: badKey, dmaLen: 8}},
			sent:  []string{nak(wire.NAKRemoteAccessError, 100)},
			state: rdma.QPSErr},
		{name: "duplicate read executed again",
			pkts: []reqPkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 8},
				{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 8}},
			sent:  []string{resp(wire.RCRDMAReadResponseOnly, 100), resp(wire.RCRDMAReadResponseOnly, 100)},
			state: rdma.QPSRTS},
		{name: "receive CQ overflow", cqe: 1, recvs: []int{64, 64},
			pkts:  []reqPkt{{op: wire.RCSendOnly, psn: 100, ackReq: true, n: 4}, {op: wire.RCSendOnly, psn: 101, ackReq: true, n: 4}},
			sent:  []string{ack(100)},
			wcs:   []string{wcOK(rdma.WCRecv, 4)},
			state: rdma.QPSErr},
	}
	rx := &rxState{tx: newTxBatch(b), reqTx: newTxBatch(b), held: make([]byte, rxBufSize)}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := qpOpts{access: tc.access, cqe: tc.cqe}
			if o.cqe == 0 {
				o.cqe = 64
			}
			o.defaults()
			e := newEnd(t, b, &o)
			t.Cleanup(func() { e.qp.Destroy() })
			bringUp(t, e, addrA, peerQPN, 500, psn0, &o)
			mem := regMR(t, e.pd, 8192, rdma.AccessLocalWrite|rw)
			for i, n := range tc.recvs {
				sg := sge(mem, 0, n)
				if n < 0 {
					sg = rdma.SGE{Addr: mem.Addr(), Length: 64, LKey: badKey}
				}
				postRecv(t, e.qp, uint64(i), sg)
			}
			if tc.dereg {
				if err := mem.Deregister(); err != nil {
					t.Fatal(err)
				}
			}
			from := len(readPcap(t, capB.bytes()))
			for _, p := range tc.pkts {
				b.input(requestDatagram(p, e.qp.QPN(), mem), rx)
				b.finishBatch(rx)
			}
			var sent []string
			for _, r := range readPcap(t, capB.bytes())[from:] {
				ip, _, pkt, err := wire.SplitIPUDP(r)
				if err != nil || [4]byte(ip[12:16]) != addrB.As4() {
					continue // received, not sent
				}
				var p wire.Packet
				if err := p.Parse(pkt); err != nil {
					t.Fatalf("sent packet: %v", err)
				}
				if op := p.Opcode(); op == wire.RCAcknowledge {
					sent = append(sent, sentAck(p.AETH.Syndrome(), p.BTH.PSN()))
				} else {
					sent = append(sent, resp(op, p.BTH.PSN()))
				}
			}
			var wcs []string
			buf := make([]rdma.WorkCompletion, 8)
			for n := e.rcq.Poll(buf); n > 0; n = e.rcq.Poll(buf) {
				for _, wc := range buf[:n] {
					wcs = append(wcs, wcString(wc))
				}
			}
			if !slices.Equal(sent, tc.sent) {
				t.Errorf("sent %q, want %q", sent, tc.sent)
			}
			if !slices.Equal(wcs, tc.wcs) {
				t.Errorf("receive completions %q, want %q", wcs, tc.wcs)
			}
			if s := e.qp.State(); s != tc.state {
				t.Errorf("QP state %s, want %s", s, tc.state)
			}
		})
	}
}

// requestDatagram builds p as the peer at addrA sends it to QP qpn at
// addrB: IPv4 and UDP headers, BTH, extended headers, zero payload and
// pad, ICRC.
func requestDatagram(p reqPkt, qpn uint32, m rdma.MR) []byte {
	pkt := make([]byte, wire.BTHLen, 64+p.n)
	writeBTH(pkt, p.op, false, wire.PadFor(p.n), qpn, p.psn, p.ackReq)
	if p.op.HasRETH() {
		rkey := p.rkey
		if rkey == 0 {
			rkey = m.RKey()
		}
		r := make([]byte, wire.RETHLen)
		wire.RETH(r).Set(m.Addr()+p.va, rkey, p.dmaLen)
		pkt = append(pkt, r...)
	}
	if p.op.HasAtomicETH() {
		pkt = append(pkt, make([]byte, wire.AtomicETHLen)...)
	}
	if p.op.HasImmDt() {
		pkt = binary.BigEndian.AppendUint32(pkt, p.imm)
	}
	if p.op.HasIETH() {
		pkt = binary.BigEndian.AppendUint32(pkt, p.ieth)
	}
	pkt = append(pkt, make([]byte, p.n+wire.PadFor(p.n)+wire.ICRCLen)...)
	src, dst := addrA.As4(), addrB.As4()
	d := make([]byte, wire.IPv4HeaderLen+wire.UDPHeaderLen+len(pkt))
	putIPv4UDPHeader(d, src, dst, len(pkt))
	copy(d[wire.IPv4HeaderLen+wire.UDPHeaderLen:], pkt)
	body := d[wire.IPv4HeaderLen+wire.UDPHeaderLen : len(d)-wire.ICRCLen]
	binary.LittleEndian.PutUint32(d[len(d)-wire.ICRCLen:], wire.ICRCForIPv4(src, dst, 0, true, wire.UDPPort, wire.UDPPort, body))
	return d
}
