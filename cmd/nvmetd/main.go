// Command nvmetd is the nvmeof NVMe over Fabrics target daemon: it exports
// files, block devices and memory as NVMe namespaces over RDMA (RoCEv2,
// with a pure-Go provider that needs no RDMA hardware, or on an RDMA NIC
// through rdma-core in a binary built with -tags ibverbs), configured in
// HCL.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/internal/buildinfo"
	"github.com/nvmeof/nvmeof/internal/cliutil"
	"github.com/nvmeof/nvmeof/internal/sdnotify"
	"github.com/nvmeof/nvmeof/internal/suggest"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/target/server"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run runs nvmetd with args and returns the exit status: 2 for a mistake
// on the command line, as for Go's flag package; 1 for any other error.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		const undefined = "flag provided but not defined: -"
		if name, ok := strings.CutPrefix(err.Error(), undefined); ok {
			if s := closestWord(name, words(c)); s != "" {
				err = fmt.Errorf("%w (did you mean %s?)", err, s)
			}
		}
		return err
	}
	return cliutil.Run(app, args, stderr, "usage: nvmetd [--config FILE] [--check] [options]; see nvmetd --help")
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Name:            "nvmetd",
		Usage:           "NVMe over Fabrics target daemon (RDMA/RoCEv2)",
		Description: "nvmetd exports namespaces of NVMe subsystems to hosts over NVMe-oF/RDMA.\n" +
			"The configuration is HCL in the shape of the kernel's nvmet configfs (see\n" +
			"examples/nvmetd.hcl), or nvmetcli's JSON. Without --config it serves an\n" +
			"embedded default: one 1 GiB memory namespace in nqn.2026-11.io.nvmeof:default\n" +
			"on 127.0.0.1:4420, open to any host but on loopback only. Relative backend paths\n" +
			"are relative to the configuration file's directory.\n\n" +
			"--check makes every check start makes (backends opened read-write without\n" +
			"changes, memory sizes against the machine's memory, RDMA devices and ports bound\n" +
			"and released at once, providers built in) and reports each error at FILE:LINE:COL.\n\n" +
			"Signals: SIGHUP reloads the configuration, all or nothing (connected hosts stay\n" +
			"connected; added or removed namespaces raise asynchronous events; a configuration\n" +
			"that cannot apply in full changes nothing), SIGTERM or SIGINT shuts down cleanly.\n\n" +
			"RDMA providers (a port's provider): soft, the built-in pure-Go RoCEv2, needs CAP_NET_RAW\n" +
			"(root) except on loopback addresses; ibverbs uses an RDMA NIC or rxe through rdma-core and\n" +
			"needs a binary built with CGO_ENABLED=1 go build -tags ibverbs; auto (the default) picks\n" +
			"ibverbs when an RDMA device holds the port's address, else soft. Built in: " + strings.Join(provider.Built(), ", ") + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration `FILE` (.hcl, or .json from nvmetcli save)"},
			&cli.StringFlag{Name: "log-level", Usage: "trace, debug, info, warn, error or off (overrides the config's log_level; trace adds a line per command and completion)"},
			&cli.BoolFlag{Name: "version", Usage: "print the version (module version and VCS revision) and exit"},
			&cli.BoolFlag{Name: "log-json", Usage: "log as JSON lines"},
			logTargetFlag, // logtarget.go
			&cli.BoolFlag{Name: "check", Usage: "check the configuration as start would (backends, memory, ports) and exit"},
			&cli.BoolFlag{Name: "print-default", Usage: "print the embedded default configuration and exit"},
			&cli.StringFlag{Name: "pcap", Usage: "write every RoCEv2 packet of the first soft device to `FILE` (pcap)"},
			&cli.BoolFlag{Name: "poll", Usage: "busy-poll the completion queues of ibverbs devices (one poller per device, as SPDK's reactors: lower latency for a busy core)"},
			metricsAddressFlag, pprofFlag, metricsPerQueueFlag, metricsHostNQNFlag, metricsMaxCtrlsFlag, // metrics.go
			controlFlag,
			smartDriveDBFlag, // smart.go
		},
		Action: serve,
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

// words the command line may hold: flags, and what they are mistaken for.
func words(c *cli.Context) []string {
	var ws []string
	for _, f := range c.App.VisibleFlags() {
		for _, n := range f.Names() {
			if len(n) > 1 {
				ws = append(ws, "--"+n)
			}
		}
	}
	return ws
}

