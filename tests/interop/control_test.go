package interop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// The control API's end-to-end check (issue 13): the guest kernel's host is
// connected to nvmetd while this test drives nvmetd's control socket; each
// change is one step of guest/control-host.sh, which checks what the
// kernel sees. nvmetd runs under host/nvmetd-restart.sh so that it can be
// restarted from the configuration the API saved.
const (
	ctlNQN       = "nqn.2026-11.io.nvmeof:kpeer-control"
	ctlHostID    = "6b706565-7200-4000-8000-0000000000c1"
	ctlNewHostID = "6b706565-7200-4000-8000-0000000000c2"
	ctlNS2Size   = 8 << 20
	ctlNS2Resize = 16 << 20
)

// TestKernelHostControlAPI, in one boot: with the kernel host connected,
// ns.add (the host sees namespace 2 through the AEN), ns.resize (the new
// size; data past the old end), host.allow (discovery lists the
// subsystem for the new host), ctrl.list (the guest's host NQN, its
// queues and address), ctrl.disconnect (the kernel reconnects, a new
// controller), config.save to the configuration file, nvmetd restarted
// from it: the same ports, subsystems and hosts, and the kernel reconnects
// to namespaces of the same sizes and data.
func TestKernelHostControlAPI(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	share := filepath.Join(work, "share")
	sock := filepath.Join(work, "c.sock")
	ns1, ns2 := filepath.Join(work, "ns1.img"), filepath.Join(work, "ns2.img")
	cfg := filepath.Join(work, "nvmetd.hcl")
	hostNQNs := []string{hostNQN(ctlHostID)}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
log_level = "debug"
port "kpeer" {
  transport = "rdma"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports         = ["kpeer"]
  allowed_hosts = [%q]
  namespace "1" {
    backend = "file"
    path    = %q
    size    = "16MiB"
  }
}
`, kpeer.HostAddr, ctlNQN, hostNQNs[0], ns1)), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper, err := filepath.Abs(filepath.Join("host", "nvmetd-restart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *kpeer.Result, 1)
	go func() {
		done <- kpeer.Do(t, dir, kpeer.Run{
			Scripts: []string{guestScript(t, "control-host.sh")},
			HostCmd: fmt.Sprintf("NVMETD_CONTROL_SOCKET=%s exec bash %s %s %s", sock, wrapper, bin, cfg),
			Env: []string{"NQN=" + ctlNQN, "HOSTNQN=" + hostNQN(ctlHostID), "HOSTID=" + ctlHostID,
				"NEW_HOSTNQN=" + hostNQN(ctlNewHostID), "NEW_HOSTID=" + ctlNewHostID,
				fmt.Sprintf("NS2_BLOCKS=%d", ctlNS2Size/512), fmt.Sprintf("NS2_RESIZED_BLOCKS=%d", ctlNS2Resize/512),
				"DISCOVER_TRIES=10"},
			Share:   share,
			Timeout: 8 * time.Minute,
		})
	}()
	h := &ctlHost{t: t, signal: filepath.Join(share, "signal"), sock: sock, done: done}
	// Whatever fails here, the guest is told and the session ends.
	defer h.finish()

	h.wait("connected")
	cs := h.controllers()
	if len(cs) != 1 || cs[0].HostNQN != hostNQN(ctlHostID) || cs[0].HostID != ctlHostID || cs[0].Remote != kpeer.GuestAAddr || cs[0].Transport != "rdma" ||
		cs[0].Port != "kpeer" || len(cs[0].Queues) < 2 || cs[0].Queues[1].Depth < 2 || cs[0].KATOMs == 0 || cs[0].Authenticated {
		h.fatalf("ctrl.list with the guest connected: %+v", cs)
	}
	first := cs[0]
	t.Logf("ctrl.list: cntlid %d host %s remote %s kato %d ms, %d queues (I/O depth %d)",
		first.CntlID, first.HostNQN, first.Remote, first.KATOMs, len(first.Queues), first.Queues[1].Depth)

	h.call("ns.add", map[string]any{"nqn": ctlNQN, "nsid": 2, "path": ns2, "size": ctlNS2Size}, nil)
	h.signalGuest("ns-added")
	h.wait("saw-ns2")

	h.call("ns.resize", map[string]any{"nqn": ctlNQN, "nsid": 2, "size": ctlNS2Resize}, nil)
	h.signalGuest("ns-resized")
	h.wait("saw-resize")

	var sub control.Subsystem
	h.call("host.allow", map[string]any{"nqn": ctlNQN, "host": hostNQN(ctlNewHostID)}, &sub)
	if want := append(hostNQNs, hostNQN(ctlNewHostID)); !reflect.DeepEqual(sub.AllowedHosts, want) {
		h.fatalf("allowed hosts after host.allow: %q, want %q", sub.AllowedHosts, want)
	}
	h.signalGuest("host-allowed")
	h.wait("saw-host")

	h.call("ctrl.disconnect", map[string]any{"cntlid": first.CntlID}, nil)
	h.signalGuest("ctrl-disconnected")
	h.wait("reconnected")
	cs = h.controllers()
	if len(cs) != 1 || cs[0].HostNQN != first.HostNQN || cs[0].CntlID == first.CntlID {
		h.fatalf("ctrl.list after the reconnect: %+v (cntlid %d before)", cs, first.CntlID)
	}

	var saved control.SaveResult
	h.call("config.save", map[string]any{"path": cfg}, &saved)
	before := h.state()
	// host/nvmetd-restart.sh stops nvmetd (SIGTERM) and starts it again
	// with the configuration file, now the saved one.
	h.signalGuest("restart-target", "TERM")
	h.wait("reconnected-2")
	if after := h.state(); !reflect.DeepEqual(after, before) {
		h.fatalf("after the restart from the saved configuration:\n%v\nwant\n%v", after, before)
	}
	if cs = h.controllers(); len(cs) != 1 || cs[0].HostNQN != first.HostNQN {
		h.fatalf("ctrl.list after the restart: %+v", cs)
	}
	if st, err := os.Stat(ns2); err != nil || st.Size() != ctlNS2Resize {
		h.fatalf("namespace 2's file: %v, %d bytes", err, st.Size())
	}
	h.signalGuest("done")
	res := h.result()
	script := res.Log("a/script.log")
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "PASS:") || strings.HasPrefix(line, "FAIL:") {
			t.Log(line)
		}
	}
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", script)
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 120))
		t.Fatalf("guest: %v", res.Err)
	}
	if host := res.Log("host-cmd.log"); !strings.Contains(host, "restart 1: nvmetd exit status 0 (after SIGTERM)") {
		t.Errorf("nvmetd log lacks the clean restart:\n%s", lastLines(host, 40))
	}
}

// ctlHost is the host side of control-host.sh's steps.
type ctlHost struct {
	t      *testing.T
	signal string // the session's signal directory
	sock   string
	done   chan *kpeer.Result
	res    *kpeer.Result
}

// wait waits for the guest's marker name; the session ending first is fatal.
func (h *ctlHost) wait(name string) {
	h.t.Helper()
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(h.signal, name)); err == nil {
			return
		}
		select {
		case h.res = <-h.done:
			h.t.Logf("guest script log:\n%s", h.res.Log("a/script.log"))
			h.t.Logf("nvmetd log:\n%s", lastLines(h.res.Log("host-cmd.log"), 80))
			h.t.Fatalf("the session ended before the guest's %s: %v", name, h.res.Err)
		case <-time.After(200 * time.Millisecond): // the guest writes markers over 9p: polled
		}
		if time.Now().After(deadline) {
			h.fatalf("no %s from the guest within 6 minutes", name)
		}
	}
}

// signalGuest writes the marker name (with text) for the guest.
func (h *ctlHost) signalGuest(name string, text ...string) {
	h.t.Helper()
	tmp := filepath.Join(h.signal, name+".tmp")
	if err := os.WriteFile(tmp, []byte(strings.Join(text, " ")+"\n"), 0o644); err != nil {
		h.fatalf("%v", err)
	}
	if err := os.Rename(tmp, filepath.Join(h.signal, name)); err != nil {
		h.fatalf("%v", err)
	}
}

// call runs a control API method on a new connection (nvmetd restarts).
func (h *ctlHost) call(method string, params, result any) {
	h.t.Helper()
	cl, err := control.Dial(h.sock)
	if err == nil {
		defer cl.Close()
		err = cl.Call(method, params, result)
	}
	if err != nil {
		h.fatalf("%s %v: %v", method, params, err)
	}
}

func (h *ctlHost) controllers() []control.Controller {
	h.t.Helper()
	var cs []control.Controller
	h.call("ctrl.list", map[string]any{"nqn": ctlNQN}, &cs)
	return cs
}

// state is what a restart must keep: ports, subsystems, hosts.
func (h *ctlHost) state() []any {
	h.t.Helper()
	var ports, subs, hosts any
	h.call("port.list", nil, &ports)
	h.call("subsystem.list", nil, &subs)
	h.call("host.list", nil, &hosts)
	return []any{ports, subs, hosts}
}

// fatalf tells the guest to give up, then fails the test.
func (h *ctlHost) fatalf(format string, args ...any) {
	h.t.Helper()
	h.signalGuest("abort", "host side: "+fmt.Sprintf(format, args...))
	h.t.Fatalf(format, args...)
}

// result waits for the session's end.
func (h *ctlHost) result() *kpeer.Result {
	if h.res == nil {
		h.res = <-h.done
	}
	return h.res
}

// finish ends a session the test left early: the guest is told to abort
// and the session awaited, so that no guest outlives the test.
func (h *ctlHost) finish() {
	if h.res != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(h.signal, "done")); errors.Is(err, os.ErrNotExist) {
		os.WriteFile(filepath.Join(h.signal, "abort"), []byte("host side: test ended\n"), 0o644)
	}
	h.res = <-h.done
}
