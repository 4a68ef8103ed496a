package control

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/server"
)

const (
	nqnA  = "nqn.2026-11.io.nvmeof:control-a"
	nqnB  = "nqn.2026-11.io.nvmeof:control-b"
	hostA = "nqn.2026-11.io.nvmeof:host-a"
	hostB = "nqn.2026-11.io.nvmeof:host-b"
)

// baseConfig serves subsystem A with one memory namespace on a loop port.
const baseConfig = `
port "lp" {
  transport = "loop"
  service   = 4420
}
subsystem "` + nqnA + `" {
  ports          = ["lp"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "4MiB"
  }
}
`

type env struct {
	srv  *server.Server
	svc  *Service
	net  *loop.Network
	sock string
	cl   *Client
}

// start runs a server with config over the loop transport and its
// control API on a socket in a temporary directory.
func start(t *testing.T, config string) *env {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(config), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{net: loop.NewNetwork()}
	e.srv = server.New(server.Options{LoopNetwork: e.net})
	t.Cleanup(func() { e.srv.Close() })
	e.svc = New(e.srv, Options{})
	if err := e.svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	e.sock = filepath.Join(t.TempDir(), "c.sock")
	if err := e.svc.Listen(e.sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve() }()
	t.Cleanup(func() {
		e.svc.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	e.cl = e.dial(t)
	return e
}

func (e *env) dial(t *testing.T) *Client {
	t.Helper()
	cl, err := Dial(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	cl.Timeout = 30 * time.Second
	t.Cleanup(func() { cl.Close() })
	return cl
}

// call runs a method and wants success.
func (e *env) call(t *testing.T, method string, params, result any) {
	t.Helper()
	if err := e.cl.Call(method, params, result); err != nil {
		t.Fatalf("%s %v: %v", method, params, err)
	}
}

// fails runs a method and wants the error code and message text.
func (e *env) fails(t *testing.T, method string, params any, code int, msg string) *Error {
	t.Helper()
	err := e.cl.Call(method, params, nil)
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("%s %v: error %v, want code %d", method, params, err, code)
	}
	if re.Code != code || !strings.Contains(re.Message, msg) {
		t.Fatalf("%s %v: error %d %q, want %d containing %q", method, params, re.Code, re.Message, code, msg)
	}
	return re
}

type m = map[string]any

// TestMethods drives every change method and its refusals through the
// socket: each step's error code and message, and the state it leaves.
func TestMethods(t *testing.T) {
	e := start(t, baseConfig)
	dir := t.TempDir()
	img := filepath.Join(dir, "ns.img")
	notDir := filepath.Join(dir, "notadir") // a file where a directory should be
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		method string
		params any
		code   int    // 0: success
		msg    string // in the error message
	}{
		{"subsystem.add", m{"nqn": nqnB, "ports": []string{"lp"}, "serial": "SERIALB"}, 0, ""},
		{"subsystem.add", m{"nqn": nqnB}, CodeExists, "exists"},
		{"subsystem.add", m{"nqn": "not an nqn"}, CodeInvalidConfig, `subsystems/not an nqn`},
		{"subsystem.add", m{"nqn": nqnA + "x", "serial": strings.Repeat("s", 21)}, CodeInvalidConfig, "serial"},
		{"subsystem.add", m{"nqn": nqnA + "x", "ports": []string{"nope"}}, CodeNotFound, `port "nope"`},
		{"subsystem.add", m{"nqn": nqnA + "x", "sirial": "x"}, CodeInvalidParams, `unknown field "sirial"`},
		{"ns.add", m{"nqn": nqnB, "backend": "memory", "size": "2MiB"}, 0, ""},
		{"ns.add", m{"nqn": nqnB, "nsid": 1, "backend": "memory", "size": 4096}, CodeExists, "namespace 1 already"},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "backend": "memory"}, CodeInvalidConfig, "subsystems/" + nqnB + "/namespaces/2: size: a size is required"},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "path": "rel.img", "size": "1MiB"}, CodeInvalidParams, "absolute path"},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "backend": "rbd", "image": "img"}, CodeInvalidConfig, "namespaces/2: pool: a pool is required for backend rbd"},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "backend": "rbd", "pool": "p", "image": "i", "keyring": "k"}, CodeInvalidParams, `keyring "k": give an absolute path`},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "path": filepath.Join(notDir, "x.img"), "size": "1MiB"}, CodeNotApplied, "nothing changed"},
		{"ns.add", m{"nqn": nqnB, "nsid": 2, "path": img, "size": "1MiB"}, 0, ""},
		{"ns.add", m{"nqn": "nqn.2026-11.io.nvmeof:none", "backend": "null", "size": 4096}, CodeNotFound, "does not exist"},
		{"ns.resize", m{"nqn": nqnB, "nsid": 1, "size": "4MiB"}, 0, ""},
		{"ns.resize", m{"nqn": nqnB, "nsid": 1, "size": "3MiB"}, CodeRefused, "data is lost"},
		{"ns.resize", m{"nqn": nqnB, "nsid": 1, "size": "3MiB", "force": true}, 0, ""},
		{"ns.resize", m{"nqn": nqnB, "nsid": 2, "size": "2MiB"}, 0, ""},
		{"ns.resize", m{"nqn": nqnB, "nsid": 2, "size": "1MiB"}, CodeNotApplied, "never shrunk"},
		{"ns.resize", m{"nqn": nqnB, "nsid": 2, "size": "1000"}, CodeInvalidConfig, "multiple of the block size"},
		{"ns.resize", m{"nqn": nqnB, "nsid": 9, "size": "1MiB"}, CodeNotFound, "no namespace 9"},
		{"ns.disable", m{"nqn": nqnB, "nsid": 2}, 0, ""},
		{"ns.enable", m{"nqn": nqnB, "nsid": 2}, 0, ""},
		{"ns.modify", m{"nqn": nqnB, "nsid": 2, "path": filepath.Join(dir, "other.img"), "size": "1MiB"}, 0, ""},
		{"ns.modify", m{"nqn": nqnB, "nsid": 2, "uuid": "zz"}, CodeInvalidParams, "uuid"},
		{"host.add", m{"nqn": hostA}, 0, ""},
		{"host.add", m{"nqn": hostA}, CodeExists, "exists"},
		{"host.add", m{"nqn": hostB, "dhchap_key": "DHHC-1:00:bad:"}, CodeInvalidConfig, "hosts/" + hostB},
		{"host.allow", m{"nqn": nqnA, "host": hostA}, CodeRefused, "allows any host"},
		{"subsystem.modify", m{"nqn": nqnA, "allow_any_host": false}, 0, ""},
		{"host.allow", m{"nqn": nqnA, "host": hostA}, 0, ""},
		{"host.allow", m{"nqn": nqnA, "host": hostA}, CodeExists, "already"},
		{"host.allow", m{"nqn": nqnA, "host": hostB}, 0, ""}, // creates the host
		{"host.del", m{"nqn": hostA}, CodeRefused, "disallow it there first"},
		{"host.disallow", m{"nqn": nqnA, "host": hostA}, 0, ""},
		{"host.disallow", m{"nqn": nqnA, "host": hostA}, CodeNotFound, "does not list"},
		{"host.del", m{"nqn": hostA}, 0, ""},
		{"host.del", m{"nqn": hostB, "force": true}, 0, ""},
		{"port.add", m{"id": "lp2", "transport": "loop", "service": "4421", "subsystems": []string{nqnB}}, 0, ""},
		{"port.add", m{"id": "r1", "transport": "rdma", "provider": "soft", "address": "127.83.0.1"}, 0, ""},
		{"port.add", m{"id": "r2", "transport": "rdma", "provider": "soft", "address": "127.83.0.1", "service": "4420"}, CodeInvalidConfig, "also used by ports/r1"},
		{"port.modify", m{"id": "r1", "address": "127.83.0.2", "subsystems": []string{nqnB}}, 0, ""},
		{"port.del", m{"id": "r1"}, 0, ""},
		{"port.add", m{"id": "lp3", "transport": "carrier-pigeon"}, CodeInvalidConfig, "ports/lp3"},
		{"port.unlink", m{"id": "lp2", "nqn": nqnB}, 0, ""},
		{"port.unlink", m{"id": "lp2", "nqn": nqnB}, CodeNotFound, "does not export"},
		{"port.link", m{"id": "lp2", "nqn": nqnA}, 0, ""},
		{"port.modify", m{"id": "lp2", "service": "4422"}, 0, ""},
		{"port.del", m{"id": "lp2"}, 0, ""},
		{"port.del", m{"id": "lp2"}, CodeNotFound, "does not exist"},
		{"ns.del", m{"nqn": nqnB, "nsid": 1}, 0, ""},
		{"subsystem.del", m{"nqn": nqnB}, 0, ""},
		{"subsystem.del", m{"nqn": nqnB}, CodeNotFound, "does not exist"},
		{"no.such", nil, CodeMethodNotFound, "rpc.methods"},
	}
	for i, st := range steps {
		if st.code == 0 {
			e.call(t, st.method, st.params, nil)
		} else {
			e.fails(t, st.method, st.params, st.code, st.msg)
		}
		_ = i
	}
	// What is left: subsystem A alone, no longer open to any host, on lp.
	var subs []Subsystem
	e.call(t, "subsystem.list", nil, &subs)
	if len(subs) != 1 || subs[0].NQN != nqnA || *subs[0].AllowAnyHost || !reflect.DeepEqual(subs[0].Ports, []string{"lp"}) ||
		len(subs[0].Namespaces) != 1 || *subs[0].Namespaces[0].Size != 4<<20 {
		t.Errorf("subsystems left: %+v", subs)
	}
	var ports []Port
	e.call(t, "port.list", nil, &ports)
	if len(ports) != 1 || ports[0].ID != "lp" {
		t.Errorf("ports left: %+v", ports)
	}
	var hosts []Host
	e.call(t, "host.list", nil, &hosts)
	if len(hosts) != 0 {
		t.Errorf("hosts left: %+v", hosts)
	}
	// The file namespace was grown to 2 MiB, then replaced by other.img.
	if st, err := os.Stat(img); err != nil || st.Size() != 2<<20 {
		t.Errorf("ns.img: %v, size %d, want 2 MiB", err, st.Size())
	}
	var names []string
	e.call(t, "rpc.methods", nil, &names)
	if len(names) != len(methods) || names[0] != "config.reload" || names[1] != "config.save" {
		t.Errorf("rpc.methods = %v", names)
	}
}

