package report

import (
	"fmt"
	"strings"
)

// MetaFlag is a repeatable -meta KEY=VALUE command-line flag (flag.Value)
// collecting what a report records about its run.
type MetaFlag map[string]string

// String implements flag.Value.
func (m MetaFlag) String() string { return fmt.Sprint(map[string]string(m)) }

// Set implements flag.Value.
func (m MetaFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("-meta %q: want KEY=VALUE", s)
	}
	m[k] = v
	return nil
}
