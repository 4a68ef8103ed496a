package bdev

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// logBuf is a goroutine-safe log sink for hclog.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines that contain every one of words.
func (l *logBuf) lines(words ...string) []string {
	var out []string
	for _, ln := range strings.Split(l.String(), "\n") {
		ok := ln != ""
		for _, w := range words {
			ok = ok && strings.Contains(ln, w)
		}
		if ok {
			out = append(out, ln)
		}
	}
	return out
}

// infoLogger logs at Info, as nvmetd does by default, into a logBuf.
func infoLogger() (hclog.Logger, *logBuf) {
	b := &logBuf{}
	return hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Info}).With("nsid", 7), b
}

func tempFile(t *testing.T, size int64) (*File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ns.img")
	d, err := OpenFile(Spec{Kind: KindFile, Path: path, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, path
}

// TestMonitorTruncatedFile: a read past the end of a file truncated under
// the backend is logged at Info level with the namespace, operation,
// offset and length.
func TestMonitorTruncatedFile(t *testing.T) {
	d, path := tempFile(t, 1<<20)
	log, buf := infoLogger()
	m := NewMonitor(d, log, MonitorOptions{})
	defer m.Close()
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	_, err := d.ReadAt(make([]byte, 4096), 1<<19)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read past the truncated end: %v", err)
	}
	m.Error("Read", 1<<19, 4096, err)
	if got := buf.lines("backend I/O error", "nsid=7", "op=Read", "offset=524288", "length=4096"); len(got) != 1 {
		t.Fatalf("want one backend error line, log:\n%s", buf)
	}
	if m.Errors() != 1 {
		t.Fatalf("Errors() = %d, want 1", m.Errors())
	}
}

// TestMonitorErrno: a write that fails with an errno (EFBIG beyond
// RLIMIT_FSIZE, which is deterministic where ENOSPC needs a full file
// system) logs the errno by name.
func TestMonitorErrno(t *testing.T) {
	d, _ := tempFile(t, 1<<20)
	log, buf := infoLogger()
	m := NewMonitor(d, log, MonitorOptions{})
	defer m.Close()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 64 << 10
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("setrlimit RLIMIT_FSIZE: %v", err)
	}
	// Go ignores SIGXFSZ, so the write fails with EFBIG instead.
	_, err := d.WriteAt(make([]byte, 4096), 512<<10)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("write beyond RLIMIT_FSIZE: %v, want EFBIG", err)
	}
	m.Error("Write", 512<<10, 4096, err)
	if got := buf.lines("backend I/O error", "op=Write", "offset=524288", "errno=EFBIG"); len(got) != 1 {
		t.Fatalf("want one line with errno=EFBIG, log:\n%s", buf)
	}
}

// TestMonitorRateLimit: the first Burst errors of an interval are logged,
// the rest counted and reported in one line when the interval ends, even
// when no further error comes.
func TestMonitorRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, buf := infoLogger()
		m := NewMonitor(mustMemory(t), log, MonitorOptions{Burst: 3, Interval: time.Minute})
		defer m.Close()
		for i := range 10 {
			m.Error("Write", int64(i)*512, 512, syscall.EIO)
		}
		if got := buf.lines("backend I/O error"); len(got) != 3 {
			t.Fatalf("%d lines in the first interval, want 3:\n%s", len(got), buf)
		}
		if got := buf.lines("suppressed"); len(got) != 0 {
			t.Fatalf("suppressed count before the interval ended:\n%s", buf)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := buf.lines("backend I/O errors suppressed", "count=7"); len(got) != 1 {
			t.Fatalf("want the count of 7 suppressed lines:\n%s", buf)
		}
		// A new interval logs again.
		m.Error("Read", 0, 512, syscall.EIO)
		if got := buf.lines("backend I/O error", "op=Read"); len(got) != 1 {
			t.Fatalf("no line in the next interval:\n%s", buf)
		}
		if m.Errors() != 11 {
			t.Fatalf("Errors() = %d, want 11", m.Errors())
		}
	})
}

// TestMonitorQuietErrors: errors that are the host's business (an
// unsupported operation) or a namespace going away are not warnings.
func TestMonitorQuietErrors(t *testing.T) {
	log, buf := infoLogger()
	m := NewMonitor(mustMemory(t), log, MonitorOptions{})
	defer m.Close()
	m.Error("Dataset Management", 0, 512, ErrNotSupported)
	m.Error("Read", 0, 512, ErrClosed)
	if s := buf.String(); s != "" {
		t.Fatalf("logged at Info:\n%s", s)
	}
}

// TestMonitorUnlinked: a backing file deleted while in use is noticed by
// the periodic check: one warning, and Unlinked reports it.
func TestMonitorUnlinked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, path := tempFile(t, 1<<20)
		log, buf := infoLogger()
		m := NewMonitor(d, log, MonitorOptions{CheckInterval: 10 * time.Second})
		defer m.Close()
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if m.Unlinked() || buf.String() != "" {
			t.Fatalf("unlinked before the file was removed:\n%s", buf)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !m.Unlinked() {
			t.Fatal("Unlinked() false after the file was removed")
		}
		if got := buf.lines("[WARN]", "backing file unlinked", path); len(got) != 1 {
			t.Fatalf("want one warning naming %s:\n%s", path, buf)
		}
		// Once only.
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := buf.lines("backing file unlinked"); len(got) != 1 {
			t.Fatalf("warned %d times:\n%s", len(got), buf)
		}
	})
}

// TestMonitorUnlinkedOnError: an I/O error checks the link at once, without
// waiting for the periodic check.
func TestMonitorUnlinkedOnError(t *testing.T) {
	d, path := tempFile(t, 1<<20)
	log, buf := infoLogger()
	m := NewMonitor(d, log, MonitorOptions{CheckInterval: time.Hour})
	defer m.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	m.Error("Write", 0, 512, syscall.EIO)
	if !m.Unlinked() || len(buf.lines("backing file unlinked")) != 1 {
		t.Fatalf("unlinked file not noticed on error:\n%s", buf)
	}
}

// TestMonitorCheckHook: the periodic check runs the caller's hook (the
// target checks its reservation file with it).
func TestMonitorCheckHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, _ := infoLogger()
		n := 0
		m := NewMonitor(mustMemory(t), log, MonitorOptions{CheckInterval: time.Second, Check: func() { n++ }})
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		m.Close()
		if n != 3 {
			t.Fatalf("hook ran %d times in 3.5 s, want 3", n)
		}
	})
}

func mustMemory(t *testing.T) *Memory {
	t.Helper()
	d, err := NewMemory(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestFileUnlinked: File.Unlinked is fstat's st_nlink == 0.
func TestFileUnlinked(t *testing.T) {
	d, path := tempFile(t, 1<<20)
	if u, err := d.Unlinked(); u || err != nil {
		t.Fatalf("Unlinked() = %v, %v on a linked file", u, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if u, err := d.Unlinked(); !u || err != nil {
		t.Fatalf("Unlinked() = %v, %v after remove", u, err)
	}
}
