package fio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	nvmetcp "github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/internal/softcc"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Defaults of the engine's options.
const (
	// DefaultTraddr is the target address when traddr is not given.
	DefaultTraddr = "127.0.0.1"
	// DefaultLoopNQN is the subsystem of the in-process loop target when
	// subnqn is not given.
	DefaultLoopNQN = "nqn.2026-11.io.nvmeof:fio-loop"
	// DefaultLoopSize is the loop target's namespace size (sparse memory).
	DefaultLoopSize = 1 << 30
	// LoopbackHostAddr is host_traddr's default when traddr is a loopback
	// address: the target's soft device holds UDP 4791 on traddr itself.
	LoopbackHostAddr = "127.0.0.2"
	// ConnectTimeout bounds Connect (admin queue, I/O queues, identify).
	ConnectTimeout = 30 * time.Second
)

// Config is the engine's configuration: fio's engine options and iodepth.
type Config struct {
	// Transport is fabrics.TransportRDMA (default), fabrics.TransportTCP
	// (NVMe/TCP; the RDMA provider options do not apply) or
	// fabrics.TransportLoop.
	Transport string
	// Traddr and Trsvcid are the target port (default 127.0.0.1, 4420).
	Traddr  string
	Trsvcid int
	// SubNQN is the subsystem (required for rdma); HostNQN the host's
	// (default as initiator.Options).
	SubNQN, HostNQN string
	// HostTraddr is the local RDMA device's address (rdma only).
	HostTraddr string
	// Provider is the RDMA provider: soft, ibverbs or auto (default;
	// see package rdma/provider). Device names the ibverbs device
	// (default: the one holding HostTraddr).
	Provider, Device string
	// DHChapSecret and DHChapCtrlSecret are the DH-HMAC-CHAP secrets
	// (DHHC-1 text) of the host and, for bidirectional authentication,
	// of the controller, as initiator.Options takes them.
	DHChapSecret, DHChapCtrlSecret string
	// Congestion turns on the soft RDMA device's RoCEv2 congestion
	// control: "on", "off" ("" too), or KEY=VALUE pairs with nvmetd's
	// congestion block keys separated by ':' (fio splits its options at
	// ','; ',' is accepted too), as nvmeof --congestion takes them.
	Congestion string
	// NSID is the namespace (default 1).
	NSID uint32
	// NrIOQueues and QueueSize are passed to initiator.Options.
	NrIOQueues, QueueSize int
	// LoopSize is the size of the loop target's namespace in bytes.
	LoopSize int64
	// Depth is the number of request slots (fio's iodepth).
	Depth int
	// BusyPoll is how long Reap polls the transport on the caller's
	// thread (Namespace.Poll) before it sleeps; 0 sleeps at once, and
	// completions then come from the provider's goroutine.
	BusyPoll time.Duration
	// DelaySubmit holds the commands Submit starts until the next Reap
	// (or Close), which sends each I/O queue's together: one doorbell,
	// one UDP send on the soft provider (SPDK's delay_cmd_submit, on by
	// default in its RDMA transport). Off, each leaves from Submit.
	DelaySubmit bool
	// PollSleep spends the BusyPoll window asleep in the kernel on the
	// transport's socket (Namespace.PollWait), woken by the completion's
	// datagram on this thread, instead of spinning, where the transport
	// can (the soft provider with one I/O queue): less CPU per I/O, a few
	// microseconds more latency.
	PollSleep bool
	// PollSleepAuto lets the connected queue choose PollSleep (fio's
	// default, poll_sleep=auto): on, with a BusyPoll window of at least
	// 1 ms, where PollWait can sleep (tcp; the soft provider with one I/O
	// queue): fewer wake-ups and less CPU than spinning, and at QD32 and
	// 128K as fast (docs/tcp.md, docs/soft-perf.md "Session 13"); off
	// elsewhere (ibverbs, several I/O queues), where it would spin.
	PollSleepAuto bool
	// Logger receives the initiator's log (default: none).
	Logger hclog.Logger

	// hostKey and ctrlKey are DHChapSecret and DHChapCtrlSecret parsed
	// (by withDefaults).
	hostKey, ctrlKey *auth.Key
	// cc is Congestion parsed (by withDefaults; nil: off).
	cc *soft.CongestionConfig
}

