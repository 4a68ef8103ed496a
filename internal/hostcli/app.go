// Package hostcli is the nvmeof command, the NVMe over Fabrics initiator: nvme-cli's
// fabrics commands (discover, connect, connect-all, disconnect,
// disconnect-all, list, list-subsys, id-ctrl, id-ns, ns-descs, smart-log,
// error-log, get-log, get-feature, reset, gen-dhchap-key, gen-hostnqn,
// show-hostnqn; DH-HMAC-CHAP authentication with
// --dhchap-secret and --dhchap-ctrl-secret) over RDMA (RoCEv2 with
// the built-in soft RoCE provider, no RDMA hardware needed, or on an RDMA
// NIC through rdma-core in a binary built with -tags ibverbs; --provider
// and --device choose), mapping each namespace as a local block device,
// and a self-test of the whole stack.
//
// A connection outlives the command that made it: connect starts one
// daemon process per controller (see package initiator/session), which the
// other commands talk to.
package hostcli

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
)

// Run runs the CLI with args and returns the exit status: errors are one
// line on stderr and status 1.
func Run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	// Usage errors are one line too, without the help text, and every
	// error exits with status 1 (urfave/cli would exit by itself for some).
	usageErr := func(_ *cli.Context, err error, _ bool) error { return err }
	app.OnUsageError = usageErr
	for _, c := range app.Commands {
		c.OnUsageError = usageErr
	}
	app.ExitErrHandler = func(*cli.Context, error) {}
	var unknown string
	app.CommandNotFound = func(_ *cli.Context, name string) { unknown = name }
	err := app.Run(reorderArgs(app, args))
	if err == nil && unknown != "" {
		err = fmt.Errorf("unknown command %q (see nvmeof --help)", unknown)
	}
	if err != nil {
		msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
		if msg != "" {
			fmt.Fprintln(stderr, "nvmeof: "+msg)
		}
		return 1
	}
	return 0
}

