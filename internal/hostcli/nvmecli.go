package hostcli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
	"github.com/nvmeof/nvmeof/nvme"
)

// nvme-cli's admin commands on a connected controller: list-subsys,
// get-log, error-log, ns-descs, get-feature and reset. The daemon of the
// connection runs them (session.OpAdmin, session.OpReset).

// resetCallTimeout bounds a reset request: the daemon's own bound and
// some slack.
const resetCallTimeout = 75 * time.Second

// maxLogLen bounds --log-len (one control message carries the page).
const maxLogLen = session.MaxAdminData

// nvmeCommands returns the commands of this file.
func nvmeCommands() []*cli.Command {
	outputFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "output-format", Aliases: []string{"o"}, Value: nvmeprint.Normal,
			Usage: "output `FORMAT`: normal or json"}
	}
	dev := "DEVICE (nvmeofN, nvmeofNnM or a mapped device path)"
	return []*cli.Command{
		{
			Name:      "list-subsys",
			Usage:     "list the connected subsystems and their controllers",
			ArgsUsage: "[DEVICE]",
			Description: "Lists the subsystems of the connected controllers like `nvme list-subsys`: per host NQN,\n" +
				"each subsystem (nvmeof-subsysN) with its controllers, their transport, address and\n" +
				"state (live, connecting, resetting, deleting). A DEVICE limits the list to its subsystem.",
			Flags:  []cli.Flag{outputFlag()},
			Action: cmdListSubsys,
		},
		{
			Name:      "get-log",
			Usage:     "read a log page of a connected controller",
			ArgsUsage: dev,
			Description: "Reads --log-len bytes of log page --log-id like `nvme get-log` and prints them as a hex\n" +
				"dump, or as they are with --raw-binary. -o is --lpo here, as in nvme-cli: the output\n" +
				"format is --output-format.",
			Flags: []cli.Flag{
				&cli.UintFlag{Name: "log-id", Aliases: []string{"i"}, Usage: "log page `ID` (required)"},
				&cli.UintFlag{Name: "log-len", Aliases: []string{"l"}, Usage: "`BYTES` to read (required, a multiple of 4)"},
				&cli.StringFlag{Name: "namespace-id", Aliases: []string{"n"}, Value: "0xffffffff", Usage: "`NSID` the page is of"},
				&cli.UintFlag{Name: "lsp", Aliases: []string{"s"}, Usage: "log specific field `LSP` (0-127)"},
				&cli.Uint64Flag{Name: "lpo", Aliases: []string{"o"}, Usage: "log page offset in `BYTES` (a multiple of 4)"},
				&cli.BoolFlag{Name: "rae", Aliases: []string{"r"}, Usage: "retain an asynchronous event"},
				&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the page as it is"},
				&cli.StringFlag{Name: "output-format", Value: nvmeprint.Normal, Usage: "output `FORMAT`: normal or json"},
			},
			Action: cmdGetLog,
		},
		{
			Name:      "error-log",
			Usage:     "print the Error Information log of a connected controller",
			ArgsUsage: dev,
			Flags: []cli.Flag{outputFlag(),
				&cli.UintFlag{Name: "log-entries", Aliases: []string{"e"}, DefaultText: "ELPE+1 of Identify Controller",
					Usage: "number of `ENTRIES` to read (at most ELPE+1)"},
				&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the log as it is"},
			},
			Action: cmdErrorLog,
		},
		{
			Name:      "ns-descs",
			Usage:     "print the Namespace Identification Descriptors of a namespace",
			ArgsUsage: dev,
			Flags: []cli.Flag{outputFlag(),
				&cli.UintFlag{Name: "namespace-id", Aliases: []string{"n"}, Usage: "namespace `NSID` (default: the device's)"},
				&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the list as it is"},
			},
			Action: cmdNSDescs,
		},
		{
			Name:      "get-feature",
			Usage:     "read a feature of a connected controller (Get Features)",
			ArgsUsage: dev,
			Description: "Reads feature -f like `nvme get-feature` (every known feature without -f); -s selects\n" +
				"the current (0), default (1) or saved (2) value or the capabilities (3); -H decodes the\n" +
				"fields of the features nvmeof knows.",
			Flags: []cli.Flag{outputFlag(),
				&cli.StringFlag{Name: "feature-id", Aliases: []string{"f"}, Usage: "feature `FID` (decimal or 0x hex)"},
				&cli.StringFlag{Name: "namespace-id", Aliases: []string{"n"}, Value: "0", Usage: "`NSID` for a per-namespace feature"},
				&cli.UintFlag{Name: "sel", Aliases: []string{"s"}, Usage: "select `SEL`: 0 current, 1 default, 2 saved, 3 supported capabilities"},
				&cli.StringFlag{Name: "cdw11", Aliases: []string{"c"}, Value: "0", Usage: "command dword 11 `VALUE`"},
				&cli.UintFlag{Name: "data-len", Aliases: []string{"l"}, Usage: "data `BYTES` (default: the feature's data structure size)"},
				&cli.BoolFlag{Name: "raw-binary", Aliases: []string{"b"}, Usage: "print the feature's data as it is"},
				&cli.BoolFlag{Name: "human-readable", Aliases: []string{"H"}, Usage: "decode the value's fields"},
			},
			Action: cmdGetFeature,
		},
		anaLogCommand(),
		{
			Name:      "reset",
			Usage:     "reset a connected controller",
			ArgsUsage: "DEVICE (nvmeofN or a namespace of it)",
			Description: "Resets the controller as `nvme reset` does for a fabrics controller: CC.EN is cleared\n" +
				"and CSTS.RDY awaited at 0, the association is closed and a new one made (the\n" +
				"controller ID may change). I/O waits meanwhile; the mapped devices stay.",
			Action: cmdReset,
		},
	}
}

