package auth

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"slices"
)

// HostConfig is what the host side needs to authenticate one queue.
type HostConfig struct {
	HostNQN   string
	SubsysNQN string
	// Key is the host's secret (nvme connect --dhchap-secret); required.
	Key *Key
	// CtrlKey, when set, asks the controller to authenticate itself
	// (--dhchap-ctrl-secret): bidirectional authentication.
	CtrlKey *Key
	// Hashes and DHGroups are offered in AUTH_Negotiate; nil means all, in
	// the kernel's order.
	Hashes   []HashID
	DHGroups []DHGroupID
	// TID is the transaction ID (the kernel counts per controller).
	TID uint16
	// Rand is the source of challenges and DH keys; nil means crypto/rand.
	Rand io.Reader
}

// Host is the host side of DH-HMAC-CHAP on one queue:
//
//	out := h.Negotiate()              // Authentication Send
//	for !h.Done() {
//		in := <Authentication Receive, AL MaxMessageLen>
//		out, err := h.Handle(in)
//		if out != nil { <Authentication Send out> }   // Reply, Success2 or Failure2
//		if err != nil { return err }                  // queue not authenticated
//	}
//
// Not safe for concurrent use.
type Host struct {
	cfg   HostConfig
	state MessageID // message awaited from the controller; 0 before Negotiate
	hash  HashID
	group DHGroupID
	sess  []byte
	c2    []byte
	s2    uint32
	done  bool
}

// ErrNoKey reports a host configuration without a key.
var ErrNoKey = errors.New("auth: no DH-HMAC-CHAP host key")

// NewHost checks the configuration.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.Key == nil {
		return nil, ErrNoKey
	}
	if cfg.Hashes == nil {
		cfg.Hashes = Hashes
	}
	if cfg.DHGroups == nil {
		cfg.DHGroups = DHGroups
	}
	if len(cfg.Hashes) > MaxIDsPerList || len(cfg.DHGroups) > MaxIDsPerList {
		return nil, fmt.Errorf("auth: more than %d hashes or DH groups", MaxIDsPerList)
	}
	cfg.Rand = randOrDefault(cfg.Rand)
	return &Host{cfg: cfg}, nil
}

// Negotiate starts (or restarts) the transaction and returns the
// AUTH_Negotiate to send.
func (h *Host) Negotiate() []byte {
	h.reset()
	b, _ := EncodeNegotiate(h.cfg.TID, 0, h.cfg.Hashes, h.cfg.DHGroups) // lengths checked in NewHost
	h.state = MsgChallenge
	return b
}

func (h *Host) reset() {
	h.state, h.hash, h.group, h.sess, h.c2, h.s2, h.done = 0, 0, 0, nil, nil, 0, false
}

// Done reports whether the queue is authenticated.
func (h *Host) Done() bool { return h.done }

// Hash returns the hash the controller chose.
func (h *Host) Hash() HashID { return h.hash }

// DHGroup returns the DH group the controller chose.
func (h *Host) DHGroup() DHGroupID { return h.group }

// Handle consumes an Authentication Receive payload. It returns the message
// to send next (nil: none) and, when authentication failed, an *Error; a
// failing Handle may still return an AUTH_Failure2 to send.
func (h *Host) Handle(msg []byte) ([]byte, error) {
	if h.state == 0 || h.done {
		return nil, failf(ReasonIncorrectProtocol, "no authentication transaction in progress")
	}
	hd, err := ParseHeader(msg)
	if err != nil {
		return h.failure2(failf(ReasonIncorrectPayload, "%v", err))
	}
	want := h.expect()
	if hd.Type() == TypeCommon && hd.ID() == MsgFailure1 {
		f, _ := ParseFailure(msg)
		h.state = 0
		return nil, &Error{Reason: f.Reason(), Remote: true, Msg: fmt.Sprintf("controller sent AUTH_Failure1 awaiting %v", want)}
	}
	if hd.Type() != TypeDHCHAP || hd.ID() != h.state {
		// The kernel host gives up without a Failure2 here.
		h.state = 0
		return nil, failf(ReasonIncorrectProtocol, "got type 0x%02x %v, expected %v", uint8(hd.Type()), hd.ID(), want)
	}
	if hd.TID() != h.cfg.TID {
		h.state = 0
		return nil, failf(ReasonIncorrectProtocol, "transaction ID %d, expected %d", hd.TID(), h.cfg.TID)
	}
	switch h.state {
	case MsgChallenge:
		return h.challenge(msg)
	default:
		return h.success1(msg)
	}
}

