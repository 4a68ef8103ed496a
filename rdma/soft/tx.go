package soft

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// txBatchSize is the number of packets one flush carries.
const txBatchSize = 64

// txMaxOut is the number of datagrams one flush may send: every packet, a
// fault-injected duplicate of each and the reordered packet.
const txMaxOut = 2*txBatchSize + 1

// txPkt is one packet being built: the UDP payload (BTH through ICRC).
type txPkt struct {
	buf [maxPacketSize]byte
	n   int
	dst [16]byte // IPv4-mapped for IPv4
	tos uint8    // IP TOS / IPv6 traffic class (the QP's AV traffic class)
	// flip is the bit the send-side fault injector flips once the ICRC
	// is computed, plus one (0: none).
	flip int
	// ext, when set, is the payload in place in a memory region, sent
	// without a copy: buf holds the headers (hn bytes) and then the pad
	// and the ICRC; n counts all of it. The ICRC is computed at flush
	// time over the region's bytes as they are then: a consumer that
	// changes a buffer while its work request is outstanding gets a
	// packet the peer drops, and the resend carries the new bytes.
	ext []byte
	hn  int
	// src, when set, is the region ext lies in for a READ response,
	// checked under generation gen: flush sends the packet only if the
	// region has not changed since (mr.fence), and holds the access
	// until the datagrams left.
	src  *mr
	gen  uint64
	dead bool // fenced off: not sent
	// from is the source port socket of the QP that built the packet
	// (nil: the device's socket and port).
	from *srcSock
	// qc are the counters of the QP that built the packet (nil: none).
	qc *qpCounters
}

// materialize copies an ext payload into buf, making the packet one
// contiguous buffer (for the fault injector and the capture writer).
func (p *txPkt) materialize() {
	if p.ext == nil {
		return
	}
	e := len(p.ext)
	tail := p.n - p.hn - e
	copy(p.buf[p.hn+e:p.hn+e+tail], p.buf[p.hn:p.hn+tail])
	copy(p.buf[p.hn:], p.ext)
	p.ext = nil
}

// txMsg is one message of a sendmmsg: a packet, or a run of packets sent
// with UDP GSO.
type txMsg struct {
	count int      // packets
	bytes int      // UDP payload bytes
	seg   int      // GSO segment size (0: one packet)
	from  *srcSock // the socket it leaves through (nil: the device's)
}

// txBatch collects packets and sends them with one sendmmsg. The ICRC is
// computed at flush time, so that a packet's headers (AckReq) may still
// change after it was built, and so that a packet sent as segment k of a
// GSO run gets the ICRC for IP ID k. A batch is used by one goroutine at
// a time: the receive goroutine owns two, other senders take one from
// the device's pool.
type txBatch struct {
	dev  *Device
	n    int
	pkts [txBatchSize]txPkt
	m    *mmsg
	// out lists the datagrams of one flush, in order: packets,
	// fault-injected duplicates and the reordered packet. alone marks the
	// two copies of a duplicate (one buffer, so one ICRC: each is sent
	// as a datagram of its own, IP ID 0); ids holds the IP ID each
	// packet is sent with.
	out   [txMaxOut]*txPkt
	alone [txMaxOut]bool
	ids   [txMaxOut]uint16
	msgs  [txMaxOut]txMsg
	// held is the packet the fault injector delays behind the next one.
	held txPkt
	// src is the source port socket of the QP building packets now
	// (nil: the device's): whoever hands the batch to a QP sets it,
	// and commit stamps it on the packet; qc likewise the QP's counters.
	src *srcSock
	qc  *qpCounters
	// tos is the traffic class commit stamps: the QP's (forQP), or a UD
	// work request's own.
	tos uint8
	// q is the QP forQP made the batch's (nil: none): commit diverts its
	// responder packets to its paced queue while it is rate limited
	// (congestion.go).
	q *qp
	// icrc remembers the ICRC header registers of the datagrams sent.
	icrc wire.ICRCCache
}

// forQP makes the packets committed next q's: its source port, its
// traffic class and its counters.
func (t *txBatch) forQP(q *qp) {
	t.src, t.qc, t.tos, t.q = q.src, &q.stats, q.tos, q
}

func newTxBatch(d *Device) *txBatch {
	t := &txBatch{dev: d, m: newMmsgFamily(txMaxOut, true, d.v6)}
	// Up to three iovecs a packet: headers, payload in place, pad and ICRC.
	t.m.iovs = make([]unix.Iovec, 3*txMaxOut)
	return t
}

func (d *Device) getTx() *txBatch  { return d.txPool.Get().(*txBatch) }
func (d *Device) putTx(t *txBatch) { t.flush(); t.q = nil; d.txPool.Put(t) }

// next returns the packet to build next, flushing first when the batch
// is full. The caller fills buf, sets n and dst, and calls commit.
func (t *txBatch) next() *txPkt {
	if t.n == txBatchSize {
		t.flush()
	}
	p := &t.pkts[t.n]
	p.ext, p.src, p.dead = nil, nil, false
	return p
}

