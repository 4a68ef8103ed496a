package main

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/target"
)

// table prints rows under a header, aligned.
func table(c *cli.Context, header string, rows [][]string) {
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

func say(c *cli.Context, format string, args ...any) {
	fmt.Fprintf(c.App.Writer, format+"\n", args...)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func list(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, ",")
}

func size(p *control.Size) string {
	if p == nil || *p == 0 {
		return "-"
	}
	return configfs.FormatSize(int64(*p))
}

// group is a command with subcommands.
func group(name, usage string, sub ...*cli.Command) *cli.Command {
	return &cli.Command{Name: name, Usage: usage, Subcommands: sub, Action: noCommand, HideHelpCommand: true}
}

var forceFlag = &cli.BoolFlag{Name: "force", Usage: "do it even if connected hosts lose their controllers"}

// --- subsystem ---

func subsystemFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "allow-any-host", Usage: "let any host connect (--allow-any-host=false to use the allow-list)"},
		&cli.StringSliceFlag{Name: "host", Usage: "allowed host `NQN` (repeat; replaces the list)"},
		&cli.StringSliceFlag{Name: "port", Usage: "export through port `ID` (repeat; replaces the ports)"},
		&cli.StringFlag{Name: "serial", Usage: "serial number"},
		&cli.StringFlag{Name: "model", Usage: "model number"},
		&cli.StringFlag{Name: "firmware", Usage: "firmware revision"},
		&cli.StringFlag{Name: "version", Usage: "NVMe version, major.minor[.tertiary]"},
		&cli.IntFlag{Name: "cntlid-min", Usage: "lowest controller ID", DefaultText: strconv.Itoa(configfs.DefaultCntlidMin)},
		&cli.IntFlag{Name: "cntlid-max", Usage: "highest controller ID", DefaultText: strconv.Itoa(configfs.DefaultCntlidMax)},
		&cli.IntFlag{Name: "qid-max", Usage: "I/O queues a controller grants", DefaultText: strconv.Itoa(target.DefaultMaxIOQueues)},
		&cli.IntFlag{Name: "max-controllers", Usage: "most controllers at once", DefaultText: strconv.Itoa(target.DefaultMaxControllers)},
		&cli.IntFlag{Name: "max-controllers-per-host", Usage: "most controllers of one host NQN at once", DefaultText: strconv.Itoa(target.DefaultMaxControllersPerHost)},
	}
}

func subsystemCmd() *cli.Command {
	printSubs := func(c *cli.Context) func([]control.Subsystem) {
		return func(subs []control.Subsystem) {
			var rows [][]string
			for _, s := range subs {
				hosts := list(s.AllowedHosts)
				if deref(s.AllowAnyHost) {
					hosts = "any"
				}
				var nss []string
				for _, ns := range s.Namespaces {
					nss = append(nss, strconv.FormatUint(uint64(ns.NSID), 10))
				}
				rows = append(rows, []string{s.NQN, list(s.Ports), hosts, list(nss), deref(s.Serial), deref(s.Model)})
			}
			table(c, "NQN\tPORTS\tHOSTS\tNAMESPACES\tSERIAL\tMODEL", rows)
		}
	}
	return group("subsystem", "list, add, modify and delete subsystems",
		&cli.Command{Name: "list", Usage: "list subsystems", ArgsUsage: "[NQN]", Action: func(c *cli.Context) error {
			a, err := args(c, "[NQN]")
			if err != nil {
				return err
			}
			return do(c, "subsystem.list", map[string]any{"nqn": a[0]}, printSubs(c))
		}},
		&cli.Command{Name: "add", Usage: "add a subsystem", ArgsUsage: "NQN", Flags: subsystemFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "NQN")
			if err != nil {
				return err
			}
			return do(c, "subsystem.add", params(c, map[string]any{"nqn": a[0]}), func(s control.Subsystem) { say(c, "subsystem %s added", s.NQN) })
		}},
		&cli.Command{Name: "modify", Usage: "change a subsystem's attributes", ArgsUsage: "NQN", Flags: subsystemFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "NQN")
			if err != nil {
				return err
			}
			return do(c, "subsystem.modify", params(c, map[string]any{"nqn": a[0]}), func(s control.Subsystem) { say(c, "subsystem %s changed", s.NQN) })
		}},
		&cli.Command{Name: "del", Aliases: []string{"delete"}, Usage: "delete a subsystem and its namespaces", ArgsUsage: "NQN", Flags: []cli.Flag{forceFlag}, Action: func(c *cli.Context) error {
			a, err := args(c, "NQN")
			if err != nil {
				return err
			}
			return do(c, "subsystem.del", params(c, map[string]any{"nqn": a[0]}), func(bool) { say(c, "subsystem %s deleted", a[0]) })
		}},
	)
}