// strayArgs refuses positional arguments: nvmetd takes none, and a
// mistyped flag ("chec") or a flag after a stray word (which stops flag
// parsing) must not leave it serving the embedded default.
func strayArgs(c *cli.Context) error {
	if c.NArg() == 0 {
		return nil
	}
	a := c.Args().First()
	msg := fmt.Sprintf("unexpected argument %q: nvmetd takes only flags", a)
	if s := closestWord(a, words(c)); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return cliutil.UsageError{Err: errors.New(msg)}
}

// closestWord returns the word of ws closest to a (ignoring leading
// dashes) when it is close enough to be a typo, else "".
func closestWord(a string, ws []string) string {
	a = strings.TrimLeft(a, "-")
	bare := make([]string, len(ws))
	for i, w := range ws {
		bare[i] = strings.TrimLeft(w, "-")
	}
	if i := suggest.Within(a, bare, suggest.MaxEdits(a)); i >= 0 {
		return ws[i]
	}
	return ""
}

func serve(c *cli.Context) error {
	if c.Args().First() == "help" && c.NArg() == 1 {
		return cli.ShowAppHelp(c)
	}
	if err := strayArgs(c); err != nil {
		return err
	}
	if c.Bool("version") {
		_, err := fmt.Fprintln(c.App.Writer, buildinfo.Line("nvmetd"))
		return err
	}
	if l := c.String("log-level"); l != "" {
		if _, err := parseLogLevel(l); err != nil {
			return err
		}
	}
	if err := checkLogTarget(c); err != nil { // logtarget.go
		return err
	}
	if err := loadDriveDB(c); err != nil { // smart.go
		return err
	}
	if c.Bool("print-default") {
		_, err := c.App.Writer.Write(server.DefaultConfig)
		return err
	}
	tree, err := load(c)
	if err != nil {
		return err
	}
	embedded := c.String("config") == ""
	var listeners []string
	if embedded {
		// Open to any host: refuse it anywhere but on loopback.
		if listeners, err = server.LoopbackListeners(tree); err != nil {
			return fmt.Errorf("the embedded default must listen on loopback only: %w", err)
		}
	}
	if c.Bool("check") {
		for _, w := range tree.Warnings() {
			fmt.Fprintln(c.App.ErrWriter, "warning:", w)
		}
		if err := server.Check(tree, server.Options{Poll: c.Bool("poll")}); err != nil {
			return fmt.Errorf("configuration cannot start:\n%w", err)
		}
		fmt.Fprintf(c.App.Writer, "configuration OK: %d ports, %d subsystems\n", len(tree.Ports), len(tree.Subsystems))
		return nil
	}
	level := tree.LogLevel
	if l := c.String("log-level"); l != "" {
		level = l
	}
	if level == "" {
		level = "info"
	}
	log, closeLog, err := newLogger(c, hclog.LevelFromString(level)) // logtarget.go: --log-target
	if err != nil {
		return err
	}
	defer closeLog()
	opts := server.Options{Logger: log, Poll: c.Bool("poll")}
	if p := c.String("pcap"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.Pcap = f
	}
	// Signals are caught before the first log line that says the daemon
	// serves: a SIGHUP right after it must not kill the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	srv := server.New(opts)
	stopMetrics, err := startMetrics(c, srv, log) // metrics.go
	if err != nil {
		srv.Close()
		return err
	}
	defer stopMetrics()
	ctl, err := newControl(c, srv, log) // control.go
	if err != nil {
		srv.Close()
		return err
	}
	if err := ctl.Apply(tree); err != nil {
		ctl.Close()
		srv.Close()
		return fmt.Errorf("configuration not applied:\n%w", err)
	}
	if embedded {
		log.Info(defaultAnnouncement(listeners))
	}
	announce(log, tree)
	notifyReady(log, tree) // notify.go: systemd Type=notify

	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("shutting down", "signal", sig.String())
			notify(log, sdnotify.Stopping)
			break
		}
		if embedded {
			log.Warn("SIGHUP: no --config file to reload; the embedded default stays")
			continue
		}
		notify(log, sdnotify.Reloading())
		_, _ = ctl.Reload() // it logs the outcome; nvmetctl reload gets it as the answer
		notifyReady(log, ctl.Tree())
	}
	ctl.Close()
	return srv.Close()
}

// defaultAnnouncement is the start-up line of the embedded default.
func defaultAnnouncement(listeners []string) string {
	return "serving the embedded default configuration: open to any host, on loopback only (" + strings.Join(listeners, ", ") + ")"
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
