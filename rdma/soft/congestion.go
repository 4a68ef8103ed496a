package soft

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// RoCEv2 congestion control (docs/congestion.md): ECN, CNPs and DCQCN.
//
// With Config.Congestion enabled, every packet but acknowledgements and
// CNPs leaves ECN-capable (ECT(0), or ECT(1)) in its IP header, set in
// the TOS / traffic class the packet carries per datagram (tos.go), so
// every send path (GSO runs, plain datagrams, IPv4 and IPv6) has it. A
// switch queue past its marking threshold turns ECT into CE.
//
// Receiving, the device learns each packet's ECN field from the IP
// header: a raw socket's own, or on a UDP socket (GSO mode, IPv6) from
// the IP_TOS / IPV6_TCLASS control message (IP_RECVTOS /
// IPV6_RECVTCLASS), written into the header gso.go rebuilds. A CE-marked
// packet for an RC QP makes the QP (the notification point) send a CNP
// to its peer QP, at most one per MinCNPInterval. A CNP makes the QP it
// names (the reaction point) cut its rate (dcqcn.go), which paces its
// requester and its responder's output (READ responses and ACKs, through
// the QP's paced queue). With congestion control off nothing of this runs: no
// control message is asked for or parsed, packets keep their QP's class.

// ECN codepoints of the IP header's two low TOS / traffic class bits.
const (
	ecnNotECT = 0
	ecnECT1   = 1
	ecnECT0   = 2
	ecnCE     = 3
)

// CongestionConfig configures RoCEv2 congestion control of a device
// (Config.Congestion). Zero values take the defaults named.
type CongestionConfig struct {
	// Enabled turns on ECN marking, the notification point (CNPs on CE)
	// and the reaction point (DCQCN). Off, a CNP received is counted in
	// RPCNPIgnored and dropped.
	Enabled bool
	// ECT1 marks data packets ECT(1) instead of ECT(0) (RFC 3168; L4S
	// queues treat ECT(1) differently).
	ECT1 bool
	// MinCNPInterval is the least time between two CNPs one QP sends
	// (default DefaultMinCNPInterval; negative: no limit).
	MinCNPInterval time.Duration
	// CNPDSCP is the DSCP of the CNPs the device sends (default 48, as
	// mlx5's np_cnp_dscp, for a switch to queue them ahead of data);
	// -1 sends them with their QP's traffic class.
	CNPDSCP int
	// LineRate is the rate a QP sends at until its first CNP, and the
	// rate it recovers to, in bits per second (default 10 Gb/s).
	LineRate float64
	// MinRate is the floor of the rate cuts, bits per second (default
	// 10 Mb/s).
	MinRate float64
	// AdditiveIncrease (R_AI) and HyperIncrease (R_HAI) are the target
	// rate steps of the increase stages, bits per second (defaults 40
	// Mb/s and 400 Mb/s).
	AdditiveIncrease, HyperIncrease float64
	// G is the gain of the alpha average (default 1/256).
	G float64
	// AlphaPeriod (K) is the alpha update timer (default 55 µs).
	AlphaPeriod time.Duration
	// IncreasePeriod (T) is the rate increase timer (default 55 µs).
	IncreasePeriod time.Duration
	// RateReducePeriod is the least time between two rate cuts (default
	// 4 µs, as mlx5's rate_reduce_monitor_period).
	RateReducePeriod time.Duration
	// ByteCounter (B) is the bytes sent per byte counter increase event
	// (default 10 MiB).
	ByteCounter int64
	// FastRecoverySteps (F) is the number of increase events of a stage
	// before additive increase (default 5).
	FastRecoverySteps int
}

// Congestion control defaults (docs/congestion.md gives their sources).
const (
	DefaultMinCNPInterval = 50 * time.Microsecond // the DCQCN paper's CNP interval N (mlx5: min_time_between_cnps)
	DefaultCNPDSCP        = 48                    // mlx5's np_cnp_dscp
	DefaultLineRate       = 10e9
	DefaultMinRate        = 10e6
	DefaultAI             = 40e6
	DefaultHAI            = 400e6
	DefaultG              = 1.0 / 256
	DefaultAlphaPeriod    = 55 * time.Microsecond
	DefaultIncreasePeriod = 55 * time.Microsecond
	DefaultRateReduce     = 4 * time.Microsecond
	DefaultByteCounter    = 10 << 20
	DefaultFastRecovery   = 5
	// ccBurst is the most a paced QP may send back to back, ccBurstTime
	// what its rate sends in the time a late pacing timer may cost (its
	// usual burst), ccMinBurst the least (four 4096-byte packets). A
	// bucket smaller than the timer's lateness loses rate: on a TCG guest
	// an 8 KiB bucket held a 40 Mb/s QP to 15 Mb/s (docs/congestion.md).
	ccBurst     = 256 << 10
	ccMinBurst  = 16 << 10
	ccBurstTime = 2 * time.Millisecond
)

