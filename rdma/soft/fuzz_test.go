package soft

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// FuzzInput feeds arbitrary RoCEv2 packets (BTH onward, wrapped in the
// IPv4 and UDP headers a peer sends, with a correct ICRC so that they get
// past the check) to a device with a connected RC QP and a GSI QP, as if
// they came from the peer. It must not panic, and memory outside the
// region the peer may write must stay untouched.
func FuzzInput(f *testing.F) {
	seed := func(op wire.Opcode, psn uint32, ext []byte, payload int) []byte {
		b := make([]byte, wire.BTHLen)
		writeBTH(b, op, false, wire.PadFor(payload), 0, psn, true)
		b = append(b, ext...)
		return append(b, make([]byte, payload+wire.PadFor(payload))...)
	}
	reth := func(va uint64, rkey, n uint32) []byte {
		r := make([]byte, wire.RETHLen)
		wire.RETH(r).Set(va, rkey, n)
		return r
	}
	aeth := func(s wire.Syndrome) []byte {
		a := make([]byte, wire.AETHLen)
		wire.AETH(a).Set(s, 1)
		return a
	}
	deth := make([]byte, wire.DETHLen)
	wire.DETH(deth).Set(rdma.QKeyGSI, 1)
	f.Add(uint8(0), seed(wire.RCSendOnly, 100, nil, 10))
	f.Add(uint8(0), seed(wire.RCSendFirst, 100, nil, 1024))
	f.Add(uint8(0), seed(wire.RCRDMAWriteOnly, 100, reth(0x10_0002_0000_0000, 0x100, 8), 8))
	f.Add(uint8(0), seed(wire.RCRDMAWriteFirst, 100, reth(0x10_0002_0000_0000, 0x100, 4000), 1024))
	f.Add(uint8(0), seed(wire.RCRDMAReadRequest, 100, reth(0x10_0002_0000_0000, 0x100, 3000), 0))
	f.Add(uint8(0), seed(wire.RCAcknowledge, 99, aeth(wire.SyndromeACK|0x1f), 0))
	f.Add(uint8(0), seed(wire.RCAcknowledge, 99, aeth(wire.SyndromeNAK|wire.NAKPSNSequenceError), 0))
	f.Add(uint8(0), seed(wire.RCRDMAReadResponseOnly, 99, aeth(wire.SyndromeACK|0x1f), 100))
	f.Add(uint8(1), seed(wire.UDSendOnly, 5, deth, 256))
	f.Add(uint8(0), seed(wire.RCSendOnlyWithInvalidate, 100, []byte{0, 0, 1, 0}, 4))

	// Fuzzing runs one worker process per CPU, each with its own devices:
	// addresses from the process ID keep them apart.
	pid := os.Getpid()
	fa := netip.AddrFrom4([4]byte{127, byte(100 + pid%100), byte(pid / 100 % 250), 1})
	fb := netip.AddrFrom4([4]byte{127, byte(100 + pid%100), byte(pid / 100 % 250), 2})
	a, b := openPairAt(f, Config{Addr: fa}, Config{Addr: fb})
	o := qpOpts{psnA: 99, psnB: 100}
	o.defaults()
	ea, eb := newEnd(f, a, &o), newEnd(f, b, &o)
	bringUp(f, ea, fb, eb.qp.QPN(), o.psnA, o.psnB, &o)
	mem := regMR(f, eb.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	other := regMR(f, eb.pd, 8192, rdma.AccessLocalWrite)
	fill(other.Bytes(), 1)
	otherBefore := append([]byte(nil), other.Bytes()...)
	g := openGSI(f, b)
	rx := &rxState{tx: newTxBatch(b), reqTx: newTxBatch(b), held: make([]byte, rxBufSize)}
	f.Fuzz(func(t *testing.T, target uint8, pkt []byte) {
		if len(pkt) < wire.BTHLen || len(pkt) > 4200 {
			return
		}
		// Start each input from a fresh connection.
		if err := eb.qp.Modify(&rdma.QPAttr{State: rdma.QPSReset}, rdma.QPAttrState); err != nil {
			t.Fatal(err)
		}
		bringUp(t, eb, fa, 0xabcdef, o.psnB, o.psnA, &o)
		for i := 0; i < 2; i++ {
			postRecv(t, eb.qp, uint64(i), sge(mem, 0, 2048))
		}
		pkt = append(pkt[:len(pkt):len(pkt)], 0, 0, 0, 0)
		qpn := eb.qp.QPN()
		if target&1 != 0 {
			qpn = g.qp.QPN()
		}
		binary.BigEndian.PutUint32(pkt[4:], binary.BigEndian.Uint32(pkt[4:])&0xff000000|qpn)
		d := make([]byte, wire.IPv4HeaderLen+wire.UDPHeaderLen+len(pkt))
		putIPv4UDPHeader(d, fa.As4(), fb.As4(), len(pkt))
		copy(d[28:], pkt)
		body := d[28 : len(d)-wire.ICRCLen]
		binary.LittleEndian.PutUint32(d[len(d)-wire.ICRCLen:], wire.ICRCForIPv4(fa.As4(), fb.As4(), 0, true, wire.UDPPort, wire.UDPPort, body))
		b.input(d, rx)
		b.finishBatch(rx)
		if !bytes.Equal(other.Bytes(), otherBefore) {
			t.Fatal("a region without remote access changed")
		}
	})
}

// FuzzInput6 is FuzzInput for an IPv6 device: arbitrary packets from the
// peer on ::1, in the IPv6 and UDP headers the device rebuilds (udp6 mode)
// and with a correct ICRC, to a connected RC QP or the GSI QP. It must not
// panic, and memory outside the region the peer may write must stay
// untouched.
func FuzzInput6(f *testing.F) {
	deth := make([]byte, wire.DETHLen)
	wire.DETH(deth).Set(rdma.QKeyGSI, 1)
	for _, s := range []struct {
		target  uint8
		op      wire.Opcode
		ext     []byte
		payload int
	}{
		{0, wire.RCSendOnly, nil, 10},
		{0, wire.RCSendFirst, nil, 1024},
		{0, wire.RCRDMAReadRequest, make([]byte, wire.RETHLen), 0},
		{1, wire.UDSendOnly, deth, 256},
	} {
		b := make([]byte, wire.BTHLen)
		writeBTH(b, s.op, false, wire.PadFor(s.payload), 0, 100, true)
		b = append(b, s.ext...)
		f.Add(s.target, append(b, make([]byte, s.payload+wire.PadFor(s.payload))...))
	}
	a, b := openPair6(f, Config{}, Config{})
	o := qpOpts{psnA: 99, psnB: 100}
	o.defaults()
	eb := newEnd(f, b, &o)
	mem := regMR(f, eb.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	other := regMR(f, eb.pd, 8192, rdma.AccessLocalWrite)
	fill(other.Bytes(), 1)
	otherBefore := append([]byte(nil), other.Bytes()...)
	g := openGSI(f, b)
	rx := &rxState{tx: newTxBatch(b), reqTx: newTxBatch(b), held: make([]byte, rxHeadroom6+rxBufSize)}
	lo := addr6.As16()
	f.Fuzz(func(t *testing.T, target uint8, pkt []byte) {
		if len(pkt) < wire.BTHLen || len(pkt) > 4200 {
			return
		}
		if err := eb.qp.Modify(&rdma.QPAttr{State: rdma.QPSReset}, rdma.QPAttrState); err != nil {
			t.Fatal(err)
		}
		bringUp(t, eb, addr6, 0xabcdef, o.psnB, o.psnA, &o)
		for i := 0; i < 2; i++ {
			postRecv(t, eb.qp, uint64(i), sge(mem, 0, 2048))
		}
		pkt = append(pkt[:len(pkt):len(pkt)], 0, 0, 0, 0)
		qpn := eb.qp.QPN()
		if target&1 != 0 {
			qpn = g.qp.QPN()
		}
		binary.BigEndian.PutUint32(pkt[4:], binary.BigEndian.Uint32(pkt[4:])&0xff000000|qpn)
		d := make([]byte, rxHeadroom6+len(pkt))
		putIPv6UDPHeader(d, lo, lo, uint16(a.UDPPort()), uint16(b.UDPPort()), len(pkt))
		copy(d[rxHeadroom6:], pkt)
		body := d[rxHeadroom6 : len(d)-wire.ICRCLen]
		binary.LittleEndian.PutUint32(d[len(d)-wire.ICRCLen:], wire.ICRCForIPv6(lo, lo, uint16(a.UDPPort()), uint16(b.UDPPort()), body))
		b.input(d, rx)
		b.finishBatch(rx)
		if !bytes.Equal(other.Bytes(), otherBefore) {
			t.Fatal("a region without remote access changed")
		}
	})
}
