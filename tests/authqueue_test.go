package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// Issue 22, item 1, against the nvmetd binary over soft RoCE on loopback:
// a peer without the host's key that knows its NQN and guesses its
// controller ID connects a granted I/O queue of the host's authenticated
// controller. Its failed transaction closes its own queue only, it does
// not keep the host from that QID, and nvmetd's log names its address.
const (
	aqTgtAddr      = "127.0.79.1"
	aqHostAddr     = "127.0.79.2"
	aqAttackerAddr = "127.0.79.3"
	aqSvc          = 4479
	aqNQN          = "nqn.2026-11.io.nvmeof:authqueue"
	aqHost         = "nqn.2014-08.org.nvmexpress:uuid:c1000000-0000-4000-8000-000000000022"
	aqKey          = "DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYOtVl3:"
)

// aqQueue is one host queue of this test, driven command by command.
type aqQueue struct {
	t   *testing.T
	q   fabrics.HostQueue
	qid uint16
}

func aqDial(t *testing.T, ctx context.Context, d *nvmerdma.Dialer, qid uint16) *aqQueue {
	t.Helper()
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(aqTgtAddr), ServiceID: aqSvc}
	q, err := d.Dial(ctx, addr, fabrics.QueueParams{QID: qid, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatalf("queue %d: %v", qid, err)
	}
	t.Cleanup(func() { q.Close() })
	return &aqQueue{t: t, q: q, qid: qid}
}

// run runs one command; a transport error (the queue closed) is returned.
func (a *aqQueue) run(ctx context.Context, sqe [64]byte, data []byte, dir fabrics.DataDirection) (nvme.CQE, error) {
	return runSQE(ctx, a.q, sqe, data, dir)
}

// connect runs the queue's Connect for cntlid as aqHost and returns the
// controller ID and AUTHREQ of its result.
func (a *aqQueue) connect(ctx context.Context, cntlid uint16) (uint16, uint16, nvme.Status) {
	a.t.Helper()
	d := fabrics.NewConnectData()
	id, _ := fabrics.UUIDFromNQN(aqHost)
	d.SetHostID(id)
	d.SetCntlID(cntlid)
	if err := d.SetSubNQN(aqNQN); err != nil {
		a.t.Fatal(err)
	}
	if err := d.SetHostNQN(aqHost); err != nil {
		a.t.Fatal(err)
	}
	cqe, err := a.run(ctx, connectSQE(a.qid, 32, 0), d, fabrics.DirHostToCtrl)
	if err != nil {
		a.t.Fatalf("Connect of queue %d: %v", a.qid, err)
	}
	return fabrics.ConnectResultCntlID(cqe.DW0()), fabrics.ConnectResultAuthReq(cqe.DW0()), cqe.Status()
}

func aqAuthSQE(t fabrics.FCType, n int) [64]byte {
	return fabricsSQE(t, func(c fabrics.Command) {
		a := c.Auth()
		a.SetSECP(auth.SECP)
		a.SetSPSP0(auth.SPSP0)
		a.SetSPSP1(auth.SPSP1)
		a.SetTL(uint32(n))
	})
}

// authenticate runs a DH-HMAC-CHAP transaction with key, as the Linux
// host does: Negotiate, then Receive and Send until the outcome.
func (a *aqQueue) authenticate(ctx context.Context, key *auth.Key) error {
	h, err := auth.NewHost(auth.HostConfig{HostNQN: aqHost, SubsysNQN: aqNQN, Key: key})
	if err != nil {
		return err
	}
	send := func(msg []byte) error {
		cqe, err := a.run(ctx, aqAuthSQE(fabrics.FCTypeAuthSend, len(msg)), msg, fabrics.DirHostToCtrl)
		if err == nil && cqe.Status() != 0 {
			err = fmt.Errorf("Authentication Send: %v", cqe.Status())
		}
		return err
	}
	if err := send(h.Negotiate()); err != nil {
		return err
	}
	for !h.Done() {
		buf := make([]byte, auth.MaxMessageLen)
		cqe, err := a.run(ctx, aqAuthSQE(fabrics.FCTypeAuthReceive, len(buf)), buf, fabrics.DirCtrlToHost)
		if err != nil {
			return err
		}
		if cqe.Status() != 0 {
			return fmt.Errorf("Authentication Receive: %v", cqe.Status())
		}
		out, herr := h.Handle(buf)
		if out != nil {
			if err := send(out); err != nil {
				return err
			}
		}
		if herr != nil {
			return herr
		}
	}
	return nil
}

// read reads block 0 of namespace 1.
func (a *aqQueue) read(ctx context.Context) (nvme.CQE, error) {
	return a.run(ctx, rwSQE(nvme.IORead, 1, 0, 1), make([]byte, 512), fabrics.DirCtrlToHost)
}

// waitClosed waits until the target has closed the queue: every command
// before then is answered (Authentication Required), so each round trip
// either shows the queue open or ends the wait.
func (a *aqQueue) waitClosed(ctx context.Context) {
	a.t.Helper()
	for {
		cqe, err := a.read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				a.t.Fatalf("queue %d still open: %v", a.qid, err)
			}
			return
		}
		if cqe.Status() != fabrics.StatusAuthenticationRequired {
			a.t.Fatalf("queue %d: Read %v, want Authentication Required until it closes", a.qid, cqe.Status())
		}
	}
}

