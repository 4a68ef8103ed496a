// Command rping is an rping (rdma-core's librdmacm/examples/rping)
// compatible RDMA ping over either RDMA provider (--provider: the pure-Go
// soft RoCEv2 one, or ibverbs on an RDMA NIC or rxe in a binary built
// with -tags ibverbs; auto by default): a client
// advertises a buffer, the server RDMA-READs it, the client advertises a
// second buffer, the server RDMA-WRITEs the data back, and the client
// checks it. It talks to Linux's rping (over rxe or a real RNIC) in both
// directions.
//
//	rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P] [-t tos]
//	rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port] [-t tos]
//
// plus --provider and --device. The soft device needs UDP port 4791 on
// its address, and CAP_NET_RAW (a raw socket) unless the address is a
// loopback one.
package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/internal/buildinfo"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

func main() {
	if err := newApp(os.Stdout, os.Stderr).Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rping:", err)
		os.Exit(1)
	}
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "rping",
		Usage: "RDMA ping over the soft RoCEv2 provider or an RDMA device, compatible with rdma-core's rping",
		UsageText: "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P] [-t tos] [--provider P] [--device D]\n" +
			"rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port] [-t tos] [--provider P] [--device D]",
		Description: "The client sends the server the address, rkey and size of a buffer; the server RDMA-READs it,\n" +
			"answers with a SEND, gets a second buffer advertised, RDMA-WRITEs the data into it and answers\n" +
			"again; the client can check (-V) and print (-v) the data. Connections go through the RDMA CM\n" +
			"(RDMA_PS_TCP port space), so the peer may be Linux rping on rxe or on an RDMA NIC.",
		UseShortOptionHandling: true,
		HideHelpCommand:        true,
		Writer:                 stdout,
		ErrWriter:              stderr,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "s", Usage: "server side"},
			&cli.BoolFlag{Name: "c", Usage: "client side"},
			&cli.StringFlag{Name: "a", Usage: "address: the server's address (server: the address to listen on)"},
			&cli.StringFlag{Name: "I", Usage: "source address to bind to for the client (default: the route's source address)"},
			&cli.UintFlag{Name: "p", Value: defaultPort, Usage: "port"},
			&cli.IntFlag{Name: "C", Usage: "ping count times (0: forever)"},
			&cli.IntFlag{Name: "S", Value: defaultSize, Usage: fmt.Sprintf("ping data size (%d to %d)", rpingMinSize, rpingBufSize-1)},
			&cli.BoolFlag{Name: "v", Usage: "display ping data to stdout"},
			&cli.BoolFlag{Name: "V", Usage: "validate ping data"},
			&cli.BoolFlag{Name: "d", Usage: "debug printfs"},
			&cli.BoolFlag{Name: "P", Usage: "persistent server mode allowing multiple connections"},
			&cli.BoolFlag{Name: "q", Usage: "use self-created, self-modified QP (always the case here; accepted for compatibility)"},
			&cli.IntFlag{Name: "t", Usage: "type of service (the IP TOS of the connection; ibverbs only, the soft provider ignores it)"},
			&cli.IntFlag{Name: "mtu", Usage: "cap the soft device's path MTU in bytes (default: from the interface MTU)"},
			&cli.StringFlag{Name: "provider", Value: provider.Auto,
				Usage: "RDMA provider: soft (pure-Go RoCEv2), ibverbs (rdma-core; a binary built with -tags ibverbs) or " +
					"auto (ibverbs when an RDMA device holds the address, else soft); built in: " + strings.Join(provider.Built(), ", ")},
			&cli.StringFlag{Name: "device", Usage: "RDMA device (mlx5_0, rxe0) for ibverbs (default: the one holding the address)"},
			&cli.BoolFlag{Name: "version", Usage: "print the version (module version and VCS revision) and exit"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				_, err := fmt.Fprintln(stdout, buildinfo.Line("rping"))
				return err
			}
			cfg, err := configFrom(c, stdout, stderr)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.server {
				err = runServer(ctx, cfg)
				if err != nil {
					err = fmt.Errorf("rping server failed: %w", err)
				}
			} else {
				err = runClient(ctx, cfg)
				if err != nil {
					err = fmt.Errorf("rping client failed: %w", err)
				}
			}
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			return nil
		},
	}
}

func configFrom(c *cli.Context, stdout, stderr io.Writer) (*config, error) {
	if c.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", c.Args().Slice())
	}
	cfg := &config{
		server:     c.Bool("s"),
		count:      c.Int("C"),
		size:       c.Int("S"),
		verbose:    c.Bool("v"),
		validate:   c.Bool("V"),
		persistent: c.Bool("P"),
		mtu:        c.Int("mtu"),
		provider:   c.String("provider"),
		device:     c.String("device"),
		tos:        -1,
		out:        stdout,
		errOut:     stderr,
	}
	if c.Bool("s") == c.Bool("c") {
		return nil, fmt.Errorf("give exactly one of -s (server) and -c (client)")
	}
	if cfg.size < rpingMinSize || cfg.size > rpingBufSize-1 {
		return nil, fmt.Errorf("invalid size %d (valid range is %d to %d)", cfg.size, rpingMinSize, rpingBufSize)
	}
	if cfg.count < 0 {
		return nil, fmt.Errorf("invalid count %d", cfg.count)
	}
	if c.IsSet("t") {
		if t := c.Int("t"); t < 0 || t > 255 {
			return nil, fmt.Errorf("invalid type of service %d (0 to 255)", t)
		}
		cfg.tos = c.Int("t")
	}
	if err := provider.Check(cfg.provider, cfg.device); err != nil {
		return nil, fmt.Errorf("--provider %s, --device %q: %w", cfg.provider, cfg.device, err)
	}
	p := c.Uint("p")
	if p == 0 || p > 65535 {
		return nil, fmt.Errorf("invalid port %d", p)
	}
	cfg.port = uint16(p)
	var err error
	if s := c.String("a"); s != "" {
		if cfg.addr, err = netip.ParseAddr(s); err != nil {
			return nil, fmt.Errorf("-a %s: %w", s, err)
		}
	} else {
		return nil, fmt.Errorf("-a addr is required (the server's address; a server listens on it)")
	}
	if s := c.String("I"); s != "" {
		if cfg.source, err = netip.ParseAddr(s); err != nil {
			return nil, fmt.Errorf("-I %s: %w", s, err)
		}
	}
	level := hclog.Warn
	if c.Bool("d") {
		level = hclog.Debug
	}
	cfg.log = hclog.New(&hclog.LoggerOptions{Name: "rping", Level: level, Output: stderr})
	return cfg, nil
}