// ccState is a device's congestion control, derived from its
// CongestionConfig.
type ccState struct {
	ect       uint8 // ECN codepoint of data packets
	minCNP    time.Duration
	cnpDSCP   int
	rp        dcqcnParams
	lineRateB float64
}

// newCCState checks c and fills in its defaults; nil when it is off.
func newCCState(c *CongestionConfig) (*ccState, error) {
	if c == nil || !c.Enabled {
		return nil, nil
	}
	x := *c
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&x.LineRate, DefaultLineRate)
	def(&x.MinRate, DefaultMinRate)
	def(&x.AdditiveIncrease, DefaultAI)
	def(&x.HyperIncrease, DefaultHAI)
	def(&x.G, DefaultG)
	defD(&x.MinCNPInterval, DefaultMinCNPInterval)
	defD(&x.AlphaPeriod, DefaultAlphaPeriod)
	defD(&x.IncreasePeriod, DefaultIncreasePeriod)
	defD(&x.RateReducePeriod, DefaultRateReduce)
	if x.ByteCounter == 0 {
		x.ByteCounter = DefaultByteCounter
	}
	if x.FastRecoverySteps == 0 {
		x.FastRecoverySteps = DefaultFastRecovery
	}
	if x.CNPDSCP == 0 {
		x.CNPDSCP = DefaultCNPDSCP
	}
	switch {
	case x.LineRate < 0 || x.MinRate < 0 || x.MinRate > x.LineRate:
		return nil, fmt.Errorf("soft: congestion: rates line %g, min %g: %w", x.LineRate, x.MinRate, rdma.ErrInvalidArgument)
	case x.AdditiveIncrease < 0 || x.HyperIncrease < 0:
		return nil, fmt.Errorf("soft: congestion: increase steps %g, %g: %w", x.AdditiveIncrease, x.HyperIncrease, rdma.ErrInvalidArgument)
	case x.G <= 0 || x.G >= 1:
		return nil, fmt.Errorf("soft: congestion: G %g not in (0, 1): %w", x.G, rdma.ErrInvalidArgument)
	case x.AlphaPeriod < 0 || x.IncreasePeriod < 0 || x.RateReducePeriod < 0:
		return nil, fmt.Errorf("soft: congestion: negative timer: %w", rdma.ErrInvalidArgument)
	case x.ByteCounter < 0 || x.FastRecoverySteps < 0:
		return nil, fmt.Errorf("soft: congestion: byte counter %d, F %d: %w", x.ByteCounter, x.FastRecoverySteps, rdma.ErrInvalidArgument)
	case x.CNPDSCP < -1 || x.CNPDSCP > 63:
		return nil, fmt.Errorf("soft: congestion: CNP DSCP %d: %w", x.CNPDSCP, rdma.ErrInvalidArgument)
	}
	s := &ccState{ect: ecnECT0, minCNP: max(x.MinCNPInterval, 0), cnpDSCP: x.CNPDSCP}
	if x.ECT1 {
		s.ect = ecnECT1
	}
	s.rp = dcqcnParams{
		lineRate: x.LineRate / 8, minRate: x.MinRate / 8,
		ai: x.AdditiveIncrease / 8, hai: x.HyperIncrease / 8,
		g: x.G, alphaPeriod: x.AlphaPeriod, increasePeriod: x.IncreasePeriod, reducePeriod: x.RateReducePeriod,
		byteCounter: x.ByteCounter, f: x.FastRecoverySteps, burst: ccBurst,
	}
	s.lineRateB = s.rp.lineRate
	return s, nil
}

// cloneCC returns a copy of c, nil if c is nil or not Enabled.
func cloneCC(c *CongestionConfig) *CongestionConfig {
	if c == nil || !c.Enabled {
		return nil
	}
	x := *c
	return &x
}

