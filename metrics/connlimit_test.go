package metrics

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestHalfOpenConnectionsCapped: connections that never send a request
// (issue 22: 22,000 of them used all of nvmetd's 20,000 descriptors and
// scrapes took 4.7 s) hold at most MaxConns of the endpoint's
// descriptors, and a scrape among them is served.
func TestHalfOpenConnectionsCapped(t *testing.T) {
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen("127.63.0.1:0", Handler(reg, false), nil)
	if err != nil {
		t.Skipf("loopback address: %v", err)
	}
	defer s.Close()
	base := openFDs(t)
	const n = 500
	for range n {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// The scrape's connection is accepted after every one before it.
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	began := time.Now()
	resp, err := cl.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape among %d half-open connections: %v", n, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(began)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("scrape: %s", resp.Status)
	}
	// Ours: n client ends; the endpoint's: what it holds.
	held := openFDs(t) - base - n
	t.Logf("%d half-open connections: the endpoint holds %d descriptors; scrape %v", n, held, took)
	if held > MaxConns {
		t.Errorf("the endpoint holds %d descriptors for %d half-open connections, want at most %d", held, n, MaxConns)
	}
}

// TestServerTimeouts: every timeout of the endpoint is set, and long
// enough for pprof's default 30 s profile.
func TestServerTimeouts(t *testing.T) {
	s, err := Listen("127.63.0.2:0", Handler(prometheus.NewRegistry(), true), nil)
	if err != nil {
		t.Skipf("loopback address: %v", err)
	}
	defer s.Close()
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": s.srv.ReadHeaderTimeout, "ReadTimeout": s.srv.ReadTimeout,
		"WriteTimeout": s.srv.WriteTimeout, "IdleTimeout": s.srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s not set", name)
		}
	}
	if s.srv.ReadTimeout <= 30*time.Second || s.srv.WriteTimeout <= 30*time.Second {
		t.Errorf("ReadTimeout %v, WriteTimeout %v: pprof's 30 s profile is cut", s.srv.ReadTimeout, s.srv.WriteTimeout)
	}
}

// TestCapListenerKeepsRequests: at the cap, a connection with a request
// under way is never closed for a new one; the new one is shed instead,
// and once a connection is idle it is the one closed.
func TestCapListenerKeepsRequests(t *testing.T) {
	tl, err := net.Listen("tcp", "127.63.0.3:0")
	if err != nil {
		t.Skipf("loopback address: %v", err)
	}
	l := newCapListener(tl, 2)
	defer l.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func() net.Conn {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // against a hang only
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	dial()
	a := accept()
	clientB := dial()
	b := accept()
	l.connState(a, http.StateActive)
	l.connState(b, http.StateActive)
	next := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		next <- c
	}()
	if shed := dial(); !closed(shed) {
		t.Fatal("a connection past the cap, every slot with a request, was not shed")
	}
	l.connState(b, http.StateIdle) // b's request is done
	dial()
	m := <-next
	if !closed(clientB) {
		t.Error("the idle connection was not closed for the new one")
	}
	l.mu.Lock()
	_, okA := l.conns[a]
	_, okM := l.conns[m]
	n := len(l.conns)
	l.mu.Unlock()
	if !okA || !okM || n != 2 {
		t.Errorf("held: the busy one %t, the new one %t, %d in all; want both, 2", okA, okM, n)
	}
}
