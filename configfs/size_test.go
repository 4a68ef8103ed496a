package configfs

import (
	"math"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"512B", 512, ""},
		{"1GiB", 1 << 30, ""},
		{"1gib", 1 << 30, ""},
		{"1 GiB", 1 << 30, ""},
		{" 64MiB ", 64 << 20, ""},
		{"4k", 4096, ""},
		{"4K", 4096, ""},
		{"4KiB", 4096, ""},
		{"4KB", 4000, ""},
		{"2M", 2 << 20, ""},
		{"1G", 1 << 30, ""},
		{"1GB", 1e9, ""},
		{"3T", 3 << 40, ""},
		{"1TB", 1e12, ""},
		{"1PiB", 1 << 50, ""},
		{"7EiB", 7 << 60, ""},
		{"9223372036854775807", math.MaxInt64, ""},
		{"", 0, "want a number"},
		{"GiB", 0, "want a number"},
		{"-1", 0, "want a number"},
		{"1.5GiB", 0, "unknown unit"},
		{"1 GiBs", 0, "unknown unit"},
		{"1Gb!", 0, "unknown unit"},
		{"0x100", 0, "unknown unit"},
		{"8EiB", 0, "more than 2^63-1"},
		{"9223372036854775808", 0, "too large"},
		{"99999999999TiB", 0, "more than 2^63-1"},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{0, "0"}, {512, "512"}, {1000, "1000"}, {4096, "4KiB"}, {1 << 30, "1GiB"}, {3 << 29, "1536MiB"}, {1 << 40, "1TiB"}, {math.MaxInt64, "9223372036854775807"}} {
		if got := FormatSize(tt.n); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.n, got, tt.want)
		}
		if back, err := ParseSize(FormatSize(tt.n)); err != nil || back != tt.n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", tt.n, back, err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1GiB", "4096", "1 kb", "8EiB", "", "-1", "1.5G", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	})
}
