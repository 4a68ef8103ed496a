package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/internal/cliutil"
	"github.com/nvmeof/nvmeof/internal/journal"
)

// Log targets (--log-target).
const (
	logStderr  = "stderr"
	logJournal = "journal"
	logAuto    = "auto"
)

var logTargetFlag = &cli.StringFlag{Name: "log-target", Value: logAuto,
	Usage: "where to log, `TARGET`: stderr, journal (systemd's native protocol: structured fields, " +
		"journalctl -t nvmetd) or auto (journal when stderr is the journal stream systemd gives a service, $JOURNAL_STREAM; else stderr)"}

// checkLogTarget refuses an unknown --log-target.
func checkLogTarget(c *cli.Context) error {
	switch t := c.String("log-target"); t {
	case logStderr, logJournal, logAuto:
		return nil
	default:
		return cliutil.Usagef("--log-target %q: want stderr, journal or auto", t)
	}
}

// logTarget resolves auto: journal when stderr is the journal stream
// systemd connected (journald then gets fields and priorities instead of
// plain lines), else stderr.
func logTarget(c *cli.Context) string {
	t := c.String("log-target")
	if t != logAuto {
		return t
	}
	if f, ok := c.App.ErrWriter.(*os.File); ok && journal.IsJournalStream(f, os.Getenv(journal.StreamEnv)) {
		return logJournal
	}
	return logStderr
}

// newLogger returns nvmetd's logger at level on the --log-target and the
// function that releases it. On the journal ($NVMEOF_JOURNAL_SOCKET, else
// journald's socket) each line is an entry with SYSLOG_IDENTIFIER=nvmetd;
// an entry journald does not take is written to stderr. --log-json only
// shapes stderr's lines.
func newLogger(c *cli.Context, level hclog.Level) (hclog.Logger, func(), error) {
	if logTarget(c) != logJournal {
		return hclog.New(&hclog.LoggerOptions{
			Name:       "nvmetd",
			Level:      level,
			JSONFormat: c.Bool("log-json"),
			Output:     c.App.ErrWriter,
		}), func() {}, nil
	}
	conn, err := journal.Dial(journal.SocketPath())
	if err != nil {
		return nil, nil, fmt.Errorf("--log-target journal: %w", err)
	}
	w := journal.NewWriter(conn, "nvmetd", nil, c.App.ErrWriter)
	return hclog.New(w.LoggerOptions("nvmetd", level)), func() { conn.Close() }, nil
}
