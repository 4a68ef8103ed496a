package hostcli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	nvmetcp "github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target/server"
)

// errNeedRoot explains a soft RoCE device that could not be opened for
// lack of privileges.
var errNeedRoot = errors.New("run as root (CAP_NET_RAW)")

// transport is an open way to a target: the dialer, the target's address
// and what to close afterwards.
type transport struct {
	dialer fabrics.Dialer
	addr   fabrics.Address
	host   string        // the local address (rdma)
	dev    provider.Info // the RDMA device (rdma)
	rdev   rdma.Device   // the open RDMA device (rdma), for its counters
	close  func() error
	// shared counts the paths using the RDMA device (rdma): the device
	// closes when the last of them closes.
	shared *sharedDevice
}

// sharedDevice closes an RDMA device once every path using it let go
// (paths reached from one host address share its device: a soft RoCE
// device owns its address's UDP port).
type sharedDevice struct {
	mu    sync.Mutex
	users int
	close func() error
}

// hold returns the close function of one more user, or false when the
// device is closed already.
func (s *sharedDevice) hold() (func() error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == 0 {
		return nil, false
	}
	s.users++
	return s.release(), true
}

// release returns a function that drops one user, once.
func (s *sharedDevice) release() func() error {
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			s.mu.Lock()
			s.users--
			last := s.users == 0
			s.mu.Unlock()
			if last {
				err = s.close()
			}
		})
		return err
	}
}

// newSharedDevice returns the sharing of a device just opened (one user)
// and the close function of that user.
func newSharedDevice(close func() error) (*sharedDevice, func() error) {
	s := &sharedDevice{users: 1, close: close}
	return s, s.release()
}

// openTransport opens the host side of a.Transport: an RDMA device of
// --provider on the host address for rdma, an in-process target for loop.
func openTransport(a connectArgs, log hclog.Logger) (*transport, error) {
	addr, err := a.address()
	if err != nil {
		return nil, err
	}
	switch addr.Transport {
	case transportLoop:
		tree, err := configfs.LoadFile(a.TargetConfig)
		if err != nil {
			return nil, err
		}
		net := loop.NewNetwork()
		srv := server.New(server.Options{Logger: log, LoopNetwork: net})
		if err := srv.Apply(tree); err != nil {
			srv.Close()
			return nil, fmt.Errorf("target configuration %s: %w", a.TargetConfig, err)
		}
		return &transport{dialer: loop.Dialer{Net: net}, addr: addr, close: srv.Close}, nil
	case transportTCP:
		return openTCP(a, addr, log)
	default:
		dev, err := openRDMA(a, addr.Addr, log)
		if err != nil {
			return nil, err
		}
		info := provider.Describe(dev)
		log.Debug("RDMA device opened", append([]any{"addr", dev.Addr()}, info.LogArgs()...)...)
		d := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: log.Named("rdma")})
		sh, closeFn := newSharedDevice(dev.Close)
		return &transport{dialer: d, addr: addr, host: dev.Addr().String(), dev: info, rdev: dev, close: closeFn, shared: sh}, nil
	}
}

// openTCP returns the NVMe/TCP dialer of the flags: digests, the source
// address (--host-traddr) and the IP TOS (--tos). Nothing is opened
// until a queue is dialed.
func openTCP(a connectArgs, addr fabrics.Address, log hclog.Logger) (*transport, error) {
	tos, setTOS, err := a.tos()
	if err != nil {
		return nil, err
	}
	cfg := nvmetcp.HostConfig{HeaderDigest: a.HdrDigest, DataDigest: a.DataDigest, TOS: tos, SetTOS: setTOS, Logger: log.Named("tcp")}
	if a.HostTraddr != "" {
		ip, err := netip.ParseAddr(a.HostTraddr)
		if err != nil {
			return nil, fmt.Errorf("host-traddr %q is not an IP address", a.HostTraddr)
		}
		if ip.Is4() != addr.Addr.Is4() {
			return nil, fmt.Errorf("host-traddr %s and traddr %s are not of one address family", ip, addr.Addr)
		}
		cfg.LocalAddr = ip
	}
	log.Debug("NVMe/TCP host", "hdr_digest", cfg.HeaderDigest, "data_digest", cfg.DataDigest, "host_traddr", a.HostTraddr, "tos", a.TOS)
	return &transport{dialer: nvmetcp.NewDialer(cfg), addr: addr, host: a.HostTraddr, close: func() error { return nil }}, nil
}

