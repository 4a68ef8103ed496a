package auth

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func mustKey(t testing.TB, h HashID, n int) *Key {
	t.Helper()
	k, err := GenerateKey(h, n, testHostNQN, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// run drives h against c as a transport would, bounded in rounds. It
// returns the host's error.
func run(t testing.TB, h *Host, c *Controller) error {
	t.Helper()
	c.Send(h.Negotiate())
	for i := 0; i < 4 && !h.Done(); i++ {
		in, err := c.Receive(MaxMessageLen)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		out, herr := h.Handle(in)
		if out != nil {
			c.Send(out)
		}
		if herr != nil {
			return herr
		}
	}
	if !h.Done() {
		t.Fatal("no outcome after 4 rounds")
	}
	return nil
}

func TestHostControllerMatrix(t *testing.T) {
	for _, hash := range Hashes {
		for _, group := range DHGroups {
			for _, bidi := range []bool{false, true} {
				name := hash.String() + "/" + group.String()
				if bidi {
					name += "/bidi"
				}
				t.Run(name, func(t *testing.T) {
					hk := mustKey(t, hash, 0)
					var ck *Key
					if bidi {
						ck = mustKey(t, HashNone, 64)
					}
					c, err := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk, CtrlKey: ck, Hash: hash, DHGroup: group})
					if err != nil {
						t.Fatal(err)
					}
					h, err := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, CtrlKey: ck, TID: 7})
					if err != nil {
						t.Fatal(err)
					}
					if err := run(t, h, c); err != nil {
						t.Fatalf("host: %v (controller: %v)", err, c.Err())
					}
					if c.Outcome() != Succeeded || c.Err() != nil {
						t.Fatalf("controller %v: %v", c.Outcome(), c.Err())
					}
					if c.Bidirectional() != bidi {
						t.Errorf("Bidirectional() = %v after success, want %v", c.Bidirectional(), bidi)
					}
					if c.Hash() != hash || c.DHGroup() != group || h.Hash() != hash || h.DHGroup() != group {
						t.Errorf("negotiated %v/%v, host saw %v/%v", c.Hash(), c.DHGroup(), h.Hash(), h.DHGroup())
					}
					// Re-authentication on the same queue (new transaction).
					h2, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, CtrlKey: ck, TID: 8})
					if err := run(t, h2, c); err != nil || c.Outcome() != Succeeded {
						t.Fatalf("re-authentication: %v / %v %v", err, c.Outcome(), c.Err())
					}
				})
			}
		}
	}
}

func TestHostControllerFailures(t *testing.T) {
	hk := mustKey(t, HashSHA256, 0)
	ck := mustKey(t, HashSHA384, 0)
	other := mustKey(t, HashSHA256, 0)
	for _, tc := range []struct {
		name       string
		ctrl       ControllerConfig
		host       HostConfig
		ctrlReason Reason
		hostReason Reason
		remote     bool // the host learns it from a Failure1
	}{
		{name: "wrong host key", ctrl: ControllerConfig{HostKey: other}, host: HostConfig{Key: hk},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed, remote: true},
		{name: "wrong host key ffdhe", ctrl: ControllerConfig{HostKey: other, DHGroup: FFDHE2048}, host: HostConfig{Key: hk},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed, remote: true},
		{name: "no host key on target", ctrl: ControllerConfig{}, host: HostConfig{Key: hk},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed, remote: true},
		{name: "wrong ctrl key", ctrl: ControllerConfig{HostKey: hk, CtrlKey: other}, host: HostConfig{Key: hk, CtrlKey: ck},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed},
		{name: "wrong ctrl key ffdhe", ctrl: ControllerConfig{HostKey: hk, CtrlKey: other, DHGroup: FFDHE3072}, host: HostConfig{Key: hk, CtrlKey: ck},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed},
		{name: "no ctrl key on target", ctrl: ControllerConfig{HostKey: hk}, host: HostConfig{Key: hk, CtrlKey: ck},
			ctrlReason: ReasonFailed, hostReason: ReasonFailed, remote: true},
		{name: "no common hash", ctrl: ControllerConfig{HostKey: hk}, host: HostConfig{Key: hk, Hashes: []HashID{7, 9}},
			ctrlReason: ReasonHashUnusable, hostReason: ReasonHashUnusable, remote: true},
		{name: "group not offered", ctrl: ControllerConfig{HostKey: hk, DHGroup: FFDHE4096}, host: HostConfig{Key: hk, DHGroups: []DHGroupID{DHGroupNull, FFDHE2048}},
			ctrlReason: ReasonDHGroupUnusable, hostReason: ReasonDHGroupUnusable, remote: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ctrl.HostNQN, tc.ctrl.SubsysNQN = testHostNQN, testSubNQN
			tc.host.HostNQN, tc.host.SubsysNQN = testHostNQN, testSubNQN
			c, err := NewController(tc.ctrl)
			if err != nil {
				t.Fatal(err)
			}
			h, err := NewHost(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			herr := run(t, h, c)
			var he *Error
			if !errors.As(herr, &he) {
				t.Fatalf("host error %v", herr)
			}
			if he.Reason != tc.hostReason || he.Remote != tc.remote {
				t.Errorf("host: %v (remote %v), want %v remote %v", he, he.Remote, tc.hostReason, tc.remote)
			}
			var ce *Error
			if c.Outcome() != Failed || !errors.As(c.Err(), &ce) || ce.Reason != tc.ctrlReason {
				t.Errorf("controller %v: %v, want %v", c.Outcome(), c.Err(), tc.ctrlReason)
			}
		})
	}
}

