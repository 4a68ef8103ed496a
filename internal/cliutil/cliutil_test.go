package cliutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp(reword bool) *cli.App {
	action := func(c *cli.Context) error {
		switch c.Args().First() {
		case "usage":
			return Usagef("bad %q", "word")
		case "fail":
			return errors.New("daemon said no")
		case "wrapped":
			return fmt.Errorf("context: %w", UsageError{Err: errors.New("inner")})
		}
		return nil
	}
	app := &cli.App{
		Name:      "tool",
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "check"}},
		Action:    action,
		Commands: []*cli.Command{{
			Name: "outer",
			Subcommands: []*cli.Command{{
				Name:   "inner",
				Flags:  []cli.Flag{&cli.IntFlag{Name: "n"}},
				Action: action,
			}},
		}},
	}
	if reword {
		app.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%w (reworded)", err)
		}
	}
	return app
}

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		name   string
		reword bool
		args   []string
		status int
		stderr string
	}{
		{"ok", false, []string{"--check"}, ExitOK, ""},
		{"undefined flag", false, []string{"--chek"}, ExitUsage, "tool: flag provided but not defined: -chek\nHINT\n"},
		{"reworded by the app", true, []string{"--chek"}, ExitUsage, "tool: flag provided but not defined: -chek (reworded)\nHINT\n"},
		{"subcommand flag", false, []string{"outer", "inner", "--n", "x"}, ExitUsage, "tool: invalid value \"x\" for flag -n: parse error\nHINT\n"},
		{"usage error of an action", false, []string{"usage"}, ExitUsage, "tool: bad \"word\"\nHINT\n"},
		{"wrapped usage error", false, []string{"wrapped"}, ExitUsage, "tool: context: inner\nHINT\n"},
		{"other error", false, []string{"fail"}, ExitError, "tool: daemon said no\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			status := Run(testApp(tt.reword), append([]string{"tool"}, tt.args...), &stderr, "HINT")
			if status != tt.status || stderr.String() != tt.stderr {
				t.Errorf("status %d, stderr %q; want %d, %q", status, stderr.String(), tt.status, tt.stderr)
			}
		})
	}
}

func TestIsUsage(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false}, {errors.New("x"), false}, {Usagef("x"), true},
		{fmt.Errorf("a: %w", Usagef("x")), true}, {UsageError{Err: errors.New("x")}, true},
	} {
		if got := IsUsage(tt.err); got != tt.want {
			t.Errorf("IsUsage(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