func TestNvmetdAuthFailureOnIOQueue(t *testing.T) {
	_, tgt := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
port "p" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = %d
}
host %q {
  dhchap_key = %q
}
subsystem %q {
  ports         = ["p"]
  allowed_hosts = [%q]
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`, aqTgtAddr, aqSvc, aqHost, aqKey, aqNQN, aqHost)), 0o600); err != nil {
		t.Fatal(err)
	}
	hostDev := openSoftDevice(t, aqHostAddr)
	attDev := openSoftDevice(t, aqAttackerAddr)
	target := startNvmetd(t, tgt, cfg)
	defer func() {
		if t.Failed() {
			t.Logf("nvmetd log:\n%s", target.log)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), softTimeout)
	defer cancel()
	key, err := auth.ParseKey(aqKey)
	if err != nil {
		t.Fatal(err)
	}
	host := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: hostDev})
	attacker := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: attDev})

	// The host: admin queue and I/O queue 1, both authenticated; it sets
	// no Number of Queues, so queues 2.. are granted and unconnected.
	admin := aqDial(t, ctx, host, 0)
	cntlid, authreq, st := admin.connect(ctx, fabrics.CntlIDDynamic)
	if st != 0 || authreq != 2 {
		t.Fatalf("admin Connect: %v, AUTHREQ %d", st, authreq)
	}
	if err := admin.authenticate(ctx, key); err != nil {
		t.Fatalf("admin queue authentication: %v", err)
	}
	cc := fabrics.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithCSS(fabrics.CCCSSNVM)
	set := fabricsSQE(fabrics.FCTypePropertySet, func(c fabrics.Command) {
		c.PropertySet().SetAttrib(fabrics.PropertyAttrib4)
		c.PropertySet().SetOffset(fabrics.PropCC)
		c.PropertySet().SetValue(uint64(cc))
	})
	if cqe, err := admin.run(ctx, set, nil, fabrics.DirNone); err != nil || cqe.Status() != 0 {
		t.Fatalf("Property Set CC.EN: %v %v", err, cqe)
	}
	io1 := aqDial(t, ctx, host, 1)
	if _, authreq, st := io1.connect(ctx, cntlid); st != 0 || authreq != 2 {
		t.Fatalf("I/O Connect: %v, AUTHREQ %d", st, authreq)
	}
	if err := io1.authenticate(ctx, key); err != nil {
		t.Fatalf("I/O queue authentication: %v", err)
	}
	alive := func(what string) {
		t.Helper()
		if cqe, err := admin.run(ctx, identifySQE(nvme.CNSController, 0), make([]byte, 4096), fabrics.DirCtrlToHost); err != nil || cqe.Status() != 0 {
			t.Fatalf("%s: host's Identify: %v %v", what, err, cqe)
		}
		if cqe, err := io1.read(ctx); err != nil || cqe.Status() != 0 {
			t.Fatalf("%s: host's Read: %v %v", what, err, cqe)
		}
	}
	alive("before")

	// The peer without the key: a bad Authentication Receive on queue 2.
	att2 := aqDial(t, ctx, attacker, 2)
	if _, authreq, st := att2.connect(ctx, cntlid); st != 0 || authreq != 2 {
		t.Fatalf("attacker's I/O Connect: %v, AUTHREQ %d", st, authreq)
	}
	buf := make([]byte, auth.MaxMessageLen)
	// AUTH_Failure1, then the queue closes: nvmetd closes it right after
	// posting the response, which the transport sends before it
	// disconnects.
	cqe, err := att2.run(ctx, aqAuthSQE(fabrics.FCTypeAuthReceive, len(buf)), buf, fabrics.DirCtrlToHost)
	if err != nil {
		t.Fatalf("attacker's Authentication Receive: %v, want AUTH_Failure1 (the reply was lost with the queue)", err)
	}
	if cqe.Status() != 0 {
		t.Fatalf("attacker's Authentication Receive: %v, want AUTH_Failure1", cqe.Status())
	}
	if _, err := auth.ParseFailure(buf); err != nil {
		t.Fatalf("attacker's Authentication Receive: %v, want AUTH_Failure1", err)
	}
	att2.waitClosed(ctx)
	alive("after the attacker's failed authentication")
	if l := target.log.String(); !strings.Contains(l, "authentication failed; I/O queue closed") || !strings.Contains(l, aqAttackerAddr) {
		t.Errorf("nvmetd does not log the failure with the attacker's address %s", aqAttackerAddr)
	}

	// The peer holds queue 3 unauthenticated: the host connects it anyway.
	att3 := aqDial(t, ctx, attacker, 3)
	if _, _, st := att3.connect(ctx, cntlid); st != 0 {
		t.Fatalf("attacker's Connect of queue 3: %v", st)
	}
	io3 := aqDial(t, ctx, host, 3)
	if _, _, st := io3.connect(ctx, cntlid); st != 0 {
		t.Fatalf("host's Connect of queue 3 held by the attacker: %v", st)
	}
	if err := io3.authenticate(ctx, key); err != nil {
		t.Fatalf("host's queue 3 authentication: %v", err)
	}
	if cqe, err := io3.read(ctx); err != nil || cqe.Status() != 0 {
		t.Fatalf("host's Read on queue 3: %v %v", err, cqe)
	}
	att3.waitClosed(ctx)
	alive("after the host took queue 3")
}
