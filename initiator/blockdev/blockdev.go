package blockdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/nvme"
)

// Device is the namespace as this package uses it; *initiator.Namespace
// satisfies it. ReadAt and WriteAt are called with whole logical blocks only;
// Trim deallocates n bytes at off, both multiples of BlockSize. All methods
// must be safe for concurrent use.
type Device interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Flush() error
	Trim(off, n int64) error
	Size() int64
	BlockSize() int
}

// Zeroer is implemented by a Device that zeroes a range without moving data
// (NVMe Write Zeroes); off and n are multiples of the block size. Without
// it, zeroing is done with writes of zero blocks.
type Zeroer interface {
	WriteZeroes(off, n int64) error
}

// identifier is implemented by a Device that has Identify Namespace data
// (*initiator.Namespace); DLFEAT tells whether Trim reads back as zeroes.
type identifier interface {
	Identify() nvme.IdentifyNamespace
}

// Method is how a namespace becomes a block device.
type Method int

// Methods.
const (
	// MethodAuto uses ublk when the kernel has it loaded, else NBD when
	// the kernel has it, else FUSE + loop.
	MethodAuto Method = iota
	// MethodNBD uses the kernel NBD client over a socketpair.
	MethodNBD
	// MethodFUSELoop uses a FUSE file attached to a loop device.
	MethodFUSELoop
	// MethodUblk uses the kernel ublk driver (Linux 6.0+) served by this
	// process over io_uring.
	MethodUblk
)

// String names the method.
func (m Method) String() string {
	switch m {
	case MethodAuto:
		return "auto"
	case MethodNBD:
		return "nbd"
	case MethodFUSELoop:
		return "fuse+loop"
	case MethodUblk:
		return "ublk"
	}
	return "Method(" + strconv.Itoa(int(m)) + ")"
}

// Errors callers can test with errors.Is.
var (
	// ErrBusy is returned by Unmap while the block device is mounted or
	// held exclusively (nothing changed), or when another process still had
	// it open after the wait (the detach then happens on its last close).
	// The mapping keeps serving; call Unmap again after releasing it.
	ErrBusy = errors.New("block device in use")
	// ErrUnmapped is returned for a second Unmap after a successful one.
	ErrUnmapped = errors.New("mapping already removed")
)

// DefaultRunDir is where FUSE mappings create their private directory.
const DefaultRunDir = "/run/nvmeof"

// Options tune Map. The zero value (or nil) maps with MethodAuto.
type Options struct {
	// Method forces NBD or FUSE + loop; MethodAuto picks.
	Method Method
	// Name identifies the mapping: the FUSE directory <RunDir>/<Name>, the
	// loop device's file name, the NBD backend identifier. Letters, digits,
	// '.', '_', '-' and ':' only. Default "ns-<pid>-<n>".
	Name string
	// RunDir is the parent of the FUSE mapping's directory
	// (DefaultRunDir).
	RunDir string
	// ReadOnly maps the namespace read-only.
	ReadOnly bool
	// TrimZeroes says that Trim leaves blocks reading back as zeroes
	// (Identify Namespace DLFEAT bits 2:0 = 001b; detected by itself when
	// the Device has Identify()). It lets the loop driver's PUNCH_HOLE
	// become a Trim instead of Write Zeroes.
	TrimZeroes bool
	// MaxIO is the largest FUSE read/write in bytes (default and maximum
	// 1 MiB); NBD requests are bounded by the kernel (32 MiB).
	MaxIO int
	// NBDTimeout is the kernel NBD per-request timeout (default: the
	// kernel's, 30 s).
	NBDTimeout time.Duration
	// UnmapTimeout bounds each wait in Unmap (default 10 s).
	UnmapTimeout time.Duration
	// Logger receives diagnostics (default: none).
	Logger hclog.Logger
}

// mapper is one method's mapping.
type mapper interface {
	path() string
	// unmap tears down; it is retried after ErrBusy and must be idempotent.
	unmap(ctx context.Context) error
	// resize tells the kernel the device's new size (the engine has it).
	resize(ctx context.Context, size int64) error
}

// Mapping is a namespace mapped as a block device.
type Mapping struct {
	method Method
	m      mapper
	e      *engine
	log    hclog.Logger

	mu   sync.Mutex
	done bool
}

// Path returns the block device, e.g. /dev/loop3, /dev/nbd0 or /dev/ublkb0.
func (m *Mapping) Path() string { return m.m.path() }

// Method returns the method in use (never MethodAuto).
func (m *Mapping) Method() Method { return m.method }

// String describes the mapping.
func (m *Mapping) String() string { return m.Path() + " (" + m.method.String() + ")" }

