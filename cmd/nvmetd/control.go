package main

import (
	"errors"
	"io/fs"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/target/server"
)

// controlFlag is --control-socket: where the control API (nvmetctl's)
// listens.
var controlFlag = &cli.StringFlag{
	Name:    "control-socket",
	Value:   control.DefaultSocket,
	EnvVars: []string{"NVMETD_CONTROL_SOCKET"},
	Usage:   "serve the control API (JSON-RPC 2.0, nvmetctl) on the Unix socket `PATH` (mode 0600); \"none\" turns it off",
}

// newControl returns the control API of srv, serving on --control-socket
// unless that is "none". A socket another nvmetd serves is an error when
// given with --control-socket. The default socket only turns the API off,
// with a warning, when this user cannot create it (nvmetd runs
// unprivileged on loopback) or another nvmetd serves it (several daemons,
// say one per gateway address, each with a config of its own).
func newControl(c *cli.Context, srv *server.Server, log hclog.Logger) (*control.Service, error) {
	opts := control.Options{Logger: log, Loader: loader}
	if c.String("config") != "" {
		// Reload (SIGHUP, nvmetctl reload) reads the file again; the
		// embedded default has none.
		opts.Load = func() (*configfs.Tree, error) { return load(c) }
	}
	ctl := control.New(srv, opts)
	path := c.String(controlFlag.Name)
	if control.Disabled(path) {
		return ctl, nil
	}
	if err := ctl.Listen(path); err != nil {
		if !c.IsSet(controlFlag.Name) && errors.Is(err, fs.ErrPermission) {
			log.Warn("control API off: cannot create its socket; give --control-socket PATH (or none)", "error", err)
			return ctl, nil
		}
		if !c.IsSet(controlFlag.Name) && errors.Is(err, control.ErrSocketInUse) {
			log.Warn("control API off: another nvmetd serves the default socket; give this one --control-socket PATH (or none)", "socket", path)
			return ctl, nil
		}
		return nil, err
	}
	go func() {
		if err := ctl.Serve(); err != nil {
			log.Error("control API stopped", "error", err)
		}
	}()
	return ctl, nil
}