// --- ns ---

func nsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "backend", Usage: "file, block, memory, null or rbd (default: file or block by the path)"},
		&cli.StringFlag{Name: "path", Aliases: []string{"p"}, Usage: "backing file or block device `PATH`"},
		&cli.StringFlag{Name: "size", Usage: "`SIZE` in bytes or with a unit (64MiB, 1G)"},
		&cli.IntFlag{Name: "block-size", Usage: "logical block size", DefaultText: "512, or a block device's"},
		&cli.BoolFlag{Name: "grow", Usage: "extend an existing smaller file to the size"},
		&cli.StringFlag{Name: "uuid", Usage: "namespace UUID (default: derived)"},
		&cli.StringFlag{Name: "nguid", Usage: "namespace NGUID (default: derived)"},
		&cli.StringFlag{Name: "eui64", Usage: "namespace EUI-64 (default: derived)"},
		&cli.BoolFlag{Name: "disabled", Usage: "add the namespace disabled"},
		&cli.BoolFlag{Name: "buffered-io", Usage: "use the page cache instead of O_DIRECT (files and block devices)"},
		&cli.IntFlag{Name: "queue-depth", Usage: "I/Os in flight to a file or block backend (1-4096)", DefaultText: "128"},
		&cli.IntFlag{Name: "ana-grpid", Usage: "ANA group `ID` (1-128)", DefaultText: "1"},
		&cli.StringFlag{Name: "pool", Usage: "Ceph RBD pool (backend rbd)"},
		&cli.StringFlag{Name: "image", Usage: "Ceph RBD image (backend rbd)"},
		&cli.StringFlag{Name: "ceph-conf", Usage: "Ceph configuration `FILE` (backend rbd)"},
		&cli.StringFlag{Name: "client-id", Usage: "Ceph client ID (backend rbd; default admin)"},
		&cli.StringFlag{Name: "keyring", Usage: "Ceph keyring `FILE` (backend rbd)"},
	}
}