// TestInvalidConfigDetails: a validation error carries the field path of
// every problem in data.
func TestInvalidConfigDetails(t *testing.T) {
	e := start(t, baseConfig)
	re := e.fails(t, "ns.add", m{"nqn": nqnA, "nsid": 3, "backend": "memory", "size": 4096, "block_size": 3}, CodeInvalidConfig, "invalid configuration")
	d, ok := re.Data.([]ErrorDetail)
	if !ok || len(d) != 1 {
		t.Fatalf("data %#v, want one detail", re.Data)
	}
	want := ErrorDetail{Path: "subsystems/" + nqnA + "/namespaces/3", Attr: "block_size", Message: "3 is not a power of two from 512 to 65536"}
	if d[0] != want {
		t.Errorf("detail %+v, want %+v", d[0], want)
	}
	if strings.Contains(re.Message, "test.hcl") {
		t.Errorf("error %q names the configuration file the running tree came from", re.Message)
	}
}

// TestHostSeesChanges: a connected host gets the asynchronous events of
// ns.add and ns.resize and sees the new namespace and size; ctrl.list
// shows it with its queues; ctrl.disconnect tears its controller down and
// it reconnects.
func TestHostSeesChanges(t *testing.T) {
	dir := t.TempDir()
	e := start(t, baseConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	events := make(chan initiator.AsyncEvent, 8)
	ctrl, err := initiator.Connect(ctx, loop.Dialer{Net: e.net},
		fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: 4420},
		initiator.Options{SubsystemNQN: nqnA, HostNQN: hostA, NrIOQueues: 2, QueueSize: 32,
			ReconnectDelay: 50 * time.Millisecond,
			OnAsyncEvent:   func(ev initiator.AsyncEvent) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	// seen waits for asynchronous events about namespace 2 until the
	// host, which rescans on each, sees namespace 2 of size bytes. A
	// resize is applied in place (target/resize.go): the namespace never
	// goes away, so the host never sees fewer than two namespaces.
	seen := func(what string, size int64) {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if !reflect.DeepEqual(ev.ChangedNSIDs, []uint32{2}) {
					t.Fatalf("%s: event for namespaces %v, want [2]", what, ev.ChangedNSIDs)
				}
			case <-ctx.Done():
				t.Fatalf("%s: the host does not see namespace 2 of %d bytes: %d namespaces", what, size, len(ctrl.Namespaces()))
			}
			nss := ctrl.Namespaces()
			if what == "ns.resize" && len(nss) < 2 {
				t.Errorf("ns.resize: the host lost namespace 2 (%d namespaces)", len(nss))
			}
			if len(nss) == 2 && nss[1].Size() == size {
				return
			}
		}
	}
	img := filepath.Join(dir, "ns2.img")
	e.call(t, "ns.add", m{"nqn": nqnA, "nsid": 2, "path": img, "size": "1MiB"}, nil)
	seen("ns.add", 1<<20)
	var ns Namespace
	e.call(t, "ns.resize", m{"nqn": nqnA, "nsid": 2, "size": "3MiB"}, &ns)
	if *ns.Size != 3<<20 || !*ns.Grow {
		t.Errorf("ns.resize result %+v", ns)
	}
	seen("ns.resize", 3<<20)

	var cs []Controller
	e.call(t, "ctrl.list", nil, &cs)
	if len(cs) != 1 {
		t.Fatalf("ctrl.list: %+v", cs)
	}
	c := cs[0]
	if c.HostNQN != hostA || c.Subsystem != nqnA || c.Port != "lp" || c.Transport != "loop" || c.CntlID != ctrl.CntlID() || c.KATOMs != 5000 ||
		c.AuthRequired || c.Authenticated || !c.Ready || len(c.Queues) != 3 || c.Queues[0].QID != 0 || c.Queues[1].Depth != 32 {
		t.Errorf("ctrl.list: %+v", c)
	}
	e.fails(t, "subsystem.del", m{"nqn": nqnA}, CodeRefused, "connected controllers")
	e.fails(t, "ctrl.disconnect", m{"cntlid": c.CntlID + 1}, CodeNotFound, "no controller")
	e.call(t, "ctrl.disconnect", m{"cntlid": c.CntlID}, nil)
	// The host reconnects: a new controller of the same host.
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.call(t, "ctrl.list", m{"nqn": nqnA}, &cs)
		if len(cs) == 1 && cs[0].Ready && len(cs[0].Queues) == 3 && cs[0].CntlID != c.CntlID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host did not reconnect: %+v", cs)
		}
		time.Sleep(20 * time.Millisecond) // polling the host's reconnect, bounded above
	}
	if cs[0].HostNQN != hostA {
		t.Errorf("reconnected controller of %s", cs[0].HostNQN)
	}
}

