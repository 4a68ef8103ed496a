package target

import (
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// DefaultHealthPollInterval is how often the health of backends with
// health data (bdev.HealthReporter: block devices) is read for SMART /
// Health critical-warning events, while some controller has them enabled.
const DefaultHealthPollInterval = time.Minute

// aenMaskSMART marks, in controller.aenMask, a SMART / Health event sent
// and not yet cleared by a read of the SMART / Health log without RAE
// (one mask for the type: the host reads one page whatever the warning).
// Bit 0 is free in the mask: the other kinds use their AEC bit numbers
// from 8 up.
const aenMaskSMART = 1 << 0

// healthPoller is the target's one health-polling goroutine: it runs
// while a controller has SMART / Health events enabled and reads each
// namespace's health (Block.Health, itself cached) once per interval;
// a critical-warning bit that appears raises an event on the
// controllers of the namespace's subsystem that enabled it.
type healthPoller struct {
	mu      sync.Mutex
	running bool
	closed  bool
	stop    chan struct{} // closed by Close; made with the first run
	// last is the critical warning each namespace had at the previous
	// poll (only the poller's goroutine uses it, one at a time).
	last map[*namespace]uint8
}

// healthInterval returns the poll interval (0: never poll).
func (t *Target) healthInterval() time.Duration {
	switch iv := t.opts.HealthPollInterval; {
	case iv < 0:
		return 0
	case iv == 0:
		return DefaultHealthPollInterval
	default:
		return iv
	}
}

// wakeHealthPoller starts the poller unless it runs: a controller just
// enabled SMART / Health events (called without locks held).
func (t *Target) wakeHealthPoller() {
	iv := t.healthInterval()
	if iv == 0 {
		return
	}
	p := &t.health
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || p.closed {
		return
	}
	if p.stop == nil {
		p.stop = make(chan struct{})
		p.last = map[*namespace]uint8{}
	}
	p.running = true
	go t.pollHealth(iv, p.stop)
}

// closeHealthPoller stops the poller for good (Target.Close).
func (t *Target) closeHealthPoller() {
	p := &t.health
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		if p.stop != nil {
			close(p.stop)
		}
	}
}

// smartWatch is a subsystem whose controllers (some) want SMART / Health
// events, with its namespaces that report health.
type smartWatch struct {
	ctrls []*controller
	nss   []*namespace
}

// pollHealth is the poller's goroutine. It ends when no controller has
// SMART / Health events enabled any more (decided under p.mu, so that a
// controller enabling them meanwhile starts a new one) or at Close.
func (t *Target) pollHealth(iv time.Duration, stop <-chan struct{}) {
	p := &t.health
	tk := time.NewTicker(iv)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return
		case <-tk.C:
		}
		p.mu.Lock()
		watch, present := t.smartWatches()
		if len(watch) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for ns := range p.last {
			if !present[ns] {
				delete(p.last, ns) // removed: a new one under its NSID starts afresh
			}
		}
		for _, w := range watch {
			for _, ns := range w.nss {
				h, err := ns.health.Health() // may read the disk: no lock held
				if err != nil {
					continue // unknown now: the last known state stays
				}
				cw := h.CriticalWarning
				appeared := cw &^ p.last[ns]
				p.last[ns] = cw
				if appeared == 0 {
					continue
				}
				t.log.Warn("SMART / Health critical warning", "subnqn", ns.subsys, "nsid", ns.nsid, "critical_warning", cw)
				for _, c := range w.ctrls {
					c.smartWarning(appeared)
				}
			}
		}
	}
}

// smartWatches returns the subsystems some live controller of which has
// SMART / Health events enabled, and every namespace with health data
// present now.
func (t *Target) smartWatches() ([]smartWatch, map[*namespace]bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []smartWatch
	present := map[*namespace]bool{}
	for _, s := range t.subsys {
		var w smartWatch
		for _, c := range s.ctrls {
			c.mu.Lock()
			on := !c.dead && c.aen&nvme.AECSMARTMask != 0
			c.mu.Unlock()
			if on {
				w.ctrls = append(w.ctrls, c)
			}
		}
		for _, ns := range s.table().active {
			if ns.health != nil {
				present[ns] = true
				w.nss = append(w.nss, ns)
			}
		}
		if len(w.ctrls) > 0 {
			out = append(out, w)
		}
	}
	return out, present
}

// smartWarning raises a SMART / Health event for the critical-warning
// bits cw that just appeared, if the host enabled one of them (AEC bits
// 7:0) and no SMART / Health event waits for the host to read the log.
func (c *controller) smartWarning(cw uint8) {
	c.mu.Lock()
	bits := cw & uint8(c.aen&nvme.AECSMARTMask)
	if c.dead || bits == 0 || c.aenMask&aenMaskSMART != 0 {
		c.mu.Unlock()
		return
	}
	c.aenMask |= aenMaskSMART
	c.events = append(c.events, uint32(nvme.MakeAsyncEvent(nvme.AsyncEventSMART, smartEventInfo(bits), nvme.LIDSMART)))
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}

// smartEventInfo returns the Asynchronous Event Information of critical
// warning bits: reliability for any bit but spare and temperature (read
// only, volatile backup and PMR included), else temperature, else spare.
func smartEventInfo(bits uint8) uint8 {
	switch {
	case bits&^(nvme.SMARTWarningSpare|nvme.SMARTWarningTemperature) != 0:
		return nvme.AsyncSMARTReliability
	case bits&nvme.SMARTWarningTemperature != 0:
		return nvme.AsyncSMARTTemperatureThreshold
	}
	return nvme.AsyncSMARTSpareBelowThreshold
}
