// Package journaltest is a fake journald for tests: a datagram socket in a
// test's temporary directory that decodes the native-protocol entries it
// receives, inline or passed as a memfd.
package journaltest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/journal"
)

// Entry is one received entry.
type Entry struct {
	Fields []journal.Field
	Memfd  bool // it came as a sealed memfd
}

// Get returns the first value of key, "" if absent.
func (e Entry) Get(key string) string {
	for _, f := range e.Fields {
		if f.Key == key {
			return f.Value
		}
	}
	return ""
}

// Has reports whether the entry has the field key.
func (e Entry) Has(key string) bool {
	for _, f := range e.Fields {
		if f.Key == key {
			return true
		}
	}
	return false
}

// String shows the entry's fields, for test failures.
func (e Entry) String() string {
	var b strings.Builder
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%q", f.Key, f.Value)
	}
	return b.String()
}

// Server is the fake journal.
type Server struct {
	// Path is the socket to give journal.Dial (or $NVMEOF_JOURNAL_SOCKET).
	Path    string
	conn    *net.UnixConn
	entries chan Entry
	errs    chan error
}

// New starts a fake journal in a new temporary directory; it stops at the end of the
// test.
func New(t testing.TB) *Server {
	t.Helper()
	// A short directory: socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "journal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "socket")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	// Room for large datagrams and bursts of start-up entries.
	_ = conn.SetReadBuffer(8 << 20)
	s := &Server{Path: path, conn: conn, entries: make(chan Entry, 1024), errs: make(chan error, 16)}
	done := make(chan struct{})
	go s.receive(done)
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *Server) receive(done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 16<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return // closed
		}
		e, err := decode(buf[:n], oob[:oobn])
		if err != nil {
			select {
			case s.errs <- err:
			default:
			}
			continue
		}
		select {
		case s.entries <- e:
		default:
			select {
			case s.errs <- errors.New("journaltest: entry queue full"):
			default:
			}
		}
	}
}

// decode reads a datagram: the entry itself, or no data and one memfd.
func decode(p, oob []byte) (Entry, error) {
	var e Entry
	if len(oob) > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob)
		if err != nil {
			return e, err
		}
		var fds []int
		for _, m := range msgs {
			r, err := unix.ParseUnixRights(&m)
			if err != nil {
				return e, err
			}
			fds = append(fds, r...)
		}
		for _, fd := range fds {
			defer unix.Close(fd)
		}
		if len(fds) != 1 || len(p) != 0 {
			return e, fmt.Errorf("journaltest: %d descriptors with %d bytes of data", len(fds), len(p))
		}
		seals, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0)
		if err != nil {
			return e, fmt.Errorf("journaltest: passed descriptor is not a memfd: %w", err)
		}
		if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE; seals&want != want {
			return e, fmt.Errorf("journaltest: memfd not sealed (seals %#x)", seals)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fds[0], &st); err != nil {
			return e, err
		}
		data := make([]byte, st.Size)
		if n, err := unix.Pread(fds[0], data, 0); err != nil || n != len(data) {
			return e, fmt.Errorf("journaltest: reading the memfd: %w", err)
		}
		p = data
		e.Memfd = true
	}
	fs, err := journal.ParseEntry(p)
	if err != nil {
		return e, err
	}
	e.Fields = fs
	return e, nil
}

// Next returns the next entry, failing the test after timeout or on a
// malformed datagram.
func (s *Server) Next(t testing.TB, timeout time.Duration) Entry {
	t.Helper()
	select {
	case e := <-s.entries:
		return e
	case err := <-s.errs:
		t.Fatalf("fake journal: %v", err)
	case <-time.After(timeout):
		t.Fatalf("fake journal: no entry within %v", timeout)
	}
	return Entry{}
}

// WaitFor returns the first entry for which match is true, skipping the
// others (at most 10000), failing the test after timeout.
func (s *Server) WaitFor(t testing.TB, timeout time.Duration, match func(Entry) bool) Entry {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var seen []string
	for range 10000 {
		select {
		case e := <-s.entries:
			if match(e) {
				return e
			}
			if len(seen) < 20 {
				seen = append(seen, e.String())
			}
		case err := <-s.errs:
			t.Fatalf("fake journal: %v", err)
		case <-deadline.C:
			t.Fatalf("fake journal: no matching entry within %v; got:\n%s", timeout, strings.Join(seen, "\n"))
		}
	}
	t.Fatalf("fake journal: no matching entry among 10000")
	return Entry{}
}

// TryNext returns an entry already received, if any, without waiting.
func (s *Server) TryNext() (Entry, bool) {
	select {
	case e := <-s.entries:
		return e, true
	default:
		return Entry{}, false
	}
}
