package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// rxBufSize is the size of one receive buffer in raw mode: any IPv4
// datagram a RoCEv2 peer sends with a 4096-byte MTU fits. In GSO mode
// the buffers are rxGSOBufSize.
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
	// holds are the QPs whose READ responses wait in tx (holdAcks).
	holds []*qp
	// A packet the receive-side fault injector delays behind the next one.
	held    []byte
	heldLen int
	// split cuts received UDP payloads into packets (GSO mode).
	split gsoSplitter
	// queue is the receive queue's index (Config.RecvQueues).
	queue uint32
	// udp: the queue reads a UDP socket (GSO mode, IPv6), whose packets
	// come with headers rebuilt by split, rather than a raw socket.
	udp bool
	// seg is the index of the packet being handled in its received
	// super-datagram (0 for a plain datagram).
	seg uint16
	// The run of received packets of one QP not yet added to its
	// counters (countQP).
	qc     *qpCounters
	qcPkts uint64
	qcLen  uint64
	// icrc remembers the ICRC header registers of the datagrams checked.
	icrc wire.ICRCCache
}

// countQP counts a packet of n bytes handed to QP q.
func (rx *rxState) countQP(q *qp, n int) {
	if rx.qc != &q.stats {
		rx.flushQPCount()
		rx.qc = &q.stats
	}
	rx.qcPkts++
	rx.qcLen += uint64(n)
}

// flushQPCount adds the pending run to its QP's counters.
func (rx *rxState) flushQPCount() {
	rx.qc.addReceived(rx.qcPkts, rx.qcLen)
	rx.qc, rx.qcPkts, rx.qcLen = nil, 0, 0
}

// newRxQueue makes receive queue queue, reading socket sc: a UDP socket
// if udp, else a raw socket. Its goroutine is rxLoop.
func (d *Device) newRxQueue(sc *sockConn, queue int, udp bool) (*rxQueue, error) {
	batch := d.cfg.RecvBatch
	size, head := rxBufSize, 0
	var m *mmsg
	switch {
	case d.v6 && udp:
		size, head = rxHeadroom6+rxBufSize, rxHeadroom6
		if d.socks.gsoMode {
			size = rxHeadroom6 + gsoMaxPayload + 1
		}
		m = newRecvMmsg6(batch)
	case udp:
		size, head = rxGSOBufSize, rxHeadroom
		m = newRecvMmsg(batch)
	default:
		m = newMmsg(batch, false)
	}
	w, err := newRxWaiter(sc)
	if err != nil {
		return nil, fmt.Errorf("soft: receive queue %d: %w", queue, err)
	}
	// A poller sleeps in the receive itself (pollWait); every other call
	// passes MSG_DONTWAIT.
	if err := unix.SetNonblock(sc.fd, false); err != nil {
		w.close()
		return nil, fmt.Errorf("soft: receive queue %d: %w", queue, os.NewSyscallError("fcntl", err))
	}
	if udp {
		// Room for each datagram's ECN field (congestion.go), which the
		// kernel gives only while the socket asks for it (setRecvTOS):
		// SetCongestion turns that on and off on a running device.
		m.recvTOS()
		if d.cc.Load() != nil {
			if err := setRecvTOS(sc, d.v6); err != nil {
				w.close()
				return nil, fmt.Errorf("soft: receive queue %d: %w", queue, err)
			}
		}
	}
	bufs := make([]byte, batch*size)
	for i := 0; i < batch; i++ {
		m.setBuf(i, bufs[i*size+head:(i+1)*size])
	}
	rx := &rxState{tx: newTxBatch(d), reqTx: newTxBatch(d), acks: make([]*qp, 0, 64), kicks: make([]*qp, 0, 64), holds: make([]*qp, 0, 64), held: make([]byte, size), queue: uint32(queue), udp: udp}
	rq := &rxQueue{sock: sc, w: w, m: m, batch: batch}
	rq.serveFn, rq.ctlFn, rq.waitFn = rq.serve, rq.controlRecv, rq.controlRecvWait
	rq.process = func(n int) {
		wireAcquire()
		f := d.recvFaults.Load()
		tos := udp && d.cc.Load() != nil
		var pkts, bytes int
		for i := 0; i < n; i++ {
			if m.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				d.stats.malformed.Add(1)
				pkts++
				continue
			}
			b := bufs[i*size : i*size+head+int(m.hdrs[i].Len)]
			if !udp {
				d.deliver(b, rx, f)
				pkts++
				if len(b) > 0 {
					bytes += max(len(b)-int(b[0]&0x0f)*4-wire.UDPHeaderLen, 0)
				}
				continue
			}
			if d.v6 {
				src, sport, ok := m.source6(i)
				if !ok || len(b) == head {
					d.stats.malformed.Add(1)
					pkts++
					continue
				}
				rx.split.start6(b, src, d.addr16, sport, d.port, m.groSize(i))
				if tos {
					rx.split.tos = m.tos(i)
				}
			} else {
				src, sport, ok := m.source(i)
				if !ok || len(b) == head {
					d.stats.malformed.Add(1)
					pkts++
					continue
				}
				rx.split.startPort(b, src, d.addr4, sport, d.port, m.groSize(i))
				if tos {
					rx.split.tos = m.tos(i)
				}
			}
			np, nb := d.receive(rx, f)
			pkts += np
			bytes += nb
		}
		d.rxqPackets[queue].Add(uint64(pkts))
		d.stats.packetsReceived.Add(uint64(pkts))
		d.stats.bytesReceived.Add(uint64(bytes))
		rx.flushQPCount()
		d.finishBatch(rx)
	}
	return rq, nil
}