func newApp(stdout, stderr io.Writer) *cli.App {
	outputFlag := &cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: nvmeprint.Normal,
		Usage: "output `FORMAT`: normal or json"}
	return &cli.App{
		Name:      "nvmeof",
		Usage:     "NVMe over Fabrics initiator (RDMA/RoCEv2), nvme-cli style",
		Version:   version(),
		Writer:    stdout,
		ErrWriter: stderr,
		Before:    func(c *cli.Context) error { return checkLogLevel(c.String("log-level")) },
		Description: "nvmeof discovers and connects NVMe-oF subsystems over RDMA (RoCEv2, with a built-in\n" +
			"soft RoCE provider: any Ethernet or loopback interface will do, no RDMA NIC or kernel\n" +
			"module needed; or, in a binary built with -tags ibverbs, on an RDMA NIC or rxe through\n" +
			"rdma-core: --provider soft|ibverbs|auto, --device mlx5_0; auto, the default, uses\n" +
			"ibverbs when an RDMA device holds the host address) and maps each namespace as a\n" +
			"local block device (ublk where the kernel has it, else NBD, else a FUSE file behind a\n" +
			"loop device; connect's --map chooses). The commands and flags are\n" +
			"nvme-cli's: `nvmeof discover -t rdma -a 192.0.2.1 -s 4420`, `nvmeof connect ... -n NQN`,\n" +
			"`nvmeof list`, `nvmeof disconnect -n NQN`.\n\n" +
			"Each connected controller is served by its own background process (named nvmeof0,\n" +
			"nvmeof1, ... like the kernel's nvme0) that keeps its state and log under --run-dir;\n" +
			"it reconnects after a connection loss like the Linux host (reconnect-delay,\n" +
			"ctrl-loss-tmo) and removes its devices when it gives up. The soft RoCE provider needs\n" +
			"root (CAP_NET_RAW) except on loopback addresses, and the block-device mappings need root.\n\n" +
			"`nvmeof selftest` checks the whole stack on this machine: an in-process target, a\n" +
			"connection over loopback and verified I/O.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "run-dir", Value: session.DefaultRunDir, EnvVars: []string{"NVMEOF_RUN_DIR"},
				Usage: "`DIR` where the connection daemons keep their state, sockets, logs and FUSE mounts"},
			&cli.StringFlag{Name: "log-level", Value: "off", Usage: "log `LEVEL` on stderr: trace, debug, info, warn, error or off (connection daemons log to their own file, or where connect's --log-target says)"},
		},
		Commands: append([]*cli.Command{
			{
				Name:  "discover",
				Usage: "read the discovery log page of a discovery controller",
				Description: "Connects to the discovery controller at -a/-s, prints its discovery log page\n" +
					"(the subsystems and ports the target offers to this host) like `nvme discover`,\n" +
					"and disconnects. Example: nvmeof discover -t rdma -a 192.0.2.1 -s 4420",
				Flags:  append(fabricsFlags(false), outputFlag),
				Action: cmdDiscover,
			},
			{
				Name:  "connect",
				Usage: "connect to a subsystem and map its namespaces as block devices",
				Description: "Connects to subsystem -n at -a/-s (admin queue, I/O queues, keep-alive), maps\n" +
					"each namespace as a block device and prints the device paths, one per line, then\n" +
					"the controller name (nvmeofN); on stderr, one line says which mapping --map auto\n" +
					"chose, or that the subsystem was connected already and the connect added a path to\n" +
					"it (nvmeofNcM: no new controller or device; -D makes a separate controller). The\n" +
					"connection is held by a background process that outlives this command; `nvmeof\n" +
					"disconnect` ends it. Fails with a one-line reason (unknown NQN, host not allowed,\n" +
					"authentication failed, target unreachable) within --timeout. A target that requires\n" +
					"DH-HMAC-CHAP authentication needs -S (and -C for bidirectional authentication); the\n" +
					"daemon gets the secrets through a pipe and keeps them in memory only, for\n" +
					"reconnecting: not in its command line, state or log.\n" +
					"Example: nvmeof connect -t rdma -a 192.0.2.1 -s 4420 -n nqn.2026-11.io.nvmeof:disk0",
				Flags: append(fabricsFlags(true), outputFlag, metricsAddressFlag, pprofFlag, logTargetFlag,
					&cli.StringFlag{Name: "map", Value: "auto",
						Usage: "how to map namespaces, `MODE`: auto (ublk, else nbd, else fuse: the first the kernel has), ublk, nbd, fuse (FUSE file + loop device), or none"}),
				Action: cmdConnect,
			},
			{
				Name:  "connect-all",
				Usage: "discover, then connect every NVM subsystem not connected yet",
				Description: "Reads the discovery log at -a/-s and connects each NVM subsystem entry of the same\n" +
					"transport that is not connected yet, as `nvmeof connect` would. Without -a, does so for\n" +
					"each discovery controller of --discovery-conf (/etc/nvme/discovery.conf), as nvme-cli.",
				Flags: append(fabricsFlags(false), outputFlag, metricsAddressFlag, pprofFlag, discoveryConfFlag, logTargetFlag,
					&cli.StringFlag{Name: "map", Value: "auto", Usage: "how to map namespaces, `MODE`: auto, ublk, nbd, fuse or none"}),
				Action: cmdConnectAllConf, // discoveryconf.go: cmdConnectAll with -a
			},
			{
				Name:  "disconnect",
				Usage: "disconnect controllers by subsystem NQN or by device",
				Description: "Unmaps the namespaces' block devices (refused while one is mounted), shuts the\n" +
					"controller down (CC.SHN) and ends its background process. -n disconnects every\n" +
					"controller of a subsystem; -d one controller, named nvmeofN, nvmeofNnM or by a mapped\n" +
					"device path such as /dev/loop3.\n\n" +
					"-d with a path of a multipath subsystem (as `nvmeof list-subsys` names them: nvmeof0c1,\n" +
					"or nvmeof0 while other paths remain) disconnects that controller only, as\n" +
					"`nvme disconnect -d nvme1` does: the I/O in flight on it ends there or moves to the\n" +
					"other paths, its controller is shut down (CC.SHN) and stops reconnecting, and the\n" +
					"devices stay (refused when a mounted namespace is reached only through that path).\n" +
					"The last path is a whole disconnect. Prints NQN:<nqn> disconnected N controller(s).",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, Usage: "subsystem `NQN`"},
					&cli.StringFlag{Name: "device", Aliases: []string{"d"}, Usage: "controller, path (nvmeofNcM) or mapped `DEVICE`"},
				},
				Action: cmdDisconnect,
			},
			{
				Name:   "disconnect-all",
				Usage:  "disconnect every controller",
				Action: cmdDisconnectAll,
			},
			{
				Name:        "list",
				Usage:       "list the connected namespaces",
				Description: "Lists the namespaces of the connected controllers like `nvme list`: Node is the\nmapped block device, Generic the name the nvmeof commands take (nvmeofNnM).",
				Flags:       []cli.Flag{outputFlag},
				Action:      cmdList,
			},
			{
				Name:      "id-ctrl",
				Usage:     "print the Identify Controller data of a connected controller",
				ArgsUsage: "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)",
				Flags:     []cli.Flag{outputFlag},
				Action:    cmdIDCtrl,
			},
			{
				Name:      "id-ns",
				Usage:     "print the Identify Namespace data of a namespace",
				ArgsUsage: "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)",
				Flags: []cli.Flag{outputFlag,
					&cli.UintFlag{Name: "namespace-id", Aliases: []string{"n"}, Usage: "namespace `NSID` (default: the device's)"}},
				Action: cmdIDNS,
			},
			{
				Name:      "smart-log",
				Usage:     "print the SMART / Health log of a connected controller",
				ArgsUsage: "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)",
				Flags:     []cli.Flag{outputFlag},
				Action:    cmdSMARTLog,
			},
			{
				Name:      "rdma-stats",
				Usage:     "print the counters of the RDMA device a connected controller uses (packets, retransmissions, timeouts, ECN marks, CNPs)",
				ArgsUsage: "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)",
				Flags:     []cli.Flag{outputFlag},
				Action:    cmdRDMAStats,
			},
			{
				Name:  "selftest",
				Usage: "run a target in-process, connect to it over loopback and verify I/O",
				Description: "Starts the target daemon's embedded default (a memory namespace in\n" +
					selftestNQN + " on 127.0.0.1:4420) inside this process,\n" +
					"connects this process's initiator to it from 127.0.0.2, writes --size of data in\n" +
					"random 4 KiB-1 MiB I/Os with a seeded pattern, reads it back and verifies it, checks\n" +
					"flush and that trimmed blocks read back as zeroes, and prints throughput. Exit\n" +
					"status 0 when every byte verified. --transport rdma (the default) uses the RDMA\n" +
					"provider of --provider for both sides (on the default loopback addresses: soft, which\n" +
					"needs no privilege there); --transport loop needs no RDMA at all.",
				Flags:  selftestFlags(),
				Action: cmdSelftest,
			},
			{
				Name:   daemonCommand,
				Hidden: true,
				Usage:  "(internal) the background process of one connection",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true},
					&cli.StringFlag{Name: "spec", Required: true},
					metricsAddressFlag, pprofFlag, // metrics.go
					logTargetFlag, logFDFlag, // logtarget.go
				},
				Action: cmdDaemon,
			},
		}, append(append(authCommands(), nvmeCommands()...), resvCommands()...)...),
	}
}

