package journal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/internal/journal"
	"github.com/nvmeof/nvmeof/internal/journal/journaltest"
)

const wait = 10 * time.Second

func TestSanitizeKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nsid", "NSID"},
		{"host_traddr", "HOST_TRADDR"},
		{"host-traddr", "HOST_TRADDR"},
		{"io.queues", "IO_QUEUES"},
		{"_PID", "PID"},
		{"__x", "X"},
		{"@module", "MODULE"},
		{"4k", "F_4K"},
		{"", "FIELD"},
		{"___", "FIELD"},
		{"café", "CAF_"},
		{"a=b\nc", "A_B_C"},
		{strings.Repeat("k", 80), strings.Repeat("K", 64)},
	} {
		got := journal.SanitizeKey(tc.in)
		if got != tc.want {
			t.Errorf("SanitizeKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !journal.ValidKey(got) {
			t.Errorf("SanitizeKey(%q) = %q, which ValidKey refuses", tc.in, got)
		}
	}
	for _, k := range []string{"", "_PID", "9X", "lower", "A-B", strings.Repeat("K", 65)} {
		if journal.ValidKey(k) {
			t.Errorf("ValidKey(%q) = true", k)
		}
	}
}

func TestLevelPriority(t *testing.T) {
	for _, tc := range []struct {
		l    hclog.Level
		want int
	}{
		{hclog.Trace, 7}, {hclog.Debug, 7}, {hclog.Info, 6}, {hclog.Warn, 4}, {hclog.Error, 3}, {hclog.NoLevel, 6},
	} {
		if got := journal.LevelPriority(tc.l); got != tc.want {
			t.Errorf("LevelPriority(%v) = %d, want %d", tc.l, got, tc.want)
		}
	}
}

// TestAppendEntry checks the wire encoding byte for byte: KEY=value, and
// the length-prefixed form for a value with a newline.
func TestAppendEntry(t *testing.T) {
	got := journal.AppendEntry(nil, []journal.Field{{"MESSAGE", "hi"}, {"ERR", "a\nb"}, {"EMPTY", ""}})
	var want bytes.Buffer
	want.WriteString("MESSAGE=hi\nERR\n")
	binary.Write(&want, binary.LittleEndian, uint64(3))
	want.WriteString("a\nb\nEMPTY=\n")
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("AppendEntry = %q, want %q", got, want.Bytes())
	}
	for _, bad := range []string{"MESSAGE", "MESSAGE=x", "lower=x\n", "_PID=1\n", "K\n\x05\x00\x00\x00\x00\x00\x00\x00ab\n", "K\n\x01\x00"} {
		if _, err := journal.ParseEntry([]byte(bad)); err == nil {
			t.Errorf("ParseEntry(%q) accepted it", bad)
		}
	}
}

