package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/internal/cliutil"
)

// levelSynonyms are words other tools use for a log level, with the level
// meant: "verbose" used to be taken and silently mean info.
var levelSynonyms = map[string]string{
	"verbose": "debug", "debug2": "trace", "all": "trace", "warning": "warn", "err": "error",
	"fatal": "error", "critical": "error", "none": "off", "quiet": "off", "silent": "off", "information": "info",
}

// parseLogLevel checks a --log-level value (any case) and returns it as
// hclog's level: one of configfs.LogLevels, as the configuration's
// log_level, else an error with the level probably meant.
func parseLogLevel(s string) (hclog.Level, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	if slices.Contains(configfs.LogLevels, l) {
		return hclog.LevelFromString(l), nil
	}
	msg := fmt.Sprintf("--log-level %q: unknown level (want one of %s)", s, strings.Join(configfs.LogLevels, ", "))
	if m, ok := levelSynonyms[l]; ok {
		msg += fmt.Sprintf("; did you mean %s?", m)
	} else if m := closestWord(l, configfs.LogLevels); m != "" {
		msg += fmt.Sprintf("; did you mean %s?", m)
	}
	return hclog.NoLevel, cliutil.UsageError{Err: errors.New(msg)}
}
