package initiator

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/target"
)

// DH-HMAC-CHAP tests: the real target behind a listener that adds in-band
// authentication the way Linux nvmet does it (AUTHREQ.ATR in every Connect
// completion, Authentication Send/Receive answered by auth.Controller, any
// other command on an unauthenticated queue refused).

// authTarget is what the authenticating listener enforces.
type authTarget struct {
	hostKey, ctrlKey *auth.Key
	dhgroup          auth.DHGroupID
	hash             auth.HashID
	// holdReceive keeps every Authentication Receive unanswered until the
	// queue closes.
	holdReceive bool
	// dropOnFailure closes the queue instead of answering AUTH_Failure1
	// once the host's response failed, as Linux nvmet does.
	dropOnFailure bool
	// replay, when set, answers from a capture instead of auth.Controller:
	// per queue ID the messages in order; what the host sends must equal
	// the captured host's messages (mismatches lists the differences).
	replay     map[uint16][]capturedMsg
	mismatches []string
	// subNQN and hostNQN default to tgtNQN and testHostNQN.
	subNQN, hostNQN string

	mu       sync.Mutex
	queues   []fabrics.TargetQueue
	authed   map[uint16]int // queue ID -> authenticated transactions
	bidir    int            // transactions with a controller challenge
	early    []string       // commands seen on unauthenticated queues
	outcomes []string       // failed transactions' errors
}

func (at *authTarget) subsys() string {
	if at.subNQN != "" {
		return at.subNQN
	}
	return tgtNQN
}

func (at *authTarget) host() string {
	if at.hostNQN != "" {
		return at.hostNQN
	}
	return testHostNQN
}

func (at *authTarget) counts() (authed map[uint16]int, bidir int, early, fails []string) {
	at.mu.Lock()
	defer at.mu.Unlock()
	authed = map[uint16]int{}
	for k, v := range at.authed {
		authed[k] = v
	}
	return authed, at.bidir, append([]string(nil), at.early...), append([]string(nil), at.outcomes...)
}

type authListener struct {
	fabrics.Listener
	at *authTarget
}

func (l *authListener) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	q, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	l.at.mu.Lock()
	l.at.queues = append(l.at.queues, q)
	l.at.mu.Unlock()
	return &authQueue{TargetQueue: q, at: l.at}, nil
}

// killQueues closes every queue from the target side.
func (at *authTarget) killQueues() {
	at.mu.Lock()
	qs := at.queues
	at.queues = nil
	at.mu.Unlock()
	for _, q := range qs {
		_ = q.Close()
	}
}

type authQueue struct {
	fabrics.TargetQueue
	at *authTarget

	mu     sync.Mutex // the handler runs on the transport's goroutine; held requests complete elsewhere
	ctrl   *auth.Controller
	authed bool
	bidir  bool // the transaction in progress has a controller challenge
	held   []*fabrics.Request
}

func (q *authQueue) Serve(h fabrics.CommandHandler) {
	q.TargetQueue.Serve(&authHandler{q: q, next: h})
}

type authHandler struct {
	q    *authQueue
	next fabrics.CommandHandler
}

func (a *authHandler) QueueClosed(err error) {
	a.q.mu.Lock()
	held := a.q.held
	a.q.held = nil
	a.q.mu.Unlock()
	for _, r := range held {
		nvme.CQE(r.CQE[:]).SetStatus(fabrics.StatusAuthenticationRequired)
		r.Complete()
	}
	a.next.QueueClosed(err)
}

// connectCompleter sets AUTHREQ.ATR in a successful Connect completion.
type connectCompleter struct{ orig fabrics.Completer }

func (c *connectCompleter) CompleteRequest(r *fabrics.Request) {
	r.Completer = c.orig
	cqe := nvme.CQE(r.CQE[:])
	if cqe.Status().Success() {
		cqe.SetDW0(cqe.DW0() | fabrics.AuthReqATR<<16)
	}
	c.orig.CompleteRequest(r)
}

