// Package provider opens an rdma.Device by provider name, so that the
// daemon, the CLI, the fio engine and rping choose between the RDMA
// providers the same way:
//
//	soft     the pure-Go RoCEv2 HCA over UDP (rdma/soft); always built in
//	ibverbs  rdma-core's libibverbs and librdmacm (rdma/ibverbs); built in
//	         only with the build tag ibverbs and cgo
//	auto     ibverbs when it is built in and an RDMA device holds the
//	         address (or a device is named), else soft; the default
//
// A binary built without ibverbs refuses it with an error wrapping
// ibverbs.ErrNotBuilt, which says how to build with it.
package provider

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// Provider names.
const (
	Soft    = "soft"    // pure-Go RoCEv2 over UDP
	IBVerbs = "ibverbs" // rdma-core (libibverbs + librdmacm), build tag ibverbs
	Auto    = "auto"    // ibverbs where an RDMA device holds the address, else soft
)

// Names returns every provider name Open accepts, built in or not, in the
// order help texts list them.
func Names() []string { return []string{Auto, Soft, IBVerbs} }

// Built returns the providers built into this binary: soft, and ibverbs
// when the binary was built with the ibverbs tag and cgo. Auto is always
// accepted and is not listed.
func Built() []string {
	if ibverbs.Built {
		return []string{Soft, IBVerbs}
	}
	return []string{Soft}
}

// ErrUnknown is wrapped by the errors for a provider name that is none of
// Names.
var ErrUnknown = errors.New("unknown RDMA provider")

// ErrDeviceWithSoft is wrapped by the errors for a device name given with
// the soft provider, which has no devices to choose from.
var ErrDeviceWithSoft = errors.New("a device name selects an rdma-core device: the soft provider takes none")

// Config says which device to open.
type Config struct {
	// Provider is soft, ibverbs or auto; "" means auto.
	Provider string
	// Device names the rdma-core device ("mlx5_0", "rxe0"); empty means
	// the device whose GID table holds Addr. Only ibverbs has devices: a
	// name with soft is an error, and with auto selects ibverbs.
	Device string
	// Addr is the device's IP address (on RoCE its GID). Required.
	Addr netip.Addr
	// TOS, when SetTOS is true, is the IP type of service (DSCP << 2 |
	// ECN) of the connections the connection manager initiates: ibverbs
	// sets it with rdma_set_option(RDMA_OPTION_ID_TOS), soft as
	// soft.Config.TrafficClass (the same: the REQ's and the QP's
	// traffic class, sent as every datagram's TOS).
	TOS    uint8
	SetTOS bool
	// Logger receives the provider's logs (nil: none).
	Logger hclog.Logger

	// MTU caps the soft device's path MTU in bytes (256..4096; 0: from
	// the interface). ibverbs uses the port's active MTU.
	MTU int
	// Pcap, if set, receives a pcap stream of the soft device's packets.
	// ibverbs ignores it (capture with ibdump or tcpdump on the netdev).
	Pcap io.Writer

	// Poll makes the ibverbs device's completion queues busy-poll
	// instead of sleeping on a completion channel. soft ignores it.
	Poll bool
	// ACKTimeout, when not 0, is the ibverbs local ACK timeout code
	// (4.096 µs × 2^code). soft ignores it.
	ACKTimeout uint8
	// Share opens a soft device that shares its address with the other
	// soft devices that do (soft.Config.Share), so that every connection
	// daemon and fio process of a host uses the host's one address, as
	// every QP uses rdma_rxe's one device. Where that cannot be done
	// (soft.ErrShareUnsupported: no privilege to load the steering
	// program) it opens an unshared device, as without Share. ibverbs
	// devices are shared by the kernel: it ignores Share.
	Share bool
	// ShareDir is soft.Config.ShareDir (tests; "" for the default).
	ShareDir string
	// Congestion is soft.Config.Congestion: RoCEv2 congestion control
	// (nil: off). ibverbs ignores it (a NIC's is configured in firmware);
	// callers refuse it there.
	Congestion *soft.CongestionConfig
}

// Check reports whether a provider name and device name are acceptable in
// this binary, without looking at any device: an unknown name (wrapping
// ErrUnknown), a device with soft (wrapping ErrDeviceWithSoft), and
// ibverbs, or auto with a device, in a binary without ibverbs (wrapping
// ibverbs.ErrNotBuilt) are errors.
func Check(name, device string) error {
	switch name {
	case Soft:
		if device != "" {
			return fmt.Errorf("provider soft, device %q: %w", device, ErrDeviceWithSoft)
		}
	case IBVerbs:
		if !ibverbs.Built {
			// The message names the provider and how to build with it.
			return ibverbs.ErrNotBuilt
		}
	case "", Auto:
		if device != "" && !ibverbs.Built {
			return fmt.Errorf("device %q needs the ibverbs provider: %w", device, ibverbs.ErrNotBuilt)
		}
	default:
		return fmt.Errorf("%w %q (want %s)", ErrUnknown, name, joinOr(Names()))
	}
	return nil
}

// Resolve returns the provider Open would use for cfg: soft or ibverbs.
// Auto is ibverbs when it is built in and either cfg.Device is set or an
// RDMA device holds cfg.Addr (ibverbs.Lookup), else soft. The errors are
// Check's.
func Resolve(cfg Config) (string, error) {
	if err := Check(cfg.Provider, cfg.Device); err != nil {
		return "", err
	}
	switch cfg.Provider {
	case Soft, IBVerbs:
		return cfg.Provider, nil
	}
	if ibverbs.Built {
		if cfg.Device != "" {
			return IBVerbs, nil
		}
		if _, ok := ibverbs.Lookup(cfg.Addr); ok {
			return IBVerbs, nil
		}
	}
	return Soft, nil
}

