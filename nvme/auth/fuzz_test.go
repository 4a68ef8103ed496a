package auth

import (
	"bytes"
	"testing"
)

// Seeds: one valid message of each kind, from a real exchange.
func seeds(t interface{ Helper() }) map[MessageID][][]byte {
	hk, _ := NewKey(HashSHA256, seq(32))
	ck, _ := NewKey(HashNone, seq(48))
	out := map[MessageID][][]byte{}
	for _, g := range []DHGroupID{DHGroupNull, FFDHE2048} {
		c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk, CtrlKey: ck, DHGroup: g})
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, CtrlKey: ck, TID: 1})
		n := h.Negotiate()
		out[MsgNegotiate] = append(out[MsgNegotiate], n)
		c.Send(n)
		ch, _ := c.Receive(MaxMessageLen)
		out[MsgChallenge] = append(out[MsgChallenge], ch)
		r, _ := h.Handle(ch)
		out[MsgReply] = append(out[MsgReply], r)
		c.Send(r)
		s1, _ := c.Receive(MaxMessageLen)
		out[MsgSuccess1] = append(out[MsgSuccess1], s1)
		s2, _ := h.Handle(s1)
		out[MsgSuccess2] = append(out[MsgSuccess2], s2)
	}
	out[MsgFailure1] = [][]byte{EncodeFailure(MsgFailure1, 1, ReasonFailed), EncodeFailure(MsgFailure2, 1, ReasonHashUnusable)}
	return out
}

func addSeeds(f *testing.F, ids ...MessageID) {
	s := seeds(f)
	for _, id := range ids {
		for _, b := range s[id] {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
}

func FuzzParseNegotiate(f *testing.F) {
	addSeeds(f, MsgNegotiate)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseNegotiate(b)
		if err != nil {
			return
		}
		hs, gs := n.HashIDs(), n.DHGroupIDs()
		again, err := EncodeNegotiate(n.TID(), n.SCC(), hs, gs)
		if err != nil {
			t.Fatal(err)
		}
		n2, err := ParseNegotiate(again)
		if err != nil || n2.TID() != n.TID() || len(n2.HashIDs()) != len(hs) || len(n2.DHGroupIDs()) != len(gs) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseChallenge(f *testing.F) {
	addSeeds(f, MsgChallenge)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseChallenge(b)
		if err != nil {
			return
		}
		again := EncodeChallenge(c.TID(), c.HashID(), c.DHGroupID(), c.SeqNum(), c.C(), c.DHValue())
		if !bytes.Equal(again[chapHeaderLen:], b[chapHeaderLen:len(again)]) || Challenge(again).SeqNum() != c.SeqNum() {
			t.Fatal("round trip")
		}
	})
}

func FuzzParseReply(f *testing.F) {
	addSeeds(f, MsgReply)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReply(b)
		if err != nil {
			return
		}
		var c2 []byte
		if r.CValid() {
			c2 = r.C()
		}
		again := EncodeReply(r.TID(), r.Response(), c2, r.SeqNum(), r.DHValue())
		r2, err := ParseReply(again)
		if err != nil || !bytes.Equal(r2.Response(), r.Response()) || !bytes.Equal(r2.DHValue(), r.DHValue()) || r2.CValid() != r.CValid() {
			t.Fatalf("round trip %v", err)
		}
	})
}

func FuzzParseSuccess1(f *testing.F) {
	addSeeds(f, MsgSuccess1)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSuccess1(b)
		if err != nil {
			return
		}
		if s.RValid() {
			_ = s.Response()
		}
		_ = s.TID()
	})
}

func FuzzParseSuccess2(f *testing.F) {
	addSeeds(f, MsgSuccess2)
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := ParseSuccess2(b); err == nil {
			_ = h.TID()
		}
	})
}

func FuzzParseFailure(f *testing.F) {
	addSeeds(f, MsgFailure1)
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := ParseFailure(b)
		if err != nil {
			return
		}
		// Reserved bytes are not kept: compare the fields.
		again, err := ParseFailure(EncodeFailure(fl.ID(), fl.TID(), fl.Reason()))
		if err != nil || again.ID() != fl.ID() || again.TID() != fl.TID() || again.Reason() != fl.Reason() {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add(testKey01)
	f.Add("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR")
	f.Add("DHHC-1:03::")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		back, err := ParseKey(k.Encode())
		if err != nil || !back.Equal(k) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzController feeds arbitrary Authentication Send payloads to a
// controller mid-transaction: no panic, and a failed transaction stays
// failed until a new AUTH_Negotiate.
func FuzzController(f *testing.F) {
	addSeeds(f, MsgNegotiate, MsgReply, MsgSuccess2, MsgFailure1)
	hk, _ := NewKey(HashSHA256, seq(32))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, HostKey: hk, DHGroup: FFDHE2048})
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, TID: 1})
		c.Send(h.Negotiate())
		if _, err := c.Receive(MaxMessageLen); err != nil {
			t.Fatal(err)
		}
		c.Send(b)
		if c.Outcome() == Succeeded {
			t.Fatal("arbitrary reply authenticated")
		}
		if _, err := c.Receive(MaxMessageLen); err != nil && c.Outcome() == Failed {
			t.Fatal(err)
		}
	})
}

// FuzzHost feeds arbitrary Authentication Receive payloads to a host
// awaiting a Challenge and then a Success1.
func FuzzHost(f *testing.F) {
	addSeeds(f, MsgChallenge, MsgSuccess1, MsgFailure1)
	hk, _ := NewKey(HashSHA256, seq(32))
	ck, _ := NewKey(HashNone, seq(48))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubNQN, Key: hk, CtrlKey: ck, TID: 1})
		h.Negotiate()
		_, _ = h.Handle(b)
		_, _ = h.Handle(b)
		if h.Done() {
			t.Fatal("arbitrary bytes authenticated the controller")
		}
	})
}