func (h *Host) expect() MessageID {
	if h.state == 0 {
		return MsgChallenge
	}
	return h.state
}

func (h *Host) failure2(e *Error) ([]byte, error) {
	h.state = 0
	h.sess, h.c2 = nil, nil
	return EncodeFailure(MsgFailure2, h.cfg.TID, e.Reason), e
}

func (h *Host) challenge(msg []byte) ([]byte, error) {
	c, err := ParseChallenge(msg)
	if err != nil {
		return h.failure2(failf(ReasonIncorrectPayload, "%v", err))
	}
	if !c.HashID().Valid() || !slices.Contains(h.cfg.Hashes, c.HashID()) {
		return h.failure2(failf(ReasonHashUnusable, "controller chose %v, not offered", c.HashID()))
	}
	if c.HL() != c.HashID().Size() {
		return h.failure2(failf(ReasonHashUnusable, "HL %d for %v", c.HL(), c.HashID()))
	}
	if !c.DHGroupID().Valid() || !slices.Contains(h.cfg.DHGroups, c.DHGroupID()) {
		return h.failure2(failf(ReasonDHGroupUnusable, "controller chose %v, not offered", c.DHGroupID()))
	}
	h.hash, h.group = c.HashID(), c.DHGroupID()
	var dhv []byte
	if h.group == DHGroupNull {
		if c.DHVLen() != 0 {
			return h.failure2(failf(ReasonIncorrectPayload, "DH value with the null group"))
		}
	} else {
		if c.DHVLen() == 0 {
			return h.failure2(failf(ReasonDHGroupUnusable, "empty DH value for %v", h.group))
		}
		k, err := newDHKey(h.group, h.cfg.Rand)
		if err != nil {
			return h.failure2(failf(ReasonFailed, "%v", err))
		}
		if h.sess, err = k.shared(c.DHValue()); err != nil {
			return h.failure2(failf(ReasonIncorrectPayload, "controller DH value: %v", err))
		}
		dhv = k.public
	}
	resp := hostResponse(h.hash, h.cfg.Key.Transform(h.cfg.HostNQN), augment(h.hash, h.sess, c.C()), c.SeqNum(), h.cfg.TID, 0, h.cfg.HostNQN, h.cfg.SubsysNQN)
	if h.cfg.CtrlKey != nil {
		if h.c2, err = nonce(h.cfg.Rand, h.hash.Size()); err != nil {
			return h.failure2(failf(ReasonFailed, "%v", err))
		}
		if h.s2, err = seqNum(h.cfg.Rand); err != nil {
			return h.failure2(failf(ReasonFailed, "%v", err))
		}
	}
	h.state = MsgSuccess1
	return EncodeReply(h.cfg.TID, resp, h.c2, h.s2, dhv), nil
}

func (h *Host) success1(msg []byte) ([]byte, error) {
	s, err := ParseSuccess1(msg)
	if err != nil {
		return h.failure2(failf(ReasonIncorrectPayload, "%v", err))
	}
	if s.HL() != h.hash.Size() {
		return h.failure2(failf(ReasonHashUnusable, "Success1 HL %d, %v needs %d", s.HL(), h.hash, h.hash.Size()))
	}
	if h.cfg.CtrlKey == nil {
		h.done, h.state, h.sess = true, 0, nil
		return nil, nil
	}
	if !s.RValid() {
		return h.failure2(failf(ReasonFailed, "controller did not answer the bidirectional challenge"))
	}
	want := ctrlResponse(h.hash, h.cfg.CtrlKey.Transform(h.cfg.SubsysNQN), augment(h.hash, h.sess, h.c2), h.s2, h.cfg.TID, h.cfg.HostNQN, h.cfg.SubsysNQN)
	if !hmac.Equal(want, s.Response()) {
		return h.failure2(failf(ReasonFailed, "controller response mismatch (wrong controller key?)"))
	}
	h.done, h.state, h.sess, h.c2 = true, 0, nil, nil
	return EncodeSuccess2(h.cfg.TID), nil
}
