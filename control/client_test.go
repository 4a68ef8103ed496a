package control

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oneShotDaemon listens on a Unix socket in a temporary directory and
// hands its first connection to serve, closing it afterwards; done is
// closed when serve has returned.
func oneShotDaemon(t *testing.T, serve func(net.Conn)) (sock string, done chan struct{}) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done = make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return sock, done
}

// TestClientBoundsResponse: a peer that answers with an endless line (no
// newline) gets an error, not the client's memory.
func TestClientBoundsResponse(t *testing.T) {
	sock, done := oneShotDaemon(t, func(c net.Conn) {
		buf := bytes.Repeat([]byte("x"), 64<<10)
		for range 64 { // 4 MiB at most; the client gives up long before
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	cl, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	cl.maxResponse = 1 << 10
	cl.Timeout = 30 * time.Second
	err = cl.Call("rpc.methods", nil, nil)
	cl.Close()
	<-done
	if err == nil || !strings.Contains(err.Error(), "larger than 1024 bytes") {
		t.Fatalf("Call: %v, want the answer refused as too large", err)
	}
}
