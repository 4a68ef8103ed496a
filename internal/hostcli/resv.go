package hostcli

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
	"github.com/nvmeof/nvmeof/nvme"
)

// nvme-cli's reservation commands (resv-register, resv-acquire,
// resv-release, resv-report) on a namespace of a connected controller,
// with nvme-cli's flags and output. The daemon of the connection runs them
// (session.OpReservation).

// resvReportLen is Reservation Report's default data length (nvme-cli:
// NUMD 1023).
const resvReportLen = 4096

// resvCommands returns the commands of this file.
func resvCommands() []*cli.Command {
	dev := "DEVICE (nvmeofNnM, or nvmeofN with -n)"
	nsFlag := func() cli.Flag {
		return &cli.UintFlag{Name: "namespace-id", Aliases: []string{"n"}, Usage: "namespace `NSID` (default: the device's)"}
	}
	keyFlag := func(name, alias, usage string) cli.Flag {
		return &cli.StringFlag{Name: name, Aliases: []string{alias}, Value: "0", Usage: usage + " (`KEY`, decimal or 0x hex)"}
	}
	outputFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: nvmeprint.Normal, Usage: "output `FORMAT`: normal or json"}
	}
	iekey := func() cli.Flag {
		return &cli.BoolFlag{Name: "iekey", Aliases: []string{"i"}, Usage: "ignore the existing reservation key"}
	}
	rtype := func() cli.Flag {
		return &cli.UintFlag{Name: "rtype", Aliases: []string{"t"}, Usage: "reservation `TYPE`: 1 Write Exclusive, 2 Exclusive Access, " +
			"3/4 the same for registrants only, 5/6 for all registrants"}
	}
	return []*cli.Command{
		{
			Name:      "resv-register",
			Usage:     "register, unregister or replace a reservation key (Reservation Register)",
			ArgsUsage: dev,
			Flags: []cli.Flag{nsFlag(), outputFlag(), iekey(),
				keyFlag("crkey", "c", "current reservation key"),
				keyFlag("nrkey", "k", "new reservation key"),
				&cli.UintFlag{Name: "rrega", Aliases: []string{"r"}, Usage: "`ACTION`: 0 register, 1 unregister, 2 replace"},
				&cli.UintFlag{Name: "cptpl", Aliases: []string{"p"}, Usage: "change persist through power loss `STATE`: 0 no change, 2 clear, 3 set"},
			},
			Action: cmdResvRegister,
		},
		{
			Name:      "resv-acquire",
			Usage:     "acquire or preempt a reservation (Reservation Acquire)",
			ArgsUsage: dev,
			Flags: []cli.Flag{nsFlag(), outputFlag(), iekey(), rtype(),
				keyFlag("crkey", "c", "current reservation key"),
				keyFlag("prkey", "p", "preempt reservation key"),
				&cli.UintFlag{Name: "racqa", Aliases: []string{"a"}, Usage: "`ACTION`: 0 acquire, 1 preempt, 2 preempt and abort"},
			},
			Action: cmdResvAcquire,
		},
		{
			Name:      "resv-release",
			Usage:     "release or clear a reservation (Reservation Release)",
			ArgsUsage: dev,
			Flags: []cli.Flag{nsFlag(), outputFlag(), iekey(), rtype(),
				keyFlag("crkey", "c", "current reservation key"),
				&cli.UintFlag{Name: "rrela", Aliases: []string{"a"}, Usage: "`ACTION`: 0 release, 1 clear"},
			},
			Action: cmdResvRelease,
		},
		{
			Name:      "resv-report",
			Usage:     "print the reservation status of a namespace (Reservation Report)",
			ArgsUsage: dev,
			Description: "Prints the Reservation Status data structure like `nvme resv-report`. Fabrics host\n" +
				"identifiers are 128-bit: targets answer the 64-bit layout with Host Identifier\n" +
				"Inconsistent Format, so give --eds (-e).",
			Flags: []cli.Flag{nsFlag(), outputFlag(),
				&cli.UintFlag{Name: "numd", Aliases: []string{"d"}, Usage: "0's based number of `DWORDS` to read (default 1023)"},
				&cli.BoolFlag{Name: "eds", Aliases: []string{"e"}, Usage: "extended data structure (128-bit host identifiers)"},
				&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the data as it is"},
			},
			Action: cmdResvReport,
		},
	}
}

