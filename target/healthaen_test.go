package target

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// sickDevice is a memory backend whose health a test sets: the fake
// health source of the SMART / Health event tests.
type sickDevice struct {
	bdev.Device
	cw    atomic.Uint32 // Critical Warning bits
	fail  atomic.Bool   // Health returns an error
	reads atomic.Int64
}

func (d *sickDevice) Health() (bdev.Health, error) {
	d.reads.Add(1)
	if d.fail.Load() {
		return bdev.Health{}, bdev.ErrNotSupported
	}
	return bdev.Health{CriticalWarning: uint8(d.cw.Load()), AvailableSpare: 100, AvailableSpareThreshold: 10}, nil
}

const healthIv = time.Minute

// smartFixture is a target polling health every healthIv, with a sick
// namespace 2 and a connected, enabled admin queue whose AEC is aec.
func smartFixture(t *testing.T, aec uint32) (*fixture, *hq, *sickDevice) {
	f := newFixtureWith(t, Options{Logger: testLogger(t), HealthPollInterval: healthIv})
	mem, err := bdev.NewMemory(1<<20, 512)
	must(t, err)
	dev := &sickDevice{Device: mem}
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	expect(t, a.setFeature(nvme.FeatAsyncEventConfig, aec), 0, "Set Features AEC")
	return f, a, dev
}

// tick lets the poller run once more and everything settle.
func tick() {
	time.Sleep(healthIv)
	synctest.Wait()
}

// aerEvent returns the event of AER ch if it completed (successfully,
// else the test fails).
func aerEvent(t *testing.T, ch <-chan result) (nvme.AsyncEvent, bool) {
	t.Helper()
	select {
	case r := <-ch:
		expect(t, r, 0, "AER")
		return nvme.AsyncEvent(r.cqe.DW0()), true
	default:
		return 0, false
	}
}

func aerSQE() [64]byte { return newSQE(uint8(nvme.AdminAsyncEventRequest), 0) }

// TestSMARTHealthAEN: a critical-warning bit that appears on a backend
// completes an outstanding AER with a SMART / Health event (type 1, the
// information of the warning, log page 02h), when the host enabled that
// warning in AEC.
func TestSMARTHealthAEN(t *testing.T) {
	for _, tc := range []struct {
		name string
		cw   uint32
		info uint8
	}{
		{"spare", nvme.SMARTWarningSpare, nvme.AsyncSMARTSpareBelowThreshold},
		{"temperature", nvme.SMARTWarningTemperature, nvme.AsyncSMARTTemperatureThreshold},
		{"reliability", nvme.SMARTWarningReliability, nvme.AsyncSMARTReliability},
		{"read-only", nvme.SMARTWarningReadOnly, nvme.AsyncSMARTReliability},
		{"temperature and spare", nvme.SMARTWarningTemperature | nvme.SMARTWarningSpare, nvme.AsyncSMARTTemperatureThreshold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, a, dev := smartFixture(t, nvme.AECSMARTMask|nvme.AECNamespaceAttribute)
				aer := a.submit(aerSQE(), nil, fabrics.DirNone)
				tick()
				if ev, ok := aerEvent(t, aer); ok {
					t.Fatalf("AER completed with a healthy disk: %v", ev)
				}
				if dev.reads.Load() == 0 {
					t.Fatal("the poller did not read the backend's health")
				}
				dev.cw.Store(tc.cw)
				tick()
				ev, ok := aerEvent(t, aer)
				if want := nvme.MakeAsyncEvent(nvme.AsyncEventSMART, tc.info, nvme.LIDSMART); !ok || ev != want {
					t.Fatalf("AER: %v (completed %v), want %v", ev, ok, want)
				}
				if ev.Type() != nvme.AsyncEventSMART || ev.LID() != nvme.LIDSMART || ev.Info() != tc.info {
					t.Fatalf("DW0 %#x", uint32(ev))
				}
				// The log page shows the warning.
				r := a.getLog(nvme.LIDSMART, nvme.NSIDAll, nvme.SMARTLogSize, 0, false)
				expect(t, r, 0, "SMART log")
				if got := nvme.SMARTLog(r.data).CriticalWarning(); uint32(got) != tc.cw {
					t.Errorf("SMART log critical warning %#x, want %#x", got, tc.cw)
				}
			})
		})
	}
}

