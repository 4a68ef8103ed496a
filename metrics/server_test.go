package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestIdleConnectionClosed: a keep-alive connection left idle is closed
// by the endpoint (before, it stayed open with its goroutine until Close).
func TestIdleConnectionClosed(t *testing.T) {
	old := idleTimeout
	idleTimeout = 50 * time.Millisecond
	defer func() { idleTimeout = old }()
	s, err := Listen("127.0.0.1:0", Handler(prometheus.NewRegistry(), false), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the endpoint closes after each response: no keep-alive to test")
	}
	c.SetReadDeadline(time.Now().Add(60 * time.Second)) // against a hang only
	_, err = r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("an idle keep-alive connection stays open")
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v, want EOF", err)
	}
}
