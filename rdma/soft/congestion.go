package soft

import (
	"fmt"
	"time"

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
// requester. With congestion control off nothing of this runs: no
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
	// ccBurst is the bytes a paced QP may send back to back: a GSO run
	// of full packets.
	ccBurst = 64 << 10
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

// packetTOS returns the IP TOS / traffic class a packet of opcode op
// leaves with when the QP's class is tos: ECN-capable but for
// acknowledgements and CNPs, which are Not-ECT (RoCEv2 annex A17.9).
func (c *ccState) packetTOS(tos uint8, op wire.Opcode) uint8 {
	if op.IsAck() || op.IsCNP() {
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
}

// newQPCC makes q's congestion control state if the device has it on.
func (q *qp) initCC() {
	cc := q.dev.cc
	if cc == nil || q.typ != rdma.QPTypeRC {
		return
	}
	q.cc = &qpCC{rp: newDCQCN(&cc.rp)}
	q.cc.paceTimer = time.AfterFunc(time.Hour, q.onPaceTimer)
	q.cc.paceTimer.Stop()
}

// onCE handles a CE-marked packet received on RC QP q (q.mu held): it
// is counted, and answered with a CNP to the peer QP unless the QP sent
// one less than MinCNPInterval ago.
func (q *qp) onCE(rx *rxState) {
	d := q.dev
	d.stats.npECNMarked.Add(1)
	q.stats.npECNMarked.Add(1)
	cc := q.cc
	if cc == nil || q.state != rdma.QPSRTR && q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		return
	}
	now := time.Now()
	if !cc.lastCNP.IsZero() && now.Sub(cc.lastCNP) < d.cc.minCNP {
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
	if d.cc.cnpDSCP >= 0 {
		rx.tx.last().tos = uint8(d.cc.cnpDSCP) << 2
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
// again when the QP's rate allows. now is read once per requester run
// (zero: not yet).
func (q *qp) pace(now *time.Time) bool {
	cc := q.cc
	if !cc.rp.limited {
		return true
	}
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
	q.kick()
}

// stopPaceTimer stops the pacing timer (q.mu held).
func (q *qp) stopPaceTimer() {
	if q.cc != nil {
		q.cc.paceTimer.Stop()
		q.cc.paceArmed = false
	}
}