// commit adds the packet returned by next to the batch.
func (t *txBatch) commit() {
	p := &t.pkts[t.n]
	p.from, p.qc, p.tos = t.src, t.qc, t.tos
	// A QP with a paced queue keeps queueing behind it even if the
	// device's congestion control just went off (SetCongestion empties
	// the queue under the QP's lock, which commit runs under).
	if cc, q := t.dev.cc.Load(), t.q; cc != nil || q != nil && q.cc != nil {
		op := wire.BTH(p.buf[:]).Opcode()
		if cc != nil {
			p.tos = cc.packetTOS(p.tos, op)
		}
		if q != nil && q.cc != nil && (op.IsReadResponse() || op.IsAck()) {
			if q.cc.respPaced() {
				q.divert(p)
				return
			}
			// Unpaced (not rate-limited): it still takes its share of
			// the line rate from the requester's tokens.
			q.cc.rp.sent(p.n)
		}
	}
	t.n++
}

// last returns the most recently committed packet, or nil.
func (t *txBatch) last() *txPkt {
	if t.n == 0 {
		return nil
	}
	return &t.pkts[t.n-1]
}

// flush applies the send-side fault injector, groups runs of packets for
// UDP GSO (loopback), computes the ICRCs and sends the batch.
func (t *txBatch) flush() {
	if t.n == 0 {
		return
	}
	n, held := t.n, false
	for i := range t.pkts[:n] {
		p := &t.pkts[i]
		if p.src == nil {
			continue
		}
		if !p.src.enter(p.gen) {
			p.ext, p.src, p.dead = nil, nil, true
			t.dev.stats.fencedResponses.Add(1)
			continue
		}
		held = true
	}
	t.send()
	if held {
		for i := range t.pkts[:n] {
			if p := &t.pkts[i]; p.src != nil {
				p.src.leave()
				p.src = nil
			}
		}
	}
}

// send sends the batch (flush's body, with the regions of in-place READ
// responses held).
func (t *txBatch) send() {
	d := t.dev
	f := d.sendFaults.Load()
	if f != nil || d.pcap != nil {
		for i := range t.pkts[:t.n] {
			t.pkts[i].materialize()
		}
	}
	k := t.applyFaults(f)
	t.n = 0
	if k == 0 {
		return
	}
	gso := d.socks.gsoMode && !d.socks.gso.disabled.Load()
	dport := uint16(d.peerPort.Load())
	nm, iv := 0, 0
	for i := 0; i < k; {
		run := 1
		if gso {
			run = t.gsoRun(i, k)
		}
		bytes := 0
		first := iv
		sport := d.sourcePort(t.out[i].from)
		for j := i; j < i+run; j++ {
			p := t.out[j]
			id := uint16(j - i)
			if p.ext != nil {
				tail := p.buf[p.hn : p.n-len(p.ext)]
				pad := tail[:len(tail)-wire.ICRCLen]
				var crc uint32
				if d.v6 {
					crc = t.icrc.ForIPv6Gather(d.addr16, p.dst, sport, dport, p.buf[:p.hn], p.ext, pad)
				} else {
					crc = t.icrc.ForIPv4Gather(d.addr4, [4]byte(p.dst[12:]), id, true, sport, dport, p.buf[:p.hn], p.ext, pad)
				}
				binary.LittleEndian.PutUint32(tail[len(pad):], crc)
				t.m.setIov(iv, p.buf[:p.hn])
				t.m.setIov(iv+1, p.ext)
				t.m.setIov(iv+2, tail)
				iv += 3
			} else {
				body := p.buf[:p.n-wire.ICRCLen]
				var crc uint32
				if d.v6 {
					crc = t.icrc.ForIPv6(d.addr16, p.dst, sport, dport, body)
				} else {
					crc = t.icrc.ForIPv4(d.addr4, [4]byte(p.dst[12:]), id, true, sport, dport, body)
				}
				binary.LittleEndian.PutUint32(p.buf[p.n-wire.ICRCLen:], crc)
				t.m.setIov(iv, p.buf[:p.n])
				iv++
			}
			t.ids[j] = id
			bytes += p.n
		}
		seg := 0
		if run > 1 {
			seg = t.out[i].n
		}
		t.m.setMsg(nm, first, iv-first, t.out[i].dst, dport, seg, t.out[i].tos)
		t.msgs[nm] = txMsg{count: run, bytes: bytes, seg: seg, from: t.out[i].from}
		nm++
		i += run
	}
	// Corruption acts on the packet as sent, after its ICRC (once per
	// buffer: a duplicate shares it).
	for _, p := range t.out[:k] {
		if p.flip != 0 {
			flipBit(p.buf[:p.n], p.flip-1)
			p.flip = 0
		}
	}
	if d.pcap != nil {
		for i, p := range t.out[:k] {
			sport := d.sourcePort(p.from)
			if d.v6 {
				d.pcap.writeSent6(d.addr16, p.dst, p.tos, sport, dport, p.buf[:p.n])
			} else {
				d.pcap.writeSentPorts(d.addr4, [4]byte(p.dst[12:]), p.tos, t.ids[i], sport, dport, p.buf[:p.n], d.socks.gsoMode)
			}
		}
	}
	wireRelease()
	// One sendmmsg per run of messages leaving through one socket.
	for i := 0; i < nm; {
		from, j := t.msgs[i].from, i+1
		for j < nm && t.msgs[j].from == from {
			j++
		}
		var rc syscall.RawConn = d.socks.udp
		if from != nil {
			rc = from.rc
		}
		t.m.sendRange(rc, i, j)
		i = j
	}
	var pkts, bytes, failed uint64
	// Per QP: one add per run of a QP's packets (t.out in order).
	var qc *qpCounters
	var qp, qb uint64
	off := 0
	for i, msg := range t.msgs[:nm] {
		run := t.out[off : off+msg.count]
		off += msg.count
		if e := t.m.errs[i]; e != 0 {
			failed += uint64(msg.count)
			if msg.seg > 0 && (e == unix.EINVAL || e == unix.EOPNOTSUPP || e == unix.ENOPROTOOPT || e == unix.EIO) {
				// The kernel does not take UDP GSO here: go back to
				// one datagram per packet (go-back-N resends the run).
				d.socks.gso.disabled.Store(true)
			}
			continue
		}
		for _, p := range run {
			if p.qc != qc {
				qc.addSent(qp, qb)
				qc, qp, qb = p.qc, 0, 0
			}
			qp++
			qb += uint64(p.n)
		}
		pkts += uint64(msg.count)
		bytes += uint64(msg.bytes)
		if msg.seg > 0 {
			d.socks.gso.sends.Add(1)
			d.socks.gso.sentSegs.Add(uint64(msg.count))
		}
	}
	qc.addSent(qp, qb)
	d.stats.packetsSent.Add(pkts)
	d.stats.bytesSent.Add(bytes)
	if failed > 0 {
		d.stats.sendErrors.Add(failed)
	}
	clear(t.out[:k])
	clear(t.msgs[:nm])
}