// parseNum parses a number as nvme-cli's argconfig does (decimal, 0x hex
// or 0 octal) into at most bits bits.
func parseNum(name, s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, bits)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: not a number of %d bits", name, s, bits)
	}
	return v, nil
}

// adminRequest runs a read-only admin command through t's daemon.
func adminRequest(c *cli.Context, t devTarget, sqe nvme.SQE, dataLen int) (*session.Response, error) {
	return request(c, t, session.Request{Op: session.OpAdmin, SQE: sqe, DataLen: dataLen})
}

// deviceName is the DEVICE argument as nvme-cli names it in output.
func deviceName(dev string) string { return strings.TrimPrefix(dev, "/dev/") }

// getLogSQE builds Get Log Page (NUMD, LSP, RAE, LPO).
func getLogSQE(lid uint8, nsid uint32, lsp uint8, rae bool, lpo uint64, n int) (nvme.SQE, error) {
	sqe := nvme.SQE(make([]byte, 64))
	sqe.SetOpcode(uint8(nvme.AdminGetLogPage))
	sqe.SetNSID(nsid)
	g := nvme.GetLogPageCommand{SQE: sqe}
	g.SetLID(nvme.LogPageID(lid))
	g.SetLSP(lsp)
	g.SetRAE(rae)
	if err := g.SetLength(uint64(n)); err != nil {
		return nil, err
	}
	g.SetLPO(lpo)
	return sqe, nil
}

func cmdGetLog(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	if !c.IsSet("log-id") {
		return errors.New("required argument --log-id (-i) not specified")
	}
	lid, n := c.Uint("log-id"), c.Uint("log-len")
	switch {
	case lid > 0xff:
		return fmt.Errorf("--log-id %d: want 0 to 255", lid)
	case n == 0:
		return errors.New("required argument --log-len (-l) not specified (bytes to read, a non-zero multiple of 4)")
	case n%4 != 0 || n > maxLogLen:
		return fmt.Errorf("--log-len %d: want a multiple of 4 up to %d", n, maxLogLen)
	case c.Uint("lsp") > 0x7f:
		return fmt.Errorf("--lsp %d: want 0 to 127", c.Uint("lsp"))
	case c.Uint64("lpo")%4 != 0:
		return fmt.Errorf("--lpo %d: want a multiple of 4", c.Uint64("lpo"))
	}
	nsid, err := parseNum("namespace-id", c.String("namespace-id"), 32)
	if err != nil {
		return err
	}
	sqe, err := getLogSQE(uint8(lid), uint32(nsid), uint8(c.Uint("lsp")), c.Bool("rae"), c.Uint64("lpo"), int(n))
	if err != nil {
		return err
	}
	resp, err := adminRequest(c, t, sqe, int(n))
	if err != nil {
		return err
	}
	if len(resp.Data) != int(n) {
		return fmt.Errorf("%s: got %d bytes of log page, asked for %d", t.entry.Name, len(resp.Data), n)
	}
	if c.Bool("raw-binary") {
		_, err := c.App.Writer.Write(resp.Data)
		return err
	}
	return nvmeprint.GetLog(c.App.Writer, format, deviceName(dev), uint8(lid), uint32(nsid), resp.Data)
}

