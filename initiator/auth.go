package initiator

import (
	"context"
	"errors"
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// In-band authentication (NVMe Base 2.0 §8.13, DH-HMAC-CHAP) on the host
// side, as Linux drivers/nvme/host/auth.c: when a Connect completion's
// AUTHREQ asks for it, the queue is authenticated before anything else is
// sent on it, the admin queue and every I/O queue alike, each with its own
// transaction ID. Authentication Send carries the host's messages and
// Authentication Receive fetches the controller's; package nvme/auth
// decides what they say.

// maxAuthSteps bounds the Authentication Receives of one transaction: a
// conforming controller needs two (Challenge, Success1).
const maxAuthSteps = 4

// ErrAuthKeyRequired is wrapped when a controller requires DH-HMAC-CHAP
// authentication and no host secret is configured (Linux: "Required key
// not available", ENOKEY).
var ErrAuthKeyRequired = errors.New("target requires DH-HMAC-CHAP authentication: give the host secret (--dhchap-secret)")

// ErrAuthFailed is wrapped by every failed authentication (an *AuthError).
var ErrAuthFailed = errors.New("DH-HMAC-CHAP authentication failed")

// AuthError is a queue whose DH-HMAC-CHAP authentication failed: the
// controller refused the host's response (AUTH_Failure1), the controller
// failed to prove its own key, a message was malformed, or the exchange
// failed or timed out. It never contains a secret.
type AuthError struct {
	Addr fabrics.Address
	QID  uint16
	// Bidirectional is set when the host asked the controller to prove
	// its key too.
	Bidirectional bool
	// AfterResponse is set when the exchange broke off after the host had
	// sent its response (DH-HMAC-CHAP_Reply): Linux nvmet tears the queue
	// down there when it refuses the key, so the cause is likely the key.
	AfterResponse bool
	// Err says why: an *auth.Error (Reason, and Remote when the
	// controller reported it), a *CommandError or a timeout.
	Err error
}

// Error explains the failure in one line.
func (e *AuthError) Error() string {
	var ae *auth.Error
	what := ""
	if errors.As(e.Err, &ae) {
		switch {
		case ae.Remote && ae.Reason == auth.ReasonFailed && e.Bidirectional:
			what = ": the controller refused the host (wrong --dhchap-secret for this host NQN, or the controller has no key for bidirectional authentication?)"
		case ae.Remote && ae.Reason == auth.ReasonFailed:
			what = ": the controller refused the host's response (wrong --dhchap-secret for this host NQN?)"
		case !ae.Remote && ae.Reason == auth.ReasonFailed:
			what = ": the controller did not prove its key (wrong --dhchap-ctrl-secret?)"
		}
	} else if e.AfterResponse {
		what = ": the controller ended the exchange after the host's response (wrong --dhchap-secret for this host NQN?)"
	}
	return fmt.Sprintf("initiator: connect %s qid %d: %v%s: %v", e.Addr, e.QID, ErrAuthFailed, what, e.Err)
}

// Unwrap returns the cause and ErrAuthFailed.
func (e *AuthError) Unwrap() []error { return []error{ErrAuthFailed, e.Err} }

// authenticate runs DH-HMAC-CHAP on queue q, whose Connect completed with
// AUTHREQ authreq (nvme_auth_negotiate and nvme_auth_wait). The whole
// exchange is bounded by CommandTimeout, each command by CommandTimeout.
func (c *Controller) authenticate(ctx context.Context, q *queue, authreq uint16) error {
	if authreq&fabrics.AuthReqASCR != 0 {
		return fmt.Errorf("initiator: connect %s qid %d: controller requires secure channel concatenation (AUTHREQ %#x), not supported", c.addr, q.qid, authreq)
	}
	if authreq&fabrics.AuthReqATR == 0 {
		return nil
	}
	o := &c.opts
	if o.HostKey == nil {
		return fmt.Errorf("initiator: connect %s qid %d: %w", c.addr, q.qid, ErrAuthKeyRequired)
	}
	h, err := auth.NewHost(auth.HostConfig{
		HostNQN:   o.HostNQN,
		SubsysNQN: o.SubsystemNQN,
		Key:       o.HostKey,
		CtrlKey:   o.CtrlKey,
		TID:       uint16(c.authTID.Add(1) - 1),
	})
	if err != nil {
		return fmt.Errorf("initiator: connect %s qid %d: %w", c.addr, q.qid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.CommandTimeout)
	defer cancel()
	replied := false
	fail := func(err error) error {
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w (the exchange is bounded by %v: %w)", err, o.CommandTimeout, ErrTimeout)
		}
		return &AuthError{Addr: c.addr, QID: q.qid, Bidirectional: o.CtrlKey != nil, AfterResponse: replied, Err: err}
	}
	if err := c.authSend(ctx, q, h.Negotiate()); err != nil {
		return fail(err)
	}
	buf := make([]byte, auth.MaxMessageLen)
	for step := 0; !h.Done(); step++ {
		if step == maxAuthSteps {
			return fail(fmt.Errorf("no outcome after %d messages from the controller", step))
		}
		if err := c.authReceive(ctx, q, buf); err != nil {
			return fail(err)
		}
		out, herr := h.Handle(buf)
		if out != nil {
			if err := c.authSend(ctx, q, out); err != nil && herr == nil {
				return fail(err)
			}
			replied = replied || (herr == nil && auth.Header(out).ID() == auth.MsgReply)
		}
		if herr != nil {
			return fail(herr)
		}
	}
	lvl := c.log.Debug
	if q.qid == 0 {
		lvl = c.log.Info
	}
	lvl("authenticated", "qid", q.qid, "hash", h.Hash().String(), "dhgroup", h.DHGroup().String(), "bidirectional", o.CtrlKey != nil)
	return nil
}

// authCommand returns an Authentication Send or Receive command with the
// fields the Linux host sets (nvme_auth_submit): SECP 0xE9, SPSP0 and
// SPSP1 1, TL or AL the data length.
func authCommand(t fabrics.FCType, n int) *[64]byte {
	cmd := fabrics.NewCommand(t)
	cmd.SetPSDT(uint8(nvme.PSDTSGLMPTRAddress))
	a := cmd.Auth()
	a.SetSECP(auth.SECP)
	a.SetSPSP0(auth.SPSP0)
	a.SetSPSP1(auth.SPSP1)
	a.SetTL(uint32(n))
	return (*[64]byte)(cmd)
}

// authSend sends msg in an Authentication Send on q.
func (c *Controller) authSend(ctx context.Context, q *queue, msg []byte) error {
	_, err := q.exec(ctx, authCommand(fabrics.FCTypeAuthSend, len(msg)), msg, fabrics.DirHostToCtrl, "Authentication Send", c.setupWait())
	return err
}

// authReceive fills buf by an Authentication Receive on q (AL len(buf)).
func (c *Controller) authReceive(ctx context.Context, q *queue, buf []byte) error {
	clear(buf)
	_, err := q.exec(ctx, authCommand(fabrics.FCTypeAuthReceive, len(buf)), buf, fabrics.DirCtrlToHost, "Authentication Receive", c.setupWait())
	return err
}