// logger returns an hclog logger writing to the fake journal s.
func logger(t *testing.T, s *journaltest.Server, fallback *bytes.Buffer, static ...journal.Field) (hclog.Logger, *journal.Conn) {
	t.Helper()
	c, err := journal.Dial(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := journal.NewWriter(c, "nvmetest", static, fallback)
	return hclog.New(w.LoggerOptions("test", hclog.Trace)), c
}

// TestWriterFields logs through hclog into a fake journald and checks each
// entry's fields: message, priority of each level, identifier, code
// location, logger name, static fields, key/values with sanitised keys, a
// multi-line value and a key that would replace a reserved field.
func TestWriterFields(t *testing.T) {
	s := journaltest.New(t)
	log, _ := logger(t, s, nil, journal.Field{Key: "nvmeof-controller", Value: "nvmeof3"})
	for _, tc := range []struct {
		level hclog.Level
		pri   string
	}{
		{hclog.Trace, "7"}, {hclog.Debug, "7"}, {hclog.Info, "6"}, {hclog.Warn, "4"}, {hclog.Error, "3"},
	} {
		log.Log(tc.level, "level "+tc.level.String())
		e := s.Next(t, wait)
		if e.Get("MESSAGE") != "level "+tc.level.String() || e.Get("PRIORITY") != tc.pri {
			t.Errorf("%v: entry %v, want PRIORITY=%s", tc.level, e, tc.pri)
		}
	}

	log.Named("sub").With("qid", 2).Error("queue failed", "error", errors.New("line one\nline two"),
		"host-traddr", "127.0.0.2", "message", "not the message", "_PID", 1, "count", 7)
	e := s.Next(t, wait)
	if e.Memfd {
		t.Errorf("a small entry came through a memfd")
	}
	for k, want := range map[string]string{
		"MESSAGE":           "queue failed",
		"PRIORITY":          "3",
		"SYSLOG_IDENTIFIER": "nvmetest",
		"NVMEOF_CONTROLLER": "nvmeof3",
		"LOGGER":            "test.sub",
		"QID":               "2",
		"ERROR":             "line one\nline two",
		"HOST_TRADDR":       "127.0.0.2",
		"KV_MESSAGE":        "not the message",
		"PID":               "1",
		"COUNT":             "7",
	} {
		if got := e.Get(k); got != want {
			t.Errorf("%s = %q, want %q (entry %v)", k, got, want, e)
		}
	}
	if f := e.Get("CODE_FILE"); !strings.HasSuffix(f, "internal/journal/journal_test.go") {
		t.Errorf("CODE_FILE = %q", f)
	}
	if l := e.Get("CODE_LINE"); l == "" || strings.Trim(l, "0123456789") != "" {
		t.Errorf("CODE_LINE = %q", l)
	}
	for _, f := range e.Fields {
		if f.Key == "MESSAGE" && f.Value != "queue failed" {
			t.Errorf("a key/value replaced MESSAGE: %v", e)
		}
	}
}

// TestLargeEntryMemfd: an entry larger than the kernel takes as one
// datagram (EMSGSIZE; the send buffer made small here) goes through a
// sealed memfd, whole; with the default buffer a 1 MiB entry arrives whole
// too, either way.
func TestLargeEntryMemfd(t *testing.T) {
	s := journaltest.New(t)
	log, c := logger(t, s, nil)
	big := strings.Repeat("0123456789abcdef", 1<<16) + "\nend" // 1 MiB and a newline
	log.Info("big", "dump", big)
	e := s.Next(t, wait)
	if e.Get("MESSAGE") != "big" || e.Get("DUMP") != big {
		t.Errorf("large entry: MESSAGE %q, DUMP of %d bytes (want %d)", e.Get("MESSAGE"), len(e.Get("DUMP")), len(big))
	}

	c.SetSendBuffer(t, 4096)
	log.Info("small")
	if e := s.Next(t, wait); e.Memfd || e.Get("MESSAGE") != "small" {
		t.Errorf("small entry: memfd %v, %v", e.Memfd, e)
	}
	log.Info("big", "dump", big)
	e = s.Next(t, wait)
	if !e.Memfd {
		t.Errorf("a 1 MiB entry came as a datagram through a 4 KiB send buffer")
	}
	if e.Get("MESSAGE") != "big" || e.Get("DUMP") != big {
		t.Errorf("large entry through the memfd: MESSAGE %q, DUMP of %d bytes (want %d)", e.Get("MESSAGE"), len(e.Get("DUMP")), len(big))
	}
}

// TestFallback: entries the journal does not take go to the fallback
// writer, and Dial refuses what is not a socket.
func TestFallback(t *testing.T) {
	s := journaltest.New(t)
	var fb bytes.Buffer
	log, c := logger(t, s, &fb)
	log.Info("first")
	if e := s.Next(t, wait); e.Get("MESSAGE") != "first" {
		t.Fatalf("entry %v", e)
	}
	c.Close()
	log.Warn("second", "k", "v")
	if !strings.Contains(fb.String(), `"@message":"second"`) {
		t.Errorf("fallback got %q", fb.String())
	}
	if _, err := journal.Dial(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Errorf("Dial of a missing socket succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := journal.Dial(f); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Dial of a file: %v", err)
	}
}

// TestPlainLine: a line that is not hclog JSON is an info entry.
func TestPlainLine(t *testing.T) {
	s := journaltest.New(t)
	c, err := journal.Dial(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := journal.NewWriter(c, "x", nil, nil)
	w.Write([]byte("panic: oops\n\n"))
	if e := s.Next(t, wait); e.Get("MESSAGE") != "panic: oops" || e.Get("PRIORITY") != "6" || e.Get("SYSLOG_IDENTIFIER") != "x" {
		t.Errorf("entry %v", e)
	}
}

func TestIsJournalStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stream := journal.StreamOf(t, f)
	other, _ := os.Open(os.DevNull)
	defer other.Close()
	for _, tc := range []struct {
		f      *os.File
		stream string
		want   bool
	}{
		{f, stream, true},
		{other, stream, false},
		{f, "", false},
		{f, "garbage", false},
		{f, "1:", false},
		{nil, stream, false},
	} {
		if got := journal.IsJournalStream(tc.f, tc.stream); got != tc.want {
			t.Errorf("IsJournalStream(%v, %q) = %v", tc.f, tc.stream, got)
		}
	}
}

// FuzzEntry: whatever the keys and values, the sanitised key is valid and
// an encoded entry decodes to the same fields; ParseEntry never panics.
func FuzzEntry(f *testing.F) {
	f.Add("nsid", "1", []byte("MESSAGE=x\n"))
	f.Add("_a-b", "x\ny", []byte("K\n\x01\x00\x00\x00\x00\x00\x00\x00\n\n"))
	f.Add("", "", []byte{})
	f.Fuzz(func(t *testing.T, key, value string, raw []byte) {
		k := journal.SanitizeKey(key)
		if !journal.ValidKey(k) {
			t.Fatalf("SanitizeKey(%q) = %q: invalid", key, k)
		}
		in := []journal.Field{{Key: k, Value: value}, {Key: "MESSAGE", Value: key}}
		out, err := journal.ParseEntry(journal.AppendEntry(nil, in))
		if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
			t.Fatalf("round trip of %q: %q, %v", in, out, err)
		}
		if fs, err := journal.ParseEntry(raw); err == nil {
			for _, f := range fs {
				if !journal.ValidKey(f.Key) {
					t.Fatalf("ParseEntry(%q) gave key %q", raw, f.Key)
				}
			}
		}
	})
}