// identifyController reads Identify Controller through t's daemon.
func identifyController(c *cli.Context, t devTarget) (nvme.IdentifyController, error) {
	resp, err := request(c, t, session.Request{Op: session.OpIdentify})
	if err != nil {
		return nil, err
	}
	id, err := nvme.ParseIdentifyController(resp.Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", t.entry.Name, err)
	}
	return id, nil
}

func cmdErrorLog(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	id, err := identifyController(c, t)
	if err != nil {
		return err
	}
	entries := int(id.ELPE()) + 1
	if c.IsSet("log-entries") {
		e := int(c.Uint("log-entries"))
		if e == 0 {
			return errors.New("--log-entries (-e) must be at least 1")
		}
		entries = min(entries, e)
	}
	sqe, err := getLogSQE(uint8(nvme.LIDError), nvme.NSIDAll, 0, false, 0, entries*nvme.ErrorLogEntrySize)
	if err != nil {
		return err
	}
	resp, err := adminRequest(c, t, sqe, entries*nvme.ErrorLogEntrySize)
	if err != nil {
		return err
	}
	if c.Bool("raw-binary") {
		_, err := c.App.Writer.Write(resp.Data)
		return err
	}
	return nvmeprint.ErrorLog(c.App.Writer, format, deviceName(dev), nvme.ParseErrorLog(resp.Data))
}

// namespaceOf returns the namespace a command is about: -n, else the
// device's, else the controller's only one.
func namespaceOf(c *cli.Context, dev string, t devTarget) (uint32, error) {
	nsid := uint32(c.Uint("namespace-id"))
	if nsid == 0 {
		nsid = t.nsid
	}
	if nsid == 0 {
		if t.state == nil || len(t.state.Namespaces) != 1 {
			return 0, fmt.Errorf("%s: which namespace? give --namespace-id (-n) NSID or a namespace device (nvmeofNnM)", dev)
		}
		nsid = t.state.Namespaces[0].NSID
	}
	return nsid, nil
}

func cmdNSDescs(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	nsid, err := namespaceOf(c, dev, t)
	if err != nil {
		return err
	}
	sqe := nvme.SQE(make([]byte, 64))
	sqe.SetOpcode(uint8(nvme.AdminIdentify))
	sqe.SetNSID(nsid)
	nvme.IdentifyCommand{SQE: sqe}.SetCNS(nvme.CNSNSDescriptorList)
	resp, err := adminRequest(c, t, sqe, 4096)
	if err != nil {
		return err
	}
	if c.Bool("raw-binary") {
		_, err := c.App.Writer.Write(resp.Data)
		return err
	}
	ds, err := nvme.DecodeNSDescriptors(resp.Data)
	if err != nil {
		return fmt.Errorf("%s: namespace %d: %v", t.entry.Name, nsid, err)
	}
	return nvmeprint.NSDescs(c.App.Writer, format, nsid, ds)
}

// featureDataLen is nvme_get_feature_length: the size of the data
// structure a feature returns with Get Features (0 for most).
func featureDataLen(fid nvme.FeatureID, cdw11 uint32) int {
	switch fid {
	case nvme.FeatLBARangeType:
		return 4096
	case nvme.FeatAutonomousPowerState:
		return 256
	case nvme.FeatHostMemoryBuffer:
		return 4096
	case nvme.FeatTimestamp:
		return 8
	case nvme.FeatHostIdentifier:
		if cdw11&1 != 0 {
			return 16
		}
		return 8
	}
	return 0
}