func (a *authHandler) HandleCommand(r *fabrics.Request) {
	q, at := a.q, a.q.at
	if r.SQE[0] == fabrics.OpcodeFabrics {
		ac := fabrics.Command(r.SQE[:]).Auth()
		switch fabrics.FCType(r.SQE[4]) {
		case fabrics.FCTypeConnect:
			r.Completer = &connectCompleter{orig: r.Completer}
			a.next.HandleCommand(r)
			return
		case fabrics.FCTypeAuthSend:
			if ac.SECP() != auth.SECP || ac.SPSP0() != auth.SPSP0 || ac.SPSP1() != auth.SPSP1 || int(ac.TL()) != len(r.Data) {
				nvme.CQE(r.CQE[:]).SetStatus(nvme.StatusInvalidField)
				r.Complete()
				return
			}
			if at.replay != nil {
				a.replay(r, true)
				return
			}
			q.mu.Lock()
			if q.ctrl == nil {
				q.ctrl, _ = auth.NewController(auth.ControllerConfig{
					HostNQN: at.host(), SubsysNQN: at.subsys(), HostKey: at.hostKey, CtrlKey: at.ctrlKey,
					Hash: at.hash, DHGroup: at.dhgroup,
				})
			}
			q.ctrl.Send(r.Data)
			a.settle()
			q.mu.Unlock()
			r.Complete()
			return
		case fabrics.FCTypeAuthReceive:
			if at.replay != nil {
				a.replay(r, false)
				return
			}
			q.mu.Lock()
			if at.holdReceive {
				q.held = append(q.held, r)
				q.mu.Unlock()
				return
			}
			if at.dropOnFailure && q.ctrl != nil && q.ctrl.Err() != nil {
				q.held = append(q.held, r)
				q.mu.Unlock()
				go q.TargetQueue.Close()
				return
			}
			var b []byte
			var err error
			if q.ctrl != nil && ac.SECP() == auth.SECP && int(ac.AL()) == len(r.Data) {
				b, err = q.ctrl.Receive(len(r.Data))
			}
			if b == nil || err != nil {
				q.mu.Unlock()
				nvme.CQE(r.CQE[:]).SetStatus(nvme.StatusInvalidField)
				r.Complete()
				return
			}
			clear(r.Data[copy(r.Data, b):])
			a.settle()
			q.mu.Unlock()
			r.Complete()
			return
		}
	}
	q.mu.Lock()
	authed := q.authed
	q.mu.Unlock()
	if !authed {
		at.mu.Lock()
		at.early = append(at.early, fmt.Sprintf("qid %d opcode %#x fctype %#x", q.Params().QID, r.SQE[0], r.SQE[4]))
		at.mu.Unlock()
		nvme.CQE(r.CQE[:]).SetStatus(fabrics.StatusAuthenticationRequired)
		r.Complete()
		return
	}
	a.next.HandleCommand(r)
}

// capturedMsg is one authentication message of a capture.
type capturedMsg struct {
	fromHost bool
	msg      []byte
}

// maskReplySeqNum returns msg with SEQNUM (bytes 12-15) zeroed when it
// is a DH-HMAC-CHAP_Reply with CVALID 0. Linux puts its global sequence
// counter there even when it does not challenge the controller
// (nvme_auth_set_dhchap_reply_data); nvme/auth sends 0, which nothing
// reads without CVALID.
func maskReplySeqNum(msg []byte) []byte {
	if len(msg) < 16 || msg[0] != byte(auth.TypeDHCHAP) || msg[1] != byte(auth.MsgReply) || msg[7] != 0 {
		return msg
	}
	m := append([]byte(nil), msg...)
	clear(m[12:16])
	return m
}

