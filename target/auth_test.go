package target

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

func authSQE(t fabrics.FCType, n int) [64]byte {
	cmd := fabrics.NewCommand(t)
	a := cmd.Auth()
	a.SetSECP(auth.SECP)
	a.SetSPSP0(auth.SPSP0)
	a.SetSPSP1(auth.SPSP1)
	a.SetTL(uint32(n))
	return [64]byte(cmd)
}

// authSend runs an Authentication Send; a transport error (the queue torn
// down) comes back in the result.
func (h *hq) authSend(msg []byte) result {
	h.t.Helper()
	return h.wait(h.submit(authSQE(fabrics.FCTypeAuthSend, len(msg)), msg, fabrics.DirHostToCtrl))
}

func (h *hq) authReceive(al int) result {
	h.t.Helper()
	return h.wait(h.submit(authSQE(fabrics.FCTypeAuthReceive, al), make([]byte, al), fabrics.DirCtrlToHost))
}

// authenticate runs a DH-HMAC-CHAP transaction as the Linux host does and
// returns the host's verdict.
func (h *hq) authenticate(cfg auth.HostConfig) error {
	h.t.Helper()
	cfg.HostNQN, cfg.SubsysNQN = testHostNQN, testSubNQN
	ah, err := auth.NewHost(cfg)
	if err != nil {
		return err
	}
	r := h.authSend(ah.Negotiate())
	if r.err != nil || r.status() != 0 {
		return errors.New("negotiate: " + fabrics.StatusString(r.status()))
	}
	for i := 0; i < 4 && !ah.Done(); i++ {
		r := h.authReceive(auth.MaxMessageLen)
		if r.err != nil || r.status() != 0 {
			return errors.New("receive: " + fabrics.StatusString(r.status()))
		}
		out, herr := ah.Handle(r.data)
		if out != nil {
			if r := h.authSend(out); r.err == nil && r.status() != 0 {
				return errors.New("send: " + fabrics.StatusString(r.status()))
			}
		}
		if herr != nil {
			return herr
		}
	}
	if !ah.Done() {
		return errors.New("no outcome")
	}
	return nil
}

func genKey(t *testing.T, h auth.HashID) *auth.Key {
	k, err := auth.GenerateKey(h, 0, testHostNQN, nil)
	must(t, err)
	return k
}

// syncBuffer collects logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLoggedFixture is newFixture with target options and the target's
// logs captured (Info and above).
func newLoggedFixture(t *testing.T, opts Options) (*fixture, *syncBuffer) {
	t.Helper()
	b := &syncBuffer{}
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Info})
	return newFixtureWith(t, opts), b
}

func TestAuthAdminAndIOQueues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hash  auth.HashID
		group auth.DHGroupID
		bidi  bool
	}{
		{"sha256-null", auth.HashSHA256, auth.DHGroupNull, false},
		{"sha384-ffdhe2048-bidi", auth.HashSHA384, auth.FFDHE2048, true},
		{"sha512-ffdhe4096-bidi", auth.HashSHA512, auth.FFDHE4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			hk := genKey(t, tc.hash)
			var ck *auth.Key
			if tc.bidi {
				ck = genKey(t, auth.HashNone)
			}
			must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: hk, CtrlKey: ck, Hash: tc.hash, DHGroup: tc.group}))
			hcfg := auth.HostConfig{Key: hk, CtrlKey: ck}

			a := f.dial(0, 31)
			r := a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
			expect(t, r, 0, "admin Connect")
			if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 2 {
				t.Fatalf("admin Connect DW0 %#x: AUTHREQ.ATR not set", r.cqe.DW0())
			}
			a.cntlid = fabrics.ConnectResultCntlID(r.cqe.DW0())
			for what, res := range map[string]result{
				"Identify":     a.identify(nvme.CNSController, 0, 0),
				"Property Get": func() result { _, r := a.propGet(fabrics.PropCAP, 8); return r }(),
			} {
				expect(t, res, fabrics.StatusAuthenticationRequired, what+" before authentication")
				if !res.cqe.DNR() {
					t.Errorf("%s: DNR not set", what)
				}
			}
			must(t, a.authenticate(hcfg))
			a.enable()
			expect(t, a.identify(nvme.CNSController, 0, 0), 0, "Identify after authentication")
			expect(t, a.setFeature(nvme.FeatNumberOfQueues, nvme.MakeNumQueues(2, 2)), 0, "Number of Queues")

			io := f.dial(1, 16)
			r = io.connectRaw(16, 0, 0, testSubNQN, testHostNQN, a.cntlid)
			expect(t, r, 0, "I/O Connect")
			if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 2 {
				t.Fatalf("I/O Connect DW0 %#x: AUTHREQ.ATR not set", r.cqe.DW0())
			}
			expect(t, io.read(1, 0, 8), fabrics.StatusAuthenticationRequired, "Read before authentication")
			must(t, io.authenticate(hcfg))
			expect(t, io.read(1, 0, 8), 0, "Read after authentication")

			// Re-authentication on the admin queue, with a new key the
			// reload put in place: applies to the new transaction.
			nk := genKey(t, tc.hash)
			must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: nk, CtrlKey: ck, Hash: tc.hash, DHGroup: tc.group}))
			must(t, a.authenticate(auth.HostConfig{Key: nk, CtrlKey: ck, TID: 1}))
			expect(t, a.identify(nvme.CNSController, 0, 0), 0, "Identify after re-authentication")
		})
	}
}

