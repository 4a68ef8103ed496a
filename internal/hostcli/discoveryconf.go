package hostcli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// DiscoveryConfFile is where nvme-cli's `nvme connect-all` (and the
// nvmf-autoconnect service) read the discovery controllers to use when no
// --traddr is given.
const DiscoveryConfFile = "/etc/nvme/discovery.conf"

// discoveryConfFlag names the file connect-all reads without --traddr.
var discoveryConfFlag = &cli.StringFlag{Name: "discovery-conf", Value: DiscoveryConfFile,
	Usage: "without --traddr: connect-all for each discovery controller of this `FILE` (nvme-cli's format: one line of flags per controller, # comments)"}

// confLine is one discovery controller of a discovery.conf: its flags and
// its line number.
type confLine struct {
	line int
	args []string
}

// parseDiscoveryConf parses nvme-cli's discovery.conf: each line holds
// connect-all flags for one discovery controller ("--transport=rdma
// --traddr=192.0.2.1 --trsvcid=4420" or "-t rdma -a 192.0.2.1"), split at
// white space as nvme-cli splits them (no quoting); blank lines and lines
// starting with '#' are skipped. Words that are not flags or their values
// are refused here, so that a broken line says where it is.
func parseDiscoveryConf(data []byte) ([]confLine, error) {
	var out []confLine
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		args := strings.Fields(l)
		if !strings.HasPrefix(args[0], "-") {
			errs = append(errs, fmt.Errorf("line %d: %q is not a flag (want flags such as --transport=rdma --traddr=ADDRESS)", n, args[0]))
			continue
		}
		out = append(out, confLine{line: n, args: args})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// cmdConnectAllConf is connect-all: with --traddr (or -t loop) as
// cmdConnectAll; without, as `nvme connect-all` without one, for every
// discovery controller of --discovery-conf, the flags given on the command
// line applying to each unless its line sets them.
func cmdConnectAllConf(c *cli.Context) error {
	if c.IsSet("traddr") || c.String("transport") == "loop" {
		return cmdConnectAll(c)
	}
	path := c.String("discovery-conf")
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("connect-all: no --traddr, and %w", err)
	}
	lines, err := parseDiscoveryConf(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(lines) == 0 {
		return fmt.Errorf("connect-all: no --traddr, and %s names no discovery controller", path)
	}
	// The flags of this command line, then the line's, for connect-all
	// run again: later flags win.
	global := setFlags(c, c.App.Flags, "") // c.IsSet and c.Value look up the parents too
	local := setFlags(c, c.Command.Flags, "discovery-conf")
	var errs []string
	for _, l := range lines {
		argv := append([]string{c.App.Name}, global...)
		argv = append(argv, c.Command.Name)
		argv = append(append(argv, local...), l.args...)
		if !hasTraddr(l.args) {
			errs = append(errs, fmt.Sprintf("%s:%d: no --traddr (-a)", path, l.line))
			continue
		}
		if err := c.App.RunContext(c.Context, argv); err != nil {
			errs = append(errs, fmt.Sprintf("%s:%d: %v", path, l.line, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// hasTraddr reports whether args give --traddr (-a), which keeps a line
// from reading the file again.
func hasTraddr(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "traddr" || name == "a") {
			return true
		}
	}
	return false
}

// setFlags returns the flags of fs set in ctx as --name=value words, by
// their first name, leaving out skip.
func setFlags(ctx *cli.Context, fs []cli.Flag, skip string) []string {
	var out []string
	for _, f := range fs {
		name := f.Names()[0]
		if name == skip || !ctx.IsSet(name) {
			continue
		}
		out = append(out, "--"+name+"="+fmt.Sprint(ctx.Value(name)))
	}
	return out
}
