package ibverbs

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
)

// ErrNotBuilt is wrapped by Open and Devices in a binary built without
// the ibverbs build tag (or without cgo).
var ErrNotBuilt = errors.New("the ibverbs RDMA provider is not built into this binary (rebuild with CGO_ENABLED=1 go build -tags ibverbs, with libibverbs-dev and librdmacm-dev installed)")

// ErrNoDevice is wrapped by Open when no RDMA device matches the request.
var ErrNoDevice = errors.New("no RDMA device")

// Config selects and configures a device.
type Config struct {
	// Addr is the IP address (IPv4 or IPv6) the device is used with: on
	// RoCE the address of its network interface and, as a GID, an entry
	// of its GID table. Required.
	Addr netip.Addr
	// Name selects the device by name ("mlx5_0", "rxe0"); empty means
	// the device whose GID table holds Addr.
	Name string
	// TOS, when SetTOS is true, is the IP type of service (DSCP << 2 |
	// ECN) of the connections the connection manager sets up
	// (RDMA_OPTION_ID_TOS); otherwise the kernel's default applies.
	TOS    uint8
	SetTOS bool
	// ACKTimeout, when not 0, is the local ACK timeout code (4.096 µs ×
	// 2^code) of connected QPs (RDMA_OPTION_ID_ACK_TIMEOUT).
	ACKTimeout uint8
	// Poll makes completion queues busy-poll on a goroutine of their own
	// instead of sleeping on a completion channel: lower latency for a
	// core per busy CQ.
	Poll bool
	// Logger receives the provider's logs (nil: none).
	Logger hclog.Logger
}

// Info describes the device and port a Device uses.
type Info struct {
	Name      string   // the device name (ibv_get_device_name)
	Port      int      // the port number (from 1)
	GIDIndex  int      // the index of Addr's GID in the port's GID table
	GIDType   GIDType  // the type of that GID entry
	MTU       rdma.MTU // the port's active MTU
	LinkLayer string   // "Ethernet" (RoCE) or "InfiniBand"
	Netdev    string   // the network interface of the GID entry, if known
	VendorID  uint32   // the device's IEEE vendor ID (0xffffff: the kernel's rxe)
}

// Device is an open ibverbs device port.
type Device interface {
	rdma.Device
	// Info returns the device, port and GID the device uses.
	Info() Info
}

// GIDType is the type of a GID table entry (enum ibv_gid_type).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0 // InfiniBand
	GIDTypeRoCEv1 GIDType = 1 // RoCE v1 (Ethernet, no IP header)
	GIDTypeRoCEv2 GIDType = 2 // RoCE v2 (UDP/IP)
)

// String names the type as ibv_devinfo -v does.
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GIDEntry is one populated entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    rdma.GID
	Type   GIDType
	Netdev string // the network interface it belongs to ("" if unknown)
}

// Addr returns the IP address of a RoCE GID (IPv4-mapped GIDs unmapped).
func (e GIDEntry) Addr() netip.Addr { return e.GID.Addr() }

// PortInfo describes one port of a device.
type PortInfo struct {
	Port      int
	State     rdma.PortState
	ActiveMTU rdma.MTU
	LinkLayer string
	GIDs      []GIDEntry
}

// DeviceInfo describes one device rdma-core found.
type DeviceInfo struct {
	Name  string
	Ports []PortInfo
}

// Match returns the port and GID entry of the device that fit cfg: the
// device named cfg.Name (if set), a port whose GID table holds cfg.Addr,
// preferring an active port and a RoCE v2 entry over RoCE v1, as rdma_cm
// does.
func (d DeviceInfo) Match(cfg Config) (PortInfo, GIDEntry, bool) {
	if cfg.Name != "" && cfg.Name != d.Name {
		return PortInfo{}, GIDEntry{}, false
	}
	want := rdma.GIDFromAddr(cfg.Addr)
	var bestP PortInfo
	var bestG GIDEntry
	best := -1
	for _, p := range d.Ports {
		for _, g := range p.GIDs {
			if g.GID != want {
				continue
			}
			score := 0
			if p.State == rdma.PortActive {
				score += 2
			}
			if g.Type == GIDTypeRoCEv2 || g.Type == GIDTypeIB {
				score++
			}
			if score > best {
				best, bestP, bestG = score, p, g
			}
		}
	}
	return bestP, bestG, best >= 0
}

// Lookup returns the name of the device whose GID table holds addr, and
// false when there is none (or the provider is not built in).
func Lookup(addr netip.Addr) (string, bool) {
	devs, err := Devices()
	if err != nil {
		return "", false
	}
	for _, d := range devs {
		if _, _, ok := d.Match(Config{Addr: addr}); ok {
			return d.Name, true
		}
	}
	return "", false
}
