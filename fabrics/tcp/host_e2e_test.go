package tcp_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// TestHostEngineOverTCP: the initiator (its command engine, Connect,
// Identify, keep-alive set up, discovery) over this package's host and
// target, with and without digests: discovery lists the port as tcp,
// writes of 512 B to 2 MiB read back equal, and again after a reset.
func TestHostEngineOverTCP(t *testing.T) {
	const nqn = "nqn.2026-12.io.nvmeof:tcp-host-e2e"
	tests := []struct {
		name         string
		addr         string
		hdgst, ddgst bool
	}{
		{"plain", "127.0.79.1", false, false},
		{"digests", "127.0.79.2", true, true},
		{"data digest", "127.0.79.3", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tgt := target.New(target.Options{})
			defer tgt.Close()
			if err := tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true, Model: "tcp-e2e"}); err != nil {
				t.Fatal(err)
			}
			mem, err := bdev.NewMemory(32<<20, 512)
			if err != nil {
				t.Fatal(err)
			}
			if err := tgt.AddNamespace(nqn, target.NamespaceConfig{NSID: 1, Device: mem}); err != nil {
				t.Fatal(err)
			}
			l, err := tcp.Listen(tcp.TargetConfig{Addr: netip.MustParseAddr(tt.addr), Ephemeral: true})
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Address()
			if err := tgt.AddPort(target.PortConfig{ID: 1, Address: addr, Subsystems: []string{nqn}}); err != nil {
				l.Close()
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() { defer close(served); _ = tgt.Serve(ctx, 1, l) }()
			defer func() { cancel(); <-served }()

			d := tcp.NewDialer(tcp.HostConfig{HeaderDigest: tt.hdgst, DataDigest: tt.ddgst})
			opts := initiator.Options{CommandTimeout: 10 * time.Second}
			entries, err := initiator.Discover(ctx, d, addr, opts)
			if err != nil {
				t.Fatalf("discover: %v", err)
			}
			found := false
			for _, e := range entries {
				a, err := e.Address()
				found = found || e.SubNQN == nqn && err == nil && a == addr && e.TRType == fabrics.TRTypeTCP
			}
			if !found {
				t.Fatalf("discovery lacks %s on %s: %+v", nqn, addr, entries)
			}
			opts.SubsystemNQN, opts.NrIOQueues, opts.QueueSize = nqn, 2, 32
			c, err := initiator.Connect(ctx, d, addr, opts)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer c.Close()
			ns, err := c.Namespace(1)
			if err != nil {
				t.Fatal(err)
			}
			off := int64(0)
			for _, n := range []int{512, 4096, 16384, 65536, 1 << 20, 2<<20 + 4096} {
				w := make([]byte, n)
				for i := range w {
					w[i] = byte(i*31 + n)
				}
				if _, err := ns.WriteAt(w, off); err != nil {
					t.Fatalf("write %d bytes: %v", n, err)
				}
				r := make([]byte, n)
				if _, err := ns.ReadAt(r, off); err != nil {
					t.Fatalf("read %d bytes: %v", n, err)
				}
				if !bytes.Equal(r, w) {
					t.Fatalf("%d bytes read back different", n)
				}
				off += int64(n)
			}
			// A reset dials every queue again; the data stays.
			if err := c.Reset(ctx); err != nil {
				t.Fatalf("reset: %v", err)
			}
			r := make([]byte, 4096)
			if _, err := ns.ReadAt(r, 512); err != nil || r[0] != 0 || r[1] != 31 { // the 4096-byte write's
				t.Fatalf("read after the reset: %v, % x", err, r[:2])
			}
		})
	}
}

// cutProxy forwards TCP connections from its listener to to, and cuts
// every connection it carries on cut.
type cutProxy struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	n     int // connections accepted
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, at string, to fabrics.Address) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", at+":0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: netip.AddrPortFrom(to.Addr, to.ServiceID).String()}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) address() fabrics.Address {
	ap := netip.MustParseAddrPort(p.ln.Addr().String())
	return fabrics.Address{Transport: fabrics.TransportTCP, Addr: ap.Addr(), ServiceID: ap.Port()}
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.n++
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
	}
}

// cut closes every connection carried so far.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// TestHostReconnectOverTCP: when the connections of a controller are cut
// (the queues see their sockets close), the initiator reconnects over
// new ones and the I/O waiting meanwhile completes, with the data intact.
func TestHostReconnectOverTCP(t *testing.T) {
	const nqn = "nqn.2026-12.io.nvmeof:tcp-host-reconnect"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tgt := target.New(target.Options{})
	defer tgt.Close()
	if err := tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true}); err != nil {
		t.Fatal(err)
	}
	mem, err := bdev.NewMemory(8<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.AddNamespace(nqn, target.NamespaceConfig{NSID: 1, Device: mem}); err != nil {
		t.Fatal(err)
	}
	l, err := tcp.Listen(tcp.TargetConfig{Addr: netip.MustParseAddr("127.0.79.5"), Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.AddPort(target.PortConfig{ID: 1, Address: l.Address(), Subsystems: []string{nqn}}); err != nil {
		l.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = tgt.Serve(ctx, 1, l) }()
	defer func() { cancel(); <-served }()
	p := newCutProxy(t, "127.0.79.6", l.Address())

	opts := initiator.Options{SubsystemNQN: nqn, NrIOQueues: 2, QueueSize: 16, CommandTimeout: 5 * time.Second,
		KeepAliveTimeout: 2 * time.Second, ReconnectDelay: 50 * time.Millisecond, CtrlLossTimeout: 30 * time.Second}
	c, err := initiator.Connect(ctx, tcp.NewDialer(tcp.HostConfig{DataDigest: true}), p.address(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	w := bytes.Repeat([]byte("reconnect over tcp "), 4096)[:65536]
	if _, err := ns.WriteAt(w, 4096); err != nil {
		t.Fatal(err)
	}
	before := p.accepted()
	p.cut()
	r := make([]byte, len(w))
	if _, err := ns.ReadAt(r, 4096); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("read after the cut: %v (equal %v)", err, bytes.Equal(r, w))
	}
	if after := p.accepted(); after <= before {
		t.Errorf("%d connections before the cut, %d after: no reconnection", before, after)
	}
	if st := c.State(); st != initiator.StateLive {
		t.Errorf("state %v after the reconnection", st)
	}
}