// Unmap detaches the block device and removes the FUSE mount or NBD
// connection, waiting at most Options.UnmapTimeout (or ctx) per step. While
// the device is in use it returns ErrBusy (see there); call it again later.
// It is safe to call from several goroutines.
func (m *Mapping) Unmap(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return fmt.Errorf("blockdev: unmap %s: %w", m.Path(), ErrUnmapped)
	}
	if err := m.m.unmap(ctx); err != nil {
		return err
	}
	m.done = true
	m.log.Debug("unmapped", "path", m.Path(), "method", m.method.String())
	return nil
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,48}$`)
	nameSeq atomic.Uint64
)

// config is Options with defaults applied and the device checked.
type config struct {
	Options
	size int64
	bs   int
}

func newConfig(dev Device, opts *Options) (*config, error) {
	c := &config{}
	if opts != nil {
		c.Options = *opts
	}
	if dev == nil {
		return nil, errors.New("blockdev: nil Device")
	}
	c.size, c.bs = dev.Size(), dev.BlockSize()
	if c.bs < 512 || c.bs&(c.bs-1) != 0 || c.bs > 1<<16 {
		return nil, fmt.Errorf("blockdev: block size %d: want a power of two from 512 to 65536", c.bs)
	}
	if c.size <= 0 || c.size%int64(c.bs) != 0 {
		return nil, fmt.Errorf("blockdev: device size %d is not a positive multiple of the %d-byte block size", c.size, c.bs)
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("ns-%d-%d", os.Getpid(), nameSeq.Add(1))
	}
	if !nameRE.MatchString(c.Name) || c.Name == "." || c.Name == ".." {
		return nil, fmt.Errorf("blockdev: name %q: use 1-48 letters, digits, '.', '_', '-' or ':'", c.Name)
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir
	}
	if c.MaxIO <= 0 || c.MaxIO > maxFUSEIO {
		c.MaxIO = maxFUSEIO
	}
	if c.MaxIO < c.bs {
		c.MaxIO = c.bs
	}
	if c.UnmapTimeout <= 0 {
		c.UnmapTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if id, ok := dev.(identifier); ok && !c.TrimZeroes {
		if ns := id.Identify(); len(ns) >= 4096 && ns.DLFEAT()&0x7 == 1 {
			c.TrimZeroes = true
		}
	}
	return c, nil
}

// Map makes dev a local block device and returns the mapping; see the
// package documentation for the methods. ctx bounds the setup only.
func Map(ctx context.Context, dev Device, opts *Options) (*Mapping, error) {
	c, err := newConfig(dev, opts)
	if err != nil {
		return nil, err
	}
	method := c.Method
	e := newEngine(dev, c)
	var m mapper
	if method == MethodAuto {
		method = MethodFUSELoop
		if nbdAvailable() {
			method = MethodNBD
		}
		if ublkAvailable() {
			// ublk first; a device it cannot take (blocks over 4 KiB)
			// or a driver that refuses falls back to the next method.
			um, uerr := mapUblk(ctx, e, c)
			if uerr == nil {
				c.Logger.Info("mapped", "path", um.path(), "method", MethodUblk.String(), "size", c.size, "block_size", c.bs)
				return &Mapping{method: MethodUblk, m: um, e: e, log: c.Logger}, nil
			}
			c.Logger.Warn("ublk mapping failed, trying the next method", "method", method.String(), "error", uerr)
		}
		c.Logger.Debug("method chosen", "method", method.String())
	}
	switch method {
	case MethodUblk:
		m, err = mapUblk(ctx, e, c)
	case MethodNBD:
		m, err = mapNBD(ctx, e, c)
	case MethodFUSELoop:
		m, err = mapFUSELoop(ctx, e, c)
	default:
		return nil, fmt.Errorf("blockdev: unknown method %v", method)
	}
	if err != nil {
		return nil, err
	}
	c.Logger.Info("mapped", "path", m.path(), "method", method.String(), "size", c.size, "block_size", c.bs)
	return &Mapping{method: method, m: m, e: e, log: c.Logger}, nil
}

// cleanups is a stack of undo steps run in reverse; Map uses it so that an
// error midway leaves nothing behind.
type cleanups []func() error

func (c *cleanups) push(f func() error) { *c = append(*c, f) }

// run undoes the steps newest first, dropping each one that succeeds. It
// stops at the first failure and keeps that step and the older ones, so a
// later call retries from there (the older steps depend on it: a directory
// cannot go while it is still a mount point).
func (c *cleanups) run() error {
	for len(*c) > 0 {
		last := len(*c) - 1
		if err := (*c)[last](); err != nil {
			return err
		}
		*c = (*c)[:last]
	}
	return nil
}
