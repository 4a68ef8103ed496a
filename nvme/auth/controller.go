package auth

import (
	"crypto/hmac"
	"fmt"
	"io"
	"slices"
)

// Outcome is the state of an authentication transaction.
type Outcome int

// Outcomes.
const (
	// Pending: the transaction has not started or is in progress.
	Pending Outcome = iota
	// Succeeded: the host (and, bidirectionally, the controller) proved
	// its key.
	Succeeded
	// Failed: see Err; the target refuses the queue.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Pending:
		return "pending"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("outcome %d", int(o))
}

// ControllerConfig is what the target knows about the connecting host.
type ControllerConfig struct {
	HostNQN   string
	SubsysNQN string
	// HostKey is the host's secret (dhchap_key). Nil fails every
	// transaction with ReasonFailed, as the kernel does.
	HostKey *Key
	// CtrlKey is the controller's secret (dhchap_ctrl_key); nil refuses a
	// host asking for bidirectional authentication.
	CtrlKey *Key
	// Hash is the preferred hash (dhchap_hash); 0 means hmac(sha256). When
	// the host does not offer it, the first usable hash it offers is used,
	// as the kernel does.
	Hash HashID
	// DHGroup is the required DH group (dhchap_dhgroup); the host must offer
	// it.
	DHGroup DHGroupID
	// Rand is the source of challenges and DH keys; nil means crypto/rand.
	Rand io.Reader
}

// Controller is the target side of DH-HMAC-CHAP on one queue. Feed it each
// Authentication Send payload with Send and answer each Authentication
// Receive with Receive; after each call Outcome tells whether the queue is
// now authenticated or must be refused. An AUTH_Negotiate restarts the
// transaction at any time (re-authentication). Not safe for concurrent use.
type Controller struct {
	cfg ControllerConfig

	step  MessageID // the next message expected (Send) or produced (Receive)
	tid   uint16
	hash  HashID
	group DHGroupID
	dh    *dhKey
	sess  []byte
	c1    []byte
	s1    uint32
	c2    []byte
	bidi  bool // the host asked for bidirectional authentication (kept after clear)
	s2    uint32
	fail  *Error
	res   Outcome
}

// NewController checks the configuration and returns a controller waiting
// for AUTH_Negotiate.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Hash == 0 {
		cfg.Hash = HashSHA256
	}
	if !cfg.Hash.Valid() {
		return nil, fmt.Errorf("auth: controller hash %v invalid", cfg.Hash)
	}
	if !cfg.DHGroup.Valid() {
		return nil, fmt.Errorf("auth: controller DH group %v invalid", cfg.DHGroup)
	}
	cfg.Rand = randOrDefault(cfg.Rand)
	return &Controller{cfg: cfg, step: MsgNegotiate}, nil
}

// Outcome returns the transaction's state.
func (c *Controller) Outcome() Outcome { return c.res }

// Err returns why the transaction failed, or nil.
func (c *Controller) Err() error {
	if c.fail == nil {
		return nil
	}
	return c.fail
}

// Hash returns the negotiated hash (0 before negotiation).
func (c *Controller) Hash() HashID { return c.hash }

// DHGroup returns the negotiated DH group.
func (c *Controller) DHGroup() DHGroupID { return c.group }

// Bidirectional reports whether the host asked the controller to
// authenticate itself.
func (c *Controller) Bidirectional() bool { return c.bidi }

// failure1 ends the transaction; the next Receive returns AUTH_Failure1.
func (c *Controller) failure1(e *Error) {
	c.fail, c.step = e, MsgFailure1
}

// terminal ends the transaction without a Failure1 (the kernel's
// "FAILURE2" step: the controller is torn down at once).
func (c *Controller) terminal(e *Error) {
	c.fail, c.step, c.res = e, MsgFailure2, Failed
}

