// Package cliutil holds what nvmetd and nvmetctl do alike with urfave/cli:
// a mistake on the command line is a UsageError, reported in one line and
// a hint, with exit status 2 as for Go's flag package; any other error is
// one line and status 1.
package cliutil

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// Exit statuses of Run.
const (
	ExitOK    = 0
	ExitError = 1 // any error but a usage error
	ExitUsage = 2 // a mistake on the command line
)

// UsageError is a mistake on the command line.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the mistake.
func (e UsageError) Unwrap() error { return e.Err }

// Usagef formats a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// IsUsage reports whether err is, or wraps, a UsageError.
func IsUsage(err error) bool { return errors.As(err, new(UsageError)) }

// Run runs app with args and returns the exit status. Flag-parsing errors
// of app and of all its commands become UsageErrors (after the
// OnUsageError the app or command sets, which may reword them). An error
// is printed on stderr as "NAME: error", followed by hint for a usage
// error; urfave/cli never exits by itself.
func Run(app *cli.App, args []string, stderr io.Writer, hint string) int {
	app.OnUsageError = markUsage(app.OnUsageError)
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = markUsage(c.OnUsageError)
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(args)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
	if IsUsage(err) {
		fmt.Fprintln(stderr, hint)
		return ExitUsage
	}
	return ExitError
}

// markUsage returns an OnUsageError that runs f, if any, and makes its
// error a UsageError.
func markUsage(f cli.OnUsageErrorFunc) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, isSubcommand bool) error {
		if f != nil {
			err = f(c, err, isSubcommand)
		}
		if err == nil || IsUsage(err) {
			return err
		}
		return UsageError{err}
	}
}