// rxLoop is the goroutine of receive queue rq: it waits for datagrams
// and handles them, batch by batch, until the device closes.
func (d *Device) rxLoop(rq *rxQueue) {
	defer d.rxDone.Done()
	for {
		err := rq.run()
		if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) || d.isClosed() {
			return
		}
		time.Sleep(time.Millisecond) // ENOBUFS and the like: try again
	}
}

// receive handles one UDP payload received on the UDP socket (GSO mode,
// IPv6), which rx.split was started on: its headroom followed by the
// payload (at least one byte), cut at the GSO segment size. Each packet
// is delivered with the IP and UDP headers its sender's kernel wrote or
// would have written (gso.go). It returns the number of packets and their
// UDP payload bytes.
func (d *Device) receive(rx *rxState, f *faults) (pkts, bytes int) {
	s := &rx.split
	if n := s.segments(); n > 1 {
		d.socks.gso.supers.Add(1)
		d.socks.gso.recvSegs.Add(uint64(n))
	}
	for {
		rx.seg = s.k
		dg, ok := s.next()
		if !ok {
			rx.seg = 0
			return pkts, bytes
		}
		d.deliver(dg, rx, f)
		pkts++
		bytes += len(dg) - s.hl
	}
}

// deliver hands one packet's datagram to the pcap writer, the receive-side
// fault injector f (nil: none) and input.
func (d *Device) deliver(b []byte, rx *rxState, f *faults) {
	if d.pcap != nil {
		csum := csumAsIs
		switch {
		case rx.udp:
			csum = csumValid
		case d.socks.loopback:
			csum = csumFixNonZero
		}
		d.pcap.writeReceived(b, csum)
	}
	if f == nil {
		d.input(b, rx)
		return
	}
	d.inputFaulty(f, b, rx)
}

// inputFaulty applies the receive-side fault injector to one datagram.
func (d *Device) inputFaulty(f *faults, b []byte, rx *rxState) {
	hdr := d.hl
	if len(b) > 0 && b[0]>>4 == 4 {
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
	if act&faultCE != 0 && markCE(b, f.cfg.CEMarkNotECT) {
		d.stats.faultCEMarks.Add(1)
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
	if err != nil || binary.BigEndian.Uint16(udp[2:]) != d.port || d.v6 != (ip[0]>>4 == 6) {
		d.stats.malformed.Add(1)
		return
	}
	if rx.icrc.CheckParts(ip, udp, pkt) != nil && !d.fixedIDMatch(rx, ip, udp, pkt) {
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
	qpn := p.BTH.DestQP()
	op := p.Opcode()
	q := d.lookupQP(qpn)
	if q == nil {
		d.stats.unknownQP.Add(1)
		if op.IsCNP() {
			d.stats.rpCNPIgnored.Add(1)
		}
		return
	}
	if d.socks.queues() > 1 && int(rx.queue) != d.socks.assistQueue && d.queueOf(qpn) != int(rx.queue) {
		// Not the QP's queue (a GSO send from a peer mixing QPs):
		// handled all the same, under the QP's lock.
		d.stats.steerMisses.Add(1)
	}
	q.mu.Lock()
	// The responder's packets leave from the QP's source port.
	rx.tx.forQP(q)
	switch {
	case q.destroyed:
		d.stats.unknownQP.Add(1)
	case op.IsCNP():
		if q.typ == rdma.QPTypeRC && q.fromPeer(ip) {
			rx.countQP(q, len(pkt))
			q.onCNP()
		} else {
			d.stats.rpCNPIgnored.Add(1)
			q.stats.rpCNPIgnored.Add(1)
		}
	case q.typ == rdma.QPTypeRC:
		if op.Class() != wire.ClassRC || !q.fromPeer(ip) {
			d.stats.dropped.Add(1)
			break
		}
		if ipECN(ip) == ecnCE && d.cc.Load() != nil {
			q.onCE(rx)
		}
		if op.IsAck() || op.IsReadResponse() {
			rx.countQP(q, len(pkt))
			q.completerInput(&p, rx)
		} else {
			rx.countQP(q, len(pkt))
			q.responderInput(&p, rx)
		}
	default:
		if op.Class() != wire.ClassUD {
			d.stats.dropped.Add(1)
		} else {
			rx.countQP(q, len(pkt))
			q.udInput(&p, ip)
		}
	}
	q.mu.Unlock()
}

// fixedIDMatch reports whether packet k > 0 of a super-datagram of an
// IPv4 device off loopback (udp4 mode), whose ICRC failed with IP ID k,
// verifies with ID 0: GRO merges a flow of DF datagrams whose IDs are all
// equal (plain sends of one soft device, each ID 0) as well as one whose
// IDs count up (a GSO send segmented on the way), and the header of the
// merged datagram shows only the first ID.
func (d *Device) fixedIDMatch(rx *rxState, ip, udp, pkt []byte) bool {
	if !rx.udp || rx.seg == 0 || d.v6 || d.socks.loopback {
		return false
	}
	ip[4], ip[5] = 0, 0
	if rx.icrc.CheckParts(ip, udp, pkt) != nil {
		return false
	}
	d.socks.gso.fixedID.Add(1)
	return true
}

// fromPeer reports whether a packet with IP header ip (of the device's
// family) comes from the QP's peer address.
func (q *qp) fromPeer(ip []byte) bool {
	if len(ip) == wire.IPv6HeaderLen && ip[0]>>4 == 6 {
		return [16]byte(ip[8:24]) == q.dst
	}
	return [4]byte(ip[12:16]) == [4]byte(q.dst[12:])
}