// Send consumes the payload of an Authentication Send.
func (c *Controller) Send(msg []byte) {
	h, err := ParseHeader(msg)
	if err != nil {
		c.terminal(failf(ReasonIncorrectPayload, "%v", err))
		return
	}
	if h.Type() == TypeCommon && h.ID() == MsgNegotiate {
		c.restart()
		c.negotiate(msg)
		return
	}
	if c.res != Pending {
		c.terminal(failf(ReasonIncorrectProtocol, "%v after the transaction ended", h.ID()))
		return
	}
	if h.Type() == TypeCommon && h.ID() == MsgFailure2 {
		f, err := ParseFailure(msg)
		if err != nil {
			c.terminal(failf(ReasonIncorrectPayload, "%v", err))
			return
		}
		c.terminal(&Error{Reason: f.Reason(), Remote: true, Msg: "host sent AUTH_Failure2"})
		return
	}
	if h.Type() != TypeDHCHAP || h.ID() != c.step {
		c.terminal(failf(ReasonIncorrectProtocol, "unexpected type 0x%02x %v, expected %v", uint8(h.Type()), h.ID(), c.step))
		return
	}
	if h.TID() != c.tid {
		c.failure1(failf(ReasonIncorrectPayload, "transaction ID %d, expected %d", h.TID(), c.tid))
		return
	}
	switch c.step {
	case MsgReply:
		c.reply(msg)
	case MsgSuccess2:
		if _, err := ParseSuccess2(msg); err != nil {
			c.terminal(failf(ReasonIncorrectPayload, "%v", err))
			return
		}
		c.step, c.res = MsgNegotiate, Succeeded
		c.clear()
	}
}

func (c *Controller) restart() {
	c.clear()
	c.fail, c.res, c.step, c.bidi = nil, Pending, MsgNegotiate, false
	c.hash, c.group, c.tid = 0, 0, 0
}

// clear drops the transaction's secrets.
func (c *Controller) clear() {
	c.dh, c.sess, c.c1, c.c2, c.s1, c.s2 = nil, nil, nil, nil, 0, 0
}

func (c *Controller) negotiate(msg []byte) {
	n, err := ParseNegotiate(msg)
	if err != nil {
		c.failure1(failf(ReasonIncorrectPayload, "%v", err))
		return
	}
	c.tid = n.TID()
	if n.SCC() != 0 {
		c.failure1(failf(ReasonConcatMismatch, "secure channel concatenation (SC_C %d) not supported", n.SCC()))
		return
	}
	if n.NAPD() != 1 {
		c.failure1(failf(ReasonHashUnusable, "NAPD %d, expected 1", n.NAPD()))
		return
	}
	if n.AuthID() != ProtocolDHCHAP {
		c.failure1(failf(ReasonIncorrectPayload, "AUTHID 0x%02x is not DH-HMAC-CHAP", n.AuthID()))
		return
	}
	hashes := n.HashIDs()
	if slices.Contains(hashes, c.cfg.Hash) {
		c.hash = c.cfg.Hash
	} else if i := slices.IndexFunc(hashes, HashID.Valid); i >= 0 {
		c.hash = hashes[i]
	}
	if c.hash == 0 {
		c.failure1(failf(ReasonHashUnusable, "host offers no usable hash (%v), configured %v", hashes, c.cfg.Hash))
		return
	}
	if groups := n.DHGroupIDs(); !slices.Contains(groups, c.cfg.DHGroup) {
		c.failure1(failf(ReasonDHGroupUnusable, "host does not offer DH group %v (offers %v)", c.cfg.DHGroup, groups))
		return
	}
	c.group = c.cfg.DHGroup
	c.step = MsgChallenge
}

