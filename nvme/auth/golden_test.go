package auth

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// kernelTranscript is testdata/auth/kernel-6.12-dhchap-null.json: what a
// Linux 6.12 host and a Linux 6.12 nvmet target said to each other, with
// the keys nvme-cli generated for them.
type kernelTranscript struct {
	SubsysNQN string `json:"subsys_nqn"`
	Hosts     []struct {
		HostNQN  string `json:"host_nqn"`
		Key      string `json:"dhchap_key"`
		CtrlKey  string `json:"dhchap_ctrl_key"`
		Hash     string `json:"hash"`
		DHGroup  string `json:"dhgroup"`
		Messages []struct {
			Dir string `json:"dir"`
			Msg string `json:"msg"`
		} `json:"messages"`
	} `json:"hosts"`
}

// fixedRand hands out the given bytes, then fails: it stands in for the
// random source so that our side draws the nonces the kernel drew.
type fixedRand struct{ b []byte }

func (r *fixedRand) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, fmt.Errorf("fixedRand exhausted")
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// TestKernelTranscript replays real Linux exchanges (null DH group,
// hmac(sha256) with a transformed key and hmac(sha512) with a controller
// key; admin and I/O queue each) through our Host and our Controller:
// given the kernel's nonces, each must produce byte for byte what the
// kernel peer sent, and accept what the kernel sent.
func TestKernelTranscript(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "auth", "kernel-6.12-dhchap-null.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tr kernelTranscript
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	for _, h := range tr.Hosts {
		key, err := ParseKey(h.Key)
		if err != nil {
			t.Fatalf("%s: key: %v", h.HostNQN, err)
		}
		var ctrlKey *Key
		if h.CtrlKey != "" {
			if ctrlKey, err = ParseKey(h.CtrlKey); err != nil {
				t.Fatalf("%s: ctrl key: %v", h.HostNQN, err)
			}
		}
		hash, err := ParseHash(h.Hash)
		if err != nil {
			t.Fatal(err)
		}
		group, err := ParseDHGroup(h.DHGroup)
		if err != nil {
			t.Fatal(err)
		}
		per := 4
		if ctrlKey != nil {
			per = 5
		}
		if len(h.Messages)%per != 0 {
			t.Fatalf("%s: %d messages, not a multiple of %d", h.HostNQN, len(h.Messages), per)
		}
		for q := 0; q < len(h.Messages)/per; q++ {
			msgs := make([][]byte, per)
			for i := range msgs {
				m := h.Messages[q*per+i]
				if msgs[i], err = hex.DecodeString(m.Msg); err != nil {
					t.Fatal(err)
				}
			}
			name := fmt.Sprintf("%s/%s/queue%d", h.Hash, h.DHGroup, q)
			t.Run(name+"/host", func(t *testing.T) {
				neg, err := ParseNegotiate(msgs[0])
				if err != nil {
					t.Fatal(err)
				}
				rep, err := ParseReply(msgs[2])
				if err != nil {
					t.Fatal(err)
				}
				var rnd []byte
				if ctrlKey != nil { // the kernel host drew C2 and S2
					rnd = append(append(rnd, rep.C()...), le32(rep.SeqNum())...)
				}
				host, err := NewHost(HostConfig{HostNQN: h.HostNQN, SubsysNQN: tr.SubsysNQN, Key: key, CtrlKey: ctrlKey,
					TID: neg.TID(), Rand: &fixedRand{rnd}})
				if err != nil {
					t.Fatal(err)
				}
				if got := host.Negotiate(); !bytes.Equal(got, msgs[0]) {
					t.Errorf("AUTH_Negotiate\n got % x\nwant % x", got, msgs[0])
				}
				out, err := host.Handle(msgs[1])
				if err != nil {
					t.Fatalf("kernel's Challenge: %v", err)
				}
				want := msgs[2]
				if ctrlKey == nil {
					// Without a controller key Linux still fills SEQNUM
					// (its per-host counter) and clears CVALID; we send 0.
					want = bytes.Clone(want)
					copy(want[12:16], []byte{0, 0, 0, 0})
				}
				if !bytes.Equal(out, want) {
					t.Errorf("Reply\n got % x\nwant % x", out, want)
				}
				out, err = host.Handle(msgs[3])
				if err != nil {
					t.Fatalf("kernel's Success1: %v", err)
				}
				if ctrlKey != nil && !bytes.Equal(out, msgs[4]) {
					t.Errorf("Success2\n got % x\nwant % x", out, msgs[4])
				}
				if ctrlKey == nil && out != nil {
					t.Errorf("unidirectional: sent % x after Success1", out)
				}
				if !host.Done() {
					t.Error("host not done")
				}
			})
			t.Run(name+"/controller", func(t *testing.T) {
				ch, err := ParseChallenge(msgs[1])
				if err != nil {
					t.Fatal(err)
				}
				ctrl, err := NewController(ControllerConfig{HostNQN: h.HostNQN, SubsysNQN: tr.SubsysNQN,
					HostKey: key, CtrlKey: ctrlKey, Hash: hash, DHGroup: group,
					Rand: &fixedRand{append(append([]byte(nil), ch.C()...), le32(ch.SeqNum())...)}})
				if err != nil {
					t.Fatal(err)
				}
				ctrl.Send(msgs[0])
				got, err := ctrl.Receive(MaxMessageLen)
				if err != nil {
					t.Fatalf("Challenge: %v", err)
				}
				if !bytes.Equal(got, msgs[1][:len(got)]) || !allZero(msgs[1][len(got):]) {
					t.Errorf("Challenge\n got % x\nwant % x", got, bytes.TrimRight(msgs[1], "\x00"))
				}
				ctrl.Send(msgs[2])
				if ctrl.Outcome() == Failed {
					t.Fatalf("kernel's Reply refused: %v", ctrl.Err())
				}
				got, err = ctrl.Receive(MaxMessageLen)
				if err != nil {
					t.Fatalf("Success1: %v", err)
				}
				if !bytes.Equal(got, msgs[3][:len(got)]) || !allZero(msgs[3][len(got):]) {
					t.Errorf("Success1\n got % x\nwant % x", got, bytes.TrimRight(msgs[3], "\x00"))
				}
				if ctrlKey != nil {
					ctrl.Send(msgs[4])
				}
				if ctrl.Outcome() != Succeeded {
					t.Errorf("outcome %v (%v), want success", ctrl.Outcome(), ctrl.Err())
				}
			})
		}
	}
}

func allZero(b []byte) bool { return len(bytes.TrimLeft(b, "\x00")) == 0 }
