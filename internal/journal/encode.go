package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Syslog priorities (PRIORITY=), as syslog(3).
const (
	PriEmerg   = 0
	PriAlert   = 1
	PriCrit    = 2
	PriErr     = 3
	PriWarning = 4
	PriNotice  = 5
	PriInfo    = 6
	PriDebug   = 7
)

// LevelPriority maps an hclog level to its syslog priority: trace and
// debug are debug, info info, warn warning, error err.
func LevelPriority(l hclog.Level) int {
	switch l {
	case hclog.Trace, hclog.Debug:
		return PriDebug
	case hclog.Warn:
		return PriWarning
	case hclog.Error:
		return PriErr
	}
	return PriInfo
}

// MaxKeyLen is the longest field name journald accepts.
const MaxKeyLen = 64

// SanitizeKey makes k a field name journald accepts for a client: ASCII
// upper-case letters, digits and '_', not starting with '_' (those are
// journald's trusted fields) nor with a digit, at most MaxKeyLen bytes.
// Lower case is upper-cased, every other character becomes '_'; leading
// underscores are dropped, a leading digit gets an "F_" prefix; a key with
// nothing left is "FIELD".
func SanitizeKey(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_")
	switch {
	case s == "":
		s = "FIELD"
	case s[0] >= '0' && s[0] <= '9':
		s = "F_" + s
	}
	if len(s) > MaxKeyLen {
		s = s[:MaxKeyLen]
	}
	return s
}

// ValidKey reports whether k is a field name journald accepts from a
// client (what SanitizeKey returns).
func ValidKey(k string) bool {
	if k == "" || len(k) > MaxKeyLen || k[0] == '_' || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// AppendEntry appends the native-protocol encoding of fields to b: KEY=value
// and a newline, or, for a value holding a newline, KEY, a newline, the
// value's length as a 64-bit little-endian integer, the value and a newline.
// The keys must be valid (ValidKey).
func AppendEntry(b []byte, fields []Field) []byte {
	for _, f := range fields {
		b = append(b, f.Key...)
		if strings.IndexByte(f.Value, '\n') < 0 {
			b = append(b, '=')
			b = append(b, f.Value...)
		} else {
			b = append(b, '\n')
			b = binary.LittleEndian.AppendUint64(b, uint64(len(f.Value)))
			b = append(b, f.Value...)
		}
		b = append(b, '\n')
	}
	return b
}

// ParseEntry decodes a native-protocol entry as journald does (the fake
// journal of the tests reads entries with it). Bad input is an error.
func ParseEntry(p []byte) ([]Field, error) {
	var fields []Field
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			return nil, errors.New("journal: entry does not end with a newline")
		}
		line := p[:nl]
		if eq := bytes.IndexByte(line, '='); eq >= 0 {
			k := string(line[:eq])
			if !ValidKey(k) {
				return nil, fmt.Errorf("journal: invalid field name %q", k)
			}
			fields = append(fields, Field{Key: k, Value: string(line[eq+1:])})
			p = p[nl+1:]
			continue
		}
		k := string(line)
		if !ValidKey(k) {
			return nil, fmt.Errorf("journal: invalid field name %q", k)
		}
		p = p[nl+1:]
		if len(p) < 8 {
			return nil, fmt.Errorf("journal: field %s: length missing", k)
		}
		n := binary.LittleEndian.Uint64(p)
		p = p[8:]
		if n >= uint64(len(p)) || p[n] != '\n' {
			return nil, fmt.Errorf("journal: field %s: %d bytes announced, value not followed by a newline", k, n)
		}
		fields = append(fields, Field{Key: k, Value: string(p[:n])})
		p = p[n+1:]
	}
	return fields, nil
}