func TestAuthFailures(t *testing.T) {
	hk := genKey(t, auth.HashSHA256)
	ck := genKey(t, auth.HashSHA256)
	other := genKey(t, auth.HashSHA256)
	for _, tc := range []struct {
		name   string
		target *HostAuth
		host   auth.HostConfig
		reason auth.Reason
		remote bool   // the host learns it from Failure1
		log    string // in the target's warning ("|" separates several)
	}{
		{name: "wrong host key", target: &HostAuth{Key: other}, host: auth.HostConfig{Key: hk},
			reason: auth.ReasonFailed, remote: true, log: "host response mismatch"},
		{name: "wrong controller key", target: &HostAuth{Key: hk, CtrlKey: other, DHGroup: auth.FFDHE2048}, host: auth.HostConfig{Key: hk, CtrlKey: ck},
			reason: auth.ReasonFailed, log: "the host refused the controller|host sent AUTH_Failure2"},
		{name: "no controller key", target: &HostAuth{Key: hk}, host: auth.HostConfig{Key: hk, CtrlKey: ck},
			reason: auth.ReasonFailed, remote: true, log: "no controller key"},
		{name: "hash unusable", target: &HostAuth{Key: hk}, host: auth.HostConfig{Key: hk, Hashes: []auth.HashID{9}},
			reason: auth.ReasonHashUnusable, remote: true, log: "no usable hash"},
		{name: "group not offered", target: &HostAuth{Key: hk, DHGroup: auth.FFDHE3072}, host: auth.HostConfig{Key: hk, DHGroups: []auth.DHGroupID{auth.DHGroupNull}},
			reason: auth.ReasonDHGroupUnusable, remote: true, log: "DH group"},
		{name: "no key for host", target: nil, host: auth.HostConfig{Key: hk},
			reason: auth.ReasonFailed, remote: true, log: "no DH-HMAC-CHAP key configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, logs := newLoggedFixture(t, Options{})
			must(t, f.tgt.SetHostAuth(testHostNQN, tc.target))
			a := f.dial(0, 31)
			r := a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
			expect(t, r, 0, "admin Connect")
			err := a.authenticate(tc.host)
			var ae *auth.Error
			if !errors.As(err, &ae) || ae.Reason != tc.reason || ae.Remote != tc.remote {
				t.Fatalf("host: %v, want %v (remote %v)", err, tc.reason, tc.remote)
			}
			waitClosed(t, a, 2*time.Second)
			out := logs.String()
			if !strings.Contains(out, "authentication failed") {
				t.Errorf("target log lacks \"authentication failed\":\n%s", out)
			}
			for _, want := range strings.Split(tc.log, "|") {
				if !strings.Contains(out, want) {
					t.Errorf("target log lacks the reason %q:\n%s", want, out)
				}
			}
			for _, k := range []*auth.Key{hk, ck, other} {
				enc := k.Encode()
				if strings.Contains(out, enc[10:30]) {
					t.Errorf("target log shows a key:\n%s", out)
				}
			}
		})
	}
}

func TestAuthCommandChecks(t *testing.T) {
	f := newFixture(t)
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: genKey(t, auth.HashSHA256)}))
	a := f.dial(0, 31)
	expect(t, a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect")
	neg, _ := auth.EncodeNegotiate(1, 0, auth.Hashes, auth.DHGroups)
	for _, tc := range []struct {
		name string
		mod  func(c fabrics.AuthCommand)
		data []byte
		want nvme.Status
	}{
		{"SECP", func(c fabrics.AuthCommand) { c.SetSECP(0xea) }, neg, nvme.StatusInvalidField},
		{"SPSP0", func(c fabrics.AuthCommand) { c.SetSPSP0(0) }, neg, nvme.StatusInvalidField},
		{"SPSP1", func(c fabrics.AuthCommand) { c.SetSPSP1(2) }, neg, nvme.StatusInvalidField},
		{"TL 0", func(c fabrics.AuthCommand) { c.SetTL(0) }, neg, nvme.StatusInvalidField},
		{"TL differs from data", func(c fabrics.AuthCommand) { c.SetTL(16) }, neg, nvme.StatusDataSGLLengthInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sqe := authSQE(fabrics.FCTypeAuthSend, len(tc.data))
			tc.mod(fabrics.AuthCommand(sqe[:]))
			r := a.run(sqe, tc.data, fabrics.DirHostToCtrl)
			expect(t, r, tc.want, tc.name)
			if !r.cqe.DNR() {
				t.Error("DNR not set")
			}
		})
	}
	// A receive too short for the Challenge fails the command, not the
	// transaction.
	expect(t, a.authSend(neg), 0, "negotiate")
	expect(t, a.authReceive(8), nvme.StatusInvalidField, "Receive with AL 8")
	r := a.authReceive(auth.MaxMessageLen)
	expect(t, r, 0, "Receive")
	if _, err := auth.ParseChallenge(r.data); err != nil {
		t.Fatalf("challenge: %v", err)
	}
}