// TestSMARTHealthAENMasked: after a SMART / Health event no other is sent
// until the host reads the SMART / Health log without RAE; a warning that
// stays set raises nothing more, one that clears and comes back does.
func TestSMARTHealthAENMasked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, dev := smartFixture(t, nvme.AECSMARTMask)
		aer := a.submit(aerSQE(), nil, fabrics.DirNone)
		dev.cw.Store(nvme.SMARTWarningSpare)
		tick()
		if _, ok := aerEvent(t, aer); !ok {
			t.Fatal("no event for the spare warning")
		}
		aer = a.submit(aerSQE(), nil, fabrics.DirNone)
		dev.cw.Store(nvme.SMARTWarningSpare | nvme.SMARTWarningTemperature)
		tick()
		if ev, ok := aerEvent(t, aer); ok {
			t.Fatalf("event %v while the first is unread", ev)
		}
		// RAE keeps the mask.
		expect(t, a.getLog(nvme.LIDSMART, nvme.NSIDAll, nvme.SMARTLogSize, 0, true), 0, "SMART log, RAE")
		dev.cw.Store(nvme.SMARTWarningSpare | nvme.SMARTWarningTemperature | nvme.SMARTWarningReliability)
		tick()
		if ev, ok := aerEvent(t, aer); ok {
			t.Fatalf("event %v after a read with RAE", ev)
		}
		// Read without RAE: unmasked, but the warnings already seen are
		// not new.
		expect(t, a.getLog(nvme.LIDSMART, nvme.NSIDAll, nvme.SMARTLogSize, 0, false), 0, "SMART log")
		tick()
		if ev, ok := aerEvent(t, aer); ok {
			t.Fatalf("event %v for warnings already seen", ev)
		}
		// An unreadable disk changes nothing; a warning that clears and
		// comes back is new.
		dev.fail.Store(true)
		tick()
		dev.fail.Store(false)
		dev.cw.Store(nvme.SMARTWarningSpare | nvme.SMARTWarningReliability)
		tick()
		if ev, ok := aerEvent(t, aer); ok {
			t.Fatalf("event %v for a warning that cleared", ev)
		}
		dev.cw.Store(nvme.SMARTWarningSpare | nvme.SMARTWarningReliability | nvme.SMARTWarningTemperature)
		tick()
		ev, ok := aerEvent(t, aer)
		if want := nvme.MakeAsyncEvent(nvme.AsyncEventSMART, nvme.AsyncSMARTTemperatureThreshold, nvme.LIDSMART); !ok || ev != want {
			t.Fatalf("AER: %v (completed %v), want %v", ev, ok, want)
		}
	})
}

// TestSMARTHealthAENDisabled: without the warning's AEC bit no event is
// sent (and without any SMART bit the backend is not even read); turning
// the bits off stops the poller.
func TestSMARTHealthAENDisabled(t *testing.T) {
	t.Run("no SMART bit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, a, dev := smartFixture(t, nvme.AECNamespaceAttribute)
			aer := a.submit(aerSQE(), nil, fabrics.DirNone)
			dev.cw.Store(nvme.SMARTWarningReliability)
			tick()
			tick()
			if ev, ok := aerEvent(t, aer); ok {
				t.Fatalf("event %v with SMART events disabled", ev)
			}
			if n := dev.reads.Load(); n != 0 {
				t.Errorf("health read %d times with no controller asking", n)
			}
			f.tgt.health.mu.Lock()
			running := f.tgt.health.running
			f.tgt.health.mu.Unlock()
			if running {
				t.Error("poller running")
			}
		})
	})
	t.Run("other bit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, a, dev := smartFixture(t, nvme.SMARTWarningTemperature)
			aer := a.submit(aerSQE(), nil, fabrics.DirNone)
			dev.cw.Store(nvme.SMARTWarningSpare)
			tick()
			if ev, ok := aerEvent(t, aer); ok {
				t.Fatalf("event %v for a warning the host did not enable", ev)
			}
			dev.cw.Store(nvme.SMARTWarningSpare | nvme.SMARTWarningTemperature)
			tick()
			if ev, ok := aerEvent(t, aer); !ok || ev.Info() != nvme.AsyncSMARTTemperatureThreshold {
				t.Fatalf("AER: %v (completed %v), want a temperature event", ev, ok)
			}
			// AEC 0: the poller ends at its next tick.
			expect(t, a.setFeature(nvme.FeatAsyncEventConfig, 0), 0, "AEC 0")
			tick()
			reads := dev.reads.Load()
			f.tgt.health.mu.Lock()
			running := f.tgt.health.running
			f.tgt.health.mu.Unlock()
			tick()
			if running || dev.reads.Load() != reads {
				t.Errorf("poller still running (%v) or reading with no controller asking", running)
			}
		})
	})
}

func TestSMARTEventInfo(t *testing.T) {
	for _, tc := range []struct {
		bits uint8
		want uint8
	}{
		{nvme.SMARTWarningSpare, nvme.AsyncSMARTSpareBelowThreshold},
		{nvme.SMARTWarningTemperature, nvme.AsyncSMARTTemperatureThreshold},
		{nvme.SMARTWarningSpare | nvme.SMARTWarningTemperature, nvme.AsyncSMARTTemperatureThreshold},
		{nvme.SMARTWarningReliability, nvme.AsyncSMARTReliability},
		{nvme.SMARTWarningReadOnly | nvme.SMARTWarningSpare, nvme.AsyncSMARTReliability},
		{nvme.SMARTWarningVolatileBackup, nvme.AsyncSMARTReliability},
		{nvme.SMARTWarningPMRReadOnly, nvme.AsyncSMARTReliability},
	} {
		if got := smartEventInfo(tc.bits); got != tc.want {
			t.Errorf("smartEventInfo(%#x) = %#x, want %#x", tc.bits, got, tc.want)
		}
	}
}
