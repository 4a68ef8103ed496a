package control

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Refused connections are logged at most refusalLogBurst times per
// refusalLogInterval; the rest are counted and summarized in one line at
// the interval's end. A client refused in a loop (a socket whose mode an
// admin loosened, a script that retries at once) must not flood the log.
const (
	refusalLogBurst    = 5
	refusalLogInterval = 10 * time.Second
)

// rateLog logs warnings a few per interval and one summary line for those
// it left out.
type rateLog struct {
	log      hclog.Logger
	burst    int
	interval time.Duration
	summary  string // the summary's message; its count is "count"

	mu         sync.Mutex
	start      time.Time // of the current interval
	logged     int       // lines logged in it
	suppressed int       // lines not logged since the last summary
	timer      *time.Timer
}

func newRateLog(log hclog.Logger, burst int, interval time.Duration, summary string) *rateLog {
	return &rateLog{log: log, burst: burst, interval: interval, summary: summary}
}

// Warn logs msg unless burst lines were logged in this interval already;
// then it counts it for the summary.
func (r *rateLog) Warn(msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.start) >= r.interval {
		r.start, r.logged = now, 0
	}
	if r.logged < r.burst {
		r.logged++
		r.log.Warn(msg, args...)
		return
	}
	r.suppressed++
	if r.timer == nil {
		r.timer = time.AfterFunc(r.start.Add(r.interval).Sub(now), r.Flush)
	}
}

// Flush logs the summary of the lines left out, if any (the timer's
// function; Close calls it so that none is lost).
func (r *rateLog) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if r.suppressed > 0 {
		r.log.Warn(r.summary, "count", r.suppressed, "interval", r.interval)
		r.suppressed = 0
	}
}