// TestSaveRestart: config.save's HCL (and nvmetcli JSON) loads into a new
// server with the same state as the running one.
func TestSaveRestart(t *testing.T) {
	dir := t.TempDir()
	e := start(t, baseConfig)
	e.call(t, "host.add", m{"nqn": hostA}, nil)
	e.call(t, "subsystem.add", m{"nqn": nqnB, "ports": []string{"lp"}, "allowed_hosts": []string{hostA, hostB}, "model": "m"}, nil)
	e.call(t, "ns.add", m{"nqn": nqnB, "path": filepath.Join(dir, "b.img"), "size": "1MiB", "enabled": false}, nil)
	e.call(t, "port.add", m{"id": "7", "transport": "loop", "service": "4430", "subsystems": []string{nqnA}}, nil)
	for _, format := range []string{"hcl", "json"} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(dir, "saved."+format)
			var res SaveResult
			e.call(t, "config.save", m{"format": format, "path": path}, &res)
			data, err := os.ReadFile(path)
			if err != nil || string(data) != res.Config || res.Path != path {
				t.Fatalf("saved file: %v; equal to the result: %t", err, string(data) == res.Config)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("saved file mode %v", st.Mode())
			}
			tree, err := configfs.LoadFile(path)
			if err != nil {
				t.Fatalf("saved configuration does not load: %v\n%s", err, data)
			}
			if !configfs.Equal(tree, e.svc.Tree()) {
				t.Fatalf("saved configuration differs from the running one:\n%s", data)
			}
			e2 := start(t, string(e.svc.Tree().HCL()))
			if err := e2.svc.Apply(tree); err != nil {
				t.Fatal(err)
			}
			for _, method := range []string{"port.list", "subsystem.list", "host.list"} {
				var a, b any
				e.call(t, method, nil, &a)
				e2.call(t, method, nil, &b)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s after restart:\n%v\nwant\n%v", method, b, a)
				}
			}
		})
	}
	// What nvmetcli JSON cannot hold is named.
	var sub Subsystem
	e.call(t, "subsystem.modify", m{"nqn": nqnB, "max_controllers": 3, "max_controllers_per_host": 2}, &sub)
	if sub.MaxControllers == nil || *sub.MaxControllers != 3 || sub.MaxControllersPerHost == nil || *sub.MaxControllersPerHost != 2 {
		t.Errorf("subsystem.modify's result: max_controllers %v, max_controllers_per_host %v, want 3 and 2", sub.MaxControllers, sub.MaxControllersPerHost)
	}
	var res SaveResult
	e.call(t, "config.save", m{"format": "json"}, &res)
	if want := []string{"subsystems/" + nqnB + ": attributes nvmetcli JSON does not hold are not saved (max_controllers, max_controllers_per_host)"}; !reflect.DeepEqual(res.Warnings, want) {
		t.Errorf("warnings %q, want %q", res.Warnings, want)
	}
	var hclRes SaveResult
	e.call(t, "config.save", m{"format": "hcl"}, &hclRes)
	if hclRes.Warnings != nil {
		t.Errorf("HCL warnings %q", hclRes.Warnings)
	}
	e.fails(t, "config.save", m{"format": "yaml"}, CodeInvalidParams, "want hcl or json")
	e.fails(t, "config.save", m{"path": "rel.hcl"}, CodeInvalidParams, "absolute")
	e.fails(t, "config.save", m{"path": filepath.Join(dir, "saved.hcl", "x.hcl")}, CodeIO, "writing")
}

