package soft

import (
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// refRP is the DCQCN reaction point as the paper states it, driven by
// real timers (time.AfterFunc, in a synctest bubble): the model the
// lazily replayed dcqcn must agree with.
type refRP struct {
	mu                   sync.Mutex
	p                    *dcqcnParams
	limited              bool
	rc, rt, alpha        float64
	t, bc                int
	bytes                int64
	lastCut              time.Time
	alphaTimer, incTimer *time.Timer
}

func newRefRP(p *dcqcnParams) *refRP {
	r := &refRP{p: p, rc: p.lineRate, rt: p.lineRate, alpha: 1}
	r.alphaTimer = time.AfterFunc(time.Hour, r.onAlphaTimer)
	r.alphaTimer.Stop()
	r.incTimer = time.AfterFunc(time.Hour, r.onIncTimer)
	r.incTimer.Stop()
	return r
}

func (r *refRP) cnp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.limited = true
	if r.lastCut.IsZero() || now.Sub(r.lastCut) >= r.p.reducePeriod {
		r.rt = r.rc
		r.rc = math.Max(r.rc*(1-r.alpha/2), r.p.minRate)
		r.lastCut = now
	}
	r.alpha = (1-r.p.g)*r.alpha + r.p.g
	r.t, r.bc, r.bytes = 0, 0, 0
	r.alphaTimer.Reset(r.p.alphaPeriod)
	r.incTimer.Reset(r.p.increasePeriod)
}

// The alpha timer runs on while the QP is unlimited too.
func (r *refRP) onAlphaTimer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alpha *= 1 - r.p.g
	r.alphaTimer.Reset(r.p.alphaPeriod)
}

func (r *refRP) onIncTimer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.limited {
		return
	}
	r.t++
	r.increase()
	if r.limited {
		r.incTimer.Reset(r.p.increasePeriod)
	}
}

func (r *refRP) increase() {
	f := r.p.f
	switch {
	case r.t < f && r.bc < f: // fast recovery
	case r.t > f && r.bc > f: // hyper increase
		r.rt += r.p.hai
	default: // additive increase
		r.rt += r.p.ai
	}
	r.rt = math.Min(r.rt, r.p.lineRate)
	r.rc = (r.rt + r.rc) / 2
	if r.rt >= r.p.lineRate && r.p.lineRate-r.rc <= r.p.ai {
		r.limited, r.rc, r.rt, r.t, r.bc, r.bytes = false, r.p.lineRate, r.p.lineRate, 0, 0, 0
	}
}

func (r *refRP) sent(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.limited {
		return
	}
	r.bytes += int64(n)
	for r.bytes >= r.p.byteCounter && r.limited {
		r.bytes -= r.p.byteCounter
		r.bc++
		r.increase()
	}
}

func (r *refRP) stop() { r.alphaTimer.Stop(); r.incTimer.Stop() }

func defaultDCQCN(t *testing.T) *dcqcnParams {
	t.Helper()
	cc, err := newCCState(&CongestionConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return &cc.rp
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestDCQCNSteps checks the first steps against the published algorithm
// by hand: the first CNP halves the rate (α starts at 1), a second one
// within the rate reduce period does not cut, one after it cuts by α/2,
// and the rate increase timer then runs fast recovery.
func TestDCQCNSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := defaultDCQCN(t)
		line, g := p.lineRate, p.g
		s := newDCQCN(p)
		if ok, _ := s.mayStart(time.Now()); !ok || s.limited || s.rate() != line {
			t.Fatalf("fresh QP: limited %t rate %g", s.limited, s.rate())
		}
		type step struct {
			after         time.Duration
			cnp           bool
			rc, rt, alpha float64
		}
		a1 := 1.0 // (1-g)·1 + g
		a2 := (1-g)*a1*math.Pow(1-g, 0) + g
		steps := []step{
			{0, true, line / 2, line, a1},
			{2 * time.Microsecond, true, line / 2, line, a1}, // within the 4 µs rate reduce period
			{10 * time.Microsecond, true, line / 2 * (1 - a1/2), line / 2, a2},
			// 55 µs after the last CNP: the alpha timer decays α, the rate
			// increase timer's first event is fast recovery.
			{55 * time.Microsecond, false, (line/2 + line/4) / 2, line / 2, a2 * (1 - g)},
			{55 * time.Microsecond, false, (line/2 + (line/2+line/4)/2) / 2, line / 2, a2 * (1 - g) * (1 - g)},
		}
		for i, st := range steps {
			time.Sleep(st.after)
			now := time.Now()
			if st.cnp {
				s.onCNP(now)
			} else {
				s.advance(now)
			}
			if !near(s.rc, st.rc) || !near(s.rt, st.rt) || !near(s.alpha, st.alpha) || !s.limited {
				t.Fatalf("step %d: rc %g rt %g alpha %g limited %t, want rc %g rt %g alpha %g", i, s.rc, s.rt, s.alpha, s.limited, st.rc, st.rt, st.alpha)
			}
		}
	})
}

