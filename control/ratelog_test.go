package control

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRateLog: burst lines per interval are logged, the rest counted and
// summarized once the interval ends (by its timer: no further line is
// needed), and a new interval logs again.
func TestRateLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines := &lockedBuffer{ch: make(chan string, 100)}
		r := newRateLog(hclog.New(&hclog.LoggerOptions{Output: lines}), 3, 10*time.Second, "left out")
		for range 50 {
			r.Warn("refused")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		r.Warn("refused")
		r.Flush() // nothing left out: no summary
		close(lines.ch)
		var got []string
		for l := range lines.ch {
			_, msg, _ := strings.Cut(l, "]  ")
			got = append(got, strings.TrimSpace(msg))
		}
		want := []string{"refused", "refused", "refused", "left out: count=47 interval=10s", "refused"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("logged %q, want %q", got, want)
		}
	})
}
