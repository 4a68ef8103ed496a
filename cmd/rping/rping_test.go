package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
)

// Loopback addresses of their own, so that these tests can run next to
// the rdma packages' tests (which use 127.0.0.1/2 and 127.0.10.1/2).
var (
	srvAddr = netip.MustParseAddr("127.0.11.1")
	cliAddr = netip.MustParseAddr("127.0.11.2")
)

func TestFillPing(t *testing.T) {
	buf := make([]byte, 64)
	fillPing(buf, 0, 'A')
	want := "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	if got := string(cstring(buf)); got != want || buf[63] != 0 {
		t.Errorf("ping 0:\n%q\nwant\n%q", got, want)
	}
	fillPing(buf, 57, 'z')
	if got := string(cstring(buf)); !strings.HasPrefix(got, "rdma-ping-57: zABC") || len(got) != 63 {
		t.Errorf("ping 57: %q", got)
	}
}

func TestInfo(t *testing.T) {
	b := make([]byte, infoLen)
	rdmaInfo{buf: 0x0102030405060708, rkey: 0x11223344, size: 64}.put(b)
	if got := fmt.Sprintf("%x", b); got != "01020304050607081122334400000040" {
		t.Errorf("rping_rdma_info %s", got)
	}
	if parseInfo(b) != (rdmaInfo{0x0102030405060708, 0x11223344, 64}) {
		t.Error("parseInfo")
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"rping"},
		{"rping", "-s", "-c", "-a", "127.0.0.1"},
		{"rping", "-c"},
		{"rping", "-c", "-a", "127.0.0.1", "-S", "10"},
		{"rping", "-c", "-a", "127.0.0.1", "-S", "65536"},
		{"rping", "-c", "-a", "127.0.0.1", "-C", "-1"},
		{"rping", "-c", "-a", "not-an-address"},
		{"rping", "-c", "-a", "127.0.0.1", "-t", "256"},
		{"rping", "-c", "-a", "127.0.0.1", "--provider", "hw"},
		{"rping", "-c", "-a", "127.0.0.1", "--provider", "soft", "--device", "rxe0"},
	} {
		var out, errOut bytes.Buffer
		app := newApp(&out, &errOut)
		app.ExitErrHandler = func(*cli.Context, error) {}
		if err := app.Run(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestPing runs our server and our client (through the command line) over
// two soft devices on loopback, chosen by each provider name that picks
// soft there, each on its own addresses.
func TestPing(t *testing.T) {
	for _, tc := range []struct {
		provider string
		srv, cli netip.Addr
	}{
		{"soft", srvAddr, cliAddr},
		{"auto", netip.MustParseAddr("127.0.12.1"), netip.MustParseAddr("127.0.12.2")},
	} {
		t.Run(tc.provider, func(t *testing.T) { testPing(t, tc.provider, tc.srv, tc.cli) })
	}
}

func testPing(t *testing.T, prov string, srvAddr, cliAddr netip.Addr) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var srvOut, srvErr bytes.Buffer
	listening := make(chan struct{})
	cfg := &config{server: true, addr: srvAddr, port: 7174, size: 100, verbose: true, // as rping, both sides need the same -S
		provider: prov, tos: -1,
		log: hclog.NewNullLogger(), out: &srvOut, errOut: &srvErr, listening: func() { close(listening) }}
	srvDone := make(chan error, 1)
	go func() { srvDone <- runServer(ctx, cfg) }()
	select {
	case <-listening:
	case err := <-srvDone:
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW: %v", err)
		}
		t.Fatalf("server: %v", err)
	}
	var out, errOut bytes.Buffer
	app := newApp(&out, &errOut)
	app.ExitErrHandler = func(*cli.Context, error) {}
	const count = 20
	if err := app.Run([]string{"rping", "-c", "-a", srvAddr.String(), "-I", cliAddr.String(), "-C", fmt.Sprint(count), "-vV", "-S", "100",
		"--provider", prov}); err != nil {
		t.Fatalf("client: %v\n%s", err, errOut.String())
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("server: %v\n%s", err, srvErr.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != count {
		t.Fatalf("client printed %d lines:\n%s", len(lines), out.String())
	}
	buf := make([]byte, 100)
	start := byte('A')
	for i, l := range lines {
		fillPing(buf, i, start)
		start++
		if want := "ping data: " + string(cstring(buf)); l != want {
			t.Errorf("line %d: %q, want %q", i, l, want)
		}
	}
	if n := strings.Count(srvOut.String(), "server ping data: rdma-ping-"); n != count {
		t.Errorf("server printed %d pings", n)
	}
	if !strings.Contains(srvErr.String(), "server DISCONNECT EVENT") {
		t.Errorf("server stderr: %q", srvErr.String())
	}
}