// SetCongestion changes the running device's congestion control
// (Config.Congestion; nil or not Enabled: off), checked as Open checks
// it. The packets sent from then on get the new ECN marking; the
// notification point (CE detection, CNPs) and the DCQCN parameters
// switch for every QP, existing and new. An RC QP keeps its DCQCN state
// across new parameters (its rates capped at the new line rate); turned
// off, a rate-limited QP sends its paced queue at once and its requester
// goes on unpaced; turned on, a QP starts at the line rate. The data path
// reads the setting once per packet (atomically), never under a lock.
func (d *Device) SetCongestion(c *CongestionConfig) error {
	cc, err := newCCState(c)
	if err != nil {
		return err
	}
	d.ccMu.Lock()
	defer d.ccMu.Unlock()
	// d.mu keeps Close from closing the sockets under setsockopt.
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return fmt.Errorf("soft: %s: %w", d.name, rdma.ErrClosed)
	}
	was := d.cc.Load()
	if was == nil && cc != nil {
		// Receive sockets report the ECN field before CE detection
		// starts: a packet received before that is simply not looked at.
		if err := d.setRecvECN(true); err != nil {
			_ = d.setRecvECN(false)
			d.mu.RUnlock()
			return err
		}
	}
	d.cc.Store(cc)
	d.ccCfg = cloneCC(c)
	qps := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.RUnlock()
	for _, q := range qps {
		q.mu.Lock()
		if !q.destroyed {
			q.syncCC()
		}
		q.mu.Unlock()
	}
	d.runHandlers() // of the requesters ccOff ran
	if was != nil && cc == nil {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if !d.closed {
			if err := d.setRecvECN(false); err != nil {
				// Harmless: the control messages go unread.
				return fmt.Errorf("soft: %s: congestion control is off, but: %w", d.name, err)
			}
		}
	}
	return nil
}

// Congestion returns the device's congestion control settings as last
// set (Config.Congestion or SetCongestion): nil when it is off.
func (d *Device) Congestion() *CongestionConfig {
	d.ccMu.Lock()
	defer d.ccMu.Unlock()
	return cloneCC(d.ccCfg)
}

// setRecvECN turns on or off the report of each datagram's TOS / traffic
// class (its ECN field) on every UDP receive socket of the device (d.mu
// held, device open). Raw sockets see the IP header anyway; the source
// port sockets (sport.go) receive nothing.
func (d *Device) setRecvECN(on bool) error {
	for i, sc := range d.socks.recv {
		if !d.socks.udpQueue(i) {
			continue
		}
		var err error
		if on {
			err = setRecvTOS(sc, d.v6)
		} else {
			err = stopRecvTOS(sc, d.v6)
		}
		if err != nil {
			return fmt.Errorf("soft: %s: receive queue %d: %w", d.name, i, err)
		}
	}
	return nil
}

// stopRecvTOS undoes setRecvTOS (net_linux.go) on UDP socket sc: the
// kernel stops giving each datagram's TOS / traffic class.
func stopRecvTOS(sc *sockConn, v6 bool) error {
	var serr error
	err := sc.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 0)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 0)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("no longer receiving the TOS: %w", err)
	}
	return nil
}

// packetTOS returns the IP TOS / traffic class a packet of opcode op
// leaves with when the QP's class is tos: ECN-capable but for CNPs,
// which are Not-ECT (RoCEv2 annex A17.9). ACKs are ECN-capable: an AQM
// queue that marks ECT packets drops Not-ECT ones instead, and a lost
// ACK costs the peer a retransmission timeout (the generalized ECN of
// RFC 8311 and ECN++ does the same for TCP's ACKs).
func (c *ccState) packetTOS(tos uint8, op wire.Opcode) uint8 {
	if op.IsCNP() {
		return tos &^ 3
	}
	return tos&^3 | c.ect
}

// ipECN returns the ECN field of an IPv4 or IPv6 header.
func ipECN(ip []byte) uint8 {
	if ip[0]>>4 == 6 {
		return ip[1] >> 4 & 3
	}
	return ip[1] & 3
}

// qpCC is an RC QP's congestion control state, under the QP's lock.
type qpCC struct {
	lastCNP   time.Time // when the QP last sent a CNP (notification point)
	rp        dcqcn
	paceTimer *time.Timer
	paceArmed bool
	// respQ is the paced queue of the QP's responder packets (see
	// divert).
	respQ []*txPkt
}

