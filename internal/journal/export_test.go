package journal

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// StreamOf returns the $JOURNAL_STREAM value that names f.
func StreamOf(t *testing.T, f *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// SetSendBuffer sets the socket's SO_SNDBUF, so that the kernel refuses
// datagrams larger than about n bytes (EMSGSIZE).
func (c *Conn) SetSendBuffer(t *testing.T, n int) {
	t.Helper()
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n); err != nil {
		t.Fatal(err)
	}
}
