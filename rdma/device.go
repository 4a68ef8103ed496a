package rdma

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Errors every provider returns (wrapped with context) for the same conditions.
var (
	// ErrNotSupported is returned for a verb or an attribute the provider does not implement.
	ErrNotSupported = errors.New("rdma: not supported")
	// ErrInvalidArgument is returned for an out-of-range attribute, a bad opcode or a malformed work request.
	ErrInvalidArgument = errors.New("rdma: invalid argument")
	// ErrInvalidState is returned for a state transition the QP state machine forbids, or a post in a state that does not accept it.
	ErrInvalidState = errors.New("rdma: invalid QP state")
	// ErrQueueFull is returned by PostSend and PostRecv when the work queue has no free slot.
	ErrQueueFull = errors.New("rdma: work queue full")
	// ErrClosed is returned after the object (device, CQ, QP, listener, connection) was closed or destroyed.
	ErrClosed = errors.New("rdma: closed")
	// ErrBusy is returned when an object is still in use (a PD with MRs or QPs, a CQ with QPs).
	ErrBusy = errors.New("rdma: resource busy")
)

// GID is a 128-bit global identifier. On RoCEv2 a port's GID is its IP
// address; IPv4 addresses are IPv4-mapped (::ffff:a.b.c.d).
type GID = wire.GID

// GIDFromAddr returns the GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return wire.GIDFromAddr(a) }

// MTU is an InfiniBand path MTU in its enumerated encoding (IBV_MTU_*):
// the largest payload of one packet.
type MTU uint8

// Path MTUs (enum ibv_mtu).
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of MTU256..MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String formats the MTU as its size in bytes.
func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprintf("%d", m.Bytes())
}

// MTUFromBytes returns the largest path MTU not above n bytes, and false
// when n is below 256.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m, true
		}
	}
	return 0, false
}

// PortState is the logical state of a device port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop    PortState = 0
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// String names the port state as ibv_port_state_str does.
func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// PortAttr describes the device's (single) port, as ibv_query_port does.
type PortAttr struct {
	State      PortState
	MaxMTU     MTU // largest path MTU the port supports
	ActiveMTU  MTU // largest path MTU usable on the current link
	GIDTblLen  int // entries in the GID table (index 0 is the device's GID)
	PKeyTblLen int
	// MaxMsgSize is the largest message a work request may carry.
	MaxMsgSize uint32
}

// DeviceAttr holds the limits of a device (a subset of ibv_device_attr).
type DeviceAttr struct {
	MaxQP           int // queue pairs
	MaxQPWR         int // work requests per queue
	MaxSGE          int // scatter/gather entries per work request
	MaxCQE          int // entries per completion queue
	MaxMR           int // memory regions
	MaxQPRdAtom     int // RDMA READs a QP may have outstanding as requester
	MaxQPInitRdAtom int // RDMA READs a QP may accept as responder
	MaxInlineData   int // bytes a SEND with SendInline may carry
	// LazyMR: registering memory neither pins nor faults in its pages,
	// so a large sparse mapping can be registered whole (the soft
	// provider; a NIC with implicit on-demand paging).
	LazyMR bool
}

// Device is one RDMA device port: on RoCEv2, one IP address. It is the
// root object: protection domains, completion queues and the connection
// manager are created from it. Methods are safe for concurrent use.
type Device interface {
	// Name returns the device name (for example "soft0" or "mlx5_0").
	Name() string
	// Addr returns the device's IP address.
	Addr() netip.Addr
	// GID returns the GID at index 0: the IP address as a GID.
	GID() GID
	// Port returns the port attributes, including the active MTU.
	Port() PortAttr
	// Attr returns the device limits.
	Attr() DeviceAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue with room for at least entries completions.
	CreateCQ(entries int) (CQ, error)
	// ConnManager returns the device's connection manager (rdma_cm over
	// the InfiniBand CM on QP1). Providers without one return an error
	// wrapping ErrNotSupported.
	ConnManager() (ConnManager, error)
	// Close releases the device. Objects created from it stop working.
	Close() error
}

// PD is a protection domain: memory regions registered in it can be used
// only by queue pairs of the same PD.
type PD interface {
	// RegMR registers buf for RDMA with the given access rights. buf must
	// stay untouched by the Go program while remote peers may access it
	// and must not be resized; it is referenced, not copied.
	RegMR(buf []byte, access Access) (MR, error)
	// CreateQP creates a queue pair in state Reset.
	CreateQP(attr *QPInitAttr) (QP, error)
	// Dealloc releases the PD; it fails with ErrBusy while MRs or QPs use it.
	Dealloc() error
}

// Access is a set of memory-region or QP access rights (enum ibv_access_flags).
type Access uint32