// A preferred hash the host does not offer falls back to the host's first
// usable one, as the kernel target does.
func TestHashFallback(t *testing.T) {
	hk := mustKey(t, HashNone, 32)
	c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk, Hash: HashSHA512})
	h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, Hashes: []HashID{9, HashSHA384}})
	if err := run(t, h, c); err != nil || c.Hash() != HashSHA384 {
		t.Fatalf("%v, hash %v", err, c.Hash())
	}
}

func TestControllerProtocolErrors(t *testing.T) {
	hk := mustKey(t, HashSHA256, 0)
	newPair := func() (*Controller, *Host) {
		c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk})
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, TID: 3})
		return c, h
	}
	t.Run("reply before negotiate", func(t *testing.T) {
		c, _ := newPair()
		c.Send(EncodeReply(3, make([]byte, 32), nil, 0, nil))
		if c.Outcome() != Failed {
			t.Fatal(c.Outcome())
		}
	})
	t.Run("receive before negotiate", func(t *testing.T) {
		c, _ := newPair()
		b, err := c.Receive(MaxMessageLen)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := ParseFailure(b); err != nil || f.ID() != MsgFailure1 || c.Outcome() != Failed {
			t.Fatalf("%v %v", err, c.Outcome())
		}
	})
	t.Run("wrong transaction ID", func(t *testing.T) {
		c, h := newPair()
		c.Send(h.Negotiate())
		ch, _ := c.Receive(MaxMessageLen)
		out, err := h.Handle(ch)
		if err != nil {
			t.Fatal(err)
		}
		out[4] ^= 1
		c.Send(out)
		b, _ := c.Receive(MaxMessageLen)
		f, err := ParseFailure(b)
		if err != nil || f.Reason() != ReasonIncorrectPayload || c.Outcome() != Failed {
			t.Fatalf("%v %v %v", err, f, c.Outcome())
		}
	})
	t.Run("failure2 from host", func(t *testing.T) {
		c, h := newPair()
		c.Send(h.Negotiate())
		c.Receive(MaxMessageLen)
		c.Send(EncodeFailure(MsgFailure2, 3, ReasonHashUnusable))
		var e *Error
		if c.Outcome() != Failed || !errors.As(c.Err(), &e) || !e.Remote || e.Reason != ReasonHashUnusable {
			t.Fatalf("%v %v", c.Outcome(), c.Err())
		}
	})
	t.Run("small allocation length", func(t *testing.T) {
		c, h := newPair()
		c.Send(h.Negotiate())
		if _, err := c.Receive(20); !errors.Is(err, ErrAllocationLength) {
			t.Fatalf("err %v", err)
		}
		if b, err := c.Receive(MaxMessageLen); err != nil || MessageID(b[1]) != MsgChallenge {
			t.Fatalf("after a short AL: %v", err)
		}
	})
	t.Run("secure channel", func(t *testing.T) {
		c, h := newPair()
		n := h.Negotiate()
		n[offSCC] = 1
		c.Send(n)
		b, _ := c.Receive(MaxMessageLen)
		if f, err := ParseFailure(b); err != nil || f.Reason() != ReasonConcatMismatch {
			t.Fatalf("%v", err)
		}
	})
}

// TestResponseLayout pins the bytes hashed into R1, R2 and the augmented
// challenge (expected values computed with Python's hmac/hashlib from the
// kernel's layout).
func TestResponseLayout(t *testing.T) {
	key := seq(32)
	c := make([]byte, 32)
	for i := range c {
		c[i] = byte(0x40 + i)
	}
	if got := hex.EncodeToString(hostResponse(HashSHA256, key, c, 0x01020304, 0x0506, 0, testHostNQN, testSubNQN)); got != "a3d008aa72f04404ccaa7dca97bd63f20fad5c56b175ef09c181d647666c7904" {
		t.Errorf("R1 %s", got)
	}
	if got := hex.EncodeToString(ctrlResponse(HashSHA256, key, c, 0x0a0b0c0d, 0x0506, testHostNQN, testSubNQN)); got != "2dab9a8a4855513a8d923561fab29adc0719bcc0beb592c7177d7a508c88dfee" {
		t.Errorf("R2 %s", got)
	}
	sk := make([]byte, 256)
	for i := range sk {
		sk[i] = 7
	}
	if got := hex.EncodeToString(augment(HashSHA256, sk, c)); got != "d2c1c71e7fa3afedaef0e99a481c457502e3c3ccbc6fcb9585583d7a4b57c3eb" {
		t.Errorf("augmented %s", got)
	}
}

// BenchmarkTransaction measures one bidirectional transaction, both sides,
// per DH group (SHA-512).
func BenchmarkTransaction(b *testing.B) {
	hk, _ := NewKey(HashSHA512, seq(64))
	ck, _ := NewKey(HashNone, seq(64))
	for _, g := range DHGroups {
		b.Run(g.String(), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk, CtrlKey: ck, Hash: HashSHA512, DHGroup: g})
				h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, CtrlKey: ck})
				if err := run(b, h, c); err != nil || c.Outcome() != Succeeded {
					b.Fatal(err, c.Err())
				}
			}
		})
	}
}

// TestHostFailureNamesState: a Failure1 in place of Success1 (the
// controller refused the host's response) is reported as such, not as
// arriving in place of the Challenge.
func TestHostFailureNamesState(t *testing.T) {
	hk := mustKey(t, HashNone, 32)
	c, err := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: mustKey(t, HashNone, 32)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, TID: 3})
	if err != nil {
		t.Fatal(err)
	}
	err = run(t, h, c)
	var e *Error
	if !errors.As(err, &e) || !e.Remote {
		t.Fatalf("wrong key: %v, want a remote *Error", err)
	}
	if want := MsgSuccess1.String(); !strings.Contains(e.Msg, want) {
		t.Errorf("failure %q does not say it came in place of %s", e.Msg, want)
	}
}