// replay handles an Authentication Send (send) or Receive from the
// capture: the host's message must be the captured one; the controller's
// is the captured one. A queue whose captured messages are all used is
// authenticated.
func (a *authHandler) replay(r *fabrics.Request, send bool) {
	q, at := a.q, a.q.at
	qid := q.Params().QID
	at.mu.Lock()
	msgs := at.replay[qid]
	var m capturedMsg
	ok := len(msgs) > 0
	if ok {
		m, at.replay[qid] = msgs[0], msgs[1:]
	}
	switch {
	case !ok:
		at.mismatches = append(at.mismatches, fmt.Sprintf("qid %d: message beyond the capture", qid))
	case m.fromHost != send:
		at.mismatches = append(at.mismatches, fmt.Sprintf("qid %d: send %v, the capture has fromHost %v", qid, send, m.fromHost))
	case send && !bytes.Equal(maskReplySeqNum(r.Data), maskReplySeqNum(m.msg)):
		at.mismatches = append(at.mismatches, fmt.Sprintf("qid %d: host sent\n%x\nthe kernel host sent\n%x", qid, r.Data, m.msg))
	case !send && len(r.Data) != len(m.msg):
		at.mismatches = append(at.mismatches, fmt.Sprintf("qid %d: AL %d, the kernel host's was %d", qid, len(r.Data), len(m.msg)))
	case !send:
		copy(r.Data, m.msg)
	}
	done := ok && len(at.replay[qid]) == 0
	if done {
		if at.authed == nil {
			at.authed = map[uint16]int{}
		}
		at.authed[qid]++
	}
	at.mu.Unlock()
	if done {
		q.mu.Lock()
		q.authed = true
		q.mu.Unlock()
	}
	r.Complete()
}

// settle records the transaction's outcome (q.mu held).
func (a *authHandler) settle() {
	q, at := a.q, a.q.at
	switch q.ctrl.Outcome() {
	case auth.Pending:
		q.bidir = q.bidir || q.ctrl.Bidirectional()
	case auth.Succeeded:
		if !q.authed {
			q.authed = true
			at.mu.Lock()
			if at.authed == nil {
				at.authed = map[uint16]int{}
			}
			at.authed[q.Params().QID]++
			if q.bidir {
				at.bidir++
			}
			at.mu.Unlock()
		}
	case auth.Failed:
		at.mu.Lock()
		at.outcomes = append(at.outcomes, q.ctrl.Err().Error())
		at.mu.Unlock()
	}
}

// newAuthFixture starts the target of newTgtFixture behind an
// authenticating listener on its own loop network.
func newAuthFixture(t *testing.T, at *authTarget) *tgtFixture {
	t.Helper()
	return newTgtFixtureFor(t, 1<<20, at.subsys(), at.host(), func(l fabrics.Listener) fabrics.Listener {
		return &authListener{Listener: l, at: at}
	})
}

// tryConnect connects with o (subsystem and host NQN filled in) and
// returns the error, disconnecting on success.
func (f *tgtFixture) tryConnect(t *testing.T, o Options) (*Controller, error) {
	t.Helper()
	if o.SubsystemNQN == "" {
		o.SubsystemNQN, o.HostNQN = tgtNQN, testHostNQN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, loop.Dialer{Net: f.net}, f.addr, o)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// writeReadBack writes n bytes of fill at off to namespace 1 of c, over
// authenticated I/O queues, and checks they read back.
func writeReadBack(t *testing.T, c *Controller, fill byte, n int, off int64) {
	t.Helper()
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	w := bytes.Repeat([]byte{fill}, n)
	if _, err := ns.WriteAt(w, off); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, n)
	if _, err := ns.ReadAt(r, off); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("read back: %v", err)
	}
}

