package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen binds a datagram socket as systemd does and points
// $NOTIFY_SOCKET at it (name: a path, or "@abstract").
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	addr := name
	if strings.HasPrefix(name, "@") {
		addr = "\x00" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotify(t *testing.T) {
	for _, name := range []string{"path", "abstract"} {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "notify")
			if name == "abstract" {
				sock = "@nvmeof-sdnotify-test-" + filepath.Base(filepath.Dir(sock))
			}
			c := listen(t, sock)
			if ok, err := Notify(Ready, Status("serving 2 subsystems")); !ok || err != nil {
				t.Fatalf("Notify: %v %v", ok, err)
			}
			if got := recv(t, c); got != "READY=1\nSTATUS=serving 2 subsystems" {
				t.Errorf("got %q", got)
			}
			if _, err := Notify(Reloading()); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, c); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
				t.Errorf("got %q", got)
			}
		})
	}
}

func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if ok, err := Notify(Ready); ok || err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v %v", ok, err)
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1")
	if _, err := Notify(Ready); err == nil {
		t.Error("a vsock address: no error")
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	if _, err := Notify(Ready); err == nil {
		t.Error("a socket nobody binds: no error")
	}
}