// nsParams builds ns.add and ns.modify params.
func nsParams(c *cli.Context, base map[string]any) (map[string]any, error) {
	p := params(c, base)
	if v, ok := p["disabled"]; ok {
		delete(p, "disabled")
		p["enabled"] = !v.(bool)
	}
	for _, k := range []string{"path", "ceph_conf", "keyring"} {
		if err := absPath(p, k); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func nsID(c *cli.Context, names ...string) (string, uint32, error) {
	a, err := args(c, names...)
	if err != nil {
		return "", 0, err
	}
	id, err := parseNSID(a[1])
	return a[0], id, err
}

func printNS(c *cli.Context) func([]control.Namespace) {
	return func(nss []control.Namespace) {
		var rows [][]string
		for _, ns := range nss {
			state := "enabled"
			if !deref(ns.Enabled) {
				state = "disabled"
			}
			path := deref(ns.Path)
			if path == "" {
				path = "-"
			}
			bs := "-"
			if b := deref(ns.BlockSize); b != 0 {
				bs = strconv.FormatUint(uint64(b), 10)
			}
			rows = append(rows, []string{ns.NQN, strconv.FormatUint(uint64(ns.NSID), 10), deref(ns.Backend), path, size(ns.Size), bs, state, deref(ns.UUID)})
		}
		table(c, "SUBSYSTEM\tNSID\tBACKEND\tPATH\tSIZE\tBLOCK\tSTATE\tUUID", rows)
	}
}

func nsCmd() *cli.Command {
	return group("ns", "add, delete, resize, enable, disable and change namespaces",
		&cli.Command{Name: "list", Usage: "list namespaces", ArgsUsage: "[SUBSYSTEM-NQN]", Action: func(c *cli.Context) error {
			a, err := args(c, "[SUBSYSTEM-NQN]")
			if err != nil {
				return err
			}
			return do(c, "ns.list", map[string]any{"nqn": a[0]}, printNS(c))
		}},
		&cli.Command{Name: "add", Usage: "add a namespace (NSID: the lowest free unless --nsid)", ArgsUsage: "SUBSYSTEM-NQN",
			Flags: append(nsFlags(), &cli.IntFlag{Name: "nsid", Aliases: []string{"n"}, Usage: "namespace ID", DefaultText: "the lowest free"}),
			Action: func(c *cli.Context) error {
				a, err := args(c, "SUBSYSTEM-NQN")
				if err != nil {
					return err
				}
				p, err := nsParams(c, map[string]any{"nqn": a[0]})
				if err != nil {
					return err
				}
				return do(c, "ns.add", p, func(ns control.Namespace) {
					say(c, "namespace %d added to %s (%s, %s)", ns.NSID, ns.NQN, deref(ns.Backend), size(ns.Size))
				})
			}},
		&cli.Command{Name: "modify", Usage: "change a namespace (backend, path, size, identifiers...)", ArgsUsage: "SUBSYSTEM-NQN NSID", Flags: nsFlags(),
			Action: func(c *cli.Context) error {
				nqn, nsid, err := nsID(c, "SUBSYSTEM-NQN", "NSID")
				if err != nil {
					return err
				}
				p, err := nsParams(c, map[string]any{"nqn": nqn, "nsid": nsid})
				if err != nil {
					return err
				}
				return do(c, "ns.modify", p, func(ns control.Namespace) { say(c, "namespace %d of %s changed", ns.NSID, ns.NQN) })
			}},
		&cli.Command{Name: "del", Aliases: []string{"delete"}, Usage: "delete a namespace", ArgsUsage: "SUBSYSTEM-NQN NSID", Action: func(c *cli.Context) error {
			nqn, nsid, err := nsID(c, "SUBSYSTEM-NQN", "NSID")
			if err != nil {
				return err
			}
			return do(c, "ns.del", map[string]any{"nqn": nqn, "nsid": nsid}, func(bool) { say(c, "namespace %d of %s deleted", nsid, nqn) })
		}},
		&cli.Command{Name: "resize", Usage: "resize a namespace (without a size: read a block device's or file's size again)",
			ArgsUsage: "SUBSYSTEM-NQN NSID [SIZE]", Description: "The size is --size SIZE, as ns add takes it, or the third argument.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "size", Usage: "new `SIZE` in bytes or with a unit (64MiB, 1G)"},
				&cli.BoolFlag{Name: "force", Usage: "shrink a memory namespace, creating it again empty"},
			},
			Action: func(c *cli.Context) error {
				a, err := args(c, "SUBSYSTEM-NQN", "NSID", "[SIZE]")
				if err != nil {
					return err
				}
				nsid, err := parseNSID(a[1])
				if err != nil {
					return err
				}
				p := params(c, map[string]any{"nqn": a[0], "nsid": nsid})
				sz := a[2]
				if c.IsSet("size") {
					if sz != "" {
						return usagef("%s: the size twice (--size %s and %s): give one", c.Command.FullName(), c.String("size"), sz)
					}
					sz = c.String("size")
				}
				if sz != "" {
					if _, err := configfs.ParseSize(sz); err != nil {
						return usagef("size %q: %v", sz, err)
					}
					p["size"] = sz
				}
				return do(c, "ns.resize", p, func(ns control.Namespace) { say(c, "namespace %d of %s: %s", ns.NSID, ns.NQN, size(ns.Size)) })
			}},
		nsEnable("enable", "ns.enable"),
		nsEnable("disable", "ns.disable"),
	)
}

func nsEnable(name, method string) *cli.Command {
	return &cli.Command{Name: name, Usage: name + " a namespace", ArgsUsage: "SUBSYSTEM-NQN NSID", Action: func(c *cli.Context) error {
		nqn, nsid, err := nsID(c, "SUBSYSTEM-NQN", "NSID")
		if err != nil {
			return err
		}
		return do(c, method, map[string]any{"nqn": nqn, "nsid": nsid}, func(ns control.Namespace) { say(c, "namespace %d of %s %sd", ns.NSID, ns.NQN, name) })
	}}
}

// --- host ---

func hostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dhchap-key", Usage: "the host's DH-HMAC-CHAP secret (DHHC-1:...)"},
		&cli.StringFlag{Name: "dhchap-ctrl-key", Usage: "the controller's secret, for bidirectional authentication"},
		&cli.StringFlag{Name: "dhchap-hash", Usage: "hmac(sha256), hmac(sha384) or hmac(sha512)"},
		&cli.StringFlag{Name: "dhchap-dhgroup", Usage: "null, ffdhe2048 ... ffdhe8192"},
	}
}