func (c *Controller) reply(msg []byte) {
	r, err := ParseReply(msg)
	if err != nil {
		c.failure1(failf(ReasonIncorrectPayload, "%v", err))
		return
	}
	if r.HL() != c.hash.Size() {
		c.failure1(failf(ReasonHashUnusable, "reply HL %d, %v needs %d", r.HL(), c.hash, c.hash.Size()))
		return
	}
	if c.dh != nil {
		s, err := c.dh.shared(r.DHValue())
		if err != nil {
			c.failure1(failf(ReasonDHGroupUnusable, "host DH value: %v", err))
			return
		}
		c.sess = s
	} else if r.DHVLen() != 0 {
		c.failure1(failf(ReasonIncorrectPayload, "DH value with the null group"))
		return
	}
	if c.cfg.HostKey == nil {
		c.failure1(failf(ReasonFailed, "no DH-HMAC-CHAP key configured for host %s", c.cfg.HostNQN))
		return
	}
	want := hostResponse(c.hash, c.cfg.HostKey.Transform(c.cfg.HostNQN), augment(c.hash, c.sess, c.c1), c.s1, c.tid, 0, c.cfg.HostNQN, c.cfg.SubsysNQN)
	if !hmac.Equal(want, r.Response()) {
		c.failure1(failf(ReasonFailed, "host response mismatch (wrong host key?)"))
		return
	}
	c.s2 = r.SeqNum()
	if r.CValid() && c.s2 != 0 {
		c.c2, c.bidi = append([]byte(nil), r.C()...), true
	}
	c.step = MsgSuccess1
}

// ErrAllocationLength reports an Authentication Receive too small for the
// message; the target fails the command (Invalid Field).
var ErrAllocationLength = fmt.Errorf("auth: allocation length too small")

// Receive returns the payload of an Authentication Receive with allocation
// length al: the Challenge, Success1 or Failure1 the transaction is at. The
// payload is no longer than al; the caller zero-fills the rest of the
// transfer as the kernel does. An error leaves the transaction unchanged.
func (c *Controller) Receive(al int) ([]byte, error) {
	switch c.step {
	case MsgChallenge:
		return c.challenge(al)
	case MsgSuccess1:
		need := chapHeaderLen + c.hash.Size()
		if al < need {
			return nil, fmt.Errorf("%w: %v needs %d, AL %d", ErrAllocationLength, MsgSuccess1, need, al)
		}
		var r2 []byte
		if c.c2 != nil {
			if c.cfg.CtrlKey == nil {
				c.failure1(failf(ReasonFailed, "host asks for bidirectional authentication but no controller key is configured"))
				return c.Receive(al)
			}
			r2 = ctrlResponse(c.hash, c.cfg.CtrlKey.Transform(c.cfg.SubsysNQN), augment(c.hash, c.sess, c.c2), c.s2, c.tid, c.cfg.HostNQN, c.cfg.SubsysNQN)
		}
		b := EncodeSuccess1(c.tid, c.hash.Size(), r2)
		if r2 != nil {
			c.step = MsgSuccess2
		} else {
			c.step, c.res = MsgNegotiate, Succeeded
			c.clear()
		}
		return b, nil
	}
	// A Failure1 is due, or the Receive came while a Send was expected.
	if al < FailureLen {
		return nil, fmt.Errorf("%w: %v needs %d, AL %d", ErrAllocationLength, MsgFailure1, FailureLen, al)
	}
	if c.step != MsgFailure1 && c.step != MsgFailure2 {
		c.fail = failf(ReasonFailed, "Authentication Receive while expecting %v", c.step)
		c.step = MsgFailure1
	}
	c.res = Failed
	c.clear()
	return EncodeFailure(MsgFailure1, c.tid, c.fail.Reason), nil
}

func (c *Controller) challenge(al int) ([]byte, error) {
	need := chapHeaderLen + c.hash.Size() + c.group.ValueSize()
	if al < need {
		return nil, fmt.Errorf("%w: %v needs %d, AL %d", ErrAllocationLength, MsgChallenge, need, al)
	}
	var err error
	if c.c1, err = nonce(c.cfg.Rand, c.hash.Size()); err != nil {
		return nil, err
	}
	if c.s1, err = seqNum(c.cfg.Rand); err != nil {
		return nil, err
	}
	var dhv []byte
	if c.group != DHGroupNull {
		if c.dh, err = newDHKey(c.group, c.cfg.Rand); err != nil {
			return nil, err
		}
		dhv = c.dh.public
	}
	c.step = MsgReply
	return EncodeChallenge(c.tid, c.hash, c.group, c.s1, c.c1, dhv), nil
}