// testKey returns a key whose secret bytes are all b.
func testKey(t *testing.T, transform auth.HashID, n int, b byte) *auth.Key {
	t.Helper()
	k, err := auth.NewKey(transform, bytes.Repeat([]byte{b}, n))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAuthConnect(t *testing.T) {
	host := testKey(t, auth.HashSHA256, 32, 0x11)
	ctrl := testKey(t, auth.HashNone, 48, 0x22)
	tests := []struct {
		name    string
		at      *authTarget
		opts    Options
		bidir   bool
		ioQueue int
	}{
		{name: "unidirectional null group", at: &authTarget{hostKey: host}, opts: Options{HostKey: host}},
		{name: "unidirectional ffdhe2048 sha384", at: &authTarget{hostKey: host, hash: auth.HashSHA384, dhgroup: auth.FFDHE2048},
			opts: Options{DHChapSecret: host.Encode(), NrIOQueues: 2}},
		{name: "bidirectional", at: &authTarget{hostKey: host, ctrlKey: ctrl, hash: auth.HashSHA512},
			opts: Options{DHChapSecret: host.Encode(), DHChapCtrlSecret: ctrl.Encode(), NrIOQueues: 2}, bidir: true},
		{name: "bidirectional ffdhe3072, parsed keys", at: &authTarget{hostKey: host, ctrlKey: ctrl, dhgroup: auth.FFDHE3072},
			opts: Options{HostKey: host, CtrlKey: ctrl}, bidir: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newAuthFixture(t, tc.at)
			var logBuf syncBuf
			tc.opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logBuf})
			c, err := f.tryConnect(t, tc.opts)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			authed, bidir, early, fails := tc.at.counts()
			if len(early) > 0 || len(fails) > 0 {
				t.Errorf("commands before authentication %v, failed transactions %v", early, fails)
			}
			// The admin queue and every I/O queue, once each.
			if authed[0] != 1 || len(authed) != 1+c.NumIOQueues() {
				t.Errorf("authenticated queues %v, want qid 0..%d once each", authed, c.NumIOQueues())
			}
			for qid := 1; qid <= c.NumIOQueues(); qid++ {
				if authed[uint16(qid)] != 1 {
					t.Errorf("I/O queue %d authenticated %d times", qid, authed[uint16(qid)])
				}
			}
			wantBidir := 0
			if tc.bidir {
				wantBidir = len(authed)
			}
			if bidir != wantBidir {
				t.Errorf("%d bidirectional transactions, want %d", bidir, wantBidir)
			}
			writeReadBack(t, c, 0x5a, 4096, 8192)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			noSecrets(t, logBuf.String(), host, ctrl)
			if !strings.Contains(logBuf.String(), "authenticated") {
				t.Errorf("no authentication in the log:\n%s", logBuf.String())
			}
		})
	}
}

func TestAuthRefused(t *testing.T) {
	host := testKey(t, auth.HashSHA256, 32, 0x11)
	other := testKey(t, auth.HashSHA256, 32, 0x12)
	ctrl := testKey(t, auth.HashNone, 32, 0x22)
	tests := []struct {
		name string
		at   *authTarget
		opts Options
		is   error  // errors.Is
		want string // in the message
		// remote: the controller reported the failure (Failure1); local:
		// the host found it.
		remote, local bool
	}{
		{name: "no key", at: &authTarget{hostKey: host}, opts: Options{},
			is: ErrAuthKeyRequired, want: "target requires DH-HMAC-CHAP authentication: give the host secret (--dhchap-secret)"},
		{name: "wrong key", at: &authTarget{hostKey: host}, opts: Options{HostKey: other},
			is: ErrAuthFailed, want: "the controller refused the host's response", remote: true},
		{name: "wrong key, ffdhe2048", at: &authTarget{hostKey: host, dhgroup: auth.FFDHE2048}, opts: Options{DHChapSecret: other.Encode()},
			is: ErrAuthFailed, want: "wrong --dhchap-secret", remote: true},
		{name: "wrong key, queue closed as Linux does", at: &authTarget{hostKey: host, dropOnFailure: true}, opts: Options{HostKey: other},
			is: ErrAuthFailed, want: "the controller ended the exchange after the host's response"},
		{name: "wrong controller key", at: &authTarget{hostKey: host, ctrlKey: ctrl}, opts: Options{HostKey: host, CtrlKey: other},
			is: ErrAuthFailed, want: "the controller did not prove its key", local: true},
		{name: "controller has no controller key", at: &authTarget{hostKey: host}, opts: Options{HostKey: host, CtrlKey: ctrl},
			is: ErrAuthFailed, want: "the controller has no key for bidirectional authentication", remote: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newAuthFixture(t, tc.at)
			var logBuf syncBuf
			tc.opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logBuf})
			c, err := f.tryConnect(t, tc.opts)
			if err == nil {
				t.Fatalf("Connect succeeded (state %v)", c.State())
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want errors.Is %v and %q in it", err, tc.is, tc.want)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error is not one line: %q", err)
			}
			// The queue is named once: the exchange's error wrapped a
			// transport failure as "queue reset: queue 0: ...", and
			// nvme-rdma's says "queue 0:" itself.
			if n := strings.Count(err.Error(), "qid 0") + strings.Count(err.Error(), "queue 0"); n != 1 {
				t.Errorf("error %q names the queue %d times, want once", err, n)
			}
			var ae *auth.Error
			if tc.remote || tc.local {
				var authErr *AuthError
				if !errors.As(err, &authErr) || authErr.QID != 0 || !errors.As(err, &ae) || ae.Remote != tc.remote {
					t.Errorf("error %q: want an *AuthError of qid 0 with an *auth.Error, remote %v", err, tc.remote)
				}
			}
			_, _, early, _ := tc.at.counts()
			if len(early) > 0 {
				t.Errorf("commands sent on an unauthenticated queue: %v", early)
			}
			noSecrets(t, err.Error()+"\n"+logBuf.String(), host, other, ctrl)
		})
	}
}

