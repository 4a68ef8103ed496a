package configfs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-cased unit to its multiplier.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
	"e": 1 << 60, "eib": 1 << 60, "eb": 1e18,
}

// ParseSize parses a size in bytes: a decimal integer, optionally followed
// (with or without a space) by a unit. KiB, MiB, GiB, TiB, PiB, EiB and the
// bare K, M, G, T, P, E are powers of 1024; KB, MB, GB, TB, PB, EB are
// powers of 1000 (SI); B is bytes. Units are case-insensitive. Fractions
// and negative sizes are refused, as are sizes above 2^63-1 bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, optionally with a unit like 512MiB or 1GiB", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: number too large", s)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, ...)", s, t[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: more than 2^63-1 bytes", s)
	}
	return n * mult, nil
}

// FormatSize formats a size in bytes with the largest binary unit that
// divides it exactly ("1GiB", "512MiB"), or as a plain number of bytes.
// ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	if n <= 0 {
		return strconv.FormatInt(n, 10)
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