func hostCmd() *cli.Command {
	allow := func(name, method, verb string) *cli.Command {
		return &cli.Command{Name: name, Usage: verb + " a host in a subsystem's allow-list", ArgsUsage: "SUBSYSTEM-NQN HOST-NQN", Action: func(c *cli.Context) error {
			a, err := args(c, "SUBSYSTEM-NQN", "HOST-NQN")
			if err != nil {
				return err
			}
			return do(c, method, map[string]any{"nqn": a[0], "host": a[1]}, func(s control.Subsystem) {
				say(c, "%s: allowed hosts %s", s.NQN, list(s.AllowedHosts))
			})
		}}
	}
	return group("host", "list, add and delete hosts; allow and disallow them in subsystems",
		&cli.Command{Name: "list", Usage: "list hosts", Action: func(c *cli.Context) error {
			if _, err := args(c); err != nil {
				return err
			}
			return do(c, "host.list", nil, func(hs []control.Host) {
				var rows [][]string
				for _, h := range hs {
					auth := "-"
					if h.HasKey {
						auth = deref(h.DHCHAPHash) + "," + deref(h.DHCHAPDHGroup)
						if h.HasCtrlKey {
							auth += ",bidirectional"
						}
					}
					rows = append(rows, []string{h.NQN, auth, list(h.AllowedIn)})
				}
				table(c, "NQN\tDH-HMAC-CHAP\tALLOWED IN", rows)
			})
		}},
		&cli.Command{Name: "add", Usage: "add a host", ArgsUsage: "HOST-NQN", Flags: hostFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "HOST-NQN")
			if err != nil {
				return err
			}
			return do(c, "host.add", params(c, map[string]any{"nqn": a[0]}), func(h control.Host) { say(c, "host %s added", h.NQN) })
		}},
		&cli.Command{Name: "modify", Usage: "change a host's DH-HMAC-CHAP settings", ArgsUsage: "HOST-NQN", Flags: hostFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "HOST-NQN")
			if err != nil {
				return err
			}
			return do(c, "host.modify", params(c, map[string]any{"nqn": a[0]}), func(h control.Host) { say(c, "host %s changed", h.NQN) })
		}},
		&cli.Command{Name: "del", Aliases: []string{"delete"}, Usage: "delete a host", ArgsUsage: "HOST-NQN",
			Flags: []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "also remove it from the subsystems that allow it"}},
			Action: func(c *cli.Context) error {
				a, err := args(c, "HOST-NQN")
				if err != nil {
					return err
				}
				return do(c, "host.del", params(c, map[string]any{"nqn": a[0]}), func(bool) { say(c, "host %s deleted", a[0]) })
			}},
		allow("allow", "host.allow", "allow"),
		allow("disallow", "host.disallow", "disallow"),
	)
}

// --- port ---

func portFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Usage: "rdma (default) or loop"},
		&cli.StringFlag{Name: "address", Aliases: []string{"a"}, Usage: "IP `ADDRESS` to listen on"},
		&cli.StringFlag{Name: "service", Aliases: []string{"s"}, Usage: "service (port number), default 4420"},
		&cli.StringFlag{Name: "provider", Usage: "RDMA provider: soft, ibverbs or auto"},
		&cli.StringFlag{Name: "device", Usage: "rdma-core device name (ibverbs)"},
		&cli.IntFlag{Name: "tos", Usage: "IP type of service (0-255)", DefaultText: "the provider's"},
		&cli.StringFlag{Name: "treq", Usage: "transport requirements: not specified, required, not required"},
		&cli.IntFlag{Name: "inline-data-size", Usage: "in-capsule data bytes", DefaultText: strconv.Itoa(configfs.DefaultInlineDataSize)},
		&cli.StringFlag{Name: "congestion", Usage: "soft RoCE congestion control (ECN, CNPs, DCQCN): on, off, or the HCL congestion block's `KEY=VALUE` pairs separated by commas", DefaultText: "off"},
		&cli.IntFlag{Name: "portid", Usage: "port number in discovery log entries", DefaultText: "PORT-ID if a number, else the lowest free"},
		&cli.StringSliceFlag{Name: "subsystem", Usage: "export subsystem `NQN` (repeat; replaces the list)"},
	}
}

func portCmd() *cli.Command {
	link := func(name, method string) *cli.Command {
		return &cli.Command{Name: name, Usage: name + " a subsystem and a port", ArgsUsage: "PORT-ID SUBSYSTEM-NQN", Action: func(c *cli.Context) error {
			a, err := args(c, "PORT-ID", "SUBSYSTEM-NQN")
			if err != nil {
				return err
			}
			return do(c, method, map[string]any{"id": a[0], "nqn": a[1]}, func(p control.Port) {
				say(c, "port %s exports %s", p.ID, list(p.Subsystems))
			})
		}}
	}
	return group("port", "list, add, modify and delete ports; link subsystems to them",
		&cli.Command{Name: "list", Usage: "list ports", Action: func(c *cli.Context) error {
			if _, err := args(c); err != nil {
				return err
			}
			return do(c, "port.list", nil, func(ps []control.Port) {
				var rows [][]string
				for _, p := range ps {
					var ana []string
					for _, g := range p.ANAGroups {
						ana = append(ana, fmt.Sprintf("%d:%s", g.GrpID, g.State))
					}
					rows = append(rows, []string{p.ID, strconv.Itoa(int(deref(p.PortID))), deref(p.Transport), deref(p.Address),
						deref(p.Service), deref(p.Provider), list(p.Subsystems), list(ana)})
				}
				table(c, "ID\tPORTID\tTRANSPORT\tADDRESS\tSERVICE\tPROVIDER\tSUBSYSTEMS\tANA", rows)
			})
		}},
		&cli.Command{Name: "stats", Usage: "show the counters of the ports' RDMA devices (all ports, or PORT-ID)", ArgsUsage: "[PORT-ID]", Action: func(c *cli.Context) error {
			a, err := args(c, "[PORT-ID]")
			if err != nil {
				return err
			}
			var p map[string]any
			if a[0] != "" {
				p = map[string]any{"id": a[0]}
			}
			return do(c, "port.stats", p, func(ps []control.PortStats) { printPortStats(c, ps) })
		}},
		&cli.Command{Name: "add", Usage: "add a port", ArgsUsage: "PORT-ID", Flags: portFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "PORT-ID")
			if err != nil {
				return err
			}
			return do(c, "port.add", params(c, map[string]any{"id": a[0]}), func(p control.Port) {
				say(c, "port %s added: %s %s:%s", p.ID, deref(p.Transport), deref(p.Address), deref(p.Service))
			})
		}},
		&cli.Command{Name: "modify", Usage: "change a port (its listener restarts when the address changes)", ArgsUsage: "PORT-ID", Flags: portFlags(), Action: func(c *cli.Context) error {
			a, err := args(c, "PORT-ID")
			if err != nil {
				return err
			}
			return do(c, "port.modify", params(c, map[string]any{"id": a[0]}), func(p control.Port) { say(c, "port %s changed", p.ID) })
		}},
		&cli.Command{Name: "del", Aliases: []string{"delete"}, Usage: "delete a port", ArgsUsage: "PORT-ID", Flags: []cli.Flag{forceFlag}, Action: func(c *cli.Context) error {
			a, err := args(c, "PORT-ID")
			if err != nil {
				return err
			}
			return do(c, "port.del", params(c, map[string]any{"id": a[0]}), func(bool) { say(c, "port %s deleted", a[0]) })
		}},
		link("link", "port.link"),
		link("unlink", "port.unlink"),
		&cli.Command{Name: "ana-state", Usage: "set the port's state of an ANA group (hosts connected through it get an ANA change event)",
			ArgsUsage: "PORT-ID GRPID optimized|non-optimized|inaccessible|persistent-loss|change", Action: func(c *cli.Context) error {
				a, err := args(c, "PORT-ID", "GRPID", "STATE")
				if err != nil {
					return err
				}
				grp, err := strconv.ParseUint(a[1], 10, 32)
				if err != nil {
					return usagef("GRPID %q: want a number from 1 to 128", a[1])
				}
				return do(c, "port.ana_state", map[string]any{"id": a[0], "grpid": grp, "state": a[2]}, func(p control.Port) {
					say(c, "port %s: ANA group %d %s", p.ID, grp, a[2])
				})
			}},
	)
}

