// Command nvmetctl changes and inspects a running nvmetd through its
// control API (JSON-RPC 2.0 on a Unix socket, docs/control-api.md), in the
// spirit of nvmetcli and SPDK's rpc.py: subsystems, namespaces, hosts and
// ports are created, changed and deleted at runtime, controllers listed
// and disconnected, and the running configuration saved.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/internal/buildinfo"
	"github.com/nvmeof/nvmeof/internal/cliutil"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// usagef formats a mistake on the command line.
func usagef(format string, args ...any) error { return cliutil.Usagef(format, args...) }

// run runs nvmetctl with args and returns the exit status: 2 for a mistake
// on the command line; 1 for an error of the daemon or the connection.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	return cliutil.Run(app, interspersed(app, args), stderr, "see nvmetctl --help, or nvmetctl COMMAND --help")
}

// opts are the global flags.
func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "nvmetctl",
		Usage:                "change and inspect a running nvmetd through its control socket",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		Description: "Every change is validated as nvmetd's configuration file is and applied all or\n" +
			"nothing; hosts connected learn of namespace changes by asynchronous events. A\n" +
			"reload of nvmetd (nvmetctl reload, or SIGHUP) replaces the running\n" +
			"configuration with its file: save changes you want to keep (nvmetctl config\n" +
			"save FILE). Shell completion: PROG=nvmetctl source urfave/cli's\n" +
			"autocomplete/bash_autocomplete.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Aliases: []string{"s"}, Value: control.DefaultSocket, EnvVars: []string{"NVMETD_CONTROL_SOCKET"}, Usage: "nvmetd's control socket `PATH`"},
			&cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: "normal", Usage: "output `FORMAT`: normal or json"},
			&cli.BoolFlag{Name: "version", Usage: "print the version (module version and VCS revision) and exit"},
			&cli.DurationFlag{Name: "wait", Value: defaultWait, Usage: "while nvmetd is busy (every control connection has a request under way), try again for up to `DURATION` (0: not at all)"},
		},
		Before: func(c *cli.Context) error {
			switch f := c.String("output-format"); f {
			case "normal", "json":
				return nil
			default:
				return usagef("-o %q: want normal or json", f)
			}
		},
		Commands: []*cli.Command{
			subsystemCmd(), nsCmd(), hostCmd(), portCmd(), ctrlCmd(), configCmd(), reloadCmd(), rpcCmd(),
		},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				if c.NArg() > 0 {
					return usagef("--version takes no command (got %q)", c.Args().First())
				}
				_, err := fmt.Fprintln(c.App.Writer, buildinfo.Line("nvmetctl"))
				return err
			}
			return noCommand(c)
		},
	}
}

// defaultWait is how long nvmetctl tries again while nvmetd is busy.
const defaultWait = 10 * time.Second

// call connects to the socket and runs method. While the daemon answers
// that it is busy (it refused the connection before reading the request,
// so nothing ran), it tries again with a growing pause, for --wait at
// most.
func call(c *cli.Context, method string, params, result any) error {
	deadline := time.Now().Add(c.Duration("wait"))
	pause := 20 * time.Millisecond
	for {
		err := callOnce(c.String("socket"), method, params, result)
		var re *control.Error
		if !errors.As(err, &re) || re.Code != control.CodeBusy {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("nvmetd is busy (tried for %v; --wait sets how long): %w", c.Duration("wait"), err)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, time.Second)
	}
}

// callOnce runs method on a new connection.
func callOnce(socket, method string, params, result any) error {
	cl, err := control.Dial(socket)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Call(method, params, result)
}

// jsonOut reports whether -o json was asked for.
func jsonOut(c *cli.Context) bool { return c.String("output-format") == "json" }

// printJSON prints v indented.
func printJSON(c *cli.Context, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
	return err
}

// do runs method with params; with -o json it prints the result, else
// normal(result) does.
func do[T any](c *cli.Context, method string, params any, normal func(T)) error {
	var res T
	if err := call(c, method, params, &res); err != nil {
		return err
	}
	if jsonOut(c) {
		return printJSON(c, res)
	}
	if normal != nil {
		normal(res)
	}
	return nil
}

