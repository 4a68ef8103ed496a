// Package buildinfo says what a binary was built from, for the --version
// flags of nvmetd and rping: the main module's version and the VCS
// revision Go stamps into binaries built in a checkout
// (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Line is the --version line of program name:
// "nvmetd version v0.0.0-20261201-abcdef (rev 0123456789ab, go1.26.8)".
func Line(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " version unknown (built without module information)"
	}
	return name + " version " + Format(bi)
}

// Format formats build information as "VERSION (rev REV[, modified],
// GOVERSION)": VERSION is the main module's ("(devel)" for a go build in
// the source tree), REV the first 12 hex digits of vcs.revision (left out
// when the binary has none, as with -buildvcs=false), "modified" when the
// tree had uncommitted changes.
func Format(bi *debug.BuildInfo) string { return format(bi, false) }

// FormatTime is Format with the commit time (vcs.time) after the revision:
// "VERSION (rev REV, TIME[, modified], GOVERSION)", as nvmeof --version.
func FormatTime(bi *debug.BuildInfo) string { return format(bi, true) }

func format(bi *debug.BuildInfo, withTime bool) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var parts []string
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		parts = append(parts, "rev "+rev[:min(len(rev), 12)])
	}
	if withTime && when != "" {
		parts = append(parts, when)
	}
	if modified {
		parts = append(parts, "modified")
	}
	parts = append(parts, bi.GoVersion)
	return v + " (" + strings.Join(parts, ", ") + ")"
}