// printPortStats prints one row per counter of each port's device, by
// name; a port without counters gets one row saying why.
func printPortStats(c *cli.Context, ps []control.PortStats) {
	var rows [][]string
	for _, p := range ps {
		dev := p.Device
		if dev == "" {
			dev = "-"
		}
		names := slices.Sorted(maps.Keys(p.Counters))
		for _, n := range names {
			rows = append(rows, []string{p.ID, p.Transport, dev, n, strconv.FormatUint(p.Counters[n], 10)})
		}
		if len(names) == 0 || p.Note != "" {
			rows = append(rows, []string{p.ID, p.Transport, dev, "-", "(" + p.Note + ")"})
		}
	}
	table(c, "PORT\tTRANSPORT\tDEVICE\tCOUNTER\tVALUE", rows)
}

// --- ctrl ---

func ctrlCmd() *cli.Command {
	return group("ctrl", "list and disconnect controllers",
		&cli.Command{Name: "list", Usage: "list connected controllers",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, Usage: "only those of subsystem `NQN`"},
				&cli.BoolFlag{Name: "discovery", Usage: "discovery controllers too"},
			},
			Action: func(c *cli.Context) error {
				if _, err := args(c); err != nil {
					return err
				}
				return do(c, "ctrl.list", params(c, nil), func(cs []control.Controller) {
					var rows [][]string
					for _, x := range cs {
						var qs []string
						for _, q := range x.Queues {
							qs = append(qs, fmt.Sprintf("%d:%d", q.QID, q.Depth))
						}
						auth := "no"
						switch {
						case x.Authenticated:
							auth = "yes"
						case x.AuthRequired:
							auth = "pending"
						}
						rows = append(rows, []string{strconv.Itoa(int(x.CntlID)), x.Subsystem, x.HostNQN, x.Remote, x.Port,
							fmt.Sprintf("%dms", x.KATOMs), auth, strings.Join(qs, " ")})
					}
					table(c, "CNTLID\tSUBSYSTEM\tHOSTNQN\tREMOTE\tPORT\tKATO\tAUTH\tQUEUES (QID:DEPTH)", rows)
				})
			}},
		&cli.Command{Name: "disconnect", Usage: "tear a controller down (the host may reconnect)", ArgsUsage: "CNTLID",
			Flags: []cli.Flag{&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, Usage: "the controller's subsystem `NQN` (when the ID is in several)"}},
			Action: func(c *cli.Context) error {
				a, err := args(c, "CNTLID")
				if err != nil {
					return err
				}
				id, err := strconv.ParseUint(a[0], 10, 16)
				if err != nil {
					return usagef("CNTLID %q: want a number", a[0])
				}
				return do(c, "ctrl.disconnect", params(c, map[string]any{"cntlid": id}), func(x control.Controller) {
					say(c, "controller %d of %s (%s) disconnected", x.CntlID, x.Subsystem, x.HostNQN)
				})
			}},
	)
}