// autoSleepWindow is the least BusyPoll window of PollSleepAuto where it
// sleeps.
const autoSleepWindow = time.Millisecond

// withDefaults fills in defaults and checks c.
func (c Config) withDefaults() (Config, error) {
	switch c.Transport {
	case "":
		c.Transport = fabrics.TransportRDMA
	case fabrics.TransportRDMA, fabrics.TransportTCP, fabrics.TransportLoop:
	default:
		return c, fmt.Errorf("fio engine: transport %q: want rdma, tcp or loop", c.Transport)
	}
	if c.Traddr == "" {
		c.Traddr = DefaultTraddr
	}
	if c.Trsvcid == 0 {
		c.Trsvcid = fabrics.DefaultServiceID
	}
	if c.Trsvcid < 0 || c.Trsvcid > 0xffff {
		return c, fmt.Errorf("fio engine: trsvcid %d out of range", c.Trsvcid)
	}
	if c.Provider == "" {
		c.Provider = provider.Auto
	}
	if c.Transport == fabrics.TransportRDMA {
		if err := provider.Check(c.Provider, c.Device); err != nil {
			if errors.Is(err, ibverbs.ErrNotBuilt) {
				return c, fmt.Errorf("fio engine: provider %s, device %q: the ibverbs RDMA provider is not built into this engine "+
					"(rebuild it with NVMEOF_TAGS=ibverbs scripts/build-fio-engine.sh; needs libibverbs-dev and librdmacm-dev)", c.Provider, c.Device)
			}
			return c, fmt.Errorf("fio engine: provider %s, device %q: %w", c.Provider, c.Device, err)
		}
	}
	cc, err := softcc.Parse(strings.ReplaceAll(c.Congestion, ":", ","))
	switch {
	case err != nil:
		return c, fmt.Errorf("fio engine: %w", err)
	case cc != nil && c.Transport != fabrics.TransportRDMA:
		return c, fmt.Errorf("fio engine: congestion is RoCEv2 congestion control of the soft RDMA provider: not for transport %s", c.Transport)
	case cc != nil && c.Provider == provider.IBVerbs:
		return c, errors.New("fio engine: congestion is the soft RDMA provider's: an RDMA NIC configures congestion control in its firmware (provider ibverbs)")
	}
	c.cc = cc
	if c.SubNQN == "" {
		if c.Transport != fabrics.TransportLoop {
			return c, errors.New("fio engine: subnqn is required")
		}
		c.SubNQN = DefaultLoopNQN
	}
	// Checked here so that a bad secret fails before any device opens;
	// the errors never show the secret.
	if c.DHChapSecret != "" {
		if c.hostKey, err = auth.ParseKey(c.DHChapSecret); err != nil {
			return c, fmt.Errorf("fio engine: dhchap_secret: %w", err)
		}
	}
	if c.DHChapCtrlSecret != "" {
		if c.ctrlKey, err = auth.ParseKey(c.DHChapCtrlSecret); err != nil {
			return c, fmt.Errorf("fio engine: dhchap_ctrl_secret: %w", err)
		}
		if c.DHChapSecret == "" {
			return c, errors.New("fio engine: dhchap_ctrl_secret needs dhchap_secret")
		}
	}
	if c.NSID == 0 {
		c.NSID = 1
	}
	if c.LoopSize == 0 {
		c.LoopSize = DefaultLoopSize
	}
	if c.Depth <= 0 {
		c.Depth = 1
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// conn is an engine's controller and what it needs released.
type conn struct {
	ctrl *initiator.Controller
}

func (c *conn) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ctrl.Disconnect(ctx)
}

// connect opens a controller to the subsystem cfg names.
func connect(ctx context.Context, cfg Config) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	opts := initiator.Options{
		SubsystemNQN: cfg.SubNQN,
		HostNQN:      cfg.HostNQN,
		NrIOQueues:   cfg.NrIOQueues,
		QueueSize:    cfg.QueueSize,
		Logger:       cfg.Logger,

		HostKey: cfg.hostKey,
		CtrlKey: cfg.ctrlKey,
	}
	var d fabrics.Dialer
	var addr fabrics.Address
	switch cfg.Transport {
	case fabrics.TransportLoop:
		lt, err := loopTargetFor(cfg)
		if err != nil {
			return nil, err
		}
		d, addr = loop.Dialer{Net: lt.net}, lt.addr
	case fabrics.TransportTCP:
		ta, err := netip.ParseAddr(cfg.Traddr)
		if err != nil {
			return nil, fmt.Errorf("fio engine: traddr: %w", err)
		}
		hc := nvmetcp.HostConfig{Logger: cfg.Logger.Named("tcp")}
		if cfg.HostTraddr != "" {
			if hc.LocalAddr, err = netip.ParseAddr(cfg.HostTraddr); err != nil {
				return nil, fmt.Errorf("fio engine: host_traddr: %w", err)
			}
		}
		d = nvmetcp.NewDialer(hc)
		addr = fabrics.Address{Transport: fabrics.TransportTCP, Addr: ta, ServiceID: uint16(cfg.Trsvcid)}
	default:
		ta, err := netip.ParseAddr(cfg.Traddr)
		if err != nil {
			return nil, fmt.Errorf("fio engine: traddr: %w", err)
		}
		ha, err := hostAddr(cfg.HostTraddr, ta)
		if err != nil {
			return nil, err
		}
		dev, err := rdmaDevice(provider.Config{Provider: cfg.Provider, Device: cfg.Device, Addr: ha, Share: true,
			Congestion: cfg.cc, Logger: cfg.Logger.Named("rdma")})
		if err != nil {
			return nil, err
		}
		d = nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: cfg.Logger.Named("rdma")})
		addr = fabrics.Address{Transport: fabrics.TransportRDMA, Addr: ta, ServiceID: uint16(cfg.Trsvcid)}
	}
	ctrl, err := initiator.Connect(ctx, d, addr, opts)
	if err != nil {
		return nil, fmt.Errorf("fio engine: connect to %s %s: %w", addr, cfg.SubNQN, err)
	}
	return &conn{ctrl: ctrl}, nil
}

