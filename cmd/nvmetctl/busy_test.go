package main

import (
	"bufio"
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// busyDaemon answers the first busy connections as nvmetd does when every
// slot has a request under way (the error, then close, without reading),
// and the requests of the later ones with an empty list. It returns the
// socket and the count of connections.
func busyDaemon(t *testing.T, busy int) (string, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "busy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if int(conns.Add(1)) <= busy {
				c.Write([]byte(`{"jsonrpc":"2.0","error":{"code":-32007,"message":"busy: too many control connections (32) with requests under way: try again"},"id":null}` + "\n"))
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadBytes('\n'); err != nil {
						return
					}
					c.Write([]byte(`{"jsonrpc":"2.0","result":["rpc.methods"],"id":1}` + "\n"))
				}
			}()
		}
	}()
	return sock, &conns
}

// TestBusyDaemonWait: nvmetctl tries again, for --wait at most, while
// the daemon says it is busy; then it says so plainly, with the daemon's
// message (before: it gave up at once, often with "write: broken pipe").
func TestBusyDaemonWait(t *testing.T) {
	sock, conns := busyDaemon(t, 3)
	var stdout, stderr bytes.Buffer
	if status := run([]string{"nvmetctl", "--socket", sock, "rpc", "rpc.methods"}, &stdout, &stderr); status != 0 || !strings.Contains(stdout.String(), `"rpc.methods"`) {
		t.Errorf("busy 3 times: status %d, stdout %q, stderr %q", status, stdout.String(), stderr.String())
	}
	if n := conns.Load(); n != 4 {
		t.Errorf("%d connections, want 4 (3 refused, 1 answered)", n)
	}

	sock, conns = busyDaemon(t, 1<<30)
	stdout.Reset()
	stderr.Reset()
	status := run([]string{"nvmetctl", "--socket", sock, "--wait", "300ms", "rpc", "rpc.methods"}, &stdout, &stderr)
	if status != 1 || !strings.Contains(stderr.String(), "nvmetd is busy") || !strings.Contains(stderr.String(), "too many control connections (32)") || strings.Contains(stderr.String(), "broken pipe") {
		t.Errorf("always busy: status %d, stderr %q", status, stderr.String())
	}
	if n := conns.Load(); n < 2 {
		t.Errorf("%d connections: nvmetctl did not try again", n)
	}
}
