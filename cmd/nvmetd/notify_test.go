package main

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdNotify: under a fake systemd ($NOTIFY_SOCKET bound by the
// test), nvmetd says READY=1 once it serves, RELOADING=1 then READY=1
// around a SIGHUP reload, and STOPPING=1 on SIGTERM, in that order.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	recv := func(want string) string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, 4096)
		n, err := conn.Read(b)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if !strings.HasPrefix(string(b[:n]), want) {
			t.Fatalf("got %q, want %q first", b[:n], want)
		}
		return string(b[:n])
	}
	cfg := filepath.Join(dir, "n.hcl")
	writeFile(t, cfg, `port "p" {
  address  = "127.83.70.1"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:notify" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "null"
    size    = "1MiB"
  }
}
`)
	d := startDaemon(t, dir, "--config", cfg)
	if got := recv("READY=1\n"); !strings.Contains(got, "STATUS=serving 1 subsystems on 1 ports") {
		t.Errorf("READY without the status: %q", got)
	}
	d.waitFor("serving subsystem") // READY=1 comes after the start-up lines
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := recv("RELOADING=1\n"); !strings.Contains(got, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING without MONOTONIC_USEC: %q", got)
	}
	recv("READY=1\n")
	d.waitFor("configuration reloaded")
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	recv("STOPPING=1")
	for range d.lines {
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("nvmetd exited with %v", err)
	}
}