// args returns the command's positional arguments, exactly n of them
// (names for the usage message), or at most n when optional.
func args(c *cli.Context, names ...string) ([]string, error) {
	var need int
	for _, n := range names {
		if !strings.HasPrefix(n, "[") {
			need++
		}
	}
	a := c.Args().Slice()
	switch {
	case len(a) < need:
		return nil, usagef("%s: missing %s", c.Command.FullName(), strings.Join(names[len(a):need], " "))
	case len(a) > len(names):
		return nil, usagef("%s: unexpected argument %q (takes %s)", c.Command.FullName(), a[len(names)], strings.Join(names, " "))
	}
	return append(a, make([]string, len(names)-len(a))...), nil
}

func parseNSID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, usagef("NSID %q: want a number from 1", s)
	}
	return uint32(n), nil
}

// params builds a params object from the flags set on the command line:
// each flag's name with dashes as underscores, by the flag's type.
func params(c *cli.Context, base map[string]any) map[string]any {
	p := base
	if p == nil {
		p = map[string]any{}
	}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		key := strings.ReplaceAll(name, "-", "_")
		if k, ok := flagKeys[name]; ok {
			key = k
		}
		switch f.(type) {
		case *cli.BoolFlag:
			p[key] = c.Bool(name)
		case *cli.IntFlag:
			p[key] = c.Int(name)
		case *cli.StringSliceFlag:
			p[key] = c.StringSlice(name)
		default:
			p[key] = c.String(name)
		}
	}
	return p
}

// flagKeys maps flags whose params member is named otherwise.
var flagKeys = map[string]string{
	"port":      "ports",
	"host":      "allowed_hosts",
	"subsystem": "subsystems",
}

// absPath makes a path flag absolute against the client's directory: the
// daemon's is another.
func absPath(p map[string]any, key string) error {
	s, ok := p[key].(string)
	if !ok || s == "" {
		return nil
	}
	a, err := filepath.Abs(s)
	if err != nil {
		return err
	}
	p[key] = a
	return nil
}

// noCommand is the action of the app and of command groups: a word that
// names no command is a usage error.
func noCommand(c *cli.Context) error {
	var names []string
	cmds := c.App.Commands
	what := "nvmetctl"
	if c.Command != nil && len(c.Command.Subcommands) > 0 {
		cmds, what = c.Command.Subcommands, c.Command.FullName()
	}
	for _, sc := range cmds {
		names = append(names, sc.Name)
	}
	if c.NArg() == 0 {
		return usagef("%s: give a command: %s", what, strings.Join(names, ", "))
	}
	return usagef("%s: no command %q (want %s)", what, c.Args().First(), strings.Join(names, ", "))
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// interspersed moves the flags that follow a command's arguments before
// them ("ns add NQN --size 1G" as "ns add --size 1G NQN"), and global
// flags given after the command ("ns list -o json") before the command:
// urfave/cli v2, like Go's flag package, stops at the first argument.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	takesValue := func(flags []cli.Flag, name string) (known, value bool) {
		for _, f := range flags {
			for _, n := range f.Names() {
				if n == name {
					_, isBool := f.(*cli.BoolFlag)
					return true, !isBool
				}
			}
		}
		return false, false
	}
	// The global flags before the command.
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if _, v := takesValue(app.Flags, name); v && !hasValue {
			i++
		}
		i++
	}
	global := args[:min(i, len(args))]
	// The command path.
	var cmd *cli.Command
	cmds := app.Commands
	j := i
	for j < len(args) {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(args[j]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		j++
	}
	if cmd == nil {
		return args
	}
	var moreGlobal, flags, positional []string
	for k := j; k < len(args); k++ {
		a := args[k]
		if a == "--" {
			positional = append(positional, args[k:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		dst := &flags
		known, value := takesValue(cmd.Flags, name)
		if !known {
			if gk, gv := takesValue(app.Flags, name); gk {
				dst, value = &moreGlobal, gv
			}
		}
		*dst = append(*dst, a)
		if value && !hasValue && k+1 < len(args) {
			k++
			*dst = append(*dst, args[k])
		}
	}
	out := append([]string(nil), global...)
	out = append(out, moreGlobal...)
	out = append(out, args[i:j]...)
	out = append(out, flags...)
	return append(out, positional...)
}
