package soft

import (
	"encoding/binary"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// txBatchSize is the number of packets one sendmmsg carries.
const txBatchSize = 64

// txPkt is one packet being built: the UDP payload (BTH through ICRC).
type txPkt struct {
	buf [maxPacketSize]byte
	n   int
	dst [4]byte
}

// txBatch collects packets and sends them with one sendmmsg. The ICRC is
// computed at flush time, so that a packet's headers (AckReq) may still
// change after it was built. A batch is used by one goroutine at a time:
// the receive goroutine owns two, other senders take one from the
// device's pool.
type txBatch struct {
	dev  *Device
	n    int
	pkts [txBatchSize]txPkt
	m    *mmsg
	// out lists the datagrams of one sendmmsg: packets, fault-injected
	// duplicates and the reordered packet.
	out    [2*txBatchSize + 1][]byte
	outDst [2*txBatchSize + 1][4]byte
	// held is the packet the fault injector delays behind the next one.
	held txPkt
}

func newTxBatch(d *Device) *txBatch {
	return &txBatch{dev: d, m: newMmsg(2*txBatchSize+1, true)}
}

func (d *Device) getTx() *txBatch  { return d.txPool.Get().(*txBatch) }
func (d *Device) putTx(t *txBatch) { t.flush(); d.txPool.Put(t) }

// next returns the packet to build next, flushing first when the batch
// is full. The caller fills buf, sets n and dst, and calls commit.
func (t *txBatch) next() *txPkt {
	if t.n == txBatchSize {
		t.flush()
	}
	return &t.pkts[t.n]
}

// commit adds the packet returned by next to the batch.
func (t *txBatch) commit() { t.n++ }

// last returns the most recently committed packet, or nil.
func (t *txBatch) last() *txPkt {
	if t.n == 0 {
		return nil
	}
	return &t.pkts[t.n-1]
}

// flush computes the ICRCs, applies the send-side fault injector and
// sends the batch.
func (t *txBatch) flush() {
	if t.n == 0 {
		return
	}
	d := t.dev
	f := d.sendFaults.Load()
	k := 0
	add := func(p *txPkt) {
		t.out[k], t.outDst[k] = p.buf[:p.n], p.dst
		k++
	}
	holding, reordered := false, false
	for i := 0; i < t.n; i++ {
		p := &t.pkts[i]
		body := p.buf[:p.n-wire.ICRCLen]
		binary.LittleEndian.PutUint32(p.buf[p.n-wire.ICRCLen:], wire.ICRCForIPv4(d.addr4, p.dst, 0, true, wire.UDPPort, wire.UDPPort, body))
		if f != nil {
			act, bit := f.decide(p.n)
			if act&faultDrop != 0 {
				d.stats.faultDrops.Add(1)
				continue
			}
			if act&faultCorrupt != 0 {
				d.stats.faultCorruptions.Add(1)
				flipBit(p.buf[:p.n], bit)
			}
			if act&faultReorder != 0 && !reordered && i+1 < t.n {
				// Deliver it after the next packet of this batch.
				d.stats.faultReorders.Add(1)
				t.held.n, t.held.dst = p.n, p.dst
				copy(t.held.buf[:p.n], p.buf[:p.n])
				holding, reordered = true, true
				continue
			}
			if act&faultDuplicate != 0 {
				d.stats.faultDuplicates.Add(1)
				add(p)
			}
		}
		add(p)
		if holding {
			add(&t.held)
			holding = false
		}
	}
	if holding {
		add(&t.held)
	}
	t.n = 0
	if k == 0 {
		return
	}
	for i := 0; i < k; i++ {
		t.m.setBuf(i, t.out[i])
		t.m.setDest(i, t.outDst[i], wire.UDPPort)
		if d.pcap != nil {
			d.pcap.writeSent(d.addr4, t.outDst[i], t.out[i])
		}
	}
	wireRelease()
	sent, failed, _ := t.m.sendBatch(d.socks.udpRC, k)
	d.stats.packetsSent.Add(uint64(sent))
	if failed > 0 {
		d.stats.sendErrors.Add(uint64(failed))
	}
	var bytes int
	for i := 0; i < sent; i++ {
		bytes += len(t.out[i])
	}
	d.stats.bytesSent.Add(uint64(bytes))
}
