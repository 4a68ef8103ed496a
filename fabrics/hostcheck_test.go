package fabrics

import (
	"strings"
	"testing"
)

func TestCheckHostCommand(t *testing.T) {
	done := func(*HostCommand) {}
	for _, tc := range []struct {
		name string
		cmd  HostCommand
		want string // "" no error
	}{
		{"fits", HostCommand{Data: make([]byte, 4096), Done: done}, ""},
		{"too large", HostCommand{Data: make([]byte, 4097), Done: done}, "nvme-x: 4097-byte transfer exceeds 4096"},
		{"no Done", HostCommand{}, "nvme-x: command without Done"},
	} {
		err := CheckHostCommand("nvme-x", &tc.cmd, 4096)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