// openRDMA opens the host's RDMA device towards target with the provider
// a names: a soft device on the first free host address (see hostAddrs
// and openSoft), or the ibverbs device holding the host address.
func openRDMA(a connectArgs, target netip.Addr, log hclog.Logger) (rdma.Device, error) {
	if err := a.checkProvider(); err != nil {
		return nil, err
	}
	cands, err := hostAddrs(target, a.HostTraddr)
	if err != nil {
		return nil, err
	}
	tos, setTOS, err := a.tos()
	if err != nil {
		return nil, err
	}
	cc, err := a.congestion()
	if err != nil {
		return nil, err
	}
	cfg := provider.Config{Provider: a.Provider, Device: a.Device, Addr: cands[0], TOS: tos, SetTOS: setTOS, Logger: log.Named("rdma")}
	name, err := provider.Resolve(cfg)
	if err != nil {
		return nil, err
	}
	if setTOS {
		log.Info("RDMA connections use the IP type of service of --tos", "tos", tos, "dscp", tos>>2)
	}
	if name == provider.Soft {
		return openSoft(cands, tos, cc, log)
	}
	if cc != nil {
		return nil, fmt.Errorf("--congestion is the soft RDMA provider's, and provider %s was chosen for host address %s (an RDMA NIC configures congestion control in its firmware; pass --provider soft)", name, cfg.Addr)
	}
	cfg.Provider = name
	dev, err := provider.Open(cfg)
	switch {
	case errors.Is(err, ibverbs.ErrNoDevice):
		return nil, fmt.Errorf("no RDMA device holds host address %s%s: add a soft-RoCE device on its interface with `rdma link add rxe0 type rxe netdev %s`, pass -w with the address of an RDMA device, or use --provider soft (%s)",
			cfg.Addr, named(a.Device), interfaceOf(cfg.Addr), trimPrefixes(err.Error()))
	case err != nil:
		return nil, errors.New(trimPrefixes(err.Error()))
	}
	return dev, nil
}

// named returns " named DEV" for a device name, or "".
func named(dev string) string {
	if dev == "" {
		return ""
	}
	return " named " + dev
}

// interfaceOf returns the network interface holding a, or "IF".
func interfaceOf(a netip.Addr) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "IF"
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.Name
				}
			}
		}
	}
	return "IF"
}

// openSoft opens a soft RoCE device on the first free address of cands,
// shared with the other soft devices on it (one per connection daemon or
// fio process: rdma/soft's Config.Share) where this process may load the
// steering program, else alone. The connections it initiates carry
// traffic class tos (--tos; 0: none), and the device runs congestion
// control cc (--congestion; nil: off).
func openSoft(cands []netip.Addr, tos uint8, cc *soft.CongestionConfig, log hclog.Logger) (rdma.Device, error) {
	var last error
	for _, a := range cands {
		dev, err := provider.Open(provider.Config{Provider: provider.Soft, Addr: a, TOS: tos, SetTOS: tos != 0, Share: true,
			Congestion: cc, Logger: log.Named("soft")})
		if err == nil {
			sd, _ := dev.(*soft.Device)
			log.Debug("soft RoCE device opened", "addr", a, "shared", sd != nil && sd.Shared(), "congestion_control", cc != nil)
			return dev, nil
		}
		switch {
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("opening the soft RoCE device on %s: %w", a, errNeedRoot)
		case errors.Is(err, syscall.EADDRINUSE):
			last = fmt.Errorf("host address %s is taken: UDP port 4791 there is bound by a soft RoCE device that does not share it (nvmetd, or an nvmeof without the privilege to share) or by the kernel's rdma_rxe (pass -w with another local address, or unload rdma_rxe)", a)
			continue
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, fmt.Errorf("host address %s is not an address of this machine", a)
		}
		return nil, fmt.Errorf("opening the soft RoCE device on %s: %w", a, err)
	}
	return nil, last
}

// describeConnectError turns a Connect or Discover failure into the one
// line the user sees.
func describeConnectError(err error, a connectArgs, tr *transport) string {
	where := fmt.Sprintf("%s %s:%s", a.Transport, a.Traddr, a.Trsvcid)
	if tr != nil && tr.host != "" {
		where += " (from " + tr.host + ")"
	}
	var ce *initiator.ConnectError
	switch {
	case errors.As(err, &ce):
		return trimPrefixes(ce.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer from %s within %v (--timeout): is a target listening there?", where, a.Timeout)
	case errors.Is(err, initiator.ErrUnreachable):
		return fmt.Sprintf("cannot reach an NVMe-oF target at %s: %s", where, trimPrefixes(err.Error()))
	}
	return trimPrefixes(err.Error())
}

// trimPrefixes removes package prefixes from an error message and makes it
// one line.
func trimPrefixes(s string) string {
	for _, p := range []string{"initiator: ", "nvme-rdma: ", "nvme-tcp: ", "session: ", "soft: ", "ibverbs: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return strings.ReplaceAll(s, "\n", "; ")
}
