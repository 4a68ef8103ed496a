package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target/server"
)

const rpNQN = "nqn.2026-11.io.nvmeof:session-remove-path"

// loopTarget serves rpNQN with one 8 MiB namespace on two loop ports
// (services 4420 and 4421) in this process.
func loopTarget(t *testing.T) *loop.Network {
	t.Helper()
	src := `
port "p1" {
  transport = "loop"
  service   = 4420
}
port "p2" {
  transport = "loop"
  service   = 4421
}
subsystem "` + rpNQN + `" {
  ports          = ["p1", "p2"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "8MiB"
  }
}
`
	tree, err := configfs.ParseHCL([]byte(src), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	net := loop.NewNetwork()
	srv := server.New(server.Options{LoopNetwork: net})
	t.Cleanup(func() { srv.Close() })
	if err := srv.Apply(tree); err != nil {
		t.Fatal(err)
	}
	return net
}

// TestDaemonRemovePath runs a daemon (in this process, mapping nothing)
// with two paths of a loop target, adds the second through OpAddPath and
// removes paths through OpRemovePath while verified I/O runs through
// the daemon's multipath namespace: an unknown path is refused, removing
// the first path leaves the second (now first) with no I/O error, and
// removing the last path is a whole disconnect (the daemon exits).
func TestDaemonRemovePath(t *testing.T) {
	net := loopTarget(t)
	dialer := loop.Dialer{Net: net}
	addr := func(svc uint16) fabrics.Address {
		return fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: svc}
	}
	opts := initiator.Options{SubsystemNQN: rpNQN, NrIOQueues: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slot, err := Allocate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release()
	addPath := func(ctx context.Context, spec json.RawMessage) (*initiator.Controller, PathState, func() error, error) {
		var s struct{ Service uint16 }
		if err := json.Unmarshal(spec, &s); err != nil {
			return nil, PathState{}, nil, err
		}
		c, err := initiator.Connect(ctx, dialer, addr(s.Service), opts)
		return c, PathState{Transport: "loop", Trsvcid: fmt.Sprint(s.Service)}, nil, err
	}
	d := NewDaemon(slot, State{Transport: "loop", Trsvcid: "4420", SubsysNQN: rpNQN}, Config{None: true, AddPath: addPath}, nil)
	c1, err := initiator.Connect(ctx, dialer, addr(4420), opts)
	if err != nil {
		t.Fatal(err)
	}
	d.Attach(c1, nil)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(make(chan os.Signal)) }()
	call := func(req Request) (*Response, error) {
		t.Helper()
		return Call(ctx, slot.SocketPath(), req)
	}
	resp, err := call(Request{Op: OpAddPath, Spec: json.RawMessage(`{"Service": 4421}`)})
	if err != nil || len(resp.State.Paths) != 2 || resp.State.Paths[1].Name != slot.Name+"c1" {
		t.Fatalf("add-path: %+v %v", resp, err)
	}
	c2 := d.Multipath().Paths()[1]

	// Verified I/O through the daemon's namespace all along.
	ns, err := d.Multipath().Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	var rounds atomic.Int64
	stop := make(chan struct{})
	ioErr := make(chan error, 2)
	for wkr := range 2 {
		go func() {
			off := int64(wkr) * (1 << 20)
			w, r := make([]byte, 64<<10), make([]byte, 64<<10)
			for i := 0; ; i++ {
				select {
				case <-stop:
					ioErr <- nil
					return
				default:
				}
				for j := range w {
					w[j] = byte(i + j + wkr)
				}
				if _, err := ns.WriteAt(w, off); err != nil {
					ioErr <- fmt.Errorf("worker %d write %d: %w", wkr, i, err)
					return
				}
				if _, err := ns.ReadAt(r, off); err != nil || !bytes.Equal(r, w) {
					ioErr <- fmt.Errorf("worker %d read %d: %v (data equal %v)", wkr, i, err, bytes.Equal(r, w))
					return
				}
				rounds.Add(1)
			}
		}()
	}
	waitRounds := func(n int64) {
		t.Helper()
		for target := rounds.Load() + n; rounds.Load() < target; {
			select {
			case err := <-ioErr:
				t.Fatalf("I/O stopped: %v", err)
			case <-ctx.Done():
				t.Fatal("I/O does not progress")
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitRounds(20)

	if _, err := call(Request{Op: OpRemovePath, Path: slot.Name + "c9"}); err == nil || !strings.Contains(err.Error(), "has no path "+slot.Name+"c9") {
		t.Fatalf("unknown path: %v", err)
	}
	// The first path goes; the second becomes the first.
	resp, err = call(Request{Op: OpRemovePath, Path: slot.Name})
	if err != nil || resp.State == nil {
		t.Fatalf("remove-path %s: %+v %v", slot.Name, resp, err)
	}
	st := resp.State
	if len(st.Paths) != 1 || st.Paths[0].Name != slot.Name+"c1" || st.Trsvcid != "4421" || st.CntlID != c2.CntlID() || st.State != "live" {
		t.Fatalf("state after removing the first path: %+v", st)
	}
	if c1.State() != initiator.StateDeleted {
		t.Fatalf("removed controller is %v, want deleted", c1.State())
	}
	if ps := d.Multipath().Paths(); len(ps) != 1 || ps[0] != c2 {
		t.Fatalf("multipath paths: %v", ps)
	}
	if fs, err := ReadState(slot.StatePath()); err != nil || len(fs.Paths) != 1 || fs.Trsvcid != "4421" {
		t.Fatalf("state file: %+v %v", fs, err)
	}
	waitRounds(20)
	close(stop)
	for range 2 {
		if err := <-ioErr; err != nil {
			t.Fatal(err)
		}
	}
	// The last path: a whole disconnect.
	resp, err = call(Request{Op: OpRemovePath, Path: slot.Name + "c1"})
	if err != nil || resp.State != nil {
		t.Fatalf("remove-path of the last path: %+v %v", resp, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the daemon did not exit after its last path was removed")
	}
	if c2.State() != initiator.StateDeleted {
		t.Fatalf("last controller is %v, want deleted", c2.State())
	}
	if _, err := os.Stat(slot.StatePath()); !os.IsNotExist(err) {
		t.Fatalf("state file left: %v", err)
	}
}
