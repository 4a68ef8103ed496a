package hostcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/internal/hostcli/workload"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/target/server"
)

// selftestNQN is the subsystem of nvmetd's embedded default, which the
// self-test serves.
const selftestNQN = server.DefaultNQN

func selftestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: transportRDMA,
			Usage: "`TRANSPORT`: rdma (soft RoCE over loopback: no root needed there, CAP_NET_RAW on other addresses) or loop (in-memory)"},
		&cli.StringFlag{Name: "size", Value: "64MiB", Usage: "`BYTES` of data to write and verify (units KiB, MiB, GiB)"},
		&cli.DurationFlag{Name: "seconds", Value: 60 * time.Second,
			Usage: "stop issuing I/O after `DURATION` (what was written is still verified)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "`SEED` of the data pattern and I/O sizes"},
		&cli.IntFlag{Name: "queue-depth", Value: 8, Usage: "`N` I/Os in flight"},
		&cli.StringFlag{Name: "target-addr", Value: "127.0.0.1", Usage: "`ADDRESS` of the in-process target's port"},
		&cli.StringFlag{Name: "host-addr", Value: "127.0.0.2", Usage: "local `ADDRESS` of the initiator's RDMA device (rdma)"},
		providerFlag(),
		deviceFlag(),
	}
}

// selftestConfig configures runSelftest.
type selftestConfig struct {
	Transport  string
	Size       int64
	Duration   time.Duration
	Seed       uint64
	QueueDepth int
	TargetAddr netip.Addr
	HostAddr   netip.Addr
	// Provider and Device select the RDMA devices of both sides (rdma).
	Provider, Device string
}

func cmdSelftest(c *cli.Context) error {
	size, err := configfs.ParseSize(c.String("size"))
	if err != nil || size < 1<<20 {
		return fmt.Errorf("--size %q: want at least 1MiB", c.String("size"))
	}
	cfg := selftestConfig{
		Transport:  c.String("transport"),
		Size:       size,
		Duration:   c.Duration("seconds"),
		Seed:       c.Uint64("seed"),
		QueueDepth: c.Int("queue-depth"),
		Provider:   c.String("provider"),
		Device:     c.String("device"),
	}
	if cfg.TargetAddr, err = netip.ParseAddr(c.String("target-addr")); err != nil || cfg.TargetAddr.Zone() != "" {
		return fmt.Errorf("--target-addr %q is not an IP address", c.String("target-addr"))
	}
	if cfg.HostAddr, err = netip.ParseAddr(c.String("host-addr")); err != nil || cfg.HostAddr.Zone() != "" {
		return fmt.Errorf("--host-addr %q is not an IP address", c.String("host-addr"))
	}
	cfg.TargetAddr, cfg.HostAddr = cfg.TargetAddr.Unmap(), cfg.HostAddr.Unmap()
	if cfg.TargetAddr.Is4() != cfg.HostAddr.Is4() {
		return fmt.Errorf("--target-addr %s and --host-addr %s: give two addresses of one family", cfg.TargetAddr, cfg.HostAddr)
	}
	if cfg.Transport == transportRDMA {
		if err := (connectArgs{Provider: cfg.Provider, Device: cfg.Device}).checkProvider(); err != nil {
			return err
		}
	}
	if cfg.QueueDepth < 1 || cfg.QueueDepth > 256 {
		return fmt.Errorf("--queue-depth %d: want 1 to 256", cfg.QueueDepth)
	}
	if cfg.Duration <= 0 {
		return fmt.Errorf("--seconds %v: must be positive", cfg.Duration)
	}
	return runSelftest(c.Context, cfg, c.App.Writer, newLogger(c, "nvmeof.selftest"))
}

