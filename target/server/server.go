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
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	nvmetcp "github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/internal/softcc"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/reconcile"
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
	// Poll makes ibverbs devices busy-poll their completion queues.
	Poll bool
}

// Server is a running target.
type Server struct {
	opts   Options
	log    hclog.Logger
	Target *target.Target
	// Reconciler applies configuration trees to Target (Apply uses it);
	// its Applied is the configuration in effect.
	Reconciler *reconcile.Reconciler

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	devices map[deviceKey]*deviceRef
	ports   map[string]*runningPort
	wg      sync.WaitGroup
	pcapUse bool
}

// deviceKey identifies a shared device: ports on the same address share
// one device per provider (a soft device owns UDP port 4791 on its
// address), and ibverbs ports also by device name and TOS (set on every
// connection of the device's connection manager).
type deviceKey struct {
	provider string // soft or ibverbs, resolved
	addr     netip.Addr
	device   string
	tos      int // -1: the provider's default
}

type deviceRef struct {
	dev  rdma.Device
	refs int
	// congestion is the soft device's congestion control (nil: off).
	congestion *soft.CongestionConfig
}

type runningPort struct {
	pl     reconcile.PortListener
	devKey *deviceKey // the device, for RDMA ports
	done   chan struct{}
}

// New creates a server with an empty target.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	tgt := target.New(target.Options{Logger: opts.Logger})
	return &Server{
		opts:       opts,
		log:        opts.Logger,
		Target:     tgt,
		Reconciler: reconcile.New(tgt, opts.Logger.Named("target")),
		ctx:        ctx,
		cancel:     cancel,
		devices:    map[deviceKey]*deviceRef{},
		ports:      map[string]*runningPort{},
	}
}

// Apply makes the target match tree (the first configuration or a reload)
// and starts the listeners of new or changed ports, all or nothing: the
// namespaces' backends and the RDMA devices of the ports to start are
// opened before the running target changes (reconcile.Reconciler.ApplyWith), and
// if any fails, nothing changes and the error, with FILE:LINE, is
// returned. What can fail after that (a listener, which should not) is
// logged and returned with the rest in effect.
func (s *Server) Apply(tree *configfs.Tree) error {
	prepared := map[string]*deviceKey{}
	release := func() {
		for name, key := range prepared {
			if key != nil {
				s.releaseDevice(*key)
			}
			delete(prepared, name)
		}
	}
	ch, err := s.Reconciler.ApplyWith(tree, func(plan reconcile.Changes) error {
		var errs []error
		for _, pl := range plan.Start {
			key, err := s.preparePort(pl)
			if err != nil {
				s.log.Error("port cannot start", "port", pl.Name, "address", pl.Address, "error", err)
				errs = append(errs, tree.PortError(tree.Port(pl.Name), "addr_traddr", err))
				continue
			}
			prepared[pl.Name] = key
		}
		if len(errs) > 0 {
			release()
			return errors.Join(errs...)
		}
		return nil
	})
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range ch.Stopped {
		s.portStopped(name)
	}
	for _, pl := range ch.Start {
		key := prepared[pl.Name]
		delete(prepared, pl.Name)
		if key != nil {
			if err := s.setCongestion(pl, *key); err != nil {
				errs = append(errs, tree.PortError(tree.Port(pl.Name), "addr_traddr", err))
				s.log.Error("congestion control not changed", "port", pl.Name, "address", pl.Address, "error", err)
			}
		}
		if err := s.startPort(pl, key); err != nil {
			errs = append(errs, tree.PortError(tree.Port(pl.Name), "addr_traddr", err))
			s.log.Error("port not started", "port", pl.Name, "address", pl.Address, "error", err)
		}
	}
	release() // ports the target did not add after all
	return errors.Join(errs...)
}