// TestSocket: the socket's mode, a second server refused on a live
// socket, a stale one replaced, and bad requests answered with the right
// codes instead of hanging or killing the daemon.
func TestSocket(t *testing.T) {
	e := start(t, baseConfig)
	st, err := os.Stat(e.sock)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v mode %v", err, st.Mode())
	}
	other := New(e.srv, Options{})
	if err := other.Listen(e.sock); !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	other.Close()

	tests := []struct {
		name, line string
		code       int
		msg        string
	}{
		{"not json", "hello\n", CodeParseError, "not JSON"},
		{"broken json", `{"jsonrpc":"2.0",` + "\n", CodeParseError, "parse error"},
		{"batch", `[{"jsonrpc":"2.0","method":"port.list","id":1}]` + "\n", CodeInvalidRequest, "batch"},
		{"version", `{"jsonrpc":"1.0","method":"port.list","id":1}` + "\n", CodeInvalidRequest, `"2.0"`},
		{"no method", `{"jsonrpc":"2.0","id":1}` + "\n", CodeInvalidRequest, "method"},
		{"positional params", `{"jsonrpc":"2.0","method":"port.list","params":[1],"id":1}` + "\n", CodeInvalidParams, "object"},
		{"extra member", `{"jsonrpc":"2.0","method":"port.list","id":1,"x":1}` + "\n", CodeInvalidRequest, "unknown member"},
		{"too large", strings.Repeat(" ", MaxRequestSize+1) + "\n", CodeInvalidRequest, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawCall(t, e.sock, tt.line)
			if resp.Error == nil || resp.Error.Code != tt.code || !strings.Contains(resp.Error.Message, tt.msg) {
				t.Errorf("answer %+v, want code %d with %q", resp, tt.code, tt.msg)
			}
		})
	}
	// A notification gets no answer; the request after it does.
	resp := rawCall(t, e.sock, `{"jsonrpc":"2.0","method":"port.list"}`+"\n"+`{"jsonrpc":"2.0","method":"port.list","id":"x"}`+"\n")
	if resp.Error != nil || string(resp.ID) != `"x"` {
		t.Errorf("answer after a notification: %+v", resp)
	}
}

