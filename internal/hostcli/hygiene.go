package hostcli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/internal/buildinfo"
	"github.com/nvmeof/nvmeof/internal/suggest"
)

// logLevels are the --log-level values, most verbose first.
var logLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// levelSynonyms maps names other tools use to ours, for the suggestion.
var levelSynonyms = map[string]string{
	"verbose": "debug", "all": "trace", "warning": "warn", "err": "error",
	"none": "off", "quiet": "off", "silent": "off", "fatal": "error", "critical": "error",
}

// checkLogLevel refuses a --log-level hclog does not know (hclog would
// quietly take it as info), suggesting the level meant.
func checkLogLevel(level string) error {
	l := strings.ToLower(strings.TrimSpace(level))
	for _, v := range logLevels {
		if l == v {
			return nil
		}
	}
	msg := fmt.Sprintf("--log-level %q: want one of %s", level, strings.Join(logLevels, ", "))
	if s := suggestLevel(l); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return fmt.Errorf("%s", msg)
}

// suggestLevel returns the level closest to l: a synonym, or a level
// within two edits.
func suggestLevel(l string) string {
	if s, ok := levelSynonyms[l]; ok {
		return s
	}
	if i := suggest.Within(l, logLevels, 2); i >= 0 {
		return logLevels[i]
	}
	return ""
}

// logLevel is the validated --log-level as hclog's level.
func logLevel(c *cli.Context) hclog.Level {
	return hclog.LevelFromString(strings.ToLower(c.String("log-level")))
}

// version returns the module version and VCS revision this binary was
// built from (runtime/debug.ReadBuildInfo): "v1.2.3 (rev 0123abcd,
// modified)", "(devel)" for a plain go build in the source tree.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	return formatVersion(bi)
}

// formatVersion formats build information as version prints it, with
// the commit time.
func formatVersion(bi *debug.BuildInfo) string { return buildinfo.FormatTime(bi) }
