// Package server runs an NVMe-oF target from a configuration tree: it
// applies the tree to a target.Target, opens the RDMA devices and
// transport listeners its ports name, serves them, and applies a new tree
// on reload. cmd/nvmetd and the initiator's self-test use it.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
)

// Options configure a Server.
type Options struct {
	Logger hclog.Logger
	// LoopNetwork serves ports with transport "loop" (in-process tests
	// and self-tests); nil refuses them.
	LoopNetwork *loop.Network
	// Pcap, if set, gets a pcap stream of every RoCEv2 packet of the soft
	// devices (one device only: the first opened).
	Pcap io.Writer
	// SoftMTU caps the soft devices' path MTU (0: from the interface).
	SoftMTU int
}

// Server is a running target.
type Server struct {
	opts   Options
	log    hclog.Logger
	Target *target.Target

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	devices map[netip.Addr]*deviceRef
	ports   map[string]*runningPort
	wg      sync.WaitGroup
	pcapUse bool
}

type deviceRef struct {
	dev  rdma.Device
	refs int
}

type runningPort struct {
	pl   target.PortListener
	addr netip.Addr // device address, for RDMA ports
	done chan struct{}
}

// New creates a server with an empty target.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:    opts,
		log:     opts.Logger,
		Target:  target.New(target.Options{Logger: opts.Logger}),
		ctx:     ctx,
		cancel:  cancel,
		devices: map[netip.Addr]*deviceRef{},
		ports:   map[string]*runningPort{},
	}
}

// Apply makes the target match tree (the first configuration or a reload)
// and starts the listeners of new or changed ports. It returns every
// error; what did not fail is in effect.
func (s *Server) Apply(tree *configfs.Tree) error {
	ch, err := s.Target.ApplyConfig(tree)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range ch.Stopped {
		s.portStopped(name)
	}
	for _, pl := range ch.Start {
		if err := s.startPort(pl); err != nil {
			errs = append(errs, err)
			s.log.Error("port not started", "port", pl.Name, "address", pl.Address, "error", err)
		}
	}
	return errors.Join(errs...)
}

// portStopped releases what a port used once its Serve has returned.
func (s *Server) portStopped(name string) {
	s.mu.Lock()
	p := s.ports[name]
	delete(s.ports, name)
	s.mu.Unlock()
	if p == nil {
		return
	}
	<-p.done
	if p.addr.IsValid() {
		s.releaseDevice(p.addr)
	}
	s.log.Info("port stopped", "port", name)
}

func (s *Server) startPort(pl target.PortListener) error {
	var l fabrics.Listener
	var devAddr netip.Addr
	switch pl.Address.Transport {
	case fabrics.TransportLoop:
		if s.opts.LoopNetwork == nil {
			return errors.New("loop transport not available in this process")
		}
		ll, err := s.opts.LoopNetwork.Listen(pl.Address)
		if err != nil {
			return err
		}
		l = ll
	case fabrics.TransportRDMA:
		dev, err := s.device(pl.Provider, pl.Address.Addr)
		if err != nil {
			return err
		}
		rl, err := nvmerdma.Listen(nvmerdma.TargetConfig{
			Device:         dev,
			ServiceID:      pl.Address.ServiceID,
			InlineDataSize: pl.InlineDataSize,
			Logger:         s.log.Named("rdma"),
		})
		if err != nil {
			s.releaseDevice(pl.Address.Addr)
			return err
		}
		l, devAddr = rl, pl.Address.Addr
	default:
		return fmt.Errorf("transport %q not supported", pl.Address.Transport)
	}
	p := &runningPort{pl: pl, addr: devAddr, done: make(chan struct{})}
	s.mu.Lock()
	s.ports[pl.Name] = p
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		if err := s.Target.Serve(s.ctx, pl.ID, l); err != nil && s.ctx.Err() == nil {
			s.log.Error("port failed", "port", pl.Name, "error", err)
		}
	}()
	s.log.Info("listening", "port", pl.Name, "portid", pl.ID, "address", pl.Address.String())
	return nil
}

// device opens (or shares) the RDMA device for an address.
func (s *Server) device(provider string, addr netip.Addr) (rdma.Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.devices[addr]; d != nil {
		d.refs++
		return d.dev, nil
	}
	switch provider {
	case "", configfs.ProviderSoft:
	default:
		return nil, fmt.Errorf("RDMA provider %q is not built into this binary", provider)
	}
	cfg := soft.Config{Addr: addr, MTU: s.opts.SoftMTU}
	if s.opts.Pcap != nil && !s.pcapUse {
		cfg.Pcap = s.opts.Pcap
		s.pcapUse = true
	}
	dev, err := soft.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("soft RoCE device on %s: %w", addr, err)
	}
	s.devices[addr] = &deviceRef{dev: dev, refs: 1}
	return dev, nil
}

func (s *Server) releaseDevice(addr netip.Addr) {
	s.mu.Lock()
	d := s.devices[addr]
	if d != nil {
		d.refs--
		if d.refs > 0 {
			d = nil
		} else {
			delete(s.devices, addr)
		}
	}
	s.mu.Unlock()
	if d != nil {
		d.dev.Close()
	}
}

// Close tears the target down: controllers, ports, namespaces (flushed
// and closed by the target) and devices.
func (s *Server) Close() error {
	err := s.Target.Close()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	devs := s.devices
	s.devices = map[netip.Addr]*deviceRef{}
	s.mu.Unlock()
	for _, d := range devs {
		d.dev.Close()
	}
	return err
}