// TestDCQCNAgainstTimers runs the lazily replayed state machine beside
// the timer-driven model through CNP bursts, a paced sender and the
// recovery to line rate, comparing rates and α every step.
func TestDCQCNAgainstTimers(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(p *dcqcnParams)
	}{
		{"defaults", func(*dcqcnParams) {}},
		// A small byte counter brings in the byte stage and hyper increase.
		{"byte counter", func(p *dcqcnParams) { p.byteCounter = 64 << 10 }},
		{"alpha period 3x", func(p *dcqcnParams) { p.alphaPeriod = 165 * time.Microsecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := defaultDCQCN(t)
				tc.mod(p)
				s := newDCQCN(p)
				ref := newRefRP(p)
				defer ref.stop()
				start := time.Now()
				cnpAt := map[int]bool{} // steps that get a CNP
				for _, k := range []int{0, 1, 3, 40, 41, 300, 302, 303} {
					cnpAt[k] = true
				}
				// Steps of 13.1 µs from 333 ns past the first CNP never
				// fall on a timer expiry (multiples of 55 µs after a CNP).
				const step = 13100 * time.Nanosecond
				time.Sleep(333 * time.Nanosecond)
				sawHyper, recovered := false, false
				for k := range 4000 {
					now := time.Now()
					if cnpAt[k] {
						s.onCNP(now)
						ref.cnp()
					}
					if ok, _ := s.mayStart(now); ok && s.limited {
						n := int(s.rc * step.Seconds())
						s.sent(n)
						ref.sent(n)
					}
					s.advance(now)
					ref.mu.Lock()
					rc, rt, alpha, limited, tb := ref.rc, ref.rt, ref.alpha, ref.limited, min(ref.t, ref.bc)
					ref.mu.Unlock()
					if !near(s.rc, rc) || !near(s.rt, rt) || !near(s.alpha, alpha) || s.limited != limited {
						t.Fatalf("step %d (%v): rc %g/%g rt %g/%g alpha %g/%g limited %t/%t", k, now.Sub(start), s.rc, rc, s.rt, rt, s.alpha, alpha, s.limited, limited)
					}
					if tb > p.f {
						sawHyper = true
					}
					if k > 303 && !limited {
						recovered = true
					}
					time.Sleep(step)
					synctest.Wait()
				}
				if !recovered {
					t.Fatalf("not back to line rate after %v", time.Since(start))
				}
				if tc.name == "byte counter" && !sawHyper {
					t.Fatal("no hyper increase")
				}
			})
		})
	}
}

// TestDCQCNPacer checks the pacer holds a QP to its rate within its
// burst (a limited QP to its cut rate, any other to the line rate, as a
// NIC's link would), and tells how long to wait.
func TestDCQCNPacer(t *testing.T) {
	for _, tc := range []struct {
		name string
		cnp  bool // a CNP first: paced at the cut rate; else held to line rate
		line float64
	}{{"limited", true, 0}, {"line rate", false, 0}, {"slow line rate", false, 40e6 / 8}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := defaultDCQCN(t)
				p.increasePeriod = time.Hour // hold the rate still
				p.byteCounter = 1 << 62
				if tc.line > 0 {
					p.lineRate = tc.line
				}
				s := newDCQCN(p)
				if tc.cnp {
					s.onCNP(time.Now())
				}
				rate := s.rc
				start := time.Now()
				sent := 0
				for range 1000000 {
					now := time.Now()
					ok, wait := s.mayStart(now)
					if !ok {
						if wait <= 0 {
							t.Fatalf("told to wait %v", wait)
						}
						time.Sleep(wait)
						continue
					}
					s.sent(4096)
					sent += 4096
					if now.Sub(start) >= 100*time.Millisecond {
						break
					}
				}
				el := time.Since(start).Seconds()
				got := float64(sent) / el
				if want := rate; got > want*1.01+(s.burst()+4096)/el || got < want*0.99 {
					t.Fatalf("paced at %.3g B/s, rate %.3g B/s", got, want)
				}
			})
		})
	}
}

// TestPacerBurst: the bucket holds ccBurstTime of the rate, within
// ccMinBurst..ccBurst.
func TestPacerBurst(t *testing.T) {
	for _, tc := range []struct {
		bps  float64
		want float64
	}{
		{10e9, ccBurst},                  // 2.5 MB in 2 ms: capped
		{100e6, 100e6 / 8 * 0.002},       // 25 KB
		{40e6, ccMinBurst},               // 10 KB: the floor
		{1e6, ccMinBurst},                // the floor
		{1e9, min(1e9/8*0.002, ccBurst)}, // 250 KB
	} {
		p := &dcqcnParams{lineRate: tc.bps / 8, burst: ccBurst}
		s := newDCQCN(p)
		if got := s.burst(); !near(got, tc.want) {
			t.Errorf("%g b/s: burst %g, want %g", tc.bps, got, tc.want)
		}
	}
}
