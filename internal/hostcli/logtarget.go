package hostcli

import (
	"fmt"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/journal"
)

// Where a connection daemon logs (--log-target).
const (
	logFile    = "file"
	logJournal = "journal"
	logStderr  = "stderr"
)

// journalIdentifier is the daemons' SYSLOG_IDENTIFIER (journalctl -t).
const journalIdentifier = "nvmeof"

// controllerField is the journal field naming a daemon's controller.
const controllerField = "NVMEOF_CONTROLLER"

var logTargetFlag = &cli.StringFlag{Name: "log-target", Value: logFile,
	Usage: "where the connection daemon logs, `TARGET`: file (RUN-DIR/nvmeofN.log, kept after it exits), " +
		"journal (systemd's journal: journalctl -t nvmeof " + controllerField + "=nvmeofN) or stderr (this command's stderr, which the daemon keeps)"}

// logFDFlag tells the daemon which inherited descriptor is the stderr of
// --log-target stderr (the one of the connect command).
var logFDFlag = &cli.IntFlag{Name: "log-fd", Hidden: true}

// checkLogTarget refuses an unknown --log-target, and journal when there
// is no journal socket (before a daemon starts and fails).
func checkLogTarget(c *cli.Context) error {
	switch t := c.String("log-target"); t {
	case logFile, logStderr:
		return nil
	case logJournal:
		conn, err := journal.Dial(journal.SocketPath())
		if err != nil {
			return fmt.Errorf("--log-target journal: %w", err)
		}
		return conn.Close()
	default:
		return fmt.Errorf("--log-target %q: want file, journal or stderr", t)
	}
}

// logWhere says where the daemon of controller name logs, for messages
// and its state: the log file, the journalctl command, or "stderr".
func logWhere(target, runDir, name string) string {
	switch target {
	case logJournal:
		return "journalctl -t " + journalIdentifier + " " + controllerField + "=" + name
	case logStderr:
		return logStderr
	}
	return session.LogPath(runDir, name)
}

// daemonLogArgs returns the daemon's flags for --log-target and, for
// stderr, the file to pass it as descriptor fd.
func daemonLogArgs(c *cli.Context, fd int) ([]string, *os.File) {
	t := c.String("log-target")
	if t != logStderr {
		return []string{"--log-target", t}, nil
	}
	f, ok := c.App.ErrWriter.(*os.File)
	if !ok {
		f = os.Stderr
	}
	return []string{"--log-target", t, "--log-fd", strconv.Itoa(fd)}, f
}

// daemonLogger returns the connection daemon's logger at level for its
// --log-target, and the function that releases it. The daemon's stderr is
// its log file (StartDaemon): file logs there, and with journal what
// journald does not take, and a panic, still land there.
func daemonLogger(c *cli.Context, name, nqn string, level hclog.Level) (hclog.Logger, func(), error) {
	logName := "nvmeof." + name
	switch t := c.String("log-target"); t {
	case logFile, "":
		return hclog.New(&hclog.LoggerOptions{Name: logName, Level: level, Output: c.App.ErrWriter}), func() {}, nil
	case logStderr:
		fd := c.Int("log-fd")
		f := os.NewFile(uintptr(fd), "stderr")
		if fd < 3 || f == nil {
			return nil, nil, fmt.Errorf("--log-target stderr: bad --log-fd %d", fd)
		}
		return hclog.New(&hclog.LoggerOptions{Name: logName, Level: level, Output: f}), func() { f.Close() }, nil
	case logJournal:
		conn, err := journal.Dial(journal.SocketPath())
		if err != nil {
			return nil, nil, fmt.Errorf("--log-target journal: %w", err)
		}
		w := journal.NewWriter(conn, journalIdentifier,
			[]journal.Field{{Key: controllerField, Value: name}, {Key: "NVMEOF_SUBSYSNQN", Value: nqn}}, c.App.ErrWriter)
		return hclog.New(w.LoggerOptions(logName, level)), func() { conn.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("--log-target %q: want file, journal or stderr", t)
	}
}
