package soft

import (
	"math"
	"time"
)

// DCQCN's reaction point (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015, the RP algorithm of §3.1),
// per RC QP, and the pacer that holds the requester to its rate.
//
// A QP starts unlimited (line rate, no pacing). A CNP cuts the current
// rate Rc: the target rate Rt takes Rc, Rc becomes Rc·(1−α/2) (at most
// once per RateReducePeriod, as mlx5's rate_reduce_monitor_period) and
// α becomes (1−g)·α + g; the rate increase timer, the byte counter and
// their stage counts restart. Every AlphaPeriod without a CNP α decays
// to (1−g)·α. Each expiry of the rate increase timer (IncreasePeriod)
// and each ByteCounter bytes sent is a rate increase event, counted in
// its stage; an event is fast recovery while both stages are below F
// (Rc ← (Rt+Rc)/2), additive increase once one reaches F (Rt += R_AI
// first), hyper increase once both exceed F (Rt += R_HAI first). Rt is
// capped at the line rate; when Rc is within R_AI of it the QP is
// unlimited again. Rc never falls below MinRate.
//
// Timers are not goroutines: advance replays every expiry up to now, in
// time order, whenever the QP sends or gets a CNP, which gives the same
// rates as timers firing on time and costs nothing while the QP is idle
// or unlimited.

// dcqcnParams are the reaction point's parameters in the state machine's
// units (rates in bytes per second).
type dcqcnParams struct {
	lineRate, minRate float64
	ai, hai           float64
	g                 float64
	alphaPeriod       time.Duration
	increasePeriod    time.Duration
	reducePeriod      time.Duration
	byteCounter       int64
	f                 int
	burst             float64 // bytes the pacer lets leave back to back
}

// dcqcnMaxSteps bounds the timer expiries one advance replays; a QP idle
// for longer has recovered to line rate (see advance).
const dcqcnMaxSteps = 1 << 16

// dcqcn is one QP's reaction point state and pacer. It is used under
// the QP's lock.
type dcqcn struct {
	p       *dcqcnParams
	limited bool    // rate limited since a CNP, not yet back to line rate
	rc, rt  float64 // current and target rate, bytes per second
	alpha   float64
	// alphaAt is the next alpha timer expiry; incAt the next rate
	// increase timer expiry (limited only).
	alphaAt, incAt time.Time
	lastCut        time.Time
	timerStage     int
	byteStage      int
	bytes          int64 // sent since the last byte counter event
	// Pacer: tokens are the bytes that may leave now (negative: owed),
	// as of last.
	tokens float64
	last   time.Time
}

func newDCQCN(p *dcqcnParams) dcqcn {
	return dcqcn{p: p, rc: p.lineRate, rt: p.lineRate, alpha: 1}
}

// setParams switches to parameters p (SetCongestion): the state carries
// on, its rates capped at p's line rate and its burst at p's.
func (s *dcqcn) setParams(p *dcqcnParams) {
	s.p = p
	s.tokens = min(s.tokens, p.burst)
	if !s.limited {
		s.rc, s.rt = p.lineRate, p.lineRate
		return
	}
	s.rt = min(s.rt, p.lineRate)
	s.rc = max(min(s.rc, p.lineRate), p.minRate)
	if p.lineRate-s.rc <= p.ai && s.rt >= p.lineRate {
		s.unlimit()
	}
}

// rate returns the current rate in bytes per second (the line rate when
// unlimited).
func (s *dcqcn) rate() float64 { return s.rc }

