package bdev

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/ratelimit"
)

// LinkChecker is implemented by backends whose medium can lose its name
// while open: a file deleted or replaced under the backend. I/O then goes
// on to the orphaned inode without an error, and everything written is
// lost when the backend closes it, so the target must say so.
type LinkChecker interface {
	// Unlinked reports whether the medium has no name left.
	Unlinked() (bool, error)
}

// Unlinked implements LinkChecker: fstat's st_nlink is 0 once the file's
// last name is removed (or renamed over).
func (d *File) Unlinked() (bool, error) {
	if d.closed.Load() {
		return false, ErrClosed
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return false, &ioError{op: "fstat", path: d.path, err: err}
	}
	return st.Nlink == 0, nil
}

// ioError names the file of a failed system call.
type ioError struct {
	op, path string
	err      error
}

func (e *ioError) Error() string { return "bdev: file " + e.path + ": " + e.op + ": " + e.err.Error() }
func (e *ioError) Unwrap() error { return e.err }

// MonitorOptions tune a Monitor; zero values take the defaults.
type MonitorOptions struct {
	// Burst is how many errors are logged in each Interval before the
	// rest are only counted (DefaultErrorBurst).
	Burst int
	// Interval is the rate limit's period (DefaultErrorInterval). The
	// count of the lines suppressed in one is logged when it ends.
	Interval time.Duration
	// CheckInterval is the period of the background check: the
	// backend's link (LinkChecker) and Check (DefaultCheckInterval).
	CheckInterval time.Duration
	// Check, when set, runs on every background check too (the target
	// checks a namespace's reservation file with it).
	Check func()
}

// Defaults of MonitorOptions.
const (
	DefaultErrorBurst    = 5
	DefaultErrorInterval = time.Minute
	DefaultCheckInterval = 30 * time.Second
)

// Monitor watches a namespace's backend for failures the hosts see only as
// a status code, or not at all: it logs the backend's I/O errors (rate
// limited: the first Burst of each Interval, then one line with the count
// of those suppressed), and warns once when the backing file is unlinked,
// checked periodically and on every error. Its methods are safe for
// concurrent use; Error does not block on the log beyond the logger's own
// write.
type Monitor struct {
	log  hclog.Logger
	link LinkChecker // nil when the backend has no name to lose
	opts MonitorOptions

	errors   atomic.Uint64
	unlinked atomic.Bool

	lim       *ratelimit.Limiter // of the Error lines
	closeOnce sync.Once

	stop chan struct{}
	done chan struct{}
}

// NewMonitor starts monitoring dev, logging to log (which should name the
// namespace). Close stops it; it does not close dev.
func NewMonitor(dev Device, log hclog.Logger, o MonitorOptions) *Monitor {
	if o.Burst <= 0 {
		o.Burst = DefaultErrorBurst
	}
	if o.Interval <= 0 {
		o.Interval = DefaultErrorInterval
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	m := &Monitor{log: log, opts: o, done: make(chan struct{})}
	m.lim = ratelimit.New(o.Burst, o.Interval, func(n int, iv time.Duration) {
		log.Error("backend I/O errors suppressed", "count", n, "interval", iv)
	})
	m.link, _ = dev.(LinkChecker)
	if m.link == nil && o.Check == nil {
		close(m.done) // nothing to check in the background
		return m
	}
	m.stop = make(chan struct{})
	go m.run()
	return m
}

// run is the background check.
func (m *Monitor) run() {
	defer close(m.done)
	t := time.NewTicker(m.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.checkLink()
			if m.opts.Check != nil {
				m.opts.Check()
			}
		}
	}
}

// checkLink warns, once, when the backing file has lost its last name.
func (m *Monitor) checkLink() {
	if m.link == nil || m.unlinked.Load() {
		return
	}
	gone, err := m.link.Unlinked()
	if err != nil || !gone || m.unlinked.Swap(true) {
		return
	}
	args := []any{}
	if f, ok := m.link.(*File); ok {
		args = append(args, "path", f.path)
	}
	m.log.Warn("backing file unlinked: I/O goes on to a file without a name, which is lost when the namespace closes it; restore it (e.g. ln /proc/$(pidof nvmetd)/fd/N PATH) or replace the namespace", args...)
}

// Unlinked reports whether the backing file was seen unlinked.
func (m *Monitor) Unlinked() bool { return m.unlinked.Load() }

// Errors is the number of backend errors reported to Error and logged or
// suppressed (not those Error leaves at Debug).
func (m *Monitor) Errors() uint64 { return m.errors.Load() }

// Error reports a failed backend operation op ("Read", "Write", ...) on n
// bytes at byte offset off. Errors that are the host's doing (an
// operation the backend does not support) or a namespace going away
// (ErrClosed) are logged at Debug only; the rest at Error, rate limited.
func (m *Monitor) Error(op string, off, n int64, err error) {
	if errors.Is(err, ErrNotSupported) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, ErrClosed) {
		m.log.Debug("backend error", "op", op, "offset", off, "length", n, "err", err)
		return
	}
	m.errors.Add(1)
	m.checkLink()
	if !m.lim.Allow() {
		return
	}
	args := []any{"op", op, "offset", off, "length", n}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		args = append(args, "errno", unix.ErrnoName(errno))
	}
	m.log.Error("backend I/O error", append(args, "err", err)...)
}

// Close stops the background check and reports the errors still
// suppressed.
func (m *Monitor) Close() {
	m.closeOnce.Do(func() {
		m.lim.Close()
		if m.stop != nil {
			close(m.stop)
		}
		<-m.done
	})
}
