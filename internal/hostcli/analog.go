package hostcli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
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
			&cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: nvmeprint.Normal, Usage: "output `FORMAT`: normal or json"},
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
	return nvmeprint.ANALog(c.App.Writer, format, deviceName(dev), l)
}
