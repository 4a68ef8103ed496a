package control

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/internal/ratelimit"
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
	log hclog.Logger
	lim *ratelimit.Limiter
}

func newRateLog(log hclog.Logger, burst int, interval time.Duration, summary string) *rateLog {
	return &rateLog{log: log, lim: ratelimit.New(burst, interval, func(n int, iv time.Duration) {
		log.Warn(summary, "count", n, "interval", iv)
	})}
}

// Warn logs msg unless burst lines were logged in this interval already;
// then it counts it for the summary.
func (r *rateLog) Warn(msg string, args ...any) {
	if r.lim.Allow() {
		r.log.Warn(msg, args...)
	}
}

// Flush logs the summary of the lines left out, if any (Close calls it so
// that none is lost).
func (r *rateLog) Flush() { r.lim.Flush() }