// rawCall writes lines on a new connection and reads one answer.
func rawCall(t *testing.T, sock, lines string) Response {
	t.Helper()
	cl, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.c.SetDeadline(time.Now().Add(30 * time.Second))
	go cl.c.Write([]byte(lines)) // a too-large request is refused before it is all written
	line, err := cl.r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	return resp
}

// TestStaleSocket: a socket file nobody serves is replaced; a file that
// is not a socket is left alone and refused.
func TestStaleSocket(t *testing.T) {
	dir := t.TempDir()
	srv := server.New(server.Options{})
	defer srv.Close()
	sock := filepath.Join(dir, "s.sock")
	first := New(srv, Options{})
	if err := first.Listen(sock); err != nil {
		t.Fatal(err)
	}
	// A daemon that died leaves its socket: the listener goes, the file stays.
	first.ln.ln.SetUnlinkOnClose(false)
	first.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatal("the stale socket is not there to test:", err)
	}
	second := New(srv, Options{})
	if err := second.Listen(sock); err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	second.Close()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := New(srv, Options{})
	defer third.Close()
	if err := third.Listen(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a plain file: %v", err)
	}
	// The directory is created 0700.
	deep := filepath.Join(dir, "run", "nvmetd", "c.sock")
	fourth := New(srv, Options{})
	defer fourth.Close()
	if err := fourth.Listen(deep); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Dir(deep)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v, mode %v", err, st.Mode())
	}
}