// preparePort makes sure a port can start: the loop network for loop
// ports; for rdma ports, the device opened (or shared), whose key it
// returns: startPort takes over that reference. tcp ports need nothing
// before their listen.
func (s *Server) preparePort(pl reconcile.PortListener) (*deviceKey, error) {
	switch pl.Address.Transport {
	case fabrics.TransportLoop:
		if s.opts.LoopNetwork == nil {
			return nil, errors.New("loop transport not available in this process")
		}
		return nil, nil
	case fabrics.TransportRDMA:
		_, key, err := s.device(pl)
		if err != nil {
			return nil, err
		}
		return &key, nil
	case fabrics.TransportTCP:
		return nil, nil
	default:
		return nil, fmt.Errorf("transport %q not supported", pl.Address.Transport)
	}
}

// Check runs on tree, without serving it, every check Apply makes before
// changing anything: the namespaces' backends (reconcile.CheckBackends,
// which opens or creates nothing) and each port: its transport available
// (opts.LoopNetwork for loop) and, for rdma, its RDMA device opened and
// closed at once, so that an address no device can hold, a provider not
// built in, or a soft device's UDP port already taken (by a running
// nvmetd, say) is reported; for tcp, its address and port listened on and
// closed at once. Errors carry FILE:LINE.
func Check(tree *configfs.Tree, opts Options) error {
	opts.Pcap = nil
	s := New(opts)
	defer s.Close()
	errs := []error{reconcile.CheckBackends(tree)}
	for _, p := range tree.Ports {
		pl := reconcile.PortListener{Name: p.ID, Address: fabrics.Address{Transport: p.Trtype},
			Provider: p.Provider, Device: p.Device, TOS: p.TOS, Congestion: p.Congestion}
		pl.Address.Addr, _ = netip.ParseAddr(p.Traddr) // validated
		if _, err := s.preparePort(pl); err != nil {
			errs = append(errs, tree.PortError(p, "addr_traddr", err))
		}
		if p.Trtype == configfs.TransportTCP {
			svc, _ := strconv.ParseUint(p.Trsvcid, 10, 16) // validated
			l, err := nvmetcp.Listen(nvmetcp.TargetConfig{Addr: pl.Address.Addr, ServiceID: uint16(svc), TOS: -1})
			if err != nil {
				errs = append(errs, tree.PortError(p, "addr_traddr", err))
				continue
			}
			l.Close()
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
	if p.devKey != nil {
		s.releaseDevice(*p.devKey)
	}
	s.log.Info("port stopped", "port", name)
}

// startPort listens on a port and serves it; key is the device
// preparePort opened for an rdma port, whose reference the port takes.
func (s *Server) startPort(pl reconcile.PortListener, key *deviceKey) error {
	var l fabrics.Listener
	var devKey *deviceKey
	var devArgs []any
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
		if key == nil {
			return errors.New("RDMA device not prepared")
		}
		dev := s.deviceOf(*key)
		rl, err := nvmerdma.Listen(nvmerdma.TargetConfig{
			Device:            dev,
			ServiceID:         pl.Address.ServiceID,
			InlineDataSize:    pl.InlineDataSize,
			ConnectTimeout:    pl.ConnectTimeout,
			MaxPending:        pl.MaxPending,
			MaxPendingPerHost: pl.MaxPendingPerHost,
			DataPoolBytes:     pl.DataPoolBytes,
			SRQSize:           pl.SRQSize,
			Logger:            s.log.Named("rdma"),
		})
		if err != nil {
			s.releaseDevice(*key)
			return err
		}
		l, devKey = rl, key
		devArgs = provider.Describe(dev).LogArgs()
	case fabrics.TransportTCP:
		inline := pl.InlineDataSize
		if inline == 0 {
			inline = -1 // none (the transport's 0 means its default)
		}
		tl, err := nvmetcp.Listen(nvmetcp.TargetConfig{
			Addr:           pl.Address.Addr,
			ServiceID:      pl.Address.ServiceID,
			InlineDataSize: inline,
			ConnectTimeout: pl.ConnectTimeout,
			MaxPending:     pl.MaxPending,
			TOS:            pl.TOS,
			Logger:         s.log.Named("tcp"),
		})
		if err != nil {
			return err
		}
		l = tl
	default:
		return fmt.Errorf("transport %q not supported", pl.Address.Transport)
	}
	// The port as the apply left it: a reload before the goroutine
	// runs must not make it serve the reloaded port with this listener.
	tp, ok := s.Target.Port(pl.ID)
	if !ok {
		l.Close()
		if devKey != nil {
			s.releaseDevice(*devKey)
		}
		return fmt.Errorf("port %s (%d) is not in the target", pl.Name, pl.ID)
	}
	p := &runningPort{pl: pl, devKey: devKey, done: make(chan struct{})}
	s.mu.Lock()
	s.ports[pl.Name] = p
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		if err := tp.Serve(s.ctx, l); err != nil && s.ctx.Err() == nil {
			s.log.Error("port failed", "port", pl.Name, "error", err)
		}
	}()
	s.log.Info("listening", append([]any{"port", pl.Name, "portid", pl.ID, "address", pl.Address.String()}, devArgs...)...)
	return nil
}

