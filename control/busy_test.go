package control

import (
	"bufio"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestClientReadsRefusal: a daemon that refuses a connection answers and
// closes it at once; the client's request then meets a closed socket
// (EPIPE). The client returns the daemon's answer, not "broken pipe".
func TestClientReadsRefusal(t *testing.T) {
	sock, done := oneShotDaemon(t, func(c net.Conn) {
		c.Write([]byte(`{"jsonrpc":"2.0","error":{"code":-32007,"message":"busy: too many control connections (32): try again"},"id":null}` + "\n"))
	})
	cl, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Timeout = 30 * time.Second
	<-done // the daemon has answered and closed before the request is sent
	err = cl.Call("port.list", nil, nil)
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeBusy || !strings.Contains(re.Message, "too many control connections") {
		t.Fatalf("Call after the daemon refused the connection: %v, want its busy error", err)
	}
}

// TestIdleConnsEvicted: connections that hold every slot without a
// request under way do not lock clients out: a new connection takes the
// slot of the one idle longest (before, the new one was refused until
// the idle ones timed out, 30 s).
func TestIdleConnsEvicted(t *testing.T) {
	e := start(t, baseConfig)
	idle := make([]net.Conn, MaxConns)
	for i := range idle {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[i] = c
	}
	// e.cl holds a slot too: the first of the idle ones.
	for range 3 {
		cl := e.dial(t)
		var names []string
		if err := cl.Call("rpc.methods", nil, &names); err != nil {
			t.Fatalf("call with %d idle connections open: %v", MaxConns, err)
		}
		cl.Close()
	}
	// The oldest idle connections were closed by the daemon.
	idle[0].SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("oldest idle connection: read %v, want EOF", err)
	}
}

// lockedBuffer collects log output written by several goroutines.
type lockedBuffer struct {
	ch chan string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.ch <- string(p)
	return len(p), nil
}

// TestRefusalsRateLimited: refused connections (here: every peer) are
// logged a few per interval, then counted and summarized, not logged one
// line each (before: 30,278 lines in 3 s when an admin loosened the
// socket's mode).
func TestRefusalsRateLimited(t *testing.T) {
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	defer srv.Close()
	lines := &lockedBuffer{ch: make(chan string, 1000)}
	svc := New(srv, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: lines, Level: hclog.Info})})
	tree, err := configfs.ParseHCL([]byte(baseConfig), "r.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "r.sock")
	if err := svc.Listen(sock); err != nil {
		t.Fatal(err)
	}
	svc.ln.peer = func(*net.UnixConn) error { return errors.New("uid 1000 (pid 1) may not use the control API") }
	done := make(chan error, 1)
	go func() { done <- svc.Serve() }()
	const n = 200
	began := time.Now()
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(c)
		if l, err := r.ReadString('\n'); !strings.Contains(l, "may not use") {
			t.Fatalf("refused connection: %q %v", l, err)
		}
		c.Close()
	}
	elapsed := time.Since(began)
	svc.Close() // logs the summary of what was not logged
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(lines.ch)
	refused, summarized := 0, 0
	for l := range lines.ch {
		switch {
		case strings.Contains(l, "not logged"):
			summarized += countArg(t, l)
		case strings.Contains(l, "refused"):
			refused++
		}
	}
	// A few lines per interval started, and every refusal counted.
	windows := int(elapsed/refusalLogInterval) + 1
	if refused > refusalLogBurst*windows || refused+summarized != n {
		t.Errorf("%d refusals: %d logged, %d summarized (at most %d logged in %v)", n, refused, summarized, refusalLogBurst*windows, elapsed)
	}
}

// countArg reads the count=N of a summary line.
func countArg(t *testing.T, line string) int {
	t.Helper()
	_, after, ok := strings.Cut(line, "count=")
	if !ok {
		t.Fatalf("summary without a count: %q", line)
	}
	n := 0
	for _, r := range after {
		if r < '0' || r > '9' {
			break
		}
		n = 10*n + int(r-'0')
	}
	return n
}