// syncCC brings RC QP q's congestion control in line with the device's
// (q.mu held, not q.txMu): on, with the device's parameters, or off. The
// device's state is read here, under the QP's lock, so that a QP created
// while SetCongestion runs ends up with the latest state either way.
func (q *qp) syncCC() {
	if q.typ != rdma.QPTypeRC {
		return
	}
	dc := q.dev.cc.Load()
	switch {
	case dc == nil && q.cc != nil:
		q.ccOff()
	case dc != nil && q.cc == nil:
		q.cc = &qpCC{rp: newDCQCN(&dc.rp)}
		q.cc.paceTimer = time.AfterFunc(time.Hour, q.onPaceTimer)
		q.cc.paceTimer.Stop()
	case dc != nil && q.cc.rp.p != &dc.rp:
		q.cc.rp.setParams(&dc.rp)
		if q.cc.paceArmed {
			// The new rate may let the QP send sooner.
			q.cc.paceTimer.Reset(0)
		}
	}
}

// ccOff turns q's congestion control off (q.mu held, not q.txMu): the
// pacing timer stops and the paced queue leaves now, in order, unless
// responder packets of a receive batch still wait ahead of it
// (ackHold), when it is dropped (PacedDrops; go-back-N resends). The
// requester, which may wait for the pacer, runs again.
func (q *qp) ccOff() {
	cc := q.cc
	cc.paceTimer.Stop()
	cc.paceArmed = false
	live := q.state != rdma.QPSErr && q.state != rdma.QPSReset
	if len(cc.respQ) > 0 && !q.resp.ackHold && live {
		q.txMu.Lock()
		tx := q.dev.getTx()
		tx.forQP(q)
		for i, c := range cc.respQ {
			p := tx.next()
			p.n, p.dst, p.tos, p.from, p.qc = c.n, c.dst, c.tos, c.from, c.qc
			copy(p.buf[:c.n], c.buf[:c.n])
			tx.n++ // committed as diverted: not again through commit
			q.dev.pacedPool.Put(c)
			cc.respQ[i] = nil
		}
		cc.respQ = cc.respQ[:0]
		tx.flush()
		q.txMu.Unlock()
		q.dev.putTx(tx)
	}
	if live {
		q.dev.stats.pacedDrops.Add(uint64(len(cc.respQ)))
	}
	q.dropPaced()
	q.cc = nil
	q.kick()
}

// onCE handles a CE-marked packet received on RC QP q (q.mu held): it
// is counted, and answered with a CNP to the peer QP unless the QP sent
// one less than MinCNPInterval ago.
func (q *qp) onCE(rx *rxState) {
	d := q.dev
	d.stats.npECNMarked.Add(1)
	q.stats.npECNMarked.Add(1)
	cc, dc := q.cc, d.cc.Load()
	if cc == nil || dc == nil || q.state != rdma.QPSRTR && q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		return
	}
	now := time.Now()
	if !cc.lastCNP.IsZero() && now.Sub(cc.lastCNP) < dc.minCNP {
		return
	}
	cc.lastCNP = now
	p := rx.tx.next()
	if _, err := wire.PutCNP(p.buf[:], q.attr.DestQPN, wire.DefaultPKey); err != nil {
		return // cannot happen: buf holds any packet
	}
	p.n = wire.CNPLen
	p.dst = q.dst
	rx.tx.commit()
	if dc.cnpDSCP >= 0 {
		rx.tx.last().tos = uint8(dc.cnpDSCP) << 2
	}
	d.stats.npCNPSent.Add(1)
	q.stats.npCNPSent.Add(1)
}

// onCNP handles a CNP received for QP q (q.mu held): the reaction point
// cuts the QP's rate.
func (q *qp) onCNP() {
	d := q.dev
	cc := q.cc
	if cc == nil || q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		d.stats.rpCNPIgnored.Add(1)
		q.stats.rpCNPIgnored.Add(1)
		return
	}
	cc.rp.onCNP(time.Now())
	d.stats.rpCNPHandled.Add(1)
	q.stats.rpCNPHandled.Add(1)
}

// pace reports whether the requester may send its next packet now
// (q.cc set); if not, it arms the pacing timer, which runs the requester
// again when the QP's rate allows. A QP no CNP limits is held to the
// line rate, as a NIC's link holds it. now is read once per requester
// run (zero: not yet).
func (q *qp) pace(now *time.Time) bool {
	cc := q.cc
	if now.IsZero() {
		*now = time.Now()
	}
	ok, wait := cc.rp.mayStart(*now)
	if ok {
		return true
	}
	if !cc.paceArmed {
		cc.paceArmed = true
		cc.paceTimer.Reset(wait)
	}
	return false
}

// paced accounts a packet of n bytes the requester built.
func (q *qp) paced(n int) {
	if q.cc != nil {
		q.cc.rp.sent(n)
	}
}