// device opens (or shares) the RDMA device of an rdma port through
// rdma/provider, and returns it with its key for releaseDevice.
func (s *Server) device(pl reconcile.PortListener) (rdma.Device, deviceKey, error) {
	cfg := provider.Config{Provider: pl.Provider, Device: pl.Device, Addr: pl.Address.Addr,
		MTU: s.opts.SoftMTU, Poll: s.opts.Poll, Congestion: softcc.Config(pl.Congestion), Logger: s.log.Named("rdma")}
	if pl.TOS >= 0 {
		cfg.TOS, cfg.SetTOS = uint8(pl.TOS), true
	}
	name, err := provider.Resolve(cfg)
	if err != nil {
		return nil, deviceKey{}, err
	}
	key := deviceKey{provider: name, addr: pl.Address.Addr, tos: -1}
	switch {
	case name == provider.IBVerbs:
		key.device = pl.Device
		if cfg.SetTOS {
			key.tos = int(cfg.TOS)
		}
	case cfg.SetTOS:
		// Said per port, not only when the shared device opens.
		s.log.Warn("the soft RDMA provider does not set the IP type of service: tos ignored", "port", pl.Name, "tos", pl.TOS)
		cfg.SetTOS = false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.devices[key]; d != nil {
		// configfs makes the ports of one soft device agree; a reload
		// that changes their block finds the device open (its ports
		// restart before it closes): Apply changes its settings once
		// the reload is accepted (setCongestion).
		d.refs++
		return d.dev, key, nil
	}
	cfg.Provider = name
	if name == provider.Soft && s.opts.Pcap != nil && !s.pcapUse {
		cfg.Pcap = s.opts.Pcap
		s.pcapUse = true
	}
	dev, err := provider.Open(cfg)
	if errors.Is(err, ibverbs.ErrNoDevice) {
		err = fmt.Errorf("%w (add a soft-RoCE device on the address's interface with `rdma link add rxe0 type rxe netdev IF`, or set provider = \"soft\")", err)
	}
	if err != nil {
		return nil, key, err
	}
	s.log.Info("RDMA device opened", append([]any{"address", pl.Address.Addr}, provider.Describe(dev).LogArgs()...)...)
	s.devices[key] = &deviceRef{dev: dev, refs: 1, congestion: cfg.Congestion}
	return dev, key, nil
}

// deviceOf returns the open device of key (a reference the caller holds).
func (s *Server) deviceOf(key deviceKey) rdma.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devices[key].dev
}

func (s *Server) releaseDevice(key deviceKey) {
	s.mu.Lock()
	d := s.devices[key]
	if d != nil {
		d.refs--
		if d.refs > 0 {
			d = nil
		} else {
			delete(s.devices, key)
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
	s.devices = map[deviceKey]*deviceRef{}
	s.mu.Unlock()
	for _, d := range devs {
		d.dev.Close()
	}
	return err
}