// Access rights.
const (
	AccessLocalWrite   Access = 1 << 0 // the local HCA may write (receive buffers, RDMA READ targets)
	AccessRemoteWrite  Access = 1 << 1 // peers may RDMA WRITE (requires LocalWrite)
	AccessRemoteRead   Access = 1 << 2 // peers may RDMA READ
	AccessRemoteAtomic Access = 1 << 3 // peers may issue atomics (requires LocalWrite)
	// AccessMWBind lets memory windows be bound to the region
	// (IBV_ACCESS_MW_BIND); the region itself needs no remote rights.
	AccessMWBind Access = 1 << 4
)

// String lists the rights.
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	add := func(f Access, n string) {
		if a&f != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	add(AccessLocalWrite, "LocalWrite")
	add(AccessRemoteWrite, "RemoteWrite")
	add(AccessRemoteRead, "RemoteRead")
	add(AccessRemoteAtomic, "RemoteAtomic")
	add(AccessMWBind, "MWBind")
	if rest := a &^ (AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", uint32(rest))
	}
	return s
}

// MR is a registered memory region.
//
// Keys: LKey names the region in local scatter/gather entries, RKey in
// remote requests (RETH). Addr is the virtual address of the first byte
// as peers use it in RETH and local SGEs use it in SGE.Addr; offsets are
// relative to it.
//
// Invalidation: the rkey can be invalidated by a peer (SEND with
// Invalidate naming it) or locally (a LOCAL_INV work request, or
// Invalidate). From then on remote accesses with it fail with a remote
// access error until Rekey gives the region a fresh, valid rkey (as the
// kernel's ib_update_fast_reg_key plus IB_WR_REG_MR do for fast-register
// MRs; a libibverbs provider backs this with a type-2 memory window).
type MR interface {
	// LKey returns the local key.
	LKey() uint32
	// RKey returns the current remote key.
	RKey() uint32
	// Addr returns the virtual address of the region's first byte.
	Addr() uint64
	// Len returns the region's length in bytes.
	Len() int
	// Bytes returns the registered buffer.
	Bytes() []byte
	// Access returns the access rights the region was registered with.
	Access() Access
	// RKeyValid reports whether the current rkey accepts remote access.
	RKeyValid() bool
	// Invalidate invalidates the current rkey, as a LOCAL_INV would.
	Invalidate() error
	// Rekey assigns a new rkey (the low 8 bits, the key, advance) that is
	// valid for remote access, and returns it. Requests still carrying
	// the old rkey fail.
	Rekey() (uint32, error)
	// Deregister releases the region. Requests that name it afterwards fail.
	Deregister() error
}

// RemappableMR is a region whose buffer can be changed without a new
// registration: what a fast-registration work request (IB_WR_REG_MR on a
// region from ib_alloc_mr) does, which lets an NVMe host hand each
// command's own buffer to the target instead of copying through a
// registered bounce buffer.
type RemappableMR interface {
	MR
	// Remap binds the region to buf, at most as long as the buffer the
	// region was registered with; the address (Addr) stays, and a new
	// rkey valid for remote access is returned (requests with an older
	// rkey fail). Remap, like Invalidate, Rekey and Deregister, fences
	// remote operations in flight on the old binding: once it returns
	// they can no longer touch either buffer, and their remaining packets
	// fail with a remote access error. The caller must keep buf alive and
	// unmoved until it remaps again or deregisters.
	Remap(buf []byte) (uint32, error)
}

// MW is a type-2 memory window (ibv_alloc_mw with IBV_MW_TYPE_2): an
// rkey of its own over a range of a region, which a BIND_MW work request
// (SendWR.Bind) sets, on the send queue, in order with the requests
// around it. The window accepts remote access only on the QP that bound
// it, with the rights of the bind, until it is invalidated: by a
// LOCAL_INV naming its rkey, or by the peer's SEND with Invalidate. A
// type-2 window must be invalidated before it is bound again, each bind
// with a new key byte (IncRKey).
type MW interface {
	// RKey returns the rkey of the latest bind posted (the one the
	// window was allocated with before any): the next bind takes
	// IncRKey of it.
	RKey() uint32
	// Dealloc releases the window; a bound window stops accepting access.
	Dealloc() error
}

// MWAllocator is implemented by the PD of a provider that has type-2
// memory windows (rdma/ibverbs). AllocMW fails with an error wrapping
// ErrNotSupported when the device has none.
type MWAllocator interface {
	AllocMW() (MW, error)
}

// IncRKey returns rkey with its low 8 bits, the key a consumer chooses,
// advanced by one (ibv_inc_rkey): the rkey a window's next bind takes.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }
