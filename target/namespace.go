package target

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/target/bdev"
)

// namespace is one namespace of a subsystem: a backend, its identity, a
// pool of goroutines that run its I/O, and its counters.
type namespace struct {
	t       *Target
	subsys  string
	nsid    uint32
	dev     bdev.Device
	bs      uint32
	bsShift uint8
	size    atomic.Int64  // bytes exposed
	nblocks atomic.Uint64 // NSZE
	uuid    [16]byte
	nguid   [16]byte
	eui64   [8]byte
	ro      bool
	health  bdev.HealthReporter // nil when the backend has none
	// readsZeroes: reads of deallocated blocks return zeroes (DLFEAT).
	readsZeroes bool

	enabled atomic.Bool
	// anagrp is the namespace's ANA group (ana.go), which may change
	// while hosts use it.
	anagrp atomic.Uint32

	// state counts commands in flight; nsDead marks a namespace being
	// destroyed (no new commands). drained is closed when both hold.
	state   atomic.Int64
	drained chan struct{}

	pool  ioPool
	stats nsStats
	io    nsIOStats // I/O counters by opcode (stats.go)
	// inline: the backend never blocks; its I/O runs on the transport's
	// goroutine (bdev.NonBlocking).
	inline bool
	// segs: the backend lends its memory for READs (bdev.SegmentReader),
	// sent without a copy on queues that can (queue.gather).
	segs bdev.SegmentReader
	// async: the backend starts I/O without waiting (bdev.Async); the
	// common commands skip the workers (ioCmd.startAsync).
	async bdev.Async
	// fua: the asynchronous backend makes one write durable by itself
	// (RWF_DSYNC), for FUA writes and writes with the cache disabled.
	fua bdev.FUAWriter
	// pr: persistent reservations (reservation.go); nil when disabled.
	pr *reservations
	// log names the namespace; mon logs its backend's errors and
	// watches for an unlinked backing file and a lost reservation file.
	log hclog.Logger
	mon *bdev.Monitor
}

const nsDead = 1 << 62

// nsStats are the SMART / Health counters of a namespace.
type nsStats struct {
	hostReads   atomic.Uint64 // Read and Compare commands
	hostWrites  atomic.Uint64 // Write and Write Zeroes commands
	mediaErrors atomic.Uint64
	busyNanos   atomic.Int64 // time with at least one command in flight
	busySince   atomic.Int64 // monotonic nanoseconds of the last idle→busy
}

// epoch is the origin of the monotonic clock the counters use.
var epoch = time.Now()

func monoNanos() int64 { return int64(time.Since(epoch)) }

func newNamespace(t *Target, subsys string, cfg NamespaceConfig) (*namespace, error) {
	dbs := cfg.Device.BlockSize()
	bs := cfg.BlockSize
	if bs == 0 {
		bs = dbs
	}
	if !bdev.ValidBlockSize(bs) || bs < dbs || (dbs != 0 && bs%dbs != 0) {
		return nil, fmt.Errorf("target: subsystem %s namespace %d: block size %d (device %d): %w", subsys, cfg.NSID, bs, dbs, ErrInvalid)
	}
	ns := &namespace{
		t:       t,
		subsys:  subsys,
		nsid:    cfg.NSID,
		dev:     cfg.Device,
		bs:      bs,
		bsShift: uint8(bits.TrailingZeros32(bs)),
		uuid:    cfg.UUID,
		nguid:   cfg.NGUID,
		eui64:   cfg.EUI64,
		ro:      cfg.ReadOnly,
		drained: make(chan struct{}),
		log:     t.log.With("subsys", subsys, "nsid", cfg.NSID),
	}
	switch g := cfg.ANAGrpID; {
	case g == 0:
		ns.anagrp.Store(DefaultANAGroup)
	case g > MaxANAGroups:
		return nil, fmt.Errorf("target: subsystem %s namespace %d: ANA group %d outside 1-%d: %w", subsys, cfg.NSID, g, MaxANAGroups, ErrInvalid)
	default:
		ns.anagrp.Store(g)
	}
	if ns.uuid == ([16]byte{}) {
		_, _ = rand.Read(ns.uuid[:])
		ns.uuid[6] = ns.uuid[6]&0x0f | 0x40 // version 4
		ns.uuid[8] = ns.uuid[8]&0x3f | 0x80 // RFC 4122 variant
	}
	if h, ok := cfg.Device.(bdev.HealthReporter); ok {
		ns.health = h
	}
	if nb, ok := cfg.Device.(bdev.NonBlocking); ok && nb.NonBlocking() {
		ns.inline = true
	}
	if sr, ok := cfg.Device.(bdev.SegmentReader); ok {
		ns.segs = sr
	}
	if a, ok := cfg.Device.(bdev.Async); ok {
		ns.async = a
		if m, ok := cfg.Device.(bdev.MaybeAsync); ok && !m.AsyncReady() {
			ns.async = nil
			ns.log.Warn("io_uring unavailable: the backend runs on blocking workers", "workers", t.workers)
		}
		if f, ok := cfg.Device.(bdev.FUAWriter); ok && ns.async != nil {
			ns.fua = f
		}
	}
	if w, ok := cfg.Device.(bdev.SizeWatcher); ok {
		// A resize seen by the backend: read the size again and raise the
		// Namespace Attribute Changed event (NamespaceChanged; an error
		// means the namespace is gone or replaced).
		nsid := cfg.NSID
		w.WatchSize(func() { _ = t.NamespaceChanged(subsys, nsid) })
	}
	switch cfg.Device.(type) {
	case *bdev.Memory, *bdev.File, *bdev.Null:
		ns.readsZeroes = true
	}
	ns.revalidate()
	if ns.nblocks.Load() == 0 {
		return nil, fmt.Errorf("target: subsystem %s namespace %d: device of %d bytes holds no %d-byte block: %w",
			subsys, cfg.NSID, cfg.Device.Size(), bs, ErrInvalid)
	}
	if cfg.Reservations {
		ns.pr = &reservations{file: cfg.ReservationFile}
		if cfg.ReservationFile != "" {
			if err := ns.pr.loadFile(ns.log); err != nil {
				return nil, fmt.Errorf("target: subsystem %s namespace %d: %w", subsys, cfg.NSID, err)
			}
		}
	}
	var check func()
	if ns.pr != nil && ns.pr.file != "" {
		check = ns.checkReservationFile
	}
	ns.mon = bdev.NewMonitor(cfg.Device, ns.log, bdev.MonitorOptions{Check: check})
	ns.enabled.Store(!cfg.Disabled)
	ns.pool.start(ns, t.workers)
	return ns, nil
}

