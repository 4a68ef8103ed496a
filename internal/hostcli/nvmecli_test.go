package hostcli

import "testing"

// FuzzParseNum: the numbers of the nvme-cli commands' flags (decimal,
// 0x hex, 0 octal) never exceed the bits asked for.
func FuzzParseNum(f *testing.F) {
	f.Add("0x10")
	f.Add("077")
	f.Add("4294967296")
	f.Fuzz(func(t *testing.T, num string) {
		if v, err := parseNum("x", num, 32); err == nil && v > 0xffffffff {
			t.Fatalf("parseNum(%q) = %d: over 32 bits", num, v)
		}
	})
}
