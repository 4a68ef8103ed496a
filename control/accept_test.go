package control

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestAcceptErrors: an accept that fails for want of descriptors is
// retried (before, Serve returned and the control API was gone until a
// restart); any other accept error still ends Serve.
func TestAcceptErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		errno   syscall.Errno
		serving bool
	}{
		{"EMFILE", syscall.EMFILE, true},
		{"ENFILE", syscall.ENFILE, true},
		{"ECONNABORTED", syscall.ECONNABORTED, true},
		{"EINVAL", syscall.EINVAL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
			defer srv.Close()
			svc := New(srv, Options{})
			tree, err := configfs.ParseHCL([]byte(baseConfig), "a.hcl")
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.Apply(tree); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(t.TempDir(), "a.sock")
			if err := svc.Listen(sock); err != nil {
				t.Fatal(err)
			}
			var fails atomic.Int32
			real := svc.ln.accept
			svc.ln.accept = func() (*net.UnixConn, error) {
				if fails.Add(1) <= 3 {
					return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", tc.errno)}
				}
				return real()
			}
			done := make(chan error, 1)
			go func() { done <- svc.Serve() }()
			if !tc.serving {
				select {
				case err := <-done:
					if !errors.Is(err, tc.errno) {
						t.Errorf("Serve: %v, want %v", err, tc.errno)
					}
				case <-time.After(60 * time.Second): // against a hang only
					t.Fatal("Serve goes on after an accept error it cannot recover from")
				}
				svc.Close()
				return
			}
			cl, err := Dial(sock)
			if err != nil {
				t.Fatal(err)
			}
			cl.Timeout = 60 * time.Second
			var names []string
			err = cl.Call("rpc.methods", nil, &names)
			cl.Close()
			if err != nil || len(names) == 0 {
				t.Errorf("rpc.methods after %d failed accepts: %v %v", 3, names, err)
			}
			svc.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}