// --- config ---

func configCmd() *cli.Command {
	return group("config", "save the running configuration",
		&cli.Command{Name: "save", Usage: "print the running configuration, or have nvmetd write it to FILE", ArgsUsage: "[FILE]",
			Description: "With FILE, nvmetd itself writes it (config.save with a path: a regular file,\n" +
				"replaced atomically and synced, mode 0600) and counts the changes as saved, so a\n" +
				"reload does not warn of them. FILE is made absolute here; it names a file of the\n" +
				"daemon's file system.",
			Flags: []cli.Flag{&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Usage: "hcl or json (nvmetcli's) (default: FILE's extension, .json or .hcl; else hcl)"}},
			Action: func(c *cli.Context) error {
				a, err := args(c, "[FILE]")
				if err != nil {
					return err
				}
				format, err := saveFormat(c.String("format"), a[0])
				if err != nil {
					return err
				}
				p := map[string]any{"format": format}
				if a[0] != "" {
					// The daemon writes it: its unsaved-change count is
					// reset only then, and it writes as config.save does.
					p["path"] = a[0]
					if err := absPath(p, "path"); err != nil {
						return err
					}
				}
				var res control.SaveResult
				if err := call(c, "config.save", p, &res); err != nil {
					return err
				}
				if jsonOut(c) {
					return printJSON(c, res)
				}
				if a[0] == "" {
					_, err := fmt.Fprint(c.App.Writer, res.Config)
					return err
				}
				for _, w := range res.Warnings {
					fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
				}
				say(c, "configuration saved to %s", res.Path)
				return nil
			}},
	)
}

// reloadCmd is nvmetctl reload: config.reload, what a SIGHUP does to
// this nvmetd alone (kill -HUP $(pidof nvmetd) signals every nvmetd on
// the machine), with the outcome as the answer.
func reloadCmd() *cli.Command {
	return &cli.Command{Name: "reload", Usage: "have nvmetd load its configuration file again and apply it, all or nothing (as SIGHUP)",
		Description: "Connected hosts stay connected. Changes made through the control API and not\n" +
			"saved (config save FILE) are replaced by the file's configuration.",
		Action: func(c *cli.Context) error {
			if _, err := args(c); err != nil {
				return err
			}
			return do(c, "config.reload", nil, func(r control.ReloadResult) {
				if r.Dropped > 0 {
					fmt.Fprintf(c.App.ErrWriter, "warning: %d changes made through the control API and not saved were replaced\n", r.Dropped)
				}
				say(c, "configuration reloaded")
			})
		}}
}

// saveFormat returns config save's format: --format if given, else the
// one FILE's extension names, else hcl. A --format FILE's extension
// contradicts is refused: nvmetd reads a .json file as JSON and refuses
// HCL in it.
func saveFormat(flag, file string) (string, error) {
	var byExt string
	switch filepath.Ext(file) { // as configfs.LoadFile tells them apart
	case ".json":
		byExt = "json"
	case ".hcl":
		byExt = "hcl"
	}
	switch flag {
	case "":
		if byExt == "" {
			return "hcl", nil
		}
		return byExt, nil
	case "hcl", "json":
		if byExt != "" && byExt != flag {
			return "", usagef("--format %s: %s is read as %s by its extension; give a FILE ending in .%s", flag, file, byExt, flag)
		}
		return flag, nil
	default:
		return "", usagef("--format %q: want hcl or json", flag)
	}
}

// --- rpc ---

func rpcCmd() *cli.Command {
	return &cli.Command{Name: "rpc", Usage: "call a control API method with JSON params (rpc.methods lists them)", ArgsUsage: "METHOD [PARAMS-JSON]",
		Action: func(c *cli.Context) error {
			a, err := args(c, "METHOD", "[PARAMS-JSON]")
			if err != nil {
				return err
			}
			var p any
			if a[1] != "" {
				if err := jsonUnmarshal(a[1], &p); err != nil {
					return usagef("params: %v", err)
				}
			}
			var res any
			if err := call(c, a[0], p, &res); err != nil {
				return err
			}
			return printJSON(c, res)
		}}
}