func TestAuthTimeout(t *testing.T) {
	f, logs := newLoggedFixture(t, Options{AuthTimeout: 200 * time.Millisecond})
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: genKey(t, auth.HashSHA256)}))
	a := f.dial(0, 31)
	start := time.Now()
	expect(t, a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect")
	// Commands other than authentication do not hold the queue.
	expect(t, a.identify(nvme.CNSController, 0, 0), fabrics.StatusAuthenticationRequired, "Identify")
	waitClosed(t, a, 3*time.Second)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("refused after %v, before the timeout", d)
	}
	if !strings.Contains(logs.String(), "authentication timed out") {
		t.Errorf("no timeout warning:\n%s", logs.String())
	}
}

// A host without a key configured connects as before: no AUTHREQ.
func TestAuthNotRequired(t *testing.T) {
	f := newFixture(t)
	must(t, f.tgt.SetHostAuth(otherHost, &HostAuth{Key: genKey(t, auth.HashSHA256)}))
	a := f.dial(0, 31)
	r := a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect")
	if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 0 {
		t.Fatalf("AUTHREQ set for a host without a key: %#x", r.cqe.DW0())
	}
	// The discovery controller never authenticates.
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: genKey(t, auth.HashSHA256)}))
	d := f.dial(0, 31)
	r = d.connectRaw(31, 0, 0, fabrics.DiscoveryNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "discovery Connect")
	if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 0 {
		t.Fatalf("AUTHREQ set on discovery: %#x", r.cqe.DW0())
	}
	if err := f.tgt.SetHostAuth(testHostNQN, &HostAuth{CtrlKey: genKey(t, auth.HashSHA256)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("controller key without host key: %v", err)
	}
}

// ReplaceHostAuth (a reload's host keys) reaches the target: a change of
// key applies to the next authentication, re-authentication of a
// controller connected before included.
func TestReplaceHostAuth(t *testing.T) {
	k1, k2 := genKey(t, auth.HashSHA256), genKey(t, auth.HashSHA256)
	f := newFixture(t)
	tgt := f.tgt
	tgt.ReplaceHostAuth(map[string]HostAuth{testHostNQN: {Key: k1, Hash: auth.HashSHA256, DHGroup: auth.FFDHE2048}})

	a := f.dial(0, 31)
	r := a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect")
	if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 2 {
		t.Fatalf("AUTHREQ not set: %#x", r.cqe.DW0())
	}
	must(t, a.authenticate(auth.HostConfig{Key: k1}))

	tgt.ReplaceHostAuth(map[string]HostAuth{testHostNQN: {Key: k2, Hash: auth.HashSHA256, DHGroup: auth.FFDHE2048}})
	// The old key no longer authenticates; the new one does.
	b := f.dial(0, 31)
	expect(t, b.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect")
	var ae *auth.Error
	if err := b.authenticate(auth.HostConfig{Key: k1}); !errors.As(err, &ae) || ae.Reason != auth.ReasonFailed {
		t.Fatalf("old key after reload: %v", err)
	}
	c := f.dial(0, 31)
	expect(t, c.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect")
	must(t, c.authenticate(auth.HostConfig{Key: k2}))
	// Re-authentication of the controller connected before the reload
	// uses the new key too.
	must(t, a.authenticate(auth.HostConfig{Key: k2, TID: 1}))

	// Replaced by none: the host no longer has to authenticate.
	tgt.ReplaceHostAuth(nil)
	d := f.dial(0, 31)
	r = d.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect without keys")
	if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 0 {
		t.Fatalf("AUTHREQ set with no key: %#x", r.cqe.DW0())
	}
}

// A host without a key gives up when the Connect asks for authentication
// (Linux: "no key"); the target says why the controller went away.
func TestAuthHostWithoutKey(t *testing.T) {
	f, logs := newLoggedFixture(t, Options{})
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: genKey(t, auth.HashSHA256)}))
	a := f.dial(0, 31)
	r := a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect")
	a.q.Close()
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(logs.String(), "controller removed") {
		if time.Now().After(deadline) {
			t.Fatalf("controller not removed:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := logs.String(); !strings.Contains(out, "authentication failed: queue closed before the host authenticated") || !strings.Contains(out, testHostNQN) {
		t.Errorf("no reason logged:\n%s", out)
	}
}
