package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
)

// Error is why an authentication transaction failed. Msg is for logs and
// never contains key material.
type Error struct {
	// Reason is the reason code explanation sent or received.
	Reason Reason
	// Remote is true when the peer reported the failure (a Failure1 seen by
	// the host, a Failure2 seen by the controller).
	Remote bool
	// Msg says what went wrong.
	Msg string
}

func (e *Error) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	return fmt.Sprintf("dhchap: %s (%s: %v)", e.Msg, who, e.Reason)
}

func failf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// augment returns the challenge C itself without DH, else the kernel's
// augmented challenge HMAC_H(H(g^xy mod p), C) (nvme_auth_augmented_challenge).
func augment(h HashID, sessKey, c []byte) []byte {
	if sessKey == nil {
		return c
	}
	d := h.New()
	d.Write(sessKey)
	m := hmac.New(h.New, d.Sum(nil))
	m.Write(c)
	return m.Sum(nil)
}

// hostResponse computes R1 = HMAC(Kh', C1' || S1 || T_ID || SC_C ||
// "HostHost" || NQNh || 0x00 || NQNc), integers little endian
// (nvme_auth_dhchap_setup_host_response, nvmet_auth_host_hash).
func hostResponse(h HashID, key, c []byte, seq uint32, tid uint16, scc uint8, hostNQN, subsysNQN string) []byte {
	m := hmac.New(h.New, key)
	var b [7]byte
	binary.LittleEndian.PutUint32(b[0:], seq)
	binary.LittleEndian.PutUint16(b[4:], tid)
	b[6] = scc
	m.Write(c)
	m.Write(b[:])
	m.Write([]byte("HostHost"))
	m.Write([]byte(hostNQN))
	m.Write([]byte{0})
	m.Write([]byte(subsysNQN))
	return m.Sum(nil)
}

// ctrlResponse computes R2 = HMAC(Kc', C2' || S2 || T_ID || 0x00 ||
// "Controller" || NQNc || 0x00 || NQNh) (nvme_auth_dhchap_setup_ctrl_response,
// nvmet_auth_ctrl_hash). Kc' is the controller key transformed with the
// subsystem NQN.
func ctrlResponse(h HashID, key, c []byte, seq uint32, tid uint16, hostNQN, subsysNQN string) []byte {
	m := hmac.New(h.New, key)
	var b [7]byte
	binary.LittleEndian.PutUint32(b[0:], seq)
	binary.LittleEndian.PutUint16(b[4:], tid)
	m.Write(c)
	m.Write(b[:])
	m.Write([]byte("Controller"))
	m.Write([]byte(subsysNQN))
	m.Write([]byte{0})
	m.Write([]byte(hostNQN))
	return m.Sum(nil)
}

// nonce reads n random bytes.
func nonce(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("auth: random: %w", err)
	}
	return b, nil
}

// seqNum returns a random non-zero sequence number (0 means "no
// bidirectional authentication" in a Reply).
func seqNum(r io.Reader) (uint32, error) {
	for i := 0; i < 64; i++ {
		b, err := nonce(r, 4)
		if err != nil {
			return 0, err
		}
		if s := binary.LittleEndian.Uint32(b); s != 0 {
			return s, nil
		}
	}
	return 0, fmt.Errorf("auth: random source returns only zeros")
}

func randOrDefault(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}