// allFeatures are the features get-feature reads without -f (nvme-cli
// goes through 1 to the last it knows, skipping the ones a controller
// refuses).
var allFeatures = []nvme.FeatureID{
	nvme.FeatArbitration, nvme.FeatPowerManagement, nvme.FeatLBARangeType, nvme.FeatTemperatureThreshold,
	nvme.FeatErrorRecovery, nvme.FeatVolatileWriteCache, nvme.FeatNumberOfQueues, nvme.FeatInterruptCoalescing,
	nvme.FeatInterruptVectorConfig, nvme.FeatWriteAtomicityNormal, nvme.FeatAsyncEventConfig,
	nvme.FeatAutonomousPowerState, nvme.FeatHostMemoryBuffer, nvme.FeatTimestamp, nvme.FeatKeepAliveTimer,
	nvme.FeatHostIdentifier,
}

func cmdGetFeature(c *cli.Context) error {
	format, _, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	sel := c.Uint("sel")
	if sel > 3 {
		return fmt.Errorf("--sel %d: want 0 (current), 1 (default), 2 (saved) or 3 (supported capabilities)", sel)
	}
	nsid, err := parseNum("namespace-id", c.String("namespace-id"), 32)
	if err != nil {
		return err
	}
	cdw11, err := parseNum("cdw11", c.String("cdw11"), 32)
	if err != nil {
		return err
	}
	fids := allFeatures
	if c.IsSet("feature-id") {
		v, err := parseNum("feature-id", c.String("feature-id"), 8)
		if err != nil {
			return err
		}
		if v == 0 {
			return errors.New("--feature-id (-f) 0 is reserved")
		}
		fids = []nvme.FeatureID{nvme.FeatureID(v)}
	}
	if c.Uint("data-len") > session.MaxAdminData {
		return fmt.Errorf("--data-len %d: at most %d", c.Uint("data-len"), session.MaxAdminData)
	}
	var lastErr error
	answered := 0
	for _, fid := range fids {
		n := int(c.Uint("data-len"))
		if n == 0 {
			n = featureDataLen(fid, uint32(cdw11))
		}
		if sel == 3 {
			n = 0
		}
		sqe := nvme.SQE(make([]byte, 64))
		sqe.SetOpcode(uint8(nvme.AdminGetFeatures))
		sqe.SetNSID(uint32(nsid))
		fc := nvme.FeaturesCommand{SQE: sqe}
		fc.SetFID(fid)
		fc.SetSEL(nvme.FeatureSelect(sel))
		sqe.SetCDW11(uint32(cdw11))
		resp, err := adminRequest(c, t, sqe, n)
		if err != nil {
			if len(fids) > 1 {
				lastErr = err
				continue // as nvme-cli: a feature the controller refuses is left out
			}
			return err
		}
		answered++
		f := nvmeprint.FeatureResult{FID: fid, Sel: uint8(sel), Result: resp.Result, Data: resp.Data}
		if c.Bool("raw-binary") && len(f.Data) > 0 {
			if _, err := c.App.Writer.Write(f.Data); err != nil {
				return err
			}
			continue
		}
		if err := nvmeprint.Feature(c.App.Writer, format, f, c.Bool("human-readable")); err != nil {
			return err
		}
	}
	if answered == 0 && lastErr != nil {
		return fmt.Errorf("no feature answered: %w", lastErr)
	}
	return nil
}

func cmdReset(c *cli.Context) error {
	dev, err := deviceArg(c)
	if err != nil {
		return err
	}
	t, err := resolveDevice(c, c.String("run-dir"), dev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, resetCallTimeout)
	defer cancel()
	if _, err := session.Call(ctx, t.entry.SocketPath(), session.Request{Op: session.OpReset}); err != nil {
		return fmt.Errorf("%s: reset: %s", t.entry.Name, trimPrefixes(err.Error()))
	}
	return nil
}

func cmdListSubsys(c *cli.Context) error {
	format, err := checkFormat(c)
	if err != nil {
		return err
	}
	runDir := c.String("run-dir")
	states, err := liveStates(c)
	if err != nil {
		return err
	}
	var nsid uint32
	switch c.NArg() {
	case 0:
	case 1:
		t, err := resolveDevice(c, runDir, c.Args().First())
		if err != nil {
			return err
		}
		var only []*session.State
		for _, st := range states {
			if t.state != nil && st.SubsysNQN == t.state.SubsysNQN {
				only = append(only, st)
			}
		}
		states = only
		nsid = t.nsid
	default:
		return fmt.Errorf("at most one DEVICE argument, got %d", c.NArg())
	}
	return nvmeprint.ListSubsysNS(c.App.Writer, format, states, nsid)
}
