package bdev

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/fabrics/region"
)

// Device is a block backend. Offsets and lengths are in bytes. All methods
// are safe for concurrent use, except Close, which the caller must not run
// concurrently with other methods. After Close every method returns an
// error matching ErrClosed.
type Device interface {
	// ReadAt fills p from offset off. It returns len(p) and nil, or an
	// error; a short read is always reported with an error.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt writes p at offset off. It returns len(p) and nil, or an
	// error.
	WriteAt(p []byte, off int64) (int, error)
	// Flush makes completed writes durable (fdatasync, fsync, or nothing
	// for volatile backends).
	Flush() error
	// WriteZeroes sets n bytes from off to zero.
	WriteZeroes(off, n int64) error
	// Discard tells the backend the n bytes from off are unused (NVMe
	// Deallocate). See the package documentation for what reads return
	// afterwards.
	Discard(off, n int64) error
	// Size is the usable size in bytes, a multiple of BlockSize.
	Size() int64
	// BlockSize is the logical block size in bytes: a power of two from
	// 512 to 65536.
	BlockSize() uint32
	// Close releases the backend.
	Close() error
}

// Health is the backend-neutral subset of an NVMe SMART / Health
// Information log page (NVMe base spec, log page 02h) a backend can report
// for the medium it sits on. Counters wider than 64 bits saturate.
type Health struct {
	CriticalWarning         uint8  // bit field as in the NVMe log page
	TemperatureKelvin       uint16 // composite temperature; 0 = unknown
	AvailableSpare          uint8  // percent
	AvailableSpareThreshold uint8  // percent
	PercentageUsed          uint8  // percent of rated endurance
	DataUnitsRead           uint64 // units of 1000 × 512 bytes
	DataUnitsWritten        uint64 // units of 1000 × 512 bytes
	PowerCycles             uint64
	PowerOnHours            uint64
	UnsafeShutdowns         uint64
	MediaErrors             uint64 // media and data integrity errors
	ErrorLogEntries         uint64
}

// HealthReporter is implemented by backends that can read health data from
// the medium (a real disk). Health returns an error matching
// ErrNotSupported when the medium has none; the target then reports its own
// counters.
type HealthReporter interface {
	Health() (Health, error)
}

// Identifier is implemented by backends whose medium has a stable
// identifier (a disk's WWID or serial number), which the target may use to
// derive namespace identifiers. ID returns an error matching
// ErrNotSupported when there is none.
type Identifier interface {
	ID() (string, error)
}

// NonBlocking is implemented by backends whose operations never wait
// (memory, null): the target runs their I/O on the transport's goroutine,
// run to completion, instead of handing it to a worker goroutine.
type NonBlocking interface {
	NonBlocking() bool
}

// SegmentReader is implemented by backends that lend their own memory for
// READs (Memory): ReadSegments appends to dst the pieces holding n bytes
// at off, each with a reference on its region that the caller releases
// (region.Segment.Release) once the data is sent. On error it appends
// nothing. A transport sends the pieces instead of a copy.
type SegmentReader interface {
	ReadSegments(off, n int64, dst []region.Segment) ([]region.Segment, error)
}

// Errors returned by backends; match them with errors.Is.
var (
	// ErrOutOfRange: an offset or length outside [0, Size).
	ErrOutOfRange = errors.New("bdev: access out of range")
	// ErrClosed: the device was closed.
	ErrClosed = errors.New("bdev: device closed")
	// ErrNotSupported: the backend or medium lacks the feature.
	ErrNotSupported = errors.New("bdev: not supported")
)

// RangeError describes an access outside the device. It matches
// ErrOutOfRange.
type RangeError struct {
	Op   string // "read", "write", "write zeroes", "discard"
	Off  int64
	Len  int64
	Size int64
}

// Error implements error.
func (e *RangeError) Error() string {
	return fmt.Sprintf("bdev: %s of %d bytes at offset %d: outside device of %d bytes", e.Op, e.Len, e.Off, e.Size)
}

// Is makes errors.Is(err, ErrOutOfRange) true.
func (e *RangeError) Is(target error) bool { return target == ErrOutOfRange }

// checkRange returns a *RangeError unless [off, off+n) lies inside a device
// of size bytes. It does not allocate when the range is valid.
func checkRange(op string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return &RangeError{Op: op, Off: off, Len: n, Size: size}
	}
	return nil
}

// Backend kinds, as named in the configuration.
const (
	KindFile   = "file"
	KindBlock  = "block"
	KindMemory = "memory"
	KindNull   = "null"
	// KindRBD is a Ceph RBD image (rbd.go; needs the rbd build tag).
	KindRBD = "rbd"
)

// Kinds lists the backend kinds Open accepts.
var Kinds = []string{KindFile, KindBlock, KindMemory, KindNull}

