package hostcli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
	"github.com/nvmeof/nvmeof/nvme"
)

// liveState asks a daemon for its current state, falling back to its
// state file.
func liveState(c *cli.Context, e session.Entry) *session.State {
	ctx, cancel := context.WithTimeout(c.Context, callTimeout)
	defer cancel()
	if resp, err := session.Call(ctx, e.SocketPath(), session.Request{Op: session.OpState}); err == nil && resp.State != nil {
		return resp.State
	}
	return e.State
}

// liveStates are the current states of the running daemons under
// --run-dir (liveState of each).
func liveStates(c *cli.Context) ([]*session.State, error) {
	live, _, err := session.Scan(c.String("run-dir"))
	if err != nil {
		return nil, trimErr(err)
	}
	var states []*session.State
	for _, e := range live {
		if st := liveState(c, e); st != nil {
			states = append(states, st)
		}
	}
	return states, nil
}

// devTarget is what a DEVICE argument names: a daemon, and a namespace
// when the argument names one.
type devTarget struct {
	entry session.Entry
	state *session.State
	nsid  uint32
	// path names the path (nvmeof0c1) a DEVICE argument named, whose
	// controller the admin commands go to; "" for the daemon's choice.
	path string
}

// resolveDevice finds the daemon of a DEVICE argument: nvmeofN, nvmeofNnM,
// or a mapped block device (/dev/loop3, loop3, or a symlink to it).
func resolveDevice(c *cli.Context, runDir, dev string) (devTarget, error) {
	live, _, err := session.Scan(runDir)
	if err != nil {
		return devTarget{}, trimErr(err)
	}
	// A path of a multipath daemon other than its first (nvmeof0c1):
	// its own controller, as nvme-cli's commands on /dev/nvme1.
	if name := strings.TrimPrefix(dev, "/dev/"); !slices.ContainsFunc(live, func(e session.Entry) bool { return e.Name == name }) {
		if e, st, ok := pathIn(c, live, name); ok {
			return devTarget{entry: e, state: st, path: name}, nil
		}
	}
	if name, nsid, ok := session.ParseDeviceName(dev); ok {
		for _, e := range live {
			if e.Name == name {
				return devTarget{entry: e, state: liveState(c, e), nsid: nsid}, nil
			}
		}
		return devTarget{}, fmt.Errorf("%s: no such controller (see nvmeof list)", dev)
	}
	path := dev
	if !strings.HasPrefix(path, "/") {
		path = "/dev/" + path
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	for _, e := range live {
		st := liveState(c, e)
		if st == nil {
			continue
		}
		for _, ns := range st.Namespaces {
			if ns.Device == "" {
				continue
			}
			r, err := filepath.EvalSymlinks(ns.Device)
			if err != nil {
				r = ns.Device
			}
			if ns.Device == path || r == real {
				return devTarget{entry: e, state: st, nsid: ns.NSID}, nil
			}
		}
	}
	return devTarget{}, fmt.Errorf("%s: not a device of a connected controller (see nvmeof list)", dev)
}

// deviceArg returns the command's one DEVICE argument.
func deviceArg(c *cli.Context) (string, error) {
	switch c.NArg() {
	case 1:
		return c.Args().First(), nil
	case 0:
		return "", errors.New("a DEVICE argument is required (nvmeofN, nvmeofNnM or a mapped device path)")
	}
	return "", fmt.Errorf("one DEVICE argument expected, got %d", c.NArg())
}

// request sends a control request to the daemon of t.
func request(c *cli.Context, t devTarget, req session.Request) (*session.Response, error) {
	ctx, cancel := context.WithTimeout(c.Context, callTimeout)
	defer cancel()
	switch req.Op {
	case session.OpAdmin, session.OpIdentify, session.OpSMARTLog:
		req.Path = t.path
	}
	resp, err := session.Call(ctx, t.entry.SocketPath(), req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", t.entry.Name, trimPrefixes(err.Error()))
	}
	return resp, nil
}

func cmdList(c *cli.Context) error {
	format, err := checkFormat(c)
	if err != nil {
		return err
	}
	states, err := liveStates(c)
	if err != nil {
		return err
	}
	if len(states) == 0 && format == nvmeprint.Normal {
		fmt.Fprintln(c.App.ErrWriter, "No NVMe devices detected.")
		return nil
	}
	return nvmeprint.List(c.App.Writer, format, states)
}

// deviceCommand reads what id-ctrl, id-ns and smart-log share: the output
// format and the DEVICE argument, resolved to its connection.
func deviceCommand(c *cli.Context) (format, dev string, t devTarget, err error) {
	if format, err = checkFormat(c); err != nil {
		return
	}
	if dev, err = deviceArg(c); err != nil {
		return
	}
	t, err = resolveDevice(c, c.String("run-dir"), dev)
	return
}

func cmdIDCtrl(c *cli.Context) error {
	format, _, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	resp, err := request(c, t, session.Request{Op: session.OpIdentify})
	if err != nil {
		return err
	}
	id, err := nvme.ParseIdentifyController(resp.Data)
	if err != nil {
		return fmt.Errorf("%s: %v", t.entry.Name, err)
	}
	return nvmeprint.IDCtrl(c.App.Writer, format, id)
}

func cmdIDNS(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	nsid := uint32(c.Uint("namespace-id"))
	if nsid == 0 {
		nsid = t.nsid
	}
	if nsid == 0 {
		if t.state == nil || len(t.state.Namespaces) != 1 {
			return fmt.Errorf("%s: which namespace? give --namespace-id (-n) NSID or a namespace device (nvmeofNnM)", dev)
		}
		nsid = t.state.Namespaces[0].NSID
	}
	resp, err := request(c, t, session.Request{Op: session.OpIdentify, NSID: nsid})
	if err != nil {
		return err
	}
	id, err := nvme.ParseIdentifyNamespace(resp.Data)
	if err != nil {
		return fmt.Errorf("%s: %v", t.entry.Name, err)
	}
	return nvmeprint.IDNS(c.App.Writer, format, nsid, id)
}

func cmdSMARTLog(c *cli.Context) error {
	format, dev, t, err := deviceCommand(c)
	if err != nil {
		return err
	}
	resp, err := request(c, t, session.Request{Op: session.OpSMARTLog})
	if err != nil {
		return err
	}
	l, err := nvme.ParseSMARTLog(resp.Data)
	if err != nil {
		return fmt.Errorf("%s: %v", t.entry.Name, err)
	}
	return nvmeprint.SMART(c.App.Writer, format, strings.TrimPrefix(dev, "/dev/"), nvme.NSIDAll, l)
}