// revalidate reads the device size again (Linux nvmet_ns_revalidate).
func (ns *namespace) revalidate() {
	sz := ns.dev.Size() &^ int64(ns.bs-1)
	ns.size.Store(sz)
	ns.nblocks.Store(uint64(sz) >> ns.bsShift)
}

// acquire counts a command in flight; it fails once the namespace is
// being destroyed.
func (ns *namespace) acquire() bool {
	for {
		s := ns.state.Load()
		if s&nsDead != 0 {
			return false
		}
		if ns.state.CompareAndSwap(s, s+1) {
			if s == 0 {
				ns.stats.busySince.Store(monoNanos())
			}
			return true
		}
	}
}

// release ends a command acquire counted.
func (ns *namespace) release() {
	switch n := ns.state.Add(-1); n {
	case 0:
		ns.stats.busyNanos.Add(monoNanos() - ns.stats.busySince.Load())
	case nsDead:
		close(ns.drained)
	}
}

// destroy stops new commands, waits for those in flight, stops the
// workers and closes the device.
func (ns *namespace) destroy() error {
	ns.enabled.Store(false)
	for {
		s := ns.state.Load()
		if s&nsDead != 0 {
			break
		}
		if ns.state.CompareAndSwap(s, s|nsDead) {
			if s == 0 {
				close(ns.drained)
			}
			break
		}
	}
	<-ns.drained
	ns.stopWorkers()
	if err := ns.dev.Close(); err != nil && !errors.Is(err, bdev.ErrClosed) {
		return fmt.Errorf("target: subsystem %s namespace %d: close device: %w", ns.subsys, ns.nsid, err)
	}
	return nil
}

func (ns *namespace) stopWorkers() {
	ns.pool.stop()
	ns.mon.Close()
}

// ioPool is a namespace's fixed set of goroutines running backend I/O
// from a FIFO that grows as needed, so that submitting never blocks the
// transport and never allocates in steady state.
type ioPool struct {
	mu      sync.Mutex
	cond    sync.Cond
	ring    []*ioCmd
	head, n int
	stopped bool
	wg      sync.WaitGroup
}

func (p *ioPool) start(ns *namespace, workers int) {
	p.cond.L = &p.mu
	p.ring = make([]*ioCmd, 64)
	p.wg.Add(workers)
	for range workers {
		go p.worker()
	}
}

func (p *ioPool) push(c *ioCmd) {
	p.mu.Lock()
	if p.n == len(p.ring) {
		ring := make([]*ioCmd, 2*len(p.ring))
		for i := range p.n {
			ring[i] = p.ring[(p.head+i)%len(p.ring)]
		}
		p.ring, p.head = ring, 0
	}
	p.ring[(p.head+p.n)%len(p.ring)] = c
	p.n++
	p.mu.Unlock()
	p.cond.Signal()
}

func (p *ioPool) pop() (*ioCmd, bool) {
	p.mu.Lock()
	for p.n == 0 && !p.stopped {
		p.cond.Wait()
	}
	if p.n == 0 {
		p.mu.Unlock()
		return nil, false
	}
	c := p.ring[p.head]
	p.ring[p.head] = nil
	p.head = (p.head + 1) % len(p.ring)
	p.n--
	p.mu.Unlock()
	return c, true
}

func (p *ioPool) worker() {
	defer p.wg.Done()
	var w worker
	for {
		c, ok := p.pop()
		if !ok {
			return
		}
		w.run(c)
	}
}

// stop ends the workers once the FIFO is empty.
func (p *ioPool) stop() {
	p.mu.Lock()
	if p.cond.L == nil || p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}