// onCNP handles a CNP received at now.
func (s *dcqcn) onCNP(now time.Time) {
	s.advance(now)
	s.refill(now) // the tokens earned at the rate before the cut
	p := s.p
	if !s.limited {
		s.limited = true
		s.rc, s.rt = p.lineRate, p.lineRate
	}
	if s.lastCut.IsZero() || now.Sub(s.lastCut) >= p.reducePeriod {
		s.rt = s.rc
		s.rc = max(s.rc*(1-s.alpha/2), p.minRate)
		s.lastCut = now
	}
	s.alpha = (1-p.g)*s.alpha + p.g
	s.alphaAt = now.Add(p.alphaPeriod)
	s.incAt = now.Add(p.increasePeriod)
	s.timerStage, s.byteStage, s.bytes = 0, 0, 0
}

// advance replays the alpha and rate increase timer expiries up to now.
func (s *dcqcn) advance(now time.Time) {
	p := s.p
	if s.alphaAt.IsZero() {
		return // no CNP yet: alpha is still its initial value
	}
	if !s.limited {
		if !now.Before(s.alphaAt) {
			n := now.Sub(s.alphaAt)/p.alphaPeriod + 1
			s.alpha *= math.Pow(1-p.g, float64(n))
			s.alphaAt = s.alphaAt.Add(n * p.alphaPeriod)
		}
		return
	}
	for range dcqcnMaxSteps {
		if s.alphaAt.After(now) && s.incAt.After(now) {
			return
		}
		if !s.alphaAt.After(s.incAt) {
			s.alpha *= 1 - p.g
			s.alphaAt = s.alphaAt.Add(p.alphaPeriod)
			continue
		}
		s.timerStage++
		s.incAt = s.incAt.Add(p.increasePeriod)
		s.increase()
		if !s.limited {
			s.advance(now) // alpha's remaining expiries
			return
		}
	}
	// Idle for longer than the steps replayed: recovered.
	s.unlimit()
	s.advance(now)
}

// increase applies one rate increase event.
func (s *dcqcn) increase() {
	p := s.p
	t, b := s.timerStage, s.byteStage
	switch {
	case max(t, b) < p.f: // fast recovery
	case min(t, b) > p.f:
		s.rt += p.hai
	default:
		s.rt += p.ai
	}
	s.rt = min(s.rt, p.lineRate)
	s.rc = (s.rt + s.rc) / 2
	if p.lineRate-s.rc <= p.ai && s.rt >= p.lineRate {
		s.unlimit()
	}
}

// unlimit returns to line rate without pacing.
func (s *dcqcn) unlimit() {
	s.limited = false
	s.rc, s.rt = s.p.lineRate, s.p.lineRate
	s.timerStage, s.byteStage, s.bytes = 0, 0, 0
}

// mayStart reports whether a packet may leave at now; if not, wait is
// how long until it may.
func (s *dcqcn) mayStart(now time.Time) (ok bool, wait time.Duration) {
	if s.limited {
		s.advance(now)
	}
	return s.refill(now)
}

// refill adds the tokens the rate earned since the last refill and
// reports whether a packet may leave now; if not, wait is how long until
// it may.
func (s *dcqcn) refill(now time.Time) (ok bool, wait time.Duration) {
	if dt := now.Sub(s.last); dt > 0 {
		s.tokens = min(s.tokens+dt.Seconds()*s.rc, s.burst())
		s.last = now
	}
	if s.tokens > 0 {
		return true, 0
	}
	return false, time.Duration(math.Ceil(-s.tokens/s.rc*1e9)) + 1
}

// burst returns the bytes the pacer lets leave back to back at the
// current rate (ccBurstTime's worth, within ccMinBurst..p.burst).
func (s *dcqcn) burst() float64 {
	return max(min(s.rc*ccBurstTime.Seconds(), s.p.burst), min(ccMinBurst, s.p.burst))
}

// sent accounts n bytes sent: the pacer's tokens and, while limited, the
// byte counter.
func (s *dcqcn) sent(n int) {
	s.tokens -= float64(n)
	if !s.limited {
		return
	}
	s.bytes += int64(n)
	for s.bytes >= s.p.byteCounter && s.limited {
		s.bytes -= s.p.byteCounter
		s.byteStage++
		s.increase()
	}
}
