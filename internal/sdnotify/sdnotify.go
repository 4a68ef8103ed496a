// Package sdnotify tells systemd about a service's state (sd_notify(3)):
// a Type=notify unit waits for READY=1 before it counts as started, and
// RELOADING=1 and STOPPING=1 show in systemctl status. It writes one
// datagram per call to the socket systemd names in $NOTIFY_SOCKET; without
// the variable (not started by systemd) it does nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// States the daemons send.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// Reloading is the message for the start of a reload: RELOADING=1 with the
// CLOCK_MONOTONIC time that systemd (253 and later, Type=notify-reload)
// wants alongside it; READY=1 ends the reload.
func Reloading() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "RELOADING=1"
	}
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000)
}

// Status is a STATUS= line, the free text systemctl status shows.
func Status(s string) string { return "STATUS=" + strings.ReplaceAll(s, "\n", " ") }

// Notify sends the state lines to $NOTIFY_SOCKET as one datagram. It
// returns false, nil when the variable is not set. An abstract socket
// ("@name") and a path are both accepted; vsock addresses are not.
func Notify(lines ...string) (bool, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return false, nil
	}
	if addr[0] != '/' && addr[0] != '@' {
		return false, fmt.Errorf("sdnotify: NOTIFY_SOCKET %q: not a unix socket path or abstract name", addr)
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // the abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	// A datagram to a bound socket does not block for long; bound it
	// anyway so that a stuck manager cannot stop the daemon.
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}