// onPaceTimer runs the requester when its rate lets it send again.
func (q *qp) onPaceTimer() {
	defer q.dev.runHandlers()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed || q.cc == nil {
		return
	}
	q.cc.paceArmed = false
	if len(q.cc.respQ) > 0 && q.state != rdma.QPSErr && q.state != rdma.QPSReset {
		q.txMu.Lock()
		tx := q.dev.getTx()
		tx.forQP(q)
		q.drainResp(tx)
		tx.flush()
		q.txMu.Unlock()
		q.dev.putTx(tx)
	}
	q.kick()
}

// stopPaceTimer stops the pacing timer (q.mu held).
func (q *qp) stopPaceTimer() {
	if q.cc != nil {
		q.cc.paceTimer.Stop()
		q.cc.paceArmed = false
		q.dropPaced()
	}
}

// Responder pacing. A rate-limited QP's READ responses, ACKs and NAKs
// (its responder's output) do not leave with the receive batch that
// built them: commit diverts them, in order, to the QP's paced queue,
// which the pacing timer drains as the QP's rate allows, sharing the
// token bucket with the requester. Once the queue holds a packet, every
// later responder packet of the QP queues behind it, so that no ACK
// overtakes the READ responses it would cover. The requester's packets
// are paced where they are built (pace) and never queued: the two
// directions' PSN spaces are independent.

// respQueueMax bounds a QP's paced queue; a packet beyond it is dropped,
// as a full switch queue would (go-back-N recovers).
const respQueueMax = 1024

// respHoldRetry is how soon the pacing timer looks again at a queue held
// back by READ responses still in a receive batch.
const respHoldRetry = 20 * time.Microsecond

// respPaced reports whether the QP's responder packets go through its
// paced queue now.
func (c *qpCC) respPaced() bool { return c.rp.limited || len(c.respQ) > 0 }

// divert moves the responder packet p (just built in a batch, not
// committed) to the QP's paced queue (q.mu held). A READ response
// whose payload is still in place in its region is copied now, if the
// region has not changed since the response was built (txBatch.flush's
// fence check).
func (q *qp) divert(p *txPkt) {
	d := q.dev
	cc := q.cc
	if p.src != nil {
		if !p.src.enter(p.gen) {
			p.ext, p.src = nil, nil
			d.stats.fencedResponses.Add(1)
			return
		}
		p.materialize()
		p.src.leave()
		p.src = nil
	}
	p.materialize()
	if len(cc.respQ) >= respQueueMax {
		d.stats.pacedDrops.Add(1)
		return
	}
	c := d.pacedPool.Get().(*txPkt)
	c.n, c.dst, c.tos, c.from, c.qc = p.n, p.dst, p.tos, p.from, p.qc
	copy(c.buf[:p.n], p.buf[:p.n])
	cc.respQ = append(cc.respQ, c)
	if !cc.paceArmed {
		_, wait := cc.rp.mayStart(time.Now())
		cc.paceArmed = true
		cc.paceTimer.Reset(wait)
	}
}

// drainResp sends what the QP's rate allows of its paced queue (q.mu
// and q.txMu held, tx the QP's batch).
func (q *qp) drainResp(tx *txBatch) {
	cc := q.cc
	if q.resp.ackHold {
		// Responder packets built before the QP was limited wait in a
		// receive batch: the queue's must not overtake them.
		if !cc.paceArmed {
			cc.paceArmed = true
			cc.paceTimer.Reset(respHoldRetry)
		}
		return
	}
	var now time.Time
	k := 0
	for ; k < len(cc.respQ); k++ {
		if !q.pace(&now) {
			break
		}
		c := cc.respQ[k]
		p := tx.next()
		p.n, p.dst, p.tos, p.from, p.qc = c.n, c.dst, c.tos, c.from, c.qc
		copy(p.buf[:c.n], c.buf[:c.n])
		tx.n++ // committed as diverted: not again through commit
		cc.rp.sent(c.n)
		q.dev.pacedPool.Put(c)
		cc.respQ[k] = nil
	}
	n := copy(cc.respQ, cc.respQ[k:])
	clear(cc.respQ[n:])
	cc.respQ = cc.respQ[:n]
}

// dropPaced empties the QP's paced queue (QP reset, error, destroy).
func (q *qp) dropPaced() {
	if q.cc == nil {
		return
	}
	for i, c := range q.cc.respQ {
		q.dev.pacedPool.Put(c)
		q.cc.respQ[i] = nil
	}
	q.cc.respQ = q.cc.respQ[:0]
}