// DefaultBlockSize is the block size of file, memory and null backends when
// the spec gives none.
const DefaultBlockSize = 512

// Spec says which backend to open and how. It maps onto a configfs
// namespace (backend, device_path, size, block_size, buffered_io).
type Spec struct {
	Kind string // KindFile, KindBlock, KindMemory or KindNull
	Path string // file or device node; unused by memory and null
	// Size in bytes, a multiple of the block size. Required for memory
	// and null, and to create a missing file. For a file that exists, 0
	// means its size; otherwise the file must have this size (see Grow).
	// For a block device, 0 means the whole device; a smaller size
	// exposes only the first Size bytes.
	Size int64
	// BlockSize is the logical block size: a power of two from 512 to
	// 65536. 0 means DefaultBlockSize, or the device's logical block
	// size for a block device (which may not be larger than BlockSize).
	BlockSize uint32
	// Grow lets the file backend extend an existing file smaller than
	// Size. Files are never shrunk.
	Grow bool
	// BufferedIO keeps the file and block backends off O_DIRECT
	// (nvmet's buffered_io attribute): I/O goes through the page cache.
	BufferedIO bool
	// QueueDepth bounds the I/Os in flight to a file or block backend
	// (queue_depth); 0 means DefaultQueueDepth. Commands beyond it wait
	// in order for a free slot.
	QueueDepth int
	// RBD: the image (Path unused). CephConf "" means librados'
	// default search (/etc/ceph/ceph.conf, $CEPH_CONF); ClientID ""
	// means "admin"; Keyring "" means the conf's.
	Pool, Image, CephConf, ClientID, Keyring string
}

// ValidBlockSize reports whether bs is a power of two from 512 to 65536.
func ValidBlockSize(bs uint32) bool {
	return bs >= 512 && bs <= 65536 && bits.OnesCount32(bs) == 1
}

// Open opens the backend spec describes.
func Open(spec Spec) (Device, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	switch spec.Kind {
	case KindFile:
		return OpenFile(spec)
	case KindBlock:
		return OpenBlock(spec)
	case KindMemory:
		return NewMemory(spec.Size, spec.BlockSize)
	case KindNull:
		return NewNull(spec.Size, spec.BlockSize)
	case KindRBD:
		return OpenRBD(spec)
	case "":
		return nil, errors.New("bdev: no backend kind given (want file, block, memory, null or rbd)")
	default:
		return nil, fmt.Errorf("bdev: unknown backend kind %q (want file, block, memory, null or rbd)", spec.Kind)
	}
}

// checkSpec makes the checks of Open (and Check) common to every kind.
func checkSpec(spec Spec) error {
	if spec.BlockSize != 0 && !ValidBlockSize(spec.BlockSize) {
		return fmt.Errorf("bdev: %s %q: block size %d is not a power of two from 512 to 65536", spec.Kind, spec.Path, spec.BlockSize)
	}
	if spec.Size < 0 {
		return fmt.Errorf("bdev: %s %q: negative size %d", spec.Kind, spec.Path, spec.Size)
	}
	if spec.QueueDepth < 0 || spec.QueueDepth > MaxQueueDepth {
		return fmt.Errorf("bdev: %s %q: queue depth %d outside 1-%d", spec.Kind, spec.Path, spec.QueueDepth, MaxQueueDepth)
	}
	return nil
}

// sizeAndBlock checks a size and block size for the volatile backends and
// fills in the default block size.
func sizeAndBlock(kind string, size int64, bs uint32) (uint32, error) {
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if !ValidBlockSize(bs) {
		return 0, fmt.Errorf("bdev: %s: block size %d is not a power of two from 512 to 65536", kind, bs)
	}
	if size <= 0 {
		return 0, fmt.Errorf("bdev: %s: size must be positive, got %d", kind, size)
	}
	if size%int64(bs) != 0 {
		return 0, fmt.Errorf("bdev: %s: size %d is not a multiple of the block size %d", kind, size, bs)
	}
	return bs, nil
}

// zeroes is a read-only source of zero bytes for the write-zeroes fallbacks.
var zeroes = make([]byte, 64<<10)

// rangeOp runs WriteZeroes or Discard on a file or block device: the
// closed and range checks, then the device's own operation (fast: an
// fallocate or an ioctl) when try, and fallback when the device reports
// that it cannot do it (fallocateUnsupported).
func rangeOp(closed *atomic.Bool, op string, off, n, size int64, try bool, fast, fallback func() error) error {
	if closed.Load() {
		return ErrClosed
	}
	if err := checkRange(op, off, n, size); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if try {
		err := fast()
		if err == nil || !fallocateUnsupported(err) {
			return err
		}
	}
	return fallback()
}
