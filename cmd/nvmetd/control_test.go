package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/control"
)

// TestControlSocket: nvmetd serves the control API on --control-socket; a
// second nvmetd on the same socket refuses to start; a change made through
// the API, saved with config.save and restarted from, gives the same
// state; the socket goes away when nvmetd stops.
func TestControlSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "c.sock")
	cfg := filepath.Join(dir, "n.hcl")
	writeFile(t, cfg, `port "p" {
  address  = "127.79.2.1"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:ctl" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`)
	d := startDaemon(t, dir, "--config", cfg, "--control-socket", sock)
	d.waitFor("control API listening")
	d.waitFor("serving subsystem")

	status, _, stderr := runNvmetd(t, dir, "--config", cfg, "--control-socket", sock)
	if status != 1 || !strings.Contains(stderr, "another process (nvmetd?) serves "+sock) {
		t.Errorf("second nvmetd on the socket: status %d, stderr %q", status, stderr)
	}

	cl, err := control.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	img := filepath.Join(dir, "ns2.img")
	if err := cl.Call("ns.add", map[string]any{"nqn": "nqn.2026-11.io.nvmeof:ctl", "path": img, "size": "1MiB"}, nil); err != nil {
		t.Fatal(err)
	}
	d.waitFor("control request done")
	saved := filepath.Join(dir, "saved.hcl")
	if err := cl.Call("config.save", map[string]any{"path": saved}, nil); err != nil {
		t.Fatal(err)
	}
	var before []control.Subsystem
	if err := cl.Call("subsystem.list", nil, &before); err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || len(before[0].Namespaces) != 2 {
		t.Fatalf("subsystems after ns.add: %+v", before)
	}
	cl.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitFor("shutting down")
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("nvmetd exit: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}

	d2 := startDaemon(t, dir, "--config", saved, "--control-socket", sock)
	d2.waitFor("serving subsystem")
	cl2, err := control.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	var after []control.Subsystem
	if err := cl2.Call("subsystem.list", nil, &after); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("after restart from the saved file:\n%+v\nwant\n%+v", after, before)
	}

	// config.reload (nvmetctl reload) reloads this nvmetd's file, as its
	// SIGHUP does, and answers the unsaved change it replaced.
	if err := cl2.Call("ns.add", map[string]any{"nqn": "nqn.2026-11.io.nvmeof:ctl", "backend": "memory", "size": "1MiB"}, nil); err != nil {
		t.Fatal(err)
	}
	var rr control.ReloadResult
	if err := cl2.Call("config.reload", nil, &rr); err != nil || rr.Dropped != 1 {
		t.Errorf("config.reload: %+v, %v; want 1 change dropped", rr, err)
	}
	d2.waitFor("configuration reloaded")
	var reloaded []control.Subsystem
	if err := cl2.Call("subsystem.list", nil, &reloaded); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(reloaded, before) {
		t.Errorf("after config.reload:\n%+v\nwant\n%+v", reloaded, before)
	}
}
