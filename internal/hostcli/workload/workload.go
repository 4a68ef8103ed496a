// Package workload is the self-test's verified I/O on one namespace:
// it writes a seeded pattern in random 4 KiB-1 MiB I/Os at a queue depth,
// flushes, reads everything back and verifies it, checks that trimmed
// blocks read back as zeroes (or uses Write Zeroes when the namespace does
// not promise it), rewrites and verifies again, and prints what it did
// with throughput.
package workload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// Config sets what a Workload writes: Size bytes at most (the namespace's
// size bounds it), the pattern's Seed and QueueDepth I/Os in flight.
type Config struct {
	Size       int64
	Seed       uint64
	QueueDepth int
}

// FormatSize formats a byte count in binary units.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// The workload's unit: data is generated, tracked and verified in 4 KiB
// units (or the block size, if larger).
const (
	unitSize   = 4096
	maxIO      = 1 << 20
	genUnknown = 0   // never written: content not checked
	genZero    = 255 // trimmed or zeroed: must read back as zeroes
)

// Device is the namespace as the workload uses it (*initiator.Namespace).
type Device interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Flush() error
	Trim(off, n int64) error
	WriteZeroes(off, n int64) error
	Size() int64
	BlockSize() int
	NSID() uint32
	Identify() nvme.IdentifyNamespace
}

// Workload writes and verifies one namespace.
type Workload struct {
	ns       Device
	cfg      Config
	deadline time.Time
	unit     int64
	region   int64
	gens     []uint8 // per unit: the generation last written
	rng      *rand.Rand
}

// New prepares a Workload on ns; no new I/O starts after deadline (what
// was written is still verified).
func New(ns Device, cfg Config, deadline time.Time) *Workload {
	unit := int64(max(unitSize, ns.BlockSize()))
	region := min(cfg.Size, ns.Size()) / unit * unit
	return &Workload{ns: ns, cfg: cfg, deadline: deadline, unit: unit, region: region,
		gens: make([]uint8, region/unit), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(ns.NSID())))}
}

// extent is one I/O: a byte range of whole units.
type extent struct{ off, len int64 }

// partition cuts [0, region) into extents of random sizes (1 unit to
// 1 MiB) in random order.
func (wl *Workload) partition() []extent {
	var out []extent
	maxUnits := max(maxIO/wl.unit, 1)
	for off := int64(0); off < wl.region; {
		n := min((1+wl.rng.Int64N(maxUnits))*wl.unit, wl.region-off)
		out = append(out, extent{off, n})
		off += n
	}
	wl.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// fill writes the pattern of unit u at generation g into p (one unit):
// a header (unit, generation, seed) then a xorshift stream.
func (wl *Workload) fill(p []byte, u int64, g uint8) {
	x := wl.cfg.Seed ^ uint64(u)*0x9e3779b97f4a7c15 ^ uint64(g)<<56 ^ uint64(wl.ns.NSID())<<48
	binary.LittleEndian.PutUint64(p[0:], uint64(u))
	binary.LittleEndian.PutUint64(p[8:], uint64(g))
	for i := 16; i+8 <= len(p); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}

// stats counts one phase's I/O.
type stats struct {
	bytes, ios atomic.Int64
	start      time.Time
	elapsed    time.Duration
}

func (s *stats) String() string {
	sec := s.elapsed.Seconds()
	if sec <= 0 {
		sec = 1e-9
	}
	return fmt.Sprintf("%s in %d I/Os, %.1f MB/s, %.0f IOPS", FormatSize(s.bytes.Load()), s.ios.Load(),
		float64(s.bytes.Load())/sec/1e6, float64(s.ios.Load())/sec)
}

// ErrMismatch is wrapped by verification failures.
var ErrMismatch = errors.New("data mismatch")

// parallel runs fn on the extents with QueueDepth workers, each with its
// own buffer, stopping at the deadline (unless all is set) or the first
// error.
func (wl *Workload) parallel(exts []extent, all bool, fn func(buf []byte, e extent) error) (*stats, error) {
	st := &stats{start: time.Now()}
	ch := make(chan extent)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	for range wl.cfg.QueueDepth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, maxIO+wl.unit)
			for e := range ch {
				if err := fn(buf[:e.len], e); err != nil {
					once.Do(func() { firstErr = err; close(stop) })
					return
				}
				st.bytes.Add(e.len)
				st.ios.Add(1)
			}
		}()
	}
feed:
	for _, e := range exts {
		if !all && time.Now().After(wl.deadline) {
			break
		}
		select {
		case ch <- e:
		case <-stop:
			break feed
		}
	}
	close(ch)
	wg.Wait()
	st.elapsed = time.Since(st.start)
	return st, firstErr
}

// chunks cuts [off, off+n) into extents of at most maxIO bytes.
func chunks(off, n int64) []extent {
	var out []extent
	for end := off + n; off < end; off += maxIO {
		out = append(out, extent{off, min(int64(maxIO), end-off)})
	}
	return out
}