// applyFaults fills t.out with the batch's packets as the send-side fault
// injector f (nil: none) lets them go, and returns their number.
// Corruption is recorded in txPkt.flip and applied after the ICRC.
func (t *txBatch) applyFaults(f *faults) int {
	d := t.dev
	k := 0
	add := func(p *txPkt, alone bool) {
		t.out[k], t.alone[k] = p, alone
		k++
	}
	holding, reordered := false, false
	for i := 0; i < t.n; i++ {
		p := &t.pkts[i]
		p.flip = 0
		if p.dead {
			continue
		}
		dup := false
		if f != nil {
			act, bit := f.decide(p.n)
			if act&faultDrop != 0 {
				d.stats.faultDrops.Add(1)
				continue
			}
			if act&faultCorrupt != 0 {
				d.stats.faultCorruptions.Add(1)
				p.flip = bit + 1
			}
			if act&faultReorder != 0 && !reordered && i+1 < t.n {
				// Deliver it after the next packet of this batch.
				d.stats.faultReorders.Add(1)
				t.held.n, t.held.dst, t.held.flip, t.held.from, t.held.qc, t.held.tos = p.n, p.dst, p.flip, p.from, p.qc, p.tos
				copy(t.held.buf[:p.n], p.buf[:p.n])
				holding, reordered = true, true
				continue
			}
			if act&faultDuplicate != 0 {
				d.stats.faultDuplicates.Add(1)
				add(p, true)
				dup = true
			}
		}
		add(p, dup)
		if holding {
			add(&t.held, false)
			holding = false
		}
	}
	if holding {
		add(&t.held, false)
	}
	return k
}

// gsoRun returns the length of the GSO run starting at t.out[i] (1: the
// packet goes alone): the packet and the following ones of its length
// from the same source port to the same loopback destination
// (127.0.0.0/8, or ::1 for an IPv6 device) and destination QP with the
// same traffic class (one IP header, one TOS, per GSO send), and one
// shorter one to end the run, within gsoMaxSegments packets and
// gsoMaxPayload bytes (gso.go). One destination QP, because the receiver
// picks its receive queue by the first packet's. Duplicates made by the
// fault injector go alone.
func (t *txBatch) gsoRun(i, k int) int {
	p := t.out[i]
	if t.alone[i] {
		return 1
	}
	s, total, run := p.n, p.n, 1
	for i+run < k && run < gsoMaxSegments {
		j := i + run
		q := t.out[j]
		if t.alone[j] || q.dst != p.dst || q.from != p.from || q.tos != p.tos || wire.BTH(q.buf[:]).DestQP() != wire.BTH(p.buf[:]).DestQP() ||
			q.n > s || total+q.n > gsoMaxPayload {
			break
		}
		total += q.n
		run++
		if q.n < s {
			break
		}
	}
	return run
}