// runSelftest starts the target in-process, connects to it and runs the
// verified workload on every namespace.
func runSelftest(ctx context.Context, cfg selftestConfig, w io.Writer, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var net *loop.Network
	switch cfg.Transport {
	case transportRDMA:
	case transportLoop:
		net = loop.NewNetwork()
	default:
		return fmt.Errorf("--transport %q: want rdma or loop", cfg.Transport)
	}
	// nvmetd's embedded default, on the self-test's transport and address,
	// with a namespace large enough for the test.
	tree, err := configfs.ParseHCL(server.DefaultConfig, "(embedded default)")
	if err != nil {
		return err
	}
	port := tree.Ports[0]
	port.Trtype, port.Traddr, port.Adrfam = cfg.Transport, cfg.TargetAddr.String(), ""
	if cfg.Transport == transportLoop {
		port.Provider = ""
	} else if cfg.Provider != "" {
		port.Provider, port.Device = cfg.Provider, cfg.Device
	}
	ns := tree.Subsystems[0].Namespaces[0]
	ns.Size = max(ns.Size, cfg.Size)
	if err := tree.Validate(); err != nil {
		return err
	}
	srv := server.New(server.Options{Logger: log, LoopNetwork: net})
	defer srv.Close()
	if err := srv.Apply(tree); err != nil {
		return selftestOpenError("target", cfg.TargetAddr, err)
	}
	addr := fabrics.Address{Transport: cfg.Transport, Addr: cfg.TargetAddr, ServiceID: fabrics.DefaultServiceID}
	var dialer fabrics.Dialer
	hostDesc := "in-process"
	if net != nil {
		dialer = loop.Dialer{Net: net}
	} else {
		dev, err := provider.Open(provider.Config{Provider: cfg.Provider, Device: cfg.Device, Addr: cfg.HostAddr, Logger: log.Named("rdma")})
		if err != nil {
			return selftestOpenError("initiator", cfg.HostAddr, err)
		}
		defer dev.Close()
		dialer = nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: log.Named("rdma")})
		hostDesc = cfg.HostAddr.String() + " (" + provider.Describe(dev).String() + ")"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ctrl, err := initiator.Connect(cctx, dialer, addr, initiator.Options{SubsystemNQN: selftestNQN, Logger: log})
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %s", describeConnectError(err, connectArgs{Transport: cfg.Transport,
			Traddr: cfg.TargetAddr.String(), Trsvcid: "4420", Timeout: 30 * time.Second}, &transport{host: hostDesc}))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctrl.Disconnect(dctx)
	}()
	fmt.Fprintf(w, "nvmeof selftest: %s on %s %s:%d, host %s\n", selftestNQN, cfg.Transport, cfg.TargetAddr,
		fabrics.DefaultServiceID, hostDesc)
	fmt.Fprintf(w, "controller: cntlid %d, %d I/O queues of %d entries, max transfer %s\n",
		ctrl.CntlID(), ctrl.NumIOQueues(), ctrl.QueueSize(), workload.FormatSize(int64(ctrl.MaxTransfer())))
	nss := ctrl.Namespaces()
	if len(nss) == 0 {
		return errors.New("the subsystem has no namespace")
	}
	deadline := time.Now().Add(cfg.Duration)
	for _, ns := range nss {
		fmt.Fprintf(w, "namespace %d: %s (%d blocks of %d bytes)\n", ns.NSID(), workload.FormatSize(ns.Size()), ns.Blocks(), ns.BlockSize())
		wl := workload.New(ns, workload.Config{Size: cfg.Size, Seed: cfg.Seed, QueueDepth: cfg.QueueDepth}, deadline)
		if err := wl.Run(w); err != nil {
			return fmt.Errorf("namespace %d: %w", ns.NSID(), err)
		}
	}
	fmt.Fprintln(w, "selftest passed")
	return nil
}

// selftestOpenError explains a target or initiator that could not start.
func selftestOpenError(what string, addr netip.Addr, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: cannot open the soft RoCE device on %s: run as root (CAP_NET_RAW) or use --transport loop", what, addr)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s: %s is taken by another soft RoCE device (is nvmetd running?): pass --target-addr/--host-addr or use --transport loop", what, addr)
	}
	return fmt.Errorf("%s: %s", what, trimPrefixes(err.Error()))
}