// hostAddr returns the RDMA device's address: s if set, else the source
// address the kernel would use towards target (no packet is sent), or
// LoopbackHostAddr for a loopback target.
func hostAddr(s string, target netip.Addr) (netip.Addr, error) {
	if s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return a, fmt.Errorf("fio engine: host_traddr: %w", err)
		}
		return a, nil
	}
	if target.IsLoopback() && target.Is4() {
		return netip.MustParseAddr(LoopbackHostAddr), nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(target.String(), strconv.Itoa(4791)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("fio engine: no route to %s for host_traddr: %w", target, err)
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("fio engine: host_traddr: %w", err)
	}
	return ap.Addr().Unmap(), nil
}

// Process-wide state shared by every engine (fio job) in the process. It
// lives until the process exits: fio runs a verify job after the job that
// wrote the data, and both must see the same loop target.
var shared struct {
	sync.Mutex
	devices map[deviceKey]rdma.Device
	// congestion is the congestion control each device opened with.
	congestion map[deviceKey]*soft.CongestionConfig
	loops      map[loopKey]*loopTarget
}

// deviceKey names a shared RDMA device: its provider (resolved), address
// and ibverbs device name.
type deviceKey struct {
	provider, device string
	addr             netip.Addr
}

// rdmaDevice returns the process's RDMA device for cfg, opening it the
// first time (rdma/provider picks the provider).
func rdmaDevice(cfg provider.Config) (rdma.Device, error) {
	name, err := provider.Resolve(cfg)
	if err != nil {
		return nil, fmt.Errorf("fio engine: %w", err)
	}
	key := deviceKey{provider: name, device: cfg.Device, addr: cfg.Addr}
	if name != provider.Soft && cfg.Congestion != nil {
		return nil, fmt.Errorf("fio engine: congestion is the soft RDMA provider's, and provider %s was chosen for host_traddr %s (pass provider=soft)", name, cfg.Addr)
	}
	shared.Lock()
	defer shared.Unlock()
	if d := shared.devices[key]; d != nil {
		// Jobs share the process's device: one congestion setting.
		if was := shared.congestion[key]; !equalCC(was, cfg.Congestion) {
			return nil, fmt.Errorf("fio engine: host_traddr %s: another job opened its RDMA device with other congestion settings (%+v): give every job on an address the same congestion option", cfg.Addr, was)
		}
		return d, nil
	}
	cfg.Provider = name
	d, err := provider.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("fio engine: host_traddr %s: %w", cfg.Addr, err)
	}
	cfg.Logger.Info("RDMA device opened", provider.Describe(d).LogArgs()...)
	if shared.devices == nil {
		shared.devices = map[deviceKey]rdma.Device{}
		shared.congestion = map[deviceKey]*soft.CongestionConfig{}
	}
	shared.devices[key] = d
	shared.congestion[key] = cfg.Congestion
	return d, nil
}