// resvSetup reads what the reservation commands share: the output format,
// the device's connection and the namespace.
func resvSetup(c *cli.Context) (format string, t devTarget, nsid uint32, err error) {
	var dev string
	format, dev, t, err = deviceCommand(c)
	if err != nil {
		return
	}
	nsid, err = namespaceOf(c, dev, t)
	return
}

// resvSQE builds a reservation command's SQE.
func resvSQE(op nvme.IOOpcode, nsid uint32) nvme.SQE {
	sqe := nvme.SQE(make([]byte, 64))
	sqe.SetOpcode(uint8(op))
	sqe.SetNSID(nsid)
	return sqe
}

// resvKeys parses the key flags into the command's data.
func resvKeys(c *cli.Context, names ...string) (nvme.ReservationData, error) {
	d := nvme.ReservationData(make([]byte, 8*len(names)))
	for i, n := range names {
		v, err := parseNum(n, c.String(n), 64)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			d.SetCRKEY(v)
		} else {
			d.SetNRKEY(v) // NRKEY and PRKEY share bytes 15:8
		}
	}
	return d, nil
}

// resvAction checks an action or type flag's range.
func resvAction(c *cli.Context, name string, max uint) (uint8, error) {
	v := c.Uint(name)
	if v > max {
		return 0, fmt.Errorf("--%s %d: at most %d", name, v, max)
	}
	return uint8(v), nil
}

// runResv sends a Register, Acquire or Release and prints nvme-cli's
// success line.
func runResv(c *cli.Context, op nvme.IOOpcode, act uint8, rtype uint8, cptpl uint8, keys ...string) error {
	format, t, nsid, err := resvSetup(c)
	if err != nil {
		return err
	}
	d, err := resvKeys(c, keys...)
	if err != nil {
		return err
	}
	sqe := resvSQE(op, nsid)
	cmd := nvme.ReservationCommand{SQE: sqe}
	cmd.SetAction(act)
	cmd.SetIEKEY(c.Bool("iekey"))
	cmd.SetRTYPE(nvme.ReservationType(rtype))
	cmd.SetCPTPL(cptpl)
	if _, err := request(c, t, session.Request{Op: session.OpReservation, SQE: sqe, Data: d}); err != nil {
		return err
	}
	return nvmeprint.ResvDone(c.App.Writer, format, op, nsid)
}

func cmdResvRegister(c *cli.Context) error {
	act, err := resvAction(c, "rrega", 7)
	if err != nil {
		return err
	}
	cptpl, err := resvAction(c, "cptpl", 3)
	if err != nil {
		return err
	}
	return runResv(c, nvme.IOReservationRegister, act, 0, cptpl, "crkey", "nrkey")
}

func cmdResvAcquire(c *cli.Context) error {
	act, err := resvAction(c, "racqa", 7)
	if err != nil {
		return err
	}
	rt, err := resvAction(c, "rtype", 255)
	if err != nil {
		return err
	}
	return runResv(c, nvme.IOReservationAcquire, act, rt, 0, "crkey", "prkey")
}

func cmdResvRelease(c *cli.Context) error {
	act, err := resvAction(c, "rrela", 7)
	if err != nil {
		return err
	}
	rt, err := resvAction(c, "rtype", 255)
	if err != nil {
		return err
	}
	return runResv(c, nvme.IOReservationRelease, act, rt, 0, "crkey")
}

func cmdResvReport(c *cli.Context) error {
	format, t, nsid, err := resvSetup(c)
	if err != nil {
		return err
	}
	n := resvReportLen
	if numd := c.Uint("numd"); numd != 0 {
		if numd < 3 || numd >= resvReportLen/4 {
			return errors.New("--numd: from 3 to 1023 (the header and at most 4 KiB)")
		}
		n = int(numd+1) * 4
	}
	eds := c.Bool("eds")
	sqe := resvSQE(nvme.IOReservationReport, nsid)
	rc := nvme.ReservationReportCommand{SQE: sqe}
	rc.SetLength(uint32(n))
	rc.SetEDS(eds)
	resp, err := request(c, t, session.Request{Op: session.OpReservation, SQE: sqe, DataLen: n})
	if err != nil {
		return err
	}
	if c.Bool("raw-binary") {
		_, err := c.App.Writer.Write(resp.Data)
		return err
	}
	st, err := nvme.ParseReservationStatus(resp.Data, eds)
	if err != nil {
		return fmt.Errorf("reservation report: %w", err)
	}
	return nvmeprint.ResvReport(c.App.Writer, format, st, eds)
}
