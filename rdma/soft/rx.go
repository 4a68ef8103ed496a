package soft

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// rxBufSize is the size of one receive buffer: any IPv4 datagram a RoCEv2
// peer sends with a 4096-byte MTU fits. Loopback devices, which may
// receive UDP GSO super-datagrams, use rxGSOBufSize.
const rxBufSize = 8192

// rxState is the receive goroutine's working state. Work runs to
// completion in that goroutine: responder output (ACKs, NAKs, READ
// responses) collects in tx and leaves at the end of each batch, with one
// coalesced ACK per QP; QPs whose send window opened run their requester
// at the end of the batch, each flushing reqTx before releasing its lock
// so that request packets leave in PSN order.
type rxState struct {
	tx    *txBatch
	reqTx *txBatch
	acks  []*qp
	kicks []*qp
	// A packet the receive-side fault injector delays behind the next one.
	held    []byte
	heldLen int
	// split cuts GSO super-datagrams into packets.
	split gsoSplitter
}

func (d *Device) rxLoop() {
	defer close(d.rxDone)
	batch := d.cfg.RecvBatch
	size := rxBufSize
	if d.socks.loopback {
		size = rxGSOBufSize
	}
	m := newMmsg(batch, false)
	bufs := make([]byte, batch*size)
	for i := 0; i < batch; i++ {
		m.setBuf(i, bufs[i*size:(i+1)*size])
	}
	rx := &rxState{tx: newTxBatch(d), reqTx: newTxBatch(d), acks: make([]*qp, 0, 64), kicks: make([]*qp, 0, 64), held: make([]byte, size)}
	for {
		n, err := m.recvBatch(d.socks.rawRC, batch)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || d.isClosed() {
				return
			}
			time.Sleep(time.Millisecond) // ENOBUFS and the like: try again
			continue
		}
		wireAcquire()
		f := d.recvFaults.Load()
		var pkts, bytes int
		for i := 0; i < n; i++ {
			if m.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				d.stats.malformed.Add(1)
				pkts++
				continue
			}
			b := bufs[i*size : i*size+int(m.hdrs[i].Len)]
			np, nb := d.receive(b, rx, f)
			pkts += np
			bytes += nb
		}
		d.stats.packetsReceived.Add(uint64(pkts))
		d.stats.bytesReceived.Add(uint64(bytes))
		d.finishBatch(rx)
	}
}

// receive handles one received datagram: on a loopback device a UDP GSO
// super-datagram (gso.go) is split into its packets, each delivered with
// its rebuilt IP and UDP headers. It returns the number of packets and
// their bytes.
func (d *Device) receive(b []byte, rx *rxState, f *faults) (pkts, bytes int) {
	if d.socks.loopback {
		if seg, hl, ulen := d.gsoSplitOf(b); seg > 0 && rx.split.start(b, hl, ulen, seg) {
			d.socks.gso.supers.Add(1)
			d.socks.gso.recvSegs.Add(uint64(rx.split.segments()))
			for {
				dg, ok := rx.split.next()
				if !ok {
					break
				}
				d.deliver(dg, rx, f)
				pkts++
				bytes += len(dg)
			}
			return pkts, bytes
		}
	}
	d.deliver(b, rx, f)
	return 1, len(b)
}

// gsoSplitOf returns the segment size by which datagram b is to be split
// (0: a single packet), its IP header length and its UDP length.
func (d *Device) gsoSplitOf(b []byte) (seg, hl, udpLen int) {
	ip, udp, pkt, err := wire.SplitIPUDP(b)
	if err != nil || ip[0]>>4 != 4 || binary.BigEndian.Uint16(udp[2:]) != wire.UDPPort {
		return 0, 0, 0
	}
	qpn, ok := gsoCandidate(pkt)
	if !ok {
		return 0, 0, 0
	}
	q := d.lookupQP(qpn)
	if q == nil {
		return 0, 0, 0
	}
	q.mu.Lock()
	pmtu := q.mtu
	q.mu.Unlock()
	return gsoSplitSize(pkt, pmtu), len(ip), wire.UDPHeaderLen + len(pkt)
}

// deliver hands one packet's datagram to the pcap writer, the receive-side
// fault injector f (nil: none) and input.
func (d *Device) deliver(b []byte, rx *rxState, f *faults) {
	if d.pcap != nil {
		d.pcap.writeReceived(b, d.socks.loopback)
	}
	if f == nil {
		d.input(b, rx)
		return
	}
	d.inputFaulty(f, b, rx)
}

// inputFaulty applies the receive-side fault injector to one datagram.
func (d *Device) inputFaulty(f *faults, b []byte, rx *rxState) {
	hdr := wire.IPv4HeaderLen + wire.UDPHeaderLen
	if len(b) > 0 {
		hdr = int(b[0]&0x0f)*4 + wire.UDPHeaderLen
	}
	act, bit := f.decide(max(len(b)-hdr, 0))
	if act&faultDrop != 0 {
		d.stats.faultDrops.Add(1)
		return
	}
	if act&faultCorrupt != 0 {
		d.stats.faultCorruptions.Add(1)
		flipBit(b[hdr:], bit)
	}
	if act&faultReorder != 0 && rx.heldLen == 0 {
		d.stats.faultReorders.Add(1)
		rx.heldLen = copy(rx.held, b)
		return
	}
	d.input(b, rx)
	if act&faultDuplicate != 0 {
		d.stats.faultDuplicates.Add(1)
		d.input(b, rx)
	}
	if rx.heldLen > 0 {
		n := rx.heldLen
		rx.heldLen = 0
		d.input(rx.held[:n], rx)
	}
}

// input handles one received IP datagram.
func (d *Device) input(b []byte, rx *rxState) {
	ip, udp, pkt, err := wire.SplitIPUDP(b)
	if err != nil || binary.BigEndian.Uint16(udp[2:]) != wire.UDPPort || ip[0]>>4 != 4 {
		d.stats.malformed.Add(1)
		return
	}
	if wire.CheckICRCParts(ip, udp, pkt) != nil {
		d.stats.icrcErrors.Add(1)
		return
	}
	var p wire.Packet
	if p.Parse(pkt) != nil {
		d.stats.malformed.Add(1)
		return
	}
	if p.BTH.TVer() != 0 || p.BTH.PKey()&0x7fff != 0x7fff {
		d.stats.dropped.Add(1)
		return
	}
	q := d.lookupQP(p.BTH.DestQP())
	if q == nil {
		d.stats.unknownQP.Add(1)
		return
	}
	op := p.Opcode()
	q.mu.Lock()
	switch {
	case q.destroyed:
		d.stats.unknownQP.Add(1)
	case q.typ == rdma.QPTypeRC:
		if op.Class() != wire.ClassRC || [4]byte(ip[12:16]) != q.dst {
			d.stats.dropped.Add(1)
		} else if op.IsAck() || op.IsReadResponse() {
			q.completerInput(&p, rx)
		} else {
			q.responderInput(&p, rx)
		}
	default:
		if op.Class() != wire.ClassUD {
			d.stats.dropped.Add(1)
		} else {
			q.udInput(&p, ip)
		}
	}
	q.mu.Unlock()
}
