package hostcli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/nvme"
)

// anaLogCommand is `ana-log`: the ANA log page of a connected controller,
// as `nvme ana-log` prints it.
func anaLogCommand() *cli.Command {
	return &cli.Command{
		Name:      "ana-log",
		Usage:     "print the Asymmetric Namespace Access log of a connected controller",
		ArgsUsage: "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)",
		Description: "Reads the ANA log page (0Ch) like `nvme ana-log`: each ANA group the controller reports,\n" +
			"its state through this controller's port and its namespaces (none with --groups).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: formatNormal, Usage: "output `FORMAT`: normal or json"},
			&cli.BoolFlag{Name: "groups", Aliases: []string{"g"}, Usage: "return ANA groups only (RGO: no NSID lists)"},
			&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the log as it is"},
		},
		Action: cmdANALog,
	}
}

func cmdANALog(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	id, err := identifyController(c, t)
	if err != nil {
		return err
	}
	if id.CMIC()&nvme.CMICANAReporting == 0 {
		return fmt.Errorf("%s: the controller does not report ANA (Identify Controller CMIC bit 3 clear)", deviceName(dev))
	}
	// The largest log the controller may return, as nvme-cli sizes it:
	// every group, and every namespace unless RGO.
	rgo := c.Bool("groups")
	n := nvme.ANALogHeaderSize + int(id.NANAGRPID())*nvme.ANAGroupHeaderSize
	if !rgo {
		nn := id.MNAN()
		if nn == 0 {
			nn = id.NN()
		}
		n += 4 * int(nn)
	}
	n = min((n+3)&^3, maxLogLen)
	var lsp uint8
	if rgo {
		lsp = nvme.ANALSPRGO
	}
	sqe, err := getLogSQE(uint8(nvme.LIDANA), 0, lsp, false, 0, n)
	if err != nil {
		return err
	}
	resp, err := adminRequest(c, t, sqe, n)
	if err != nil {
		return err
	}
	if c.Bool("raw-binary") {
		_, err := c.App.Writer.Write(resp.Data)
		return err
	}
	l, err := nvme.DecodeANALog(resp.Data)
	if err != nil {
		return fmt.Errorf("%s: ANA log: %w", deviceName(dev), err)
	}
	return printANALog(c.App.Writer, format, deviceName(dev), l)
}

// printANALog prints an ANA log page as nvme-cli 2.x does.
func printANALog(w io.Writer, format, devname string, l nvme.ANALog) error {
	if format == formatJSON {
		descs := make([]jobj, 0, len(l.Groups))
		for _, g := range l.Groups {
			nsids := make([]jobj, 0, len(g.NSIDs))
			for _, id := range g.NSIDs {
				nsids = append(nsids, jobj{{"nsid", id}})
			}
			descs = append(descs, jobj{
				{"grpid", g.GroupID},
				{"nnsids", len(g.NSIDs)},
				{"chgcnt", g.ChangeCount},
				{"state", anaStateString(g.State)},
				{"NSIDS", nsids},
			})
		}
		// "ANA DESC LIST " with its trailing space is nvme-cli's key.
		return writeJSON(w, jobj{
			{"Asymmetric Namespace Access Log for NVMe device", devname},
			{"chgcnt", l.ChangeCount},
			{"ngrps", len(l.Groups)},
			{"ANA DESC LIST ", descs},
		})
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Asymmetric Namespace Access Log for NVMe device: %s\n", devname)
	s.WriteString("ANA LOG HEADER :-\n")
	fmt.Fprintf(&s, "chgcnt\t:\t%d\n", l.ChangeCount)
	fmt.Fprintf(&s, "ngrps\t:\t%d\n", len(l.Groups))
	s.WriteString("ANA Log Desc :-\n")
	for _, g := range l.Groups {
		fmt.Fprintf(&s, "grpid\t:\t%d\n", g.GroupID)
		fmt.Fprintf(&s, "nnsids\t:\t%d\n", len(g.NSIDs))
		fmt.Fprintf(&s, "chgcnt\t:\t%d\n", g.ChangeCount)
		fmt.Fprintf(&s, "state\t:\t%s\n", anaStateString(g.State))
		for _, id := range g.NSIDs {
			fmt.Fprintf(&s, "\tnsid\t:\t%d\n", id)
		}
		s.WriteString("\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// anaStateString names a state as nvme-cli does ("invalid state" for
// the values the specification does not define).
func anaStateString(st nvme.ANAState) string {
	switch st {
	case nvme.ANAOptimized, nvme.ANANonOptimized, nvme.ANAInaccessible, nvme.ANAPersistentLoss, nvme.ANAChange:
		return st.String()
	}
	return "invalid state"
}