// TestAuthReconnect: after a connection loss the host authenticates every
// queue of the new association with the keys it kept.
func TestAuthReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := testKey(t, auth.HashSHA256, 32, 0x41)
		ctrl := testKey(t, auth.HashNone, 32, 0x42)
		at := &authTarget{hostKey: host, ctrlKey: ctrl, dhgroup: auth.FFDHE2048}
		f := newAuthFixture(t, at)
		c, err := f.tryConnect(t, Options{DHChapSecret: host.Encode(), DHChapCtrlSecret: ctrl.Encode(), NrIOQueues: 1, ReconnectDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		at.killQueues()
		waitFor(t, "reconnected and authenticated", func() bool {
			authed, _, _, _ := at.counts()
			return c.State() == StateLive && authed[0] == 2 && authed[1] == 2
		})
		authed, bidir, early, fails := at.counts()
		if bidir != 4 || len(early) > 0 || len(fails) > 0 {
			t.Errorf("authed %v, %d bidirectional, early %v, failed %v", authed, bidir, early, fails)
		}
		ns, err := c.Namespace(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ns.ReadAt(make([]byte, 4096), 0); err != nil {
			t.Fatalf("read after reconnect: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAuthNotRequired: a host with a key connects to a target that asks
// for no authentication, as Linux does.
func TestAuthNotRequired(t *testing.T) {
	f := newTgtFixture(t, 1<<20)
	k := testKey(t, auth.HashNone, 32, 1)
	c := f.connect(t, Options{HostKey: k, CtrlKey: k})
	if c.State() != StateLive {
		t.Fatalf("state %v", c.State())
	}
}

// TestAuthTimeout: a controller that never answers Authentication Receive
// fails the connect within the command timeout.
func TestAuthTimeout(t *testing.T) {
	at := &authTarget{hostKey: testKey(t, auth.HashNone, 32, 1), holdReceive: true}
	f := newAuthFixture(t, at)
	start := time.Now()
	_, err := f.tryConnect(t, Options{HostKey: at.hostKey, CommandTimeout: 300 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, ErrAuthFailed) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v: want an authentication failure by timeout", err)
	}
	if took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestAuthOptions(t *testing.T) {
	k := testKey(t, auth.HashSHA256, 32, 7)
	text := k.Encode()
	bad := "DHHC-1:00:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 36)) + ":" // CRC mismatch
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"bad host secret", Options{DHChapSecret: bad}, "dhchap-secret: DHHC-1 secret CRC mismatch"},
		{"not DHHC-1", Options{DHChapSecret: "secret"}, "dhchap-secret: not a DHHC-1 secret"},
		{"bad ctrl secret", Options{HostKey: k, DHChapCtrlSecret: "DHHC-1:05:xx:"}, "dhchap-ctrl-secret: not a DHHC-1 secret"},
		{"ctrl without host", Options{CtrlKey: k}, "needs the host secret"},
		{"both forms", Options{HostKey: k, DHChapSecret: text}, "dhchap-secret given both as text and as a parsed key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.SubsystemNQN = tgtNQN
			_, err := tc.o.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			noSecrets(t, err.Error(), k)
			if strings.Contains(err.Error(), bad[7:20]) {
				t.Errorf("error shows the secret text: %q", err)
			}
		})
	}
	o, err := Options{SubsystemNQN: tgtNQN, DHChapSecret: text, DHChapCtrlSecret: text}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.DHChapSecret != "" || o.DHChapCtrlSecret != "" || !o.HostKey.Equal(k) || !o.CtrlKey.Equal(k) {
		t.Errorf("withDefaults kept the text or lost the keys")
	}
}

// noSecrets fails if s holds any form of the keys' secrets.
func noSecrets(t *testing.T, s string, keys ...*auth.Key) {
	t.Helper()
	for _, k := range keys {
		enc := k.Encode()
		b64 := strings.TrimSuffix(enc[len("DHHC-1:00:"):], ":")
		for _, form := range []string{enc, b64[:16]} {
			if strings.Contains(s, form) {
				t.Fatalf("a secret (%.12s...) appears in:\n%s", form, s)
			}
		}
	}
}

// syncBuf is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuthTarget runs the cases against the target package's own
// DH-HMAC-CHAP (target.SetHostAuth), which follows Linux nvmet.
func TestAuthTarget(t *testing.T) {
	host := testKey(t, auth.HashSHA256, 32, 0x31)
	other := testKey(t, auth.HashSHA256, 32, 0x32)
	ctrl := testKey(t, auth.HashSHA512, 64, 0x33)
	tests := []struct {
		name string
		ha   target.HostAuth
		opts Options
		is   error // nil: success
		want string
	}{
		{name: "unidirectional", ha: target.HostAuth{Key: host}, opts: Options{HostKey: host, NrIOQueues: 2}},
		{name: "unidirectional ffdhe2048 sha512", ha: target.HostAuth{Key: host, Hash: auth.HashSHA512, DHGroup: auth.FFDHE2048},
			opts: Options{DHChapSecret: host.Encode(), NrIOQueues: 2}},
		{name: "bidirectional ffdhe4096", ha: target.HostAuth{Key: host, CtrlKey: ctrl, DHGroup: auth.FFDHE4096},
			opts: Options{DHChapSecret: host.Encode(), DHChapCtrlSecret: ctrl.Encode(), NrIOQueues: 2}},
		{name: "missing key", ha: target.HostAuth{Key: host}, opts: Options{},
			is: ErrAuthKeyRequired, want: "give the host secret (--dhchap-secret)"},
		{name: "wrong key", ha: target.HostAuth{Key: host}, opts: Options{HostKey: other},
			is: ErrAuthFailed, want: "the controller refused the host's response"},
		{name: "wrong controller key", ha: target.HostAuth{Key: host, CtrlKey: ctrl}, opts: Options{HostKey: host, CtrlKey: other},
			is: ErrAuthFailed, want: "the controller did not prove its key"},
		{name: "no controller key on the target", ha: target.HostAuth{Key: host}, opts: Options{HostKey: host, CtrlKey: ctrl},
			is: ErrAuthFailed, want: "DH-HMAC-CHAP authentication failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTgtFixture(t, 1<<20)
			if err := f.tgt.SetHostAuth(testHostNQN, &tc.ha); err != nil {
				t.Fatal(err)
			}
			var logBuf syncBuf
			tc.opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logBuf})
			c, err := f.tryConnect(t, tc.opts)
			defer noSecrets(t, logBuf.String(), host, other, ctrl)
			if tc.is != nil {
				if err == nil {
					t.Fatalf("Connect succeeded (state %v)", c.State())
				}
				if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %q: want errors.Is %v and %q in it", err, tc.is, tc.want)
				}
				noSecrets(t, err.Error(), host, other, ctrl)
				return
			}
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			if n := strings.Count(logBuf.String(), "authenticated"); n != 1+c.NumIOQueues() {
				t.Errorf("%d queues logged as authenticated, want %d:\n%s", n, 1+c.NumIOQueues(), logBuf.String())
			}
			writeReadBack(t, c, 0xa5, 8192, 4096)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAuthKernelCapture: against the controller messages of a Linux 6.12
// nvmet target (testdata/auth, unidirectional, null DH group: the host's
// messages depend on nothing random), our host sends byte for byte what
// the Linux 6.12 host sent, on the admin queue and on I/O queue 1 with its
// own transaction ID, and reads with the kernel's 4096-byte AL.
func TestAuthKernelCapture(t *testing.T) {
	b, err := os.ReadFile("../testdata/auth/kernel-6.12-dhchap-null.json")
	if err != nil {
		t.Fatal(err)
	}
	var capture struct {
		SubNQN string `json:"subsys_nqn"`
		Hosts  []struct {
			HostNQN  string `json:"host_nqn"`
			Key      string `json:"dhchap_key"`
			CtrlKey  string `json:"dhchap_ctrl_key"`
			Messages []struct {
				Dir string `json:"dir"`
				Msg string `json:"msg"`
			} `json:"messages"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &capture); err != nil {
		t.Fatal(err)
	}
	h := capture.Hosts[0]
	if h.CtrlKey != "" {
		t.Fatal("the first host of the capture is expected to be unidirectional")
	}
	// Split the messages by queue: each queue starts with AUTH_Negotiate
	// from the host.
	replay := map[uint16][]capturedMsg{}
	qid := -1
	for _, m := range h.Messages {
		raw, err := hex.DecodeString(m.Msg)
		if err != nil {
			t.Fatal(err)
		}
		fromHost := m.Dir == "host->ctrl"
		if fromHost && raw[0] == byte(auth.TypeCommon) && raw[1] == byte(auth.MsgNegotiate) {
			qid++
		}
		replay[uint16(qid)] = append(replay[uint16(qid)], capturedMsg{fromHost: fromHost, msg: raw})
	}
	if len(replay) != 2 {
		t.Fatalf("capture has %d queues, want 2", len(replay))
	}
	at := &authTarget{replay: replay, subNQN: capture.SubNQN, hostNQN: h.HostNQN}
	f := newAuthFixture(t, at)
	c, err := f.tryConnect(t, Options{SubsystemNQN: capture.SubNQN, HostNQN: h.HostNQN, DHChapSecret: h.Key, NrIOQueues: 1})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	authed, _, early, _ := at.counts()
	at.mu.Lock()
	mism := append([]string(nil), at.mismatches...)
	at.mu.Unlock()
	if len(mism) > 0 || len(early) > 0 || authed[0] != 1 || authed[1] != 1 || c.NumIOQueues() != 1 {
		t.Errorf("authenticated %v, %d I/O queues, early %v, differences from the kernel host:\n%s",
			authed, c.NumIOQueues(), early, strings.Join(mism, "\n"))
	}
}

// BenchmarkConnectAuth measures Connect (admin queue and two I/O queues,
// each authenticated) against target.SetHostAuth per DH group.
func BenchmarkConnectAuth(b *testing.B) {
	key, err := auth.NewKey(auth.HashSHA256, bytes.Repeat([]byte{5}, 32))
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []struct {
		name string
		ha   *target.HostAuth
	}{
		{"none", nil},
		{"null", &target.HostAuth{Key: key}},
		{"ffdhe2048", &target.HostAuth{Key: key, DHGroup: auth.FFDHE2048}},
		{"ffdhe8192", &target.HostAuth{Key: key, DHGroup: auth.FFDHE8192}},
	} {
		b.Run(g.name, func(b *testing.B) {
			f := newTgtFixture(b, 1<<20)
			if g.ha != nil {
				if err := f.tgt.SetHostAuth(testHostNQN, g.ha); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				c := f.connect(b, Options{HostKey: key, NrIOQueues: 2})
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