// daemonCommand is the hidden command connect re-executes itself with.
const daemonCommand = "__daemon"

// newLogger returns the CLI's logger on stderr.
func newLogger(c *cli.Context, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   name,
		Level:  logLevel(c),
		Output: c.App.ErrWriter,
	})
}

// checkFormat validates -o.
func checkFormat(c *cli.Context) (string, error) {
	f := c.String("output-format")
	switch f {
	case nvmeprint.Normal, nvmeprint.JSON:
		return f, nil
	}
	return "", fmt.Errorf("output format %q: want normal or json", f)
}

// reorderArgs moves a command's flags before its positional arguments, so
// that `nvmeof id-ctrl nvmeof0 -o json` works as with nvme-cli (urfave/cli
// stops parsing flags at the first positional argument).
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// Skip the global flags to find the command.
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		name, _, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		i++
		if !hasVal && !isBoolFlag(app.Flags, name) && i < len(args) {
			i++
		}
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	var flags, pos []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			pos = append(pos, rest[j+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasVal && !isBoolFlag(cmd.Flags, name) && j+1 < len(rest) {
			j++
			flags = append(flags, rest[j])
		}
	}
	out := append([]string{}, args[:i+1]...)
	out = append(out, flags...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

// isBoolFlag reports whether name is a boolean flag in fs (help included).
func isBoolFlag(fs []cli.Flag, name string) bool {
	if name == "help" || name == "h" {
		return true
	}
	for _, f := range fs {
		for _, n := range f.Names() {
			if n == name {
				_, ok := f.(*cli.BoolFlag)
				return ok
			}
		}
	}
	return false
}
