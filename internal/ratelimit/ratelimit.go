// Package ratelimit bounds how often something is logged: at most Burst
// events an Interval pass, the rest are counted, and the count is
// reported once, when the interval ends (or at Flush or Close). The
// control socket's refusals and a namespace's backend errors use it.
package ratelimit

import (
	"sync"
	"time"
)

// Limiter lets Burst events an Interval through. Its methods are safe for
// concurrent use; the report function runs with the limiter's lock held,
// so it must not call the limiter.
type Limiter struct {
	burst    int
	interval time.Duration
	report   func(suppressed int, interval time.Duration)

	mu         sync.Mutex
	start      time.Time // of the current interval
	passed     int       // events let through in it
	suppressed int       // events held back and not yet reported
	timer      *time.Timer
	closed     bool
}

// New returns a limiter of burst events per interval that calls report
// with the number of events it held back in an interval when it ends.
func New(burst int, interval time.Duration, report func(suppressed int, interval time.Duration)) *Limiter {
	return &Limiter{burst: burst, interval: interval, report: report}
}

// Allow reports whether an event may be logged now; when not, it is
// counted for the interval's report.
func (l *Limiter) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.interval {
		l.flushLocked()
		l.start, l.passed = now, 0
	}
	if l.passed < l.burst {
		l.passed++
		return true
	}
	l.suppressed++
	if l.timer == nil && !l.closed {
		start := l.start
		l.timer = time.AfterFunc(start.Add(l.interval).Sub(now), func() { l.endInterval(start) })
	}
	return false
}

// endInterval reports the events held back in the interval that began at
// start, unless Allow, Flush or Close did already.
func (l *Limiter) endInterval(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.start.Equal(start) {
		return
	}
	l.timer = nil
	l.reportLocked()
}

// Flush reports the events held back so far, if any.
func (l *Limiter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

// Close reports what is held back and stops the interval timer; later
// events are still counted but reported only by Flush.
func (l *Limiter) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.flushLocked()
}

func (l *Limiter) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.reportLocked()
}

func (l *Limiter) reportLocked() {
	if l.suppressed > 0 {
		l.report(l.suppressed, l.interval)
		l.suppressed = 0
	}
}