// Open opens the device cfg describes with the provider Resolve picks.
// Errors name the provider and the address, and wrap the provider's
// (ibverbs.ErrNoDevice when no RDMA device holds the address,
// ibverbs.ErrNotBuilt, syscall errors of the soft device's sockets).
func Open(cfg Config) (rdma.Device, error) {
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("provider: an IP address is required: %w", rdma.ErrInvalidArgument)
	}
	name, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	switch name {
	case IBVerbs:
		dev, err := ibverbs.Open(ibverbs.Config{Addr: cfg.Addr, Name: cfg.Device, TOS: cfg.TOS, SetTOS: cfg.SetTOS,
			ACKTimeout: cfg.ACKTimeout, Poll: cfg.Poll, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("RDMA device on %s (provider ibverbs): %w", cfg.Addr, err)
		}
		return dev, nil
	default:
		scfg := soft.Config{Addr: cfg.Addr, MTU: cfg.MTU, Pcap: cfg.Pcap, Logger: log, Share: cfg.Share, ShareDir: cfg.ShareDir,
			Congestion: cfg.Congestion}
		if cfg.SetTOS {
			scfg.TrafficClass = cfg.TOS
		}
		dev, err := soft.Open(scfg)
		// A user without privilege cannot share: the steering program is
		// refused (ErrShareUnsupported), or the share directory
		// (/run/soft-roce, root's) cannot be written. Both open an
		// unshared device, as a developer's go test on 127.x needs.
		if errors.Is(err, soft.ErrShareUnsupported) || cfg.Share && errors.Is(err, fs.ErrPermission) {
			// Without privilege that is expected; anything else (a kernel
			// without SK_REUSEPORT programs, a refused program) is news.
			lvl := hclog.Warn
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
				lvl = hclog.Debug
			}
			log.Log(lvl, "soft RoCE device not shared: each connection needs an address of its own", "addr", cfg.Addr, "error", err)
			scfg.Share = false
			dev, err = soft.Open(scfg)
		}
		if err != nil {
			return nil, fmt.Errorf("soft RoCE device on %s: %w", cfg.Addr, err)
		}
		return dev, nil
	}
}

// Info describes an open device for logs: which provider, device, port
// and GID it uses.
type Info struct {
	Provider string     // soft or ibverbs ("" for a device of neither)
	Name     string     // the device name
	Addr     netip.Addr // the device's IP address
	// Port, GIDIndex, GIDType, LinkLayer and Netdev are ibverbs'
	// (ibverbs.Info); zero for soft.
	Port      int
	GIDIndex  int
	GIDType   string
	LinkLayer string
	Netdev    string
	MTU       rdma.MTU // the active path MTU
}

// Describe returns what dev is: its provider, name, port, GID index, MTU
// and link layer.
func Describe(dev rdma.Device) Info {
	info := Info{Name: dev.Name(), Addr: dev.Addr(), MTU: dev.Port().ActiveMTU}
	switch d := dev.(type) {
	case ibverbs.Device:
		vi := d.Info()
		info.Provider = IBVerbs
		info.Name, info.Port, info.GIDIndex, info.GIDType = vi.Name, vi.Port, vi.GIDIndex, vi.GIDType.String()
		info.LinkLayer, info.Netdev = vi.LinkLayer, vi.Netdev
		if vi.MTU.Valid() {
			info.MTU = vi.MTU
		}
	case *soft.Device:
		info.Provider = Soft
	}
	return info
}

// PortNum returns the port number QPs of dev use (Info.Port; 1 when the
// provider has no port numbers, as soft).
func (i Info) PortNum() int {
	if i.Port > 0 {
		return i.Port
	}
	return 1
}

// LogArgs returns the description as hclog key/value pairs, without the
// fields the provider leaves zero.
func (i Info) LogArgs() []any {
	args := []any{"provider", i.Provider, "device", i.Name}
	if i.Port > 0 {
		args = append(args, "device_port", i.Port, "gid_index", i.GIDIndex)
	}
	if i.GIDType != "" {
		args = append(args, "gid_type", i.GIDType)
	}
	args = append(args, "mtu", i.MTU.String())
	if i.LinkLayer != "" {
		args = append(args, "link_layer", i.LinkLayer)
	}
	if i.Netdev != "" {
		args = append(args, "netdev", i.Netdev)
	}
	return args
}

// String formats the description on one line, as "ibverbs mlx5_0 port 1
// GID index 3 (RoCE v2) MTU 4096 Ethernet (netdev ens1f0)" or "soft
// soft-127.0.0.1 MTU 4096".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Provider)
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(i.Name)
	if i.Port > 0 {
		b.WriteString(" port " + strconv.Itoa(i.Port) + " GID index " + strconv.Itoa(i.GIDIndex))
		if i.GIDType != "" {
			b.WriteString(" (" + i.GIDType + ")")
		}
	}
	b.WriteString(" MTU " + i.MTU.String())
	if i.LinkLayer != "" {
		b.WriteString(" " + i.LinkLayer)
	}
	if i.Netdev != "" {
		b.WriteString(" (netdev " + i.Netdev + ")")
	}
	return b.String()
}

// joinOr lists names as "a, b or c".
func joinOr(names []string) string {
	names = slices.Clone(names)
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