// TestIdleTimeout: a client that sends half a request and stalls is
// disconnected after the read timeout.
func TestIdleTimeout(t *testing.T) {
	srv := server.New(server.Options{})
	defer srv.Close()
	svc := New(srv, Options{ReadTimeout: 100 * time.Millisecond})
	sock := filepath.Join(t.TempDir(), "i.sock")
	if err := svc.Listen(sock); err != nil {
		t.Fatal(err)
	}
	go svc.Serve()
	defer svc.Close()
	cl, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.c.Write([]byte(`{"jsonrpc":`)); err != nil {
		t.Fatal(err)
	}
	cl.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := cl.r.ReadByte(); err == nil {
		t.Fatal("the server answered half a request")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server kept a stalled connection open")
	}
}

// TestReloadRace: changes through the API and whole-tree applies (the
// daemon's SIGHUP reload) run concurrently without losing either's
// effect on what the other did not touch.
func TestReloadRace(t *testing.T) {
	e := start(t, baseConfig)
	reloaded, err := configfs.ParseHCL([]byte(baseConfig), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 20 {
			if err := e.svc.Apply(reloaded); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	cl := e.dial(t)
	go func() {
		defer wg.Done()
		for i := range 20 {
			if err := cl.Call("host.add", m{"nqn": hostA + "-" + string(rune('a'+i))}, nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	// Every host.add took effect on top of some tree; a reload after it
	// removed those added before. Either way the subsystem is intact.
	var subs []Subsystem
	e.call(t, "subsystem.list", nil, &subs)
	if len(subs) != 1 || len(subs[0].Namespaces) != 1 {
		t.Errorf("after the race: %+v", subs)
	}
}

// TestAuthenticatedController: ctrl.list says when a host authenticated
// with DH-HMAC-CHAP, queue by queue; host.list shows that a key is set,
// never the key.
func TestAuthenticatedController(t *testing.T) {
	const key = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	e := start(t, `
port "lp" {
  transport = "loop"
  service   = 4420
}
host "`+hostA+`" {
  dhchap_key = "`+key+`"
}
subsystem "`+nqnA+`" {
  ports         = ["lp"]
  allowed_hosts = ["`+hostA+`"]
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctrl, err := initiator.Connect(ctx, loop.Dialer{Net: e.net},
		fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: 4420},
		initiator.Options{SubsystemNQN: nqnA, HostNQN: hostA, NrIOQueues: 1, DHChapSecret: key})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	var cs []Controller
	e.call(t, "ctrl.list", nil, &cs)
	if len(cs) != 1 || !cs[0].AuthRequired || !cs[0].Authenticated || len(cs[0].Queues) != 2 ||
		!cs[0].Queues[0].Authenticated || !cs[0].Queues[1].Authenticated {
		t.Errorf("ctrl.list: %+v", cs)
	}
	var raw []map[string]any
	e.call(t, "host.list", nil, &raw)
	if len(raw) != 1 || raw[0]["has_dhchap_key"] != true || raw[0]["dhchap_hash"] != "hmac(sha256)" {
		t.Errorf("host.list: %v", raw)
	}
	var res SaveResult
	e.call(t, "host.list", nil, &raw)
	for _, h := range raw {
		if _, ok := h["dhchap_key"]; ok {
			t.Errorf("host.list shows the key: %v", h)
		}
	}
	e.call(t, "config.save", nil, &res)
	if !strings.Contains(res.Config, key) {
		t.Errorf("config.save lost the host's key:\n%s", res.Config)
	}
}

// TestReloadWarnsUnsaved: applying a whole tree (nvmetd's SIGHUP reload)
// after changes not saved to a file says it drops them; after
// config.save to a file it does not.
func TestReloadWarnsUnsaved(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	tree, err := configfs.ParseHCL([]byte(baseConfig), "r.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	defer srv.Close()
	svc := New(srv, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}})})
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if _, rerr := svc.call("host.add", json.RawMessage(`{"nqn":"`+hostA+`"}`)); rerr != nil {
		t.Fatal(rerr)
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := logs.String()
	logs.Reset()
	mu.Unlock()
	if !strings.Contains(got, "replaces changes made through the control API and not saved since: changes=1") {
		t.Errorf("reload after a change: log\n%s", got)
	}
	if _, rerr := svc.call("host.add", json.RawMessage(`{"nqn":"`+hostA+`"}`)); rerr != nil {
		t.Fatal(rerr)
	}
	path := filepath.Join(t.TempDir(), "s.hcl")
	if _, rerr := svc.call("config.save", json.RawMessage(`{"path":"`+path+`"}`)); rerr != nil {
		t.Fatal(rerr)
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "not saved") {
		t.Errorf("reload after config.save to a file warns:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestANAState: port.ana_state and ns.modify's ana_grpid change what the
// target serves (Port.ANAStates, the namespace's group), port.list shows
// the states, and bad values are refused before anything changes.
func TestANAState(t *testing.T) {
	e := start(t, baseConfig)
	e.call(t, "port.ana_state", m{"id": "lp", "grpid": 2, "state": "non-optimized"}, nil)
	e.call(t, "port.ana_state", m{"id": "lp", "grpid": 1, "state": "inaccessible"}, nil)
	e.fails(t, "port.ana_state", m{"id": "lp", "grpid": 0, "state": "optimized"}, CodeInvalidParams, "grpid")
	e.fails(t, "port.ana_state", m{"id": "lp", "grpid": 129, "state": "optimized"}, CodeInvalidParams, "grpid")
	e.fails(t, "port.ana_state", m{"id": "lp", "grpid": 3, "state": "fast"}, CodeInvalidParams, "state")
	e.fails(t, "port.ana_state", m{"id": "nope", "grpid": 3, "state": "optimized"}, CodeNotFound, "does not exist")
	var ports []Port
	e.call(t, "port.list", nil, &ports)
	want := []ANAGroup{{1, "inaccessible"}, {2, "non-optimized"}}
	if len(ports) != 1 || !reflect.DeepEqual(ports[0].ANAGroups, want) {
		t.Fatalf("port.list: %+v, want ANA groups %v", ports, want)
	}
	p, ok := e.srv.Target.Port(e.svc.Tree().PortIDs()["lp"])
	if !ok {
		t.Fatal("port lp not in the target")
	}
	got := p.ANAStates()
	if len(got) != 2 || got[0].State != nvme.ANAInaccessible || got[1].State != nvme.ANANonOptimized {
		t.Fatalf("target port states %+v", got)
	}
	var ns Namespace
	e.call(t, "ns.modify", m{"nqn": nqnA, "nsid": 1, "ana_grpid": 2}, &ns)
	if ns.ANAGrpID == nil || *ns.ANAGrpID != 2 {
		t.Fatalf("ns.modify result %+v", ns)
	}
}
