package journal

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Fields the Writer sets itself; a key/value of the same name is sent as
// KV_name instead, so that it cannot replace them.
var reserved = []string{"MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", LoggerField}

// LoggerField holds the hclog logger name (Named) of an entry.
const LoggerField = "LOGGER"

// Writer is an io.Writer for an hclog logger with JSON output (see
// LoggerOptions): each JSON line becomes a journal entry. A line that is
// not hclog JSON is sent as the MESSAGE of an info entry. An entry the
// journal does not take is written, as the line, to the fallback writer
// (if any): a stopped journald loses nothing.
type Writer struct {
	conn     *Conn
	ident    string
	static   []Field
	fallback io.Writer

	mu  sync.Mutex
	buf []byte
}

// NewWriter returns a Writer sending to conn with SYSLOG_IDENTIFIER
// identifier (journalctl -t selects it) and the static fields in every
// entry (their keys are sanitised).
func NewWriter(conn *Conn, identifier string, static []Field, fallback io.Writer) *Writer {
	w := &Writer{conn: conn, ident: identifier, fallback: fallback}
	for _, f := range static {
		w.static = append(w.static, Field{Key: SanitizeKey(f.Key), Value: f.Value})
	}
	return w
}

// LoggerOptions returns hclog options that log to w: JSON lines (which w
// decodes back into fields), the caller's file and line, no time stamp
// (journald stamps each entry as it receives it).
func (w *Writer) LoggerOptions(name string, level hclog.Level) *hclog.LoggerOptions {
	return &hclog.LoggerOptions{Name: name, Level: level, Output: w,
		JSONFormat: true, IncludeLocation: true, DisableTime: true}
}

// Write sends each line of p as an entry. It always reports success:
// hclog has nothing to do with a logging error, and failed entries went to
// the fallback.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range bytes.Split(p, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		w.buf = AppendEntry(w.buf[:0], w.Fields(line))
		if err := w.conn.SendEncoded(w.buf); err != nil && w.fallback != nil {
			_, _ = w.fallback.Write(append(line[:len(line):len(line)], '\n'))
		}
	}
	return len(p), nil
}

// Fields returns the journal fields of one hclog JSON line: MESSAGE,
// PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE, CODE_LINE, the static fields,
// LOGGER (the logger's name), then the key/values sorted by name, with
// sanitised keys. Strings are sent as they are, other values as JSON.
func (w *Writer) Fields(line []byte) []Field {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil || m["@message"] == nil {
		fs := []Field{{"MESSAGE", string(line)}, {"PRIORITY", strconv.Itoa(PriInfo)}}
		if w.ident != "" {
			fs = append(fs, Field{"SYSLOG_IDENTIFIER", w.ident})
		}
		return append(fs, w.static...)
	}
	level := hclog.LevelFromString(jsonString(m["@level"]))
	fs := []Field{{"MESSAGE", jsonString(m["@message"])}, {"PRIORITY", strconv.Itoa(LevelPriority(level))}}
	if w.ident != "" {
		fs = append(fs, Field{"SYSLOG_IDENTIFIER", w.ident})
	}
	if c := jsonString(m["@caller"]); c != "" {
		if i := strings.LastIndexByte(c, ':'); i > 0 {
			fs = append(fs, Field{"CODE_FILE", c[:i]}, Field{"CODE_LINE", c[i+1:]})
		}
	}
	fs = append(fs, w.static...)
	if mod := jsonString(m["@module"]); mod != "" {
		fs = append(fs, Field{LoggerField, mod})
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		key := SanitizeKey(k)
		if slices.Contains(reserved, key) || slices.ContainsFunc(w.static, func(f Field) bool { return f.Key == key }) {
			key = SanitizeKey("KV_" + key)
		}
		fs = append(fs, Field{key, jsonString(m[k])})
	}
	return fs
}

// jsonString returns a JSON string's value, or any other JSON value's
// text ("" for none).
func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}
