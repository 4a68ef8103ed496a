package main

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/internal/sdnotify"
)

// notify tells systemd (Type=notify; examples/systemd/nvmetd.service) the
// daemon's state; outside systemd it does nothing. A failure is logged:
// systemd then times the start out, which says more than nvmetd could.
func notify(log hclog.Logger, lines ...string) {
	if _, err := sdnotify.Notify(lines...); err != nil {
		log.Warn("cannot notify systemd", "error", err)
	}
}

// notifyReady sends READY=1 with what is served as the status line.
func notifyReady(log hclog.Logger, tree *configfs.Tree) {
	notify(log, sdnotify.Ready, sdnotify.Status(fmt.Sprintf("serving %d subsystems on %d ports", len(tree.Subsystems), len(tree.Ports))))
}