type loopKey struct {
	svcid  int
	subnqn string
}

// loopTarget is an in-process target on a loop network.
type loopTarget struct {
	net  *loop.Network
	tgt  *target.Target
	addr fabrics.Address
}

// loopTargetFor returns the process's loop target for cfg's service ID and
// subsystem, starting it (one memory namespace of cfg.LoopSize bytes as
// cfg.NSID) the first time; later engines use it as it is.
func loopTargetFor(cfg Config) (*loopTarget, error) {
	shared.Lock()
	defer shared.Unlock()
	key := loopKey{cfg.Trsvcid, cfg.SubNQN}
	if lt := shared.loops[key]; lt != nil {
		return lt, nil
	}
	addr := fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: uint16(cfg.Trsvcid)}
	if a, err := netip.ParseAddr(cfg.Traddr); err == nil {
		addr.Addr = a
	}
	tgt := target.New(target.Options{Logger: cfg.Logger.Named("target")})
	fail := func(err error) (*loopTarget, error) {
		tgt.Close()
		return nil, fmt.Errorf("fio engine: loop target: %w", err)
	}
	if err := tgt.AddSubsystem(target.SubsystemConfig{NQN: cfg.SubNQN, AllowAnyHost: true, Model: "nvmeof fio loop"}); err != nil {
		return fail(err)
	}
	if cfg.hostKey != nil {
		// The loop target then requires what the job gives, so that a
		// loop job exercises authentication (and later jobs with other
		// secrets are refused).
		ha := target.HostAuth{Key: cfg.hostKey, CtrlKey: cfg.ctrlKey}
		host := cfg.HostNQN
		if host == "" {
			host = initiator.DefaultHostNQN()
		}
		if err := tgt.SetHostAuth(host, &ha); err != nil {
			return fail(err)
		}
	}
	mem, err := bdev.NewMemory(cfg.LoopSize, 512)
	if err != nil {
		return fail(err)
	}
	if err := tgt.AddNamespace(cfg.SubNQN, target.NamespaceConfig{NSID: cfg.NSID, Device: mem}); err != nil {
		mem.Close()
		return fail(err)
	}
	if err := tgt.AddPort(target.PortConfig{ID: 1, Address: addr, Subsystems: []string{cfg.SubNQN}}); err != nil {
		return fail(err)
	}
	n := loop.NewNetwork()
	l, err := n.Listen(addr)
	if err != nil {
		return fail(err)
	}
	go func() { _ = tgt.Serve(context.Background(), 1, l) }()
	lt := &loopTarget{net: n, tgt: tgt, addr: addr}
	if shared.loops == nil {
		shared.loops = map[loopKey]*loopTarget{}
	}
	shared.loops[key] = lt
	return lt, nil
}

// equalCC reports whether two congestion settings are the same (nil: off).
func equalCC(a, b *soft.CongestionConfig) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
