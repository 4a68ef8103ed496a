// Command nvmetd is the nvmeof NVMe over Fabrics target daemon: it exports
// files, block devices and memory as NVMe namespaces over RDMA (RoCEv2,
// with a pure-Go provider that needs no RDMA hardware, or on an RDMA NIC
// through rdma-core in a binary built with -tags ibverbs), configured in
// HCL.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/target/server"
)

func main() {
	app := &cli.App{
		Name:  "nvmetd",
		Usage: "NVMe over Fabrics target daemon (RDMA/RoCEv2)",
		Description: "nvmetd exports namespaces of NVMe subsystems to hosts over NVMe-oF/RDMA.\n" +
			"The configuration is HCL in the shape of the kernel's nvmet configfs (see\n" +
			"examples/nvmetd.hcl), or nvmetcli's JSON. Without --config it serves an\n" +
			"embedded default: one 1 GiB memory namespace in nqn.2026-11.io.nvmeof:default\n" +
			"on 127.0.0.1:4420, open to any host.\n\n" +
			"Signals: SIGHUP reloads the configuration (connected hosts stay connected;\n" +
			"added or removed namespaces raise asynchronous events), SIGTERM or SIGINT\n" +
			"shuts down cleanly.\n\n" +
			"RDMA providers (a port's provider): soft, the built-in pure-Go RoCEv2, needs CAP_NET_RAW\n" +
			"(root) except on loopback addresses; ibverbs uses an RDMA NIC or rxe through rdma-core and\n" +
			"needs a binary built with CGO_ENABLED=1 go build -tags ibverbs; auto (the default) picks\n" +
			"ibverbs when an RDMA device holds the port's address, else soft. Built in: " + strings.Join(provider.Built(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration `FILE` (.hcl, or .json from nvmetcli save)"},
			&cli.StringFlag{Name: "log-level", Usage: "trace, debug, info, warn or error (overrides the config's log_level)"},
			&cli.BoolFlag{Name: "log-json", Usage: "log as JSON lines"},
			&cli.BoolFlag{Name: "check", Usage: "validate the configuration and exit"},
			&cli.BoolFlag{Name: "print-default", Usage: "print the embedded default configuration and exit"},
			&cli.StringFlag{Name: "pcap", Usage: "write every RoCEv2 packet of the first soft device to `FILE` (pcap)"},
			&cli.BoolFlag{Name: "poll", Usage: "busy-poll the completion queues of ibverbs devices (one poller per device, as SPDK's reactors: lower latency for a busy core)"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "nvmetd:", err)
		os.Exit(1)
	}
}

// loader validates configurations for this binary: a port asking for an
// RDMA provider it was built without is an error with the file position.
var loader = configfs.Loader{CheckProvider: provider.Check}

func load(c *cli.Context) (*configfs.Tree, error) {
	if path := c.String("config"); path != "" {
		return loader.LoadFile(path)
	}
	return loader.ParseHCL(server.DefaultConfig, "(embedded default)")
}

func run(c *cli.Context) error {
	if c.Bool("print-default") {
		_, err := os.Stdout.Write(server.DefaultConfig)
		return err
	}
	tree, err := load(c)
	if err != nil {
		return err
	}
	if c.Bool("check") {
		for _, w := range tree.Warnings() {
			fmt.Fprintln(os.Stderr, "warning:", w)
		}
		fmt.Printf("configuration OK: %d ports, %d subsystems\n", len(tree.Ports), len(tree.Subsystems))
		return nil
	}
	level := tree.LogLevel
	if l := c.String("log-level"); l != "" {
		level = l
	}
	if level == "" {
		level = "info"
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "nvmetd",
		Level:      hclog.LevelFromString(level),
		JSONFormat: c.Bool("log-json"),
		Output:     os.Stderr,
	})
	opts := server.Options{Logger: log, Poll: c.Bool("poll")}
	if p := c.String("pcap"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.Pcap = f
	}
	srv := server.New(opts)
	if err := srv.Apply(tree); err != nil {
		srv.Close()
		return fmt.Errorf("configuration not applied: %w", err)
	}
	announce(log, tree)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("shutting down", "signal", sig.String())
			break
		}
		if c.String("config") == "" {
			log.Warn("SIGHUP: no --config file to reload; the embedded default stays")
			continue
		}
		nt, err := load(c)
		if err != nil {
			log.Error("reload refused: configuration has errors; the running one stays", "error", err)
			continue
		}
		if err := srv.Apply(nt); err != nil {
			log.Error("reload applied with errors", "error", err)
			continue
		}
		log.Info("configuration reloaded")
	}
	return srv.Close()
}

// announce logs what is served and the command a Linux host would use.
func announce(log hclog.Logger, tree *configfs.Tree) {
	for _, ss := range tree.Subsystems {
		for _, p := range tree.PortsOf(ss.NQN) {
			svc := p.Trsvcid
			if svc == "" {
				svc = "4420"
			}
			log.Info("serving subsystem", "nqn", ss.NQN, "namespaces", len(ss.Namespaces), "port", p.ID,
				"connect", strings.Join([]string{"nvme connect -t", p.Trtype, "-a", p.Traddr, "-s", svc, "-n", ss.NQN}, " "))
		}
	}
}
