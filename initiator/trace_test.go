package initiator

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTraceLogsAdminCommands checks that trace logs more than debug: every
// admin command of the connect, with its completion.
func TestTraceLogsAdminCommands(t *testing.T) {
	for _, tc := range []struct {
		level hclog.Level
		want  bool
	}{{hclog.Debug, false}, {hclog.Trace, true}} {
		var out syncBuffer
		f := newTgtFixture(t, 1<<20)
		c := f.connect(t, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: tc.level, Output: &out})})
		_ = c.Close()
		log := out.String()
		got := strings.Contains(log, `admin command: `) && strings.Contains(log, `op="Identify (CNS 0x01)"`) &&
			strings.Contains(log, `op="Property Set CC"`)
		if got != tc.want {
			t.Errorf("level %v: admin commands logged %v, want %v:\n%s", tc.level, got, tc.want, log)
		}
	}
}
