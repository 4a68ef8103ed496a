package hostcli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
)

// cmdRDMAStats prints the counters of the RDMA devices a controller's
// connection daemon uses: packets, retransmissions, timeouts, NAKs, and
// the congestion control ones (ECN marks seen, CNPs sent and handled),
// what nvmetctl port stats prints for a target's port.
func cmdRDMAStats(c *cli.Context) error {
	format, _, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	resp, err := request(c, t, session.Request{Op: session.OpRDMAStats})
	if err != nil {
		return err
	}
	if format == nvmeprint.JSON {
		b, err := json.MarshalIndent(resp.RDMA, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
		return err
	}
	for _, d := range resp.RDMA {
		fmt.Fprintf(c.App.Writer, "%s: RDMA device %s (%s)\n", t.entry.Name, d.Device, d.Provider)
		names := make([]string, 0, len(d.Counters))
		for n := range d.Counters {
			names = append(names, n)
		}
		slices.Sort(names)
		tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
		for _, n := range names {
			fmt.Fprintf(tw, "  %s\t%d\n", strings.TrimSpace(n), d.Counters[n])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
