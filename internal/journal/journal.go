// Package journal sends log entries to the systemd journal over its
// native protocol (systemd.journal-fields(7), "Native Journal Protocol"):
// one AF_UNIX datagram per entry to /run/systemd/journal/socket, holding
// KEY=value lines, or KEY, a newline, a 64-bit little-endian length and
// the raw bytes for a value that contains a newline. An entry too large
// for one datagram goes, as sd_journal_sendv does it, into a sealed memfd
// whose descriptor travels alone in a datagram (SCM_RIGHTS): nothing is
// truncated. No dependency on libsystemd.
//
// Writer turns hclog's JSON lines into entries: MESSAGE, PRIORITY (the
// syslog level of the hclog level), SYSLOG_IDENTIFIER, CODE_FILE and
// CODE_LINE, and every key/value as an upper-cased field.
package journal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSocket is journald's native protocol socket.
const DefaultSocket = "/run/systemd/journal/socket"

// SocketEnv names the environment variable that replaces DefaultSocket
// (tests point it at a fake journal).
const SocketEnv = "NVMEOF_JOURNAL_SOCKET"

// SocketPath returns $NVMEOF_JOURNAL_SOCKET, else DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// Field is one journal field. Keys must be valid journal field names
// (SanitizeKey makes them so); values are any bytes.
type Field struct {
	Key, Value string
}

// Conn sends entries to a journal socket. It is safe for concurrent use.
type Conn struct {
	path string
	mu   sync.Mutex
	fd   int
	addr *unix.SockaddrUnix
}

// Dial opens a datagram socket for the journal at path. The socket is not
// connected, so that entries still arrive after journald restarts; Dial
// fails when path is not a socket (no journald: use another log target).
func Dial(path string) (*Conn, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("journal socket %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("journal socket %s: not a socket", path)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("journal: socket: %w", err)
	}
	// As sd_journal_send: a large send buffer lets most entries go as one
	// datagram (the kernel caps it at wmem_max).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
	return &Conn{path: path, fd: fd, addr: &unix.SockaddrUnix{Name: path}}, nil
}

// Path returns the socket path the Conn sends to.
func (c *Conn) Path() string { return c.path }

// Close closes the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// errClosed is returned by Send after Close.
var errClosed = errors.New("journal: connection closed")

// Send sends one entry made of fields (in this order).
func (c *Conn) Send(fields []Field) error {
	return c.SendEncoded(AppendEntry(nil, fields))
}

// sendRetries bounds the wait for a full journal queue: about 0.1 s, after
// which the entry is dropped rather than stalling the caller.
const sendRetries = 8

// SendEncoded sends an entry already encoded with AppendEntry: as one
// datagram, or through a memfd when it is larger than a datagram may be.
func (c *Conn) SendEncoded(entry []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return errClosed
	}
	err := c.sendmsg(entry, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EMSGSIZE) && !errors.Is(err, unix.ENOBUFS) {
		return fmt.Errorf("journal %s: %w", c.path, err)
	}
	if err := c.sendMemfd(entry); err != nil {
		return fmt.Errorf("journal %s: entry of %d bytes through a memfd: %w", c.path, len(entry), err)
	}
	return nil
}

// sendmsg sends one datagram without blocking, retrying a bounded number
// of times while journald's queue is full.
func (c *Conn) sendmsg(p, oob []byte) error {
	wait := 200 * time.Microsecond
	for i := 0; ; i++ {
		err := unix.Sendmsg(c.fd, p, oob, c.addr, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err == nil || i == sendRetries || !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return err
		}
		time.Sleep(wait)
		wait *= 2
	}
}

// sendMemfd writes entry to a memfd, seals it (journald accepts only a
// sealed memfd or an unlinked file) and sends its descriptor.
func (c *Conn) sendMemfd(entry []byte) error {
	fd, err := unix.MemfdCreate("journal-entry", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd)
	for p := entry; len(p) > 0; {
		n, err := unix.Write(fd, p)
		if err != nil {
			return fmt.Errorf("writing the memfd: %w", err)
		}
		p = p[n:]
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("sealing the memfd: %w", err)
	}
	return c.sendmsg(nil, unix.UnixRights(fd))
}