// writeExtent writes generation g over e and records it.
func (wl *Workload) writeExtent(buf []byte, e extent, g uint8) error {
	for i := int64(0); i < e.len; i += wl.unit {
		wl.fill(buf[i:i+wl.unit], (e.off+i)/wl.unit, g)
	}
	if _, err := wl.ns.WriteAt(buf, e.off); err != nil {
		return fmt.Errorf("write of %d bytes at %d: %w", e.len, e.off, err)
	}
	for i := int64(0); i < e.len; i += wl.unit {
		wl.gens[(e.off+i)/wl.unit] = g
	}
	return nil
}

// verifyExtent reads e and checks every unit of known content.
func (wl *Workload) verifyExtent(buf []byte, e extent) error {
	if _, err := wl.ns.ReadAt(buf, e.off); err != nil {
		return fmt.Errorf("read of %d bytes at %d: %w", e.len, e.off, err)
	}
	want := make([]byte, wl.unit)
	for i := int64(0); i < e.len; i += wl.unit {
		u := (e.off + i) / wl.unit
		got := buf[i : i+wl.unit]
		switch g := wl.gens[u]; g {
		case genUnknown:
		case genZero:
			if j := bytes.IndexFunc(got, func(r rune) bool { return r != 0 }); j >= 0 {
				return fmt.Errorf("%w: byte %d (unit %d) should read as zero after trim/write zeroes", ErrMismatch, e.off+i+int64(j), u)
			}
		default:
			wl.fill(want, u, g)
			if !bytes.Equal(got, want) {
				j := 0
				for j < len(got) && got[j] == want[j] {
					j++
				}
				return fmt.Errorf("%w at byte %d (unit %d, generation %d): read %#02x, wrote %#02x",
					ErrMismatch, e.off+i+int64(j), u, g, got[j], want[j])
			}
		}
	}
	return nil
}

// Run writes, flushes, reads back, trims, rewrites and verifies, printing
// each step on w; a verification failure wraps ErrMismatch.
func (wl *Workload) Run(w io.Writer) error {
	if wl.region == 0 {
		return errors.New("namespace too small")
	}
	// 1. Fill the region in random-sized writes in random order.
	st, err := wl.parallel(wl.partition(), false, func(buf []byte, e extent) error { return wl.writeExtent(buf, e, 1) })
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  write:   %s\n", st)
	if err := wl.ns.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Fprintln(w, "  flush:   ok")
	// 2. Read back in other random sizes and order.
	st, err = wl.parallel(wl.partition(), false, wl.verifyExtent)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  read:    %s, verified\n", st)
	// 3. Deallocate a range: it must read back as zeroes (with Write
	// Zeroes when the namespace does not promise that for deallocated
	// blocks, DLFEAT).
	toff := wl.region / 4 / (1 << 20) * (1 << 20)
	tlen := max(min(8<<20, wl.region/8)/(1<<20)*(1<<20), wl.unit)
	tlen = min(tlen, wl.region-toff)
	if err := wl.ns.Trim(toff, tlen); err != nil {
		return fmt.Errorf("trim of %d bytes at %d: %w", tlen, toff, err)
	}
	how := ""
	if wl.ns.Identify().DLFEAT()&7 != 1 {
		if err := wl.ns.WriteZeroes(toff, tlen); err != nil {
			return fmt.Errorf("write zeroes of %d bytes at %d: %w", tlen, toff, err)
		}
		how = " (after write zeroes: DLFEAT does not promise zeroes for deallocated blocks)"
	}
	for u := toff / wl.unit; u < (toff+tlen)/wl.unit; u++ {
		wl.gens[u] = genZero
	}
	if _, err := wl.parallel(chunks(toff, tlen), true, wl.verifyExtent); err != nil {
		return err
	}
	fmt.Fprintf(w, "  trim:    %s at %s, reads back as zeroes%s\n", FormatSize(tlen), FormatSize(toff), how)
	// 4. Overwrite about a quarter of the region with a new generation.
	var over []extent
	for _, e := range wl.partition() {
		if wl.rng.IntN(4) == 0 {
			over = append(over, e)
		}
	}
	st, err = wl.parallel(over, false, func(buf []byte, e extent) error { return wl.writeExtent(buf, e, 2) })
	if err != nil {
		return err
	}
	if err := wl.ns.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Fprintf(w, "  rewrite: %s\n", st)
	// 5. Verify everything, in 1 MiB reads.
	st, err = wl.parallel(chunks(0, wl.region), true, wl.verifyExtent)
	if err != nil {
		return err
	}
	known := 0
	for _, g := range wl.gens {
		if g != genUnknown {
			known++
		}
	}
	fmt.Fprintf(w, "  verify:  %s: OK (%s checked, seed %d)\n", st, FormatSize(int64(known)*wl.unit), wl.cfg.Seed)
	if time.Now().After(wl.deadline) {
		fmt.Fprintf(w, "  note:    stopped issuing I/O at the --seconds limit; %s of %s written\n",
			FormatSize(int64(known)*wl.unit), FormatSize(wl.region))
	}
	return nil
}
