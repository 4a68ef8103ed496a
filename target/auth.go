package target

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// DefaultAuthTimeout bounds an authentication transaction when the
// controller has no keep-alive timeout (Linux: KATO, else 120 s).
const DefaultAuthTimeout = 120 * time.Second

// DefaultAuthDeadline bounds the time a queue that must authenticate may
// stay unauthenticated after its Connect (Options.AuthDeadline): a host
// with the key authenticates at once (Linux nvmf_connect_admin_queue and
// nvmf_connect_io_queue run the transaction right after the Connect), in
// well under a second even with ffdhe8192 (docs/auth.md).
const DefaultAuthDeadline = 10 * time.Second

// Authentication Send/Receive parameter locations (error log).
const (
	locSPSP0 = 41
	locSPSP1 = 42
	locSECP  = 43
	locTLAL  = 44
)

// HostAuth is a host's DH-HMAC-CHAP configuration, the kernel's
// hosts/<nqn>/dhchap_* attributes.
type HostAuth struct {
	// Key is the host's secret (dhchap_key). Nil: the host does not
	// authenticate.
	Key *auth.Key
	// CtrlKey is the controller's secret (dhchap_ctrl_key), for hosts that
	// ask the controller to authenticate itself.
	CtrlKey *auth.Key
	// Hash is the preferred hash (dhchap_hash); 0 means hmac(sha256).
	Hash auth.HashID
	// DHGroup is the DH group (dhchap_dhgroup); the host must offer it.
	DHGroup auth.DHGroupID
}

// targetAuth holds the host keys, as the kernel's hosts/ directory: they
// apply to every subsystem the host connects to (not the discovery one).
type targetAuth struct {
	mu    sync.RWMutex
	hosts map[string]HostAuth
}

func (a *targetAuth) lookup(hostNQN string) (HostAuth, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	h, ok := a.hosts[hostNQN]
	return h, ok
}

// SetHostAuth sets the DH-HMAC-CHAP configuration of a host (nil removes
// it). Controllers created afterwards require authentication when the host
// has a Key; a change applies to every authentication transaction started
// afterwards, re-authentication included.
func (t *Target) SetHostAuth(hostNQN string, a *HostAuth) error {
	if err := validHostNQN(hostNQN); err != nil {
		return fmt.Errorf("%w: host %q: %v", ErrInvalid, hostNQN, err)
	}
	if a != nil {
		if a.Hash != 0 && !a.Hash.Valid() {
			return fmt.Errorf("%w: host %s: dhchap_hash %v", ErrInvalid, hostNQN, a.Hash)
		}
		if !a.DHGroup.Valid() {
			return fmt.Errorf("%w: host %s: dhchap_dhgroup %v", ErrInvalid, hostNQN, a.DHGroup)
		}
		if a.Key == nil && a.CtrlKey != nil {
			return fmt.Errorf("%w: host %s: dhchap_ctrl_key without dhchap_key", ErrInvalid, hostNQN)
		}
	}
	t.auth.mu.Lock()
	defer t.auth.mu.Unlock()
	if a == nil {
		delete(t.auth.hosts, hostNQN)
		return nil
	}
	if t.auth.hosts == nil {
		t.auth.hosts = map[string]HostAuth{}
	}
	t.auth.hosts[hostNQN] = *a
	return nil
}

// ReplaceHostAuth replaces the DH-HMAC-CHAP configuration of every host
// with hosts (a configuration reload): hosts left out no longer
// authenticate. As SetHostAuth, a change applies to controllers created
// and authentication transactions started afterwards. The settings are
// not checked here (SetHostAuth does): a zero HostAuth makes the host's
// controllers refuse authentication rather than skip it.
func (t *Target) ReplaceHostAuth(hosts map[string]HostAuth) {
	m := maps.Clone(hosts)
	t.auth.mu.Lock()
	t.auth.hosts = m
	t.auth.mu.Unlock()
}

// authRequired reports whether a new controller of s for hostNQN must
// authenticate its queues (Linux nvmet_setup_auth: never on the discovery
// subsystem; only when the host has a key).
func (t *Target) authRequired(s *Subsystem, hostNQN string) bool {
	if s.disc {
		return false
	}
	h, ok := t.auth.lookup(hostNQN)
	return ok && h.Key != nil
}

// queueAuth is the authentication state of one queue.
type queueAuth struct {
	authenticated atomic.Bool

	mu    sync.Mutex
	ctl   *auth.Controller // the current transaction; nil between them
	timer *time.Timer
	gen   uint64 // transaction generation, to ignore stale timers
}

// connectAuthReqLocked prepares a freshly connected queue of c and
// returns the AUTHREQ of the Connect response: ATR when the queue must
// authenticate before anything else (Linux nvmet_connect_result). c.mu is
// held; the queue is not yet published.
func (q *queue) connectAuthReqLocked(c *controller) uint16 {
	if !c.needAuth {
		return 0
	}
	a := &queueAuth{}
	a.mu.Lock()
	q.armAuthTimerLocked(a, c, min(c.authTimeoutLocked(), c.t.authDeadline()))
	a.mu.Unlock()
	q.auth.Store(a)
	return fabrics.AuthReqATR // DW0 bit 17
}

// authBlocks completes r with Authentication Required when the queue has
// not authenticated yet and r is not one of the commands allowed before
// (Linux nvmet_check_auth_status). Unlike Linux, Property Get/Set wait for
// authentication too.
func (q *queue) authBlocks(r *fabrics.Request) bool {
	a := q.auth.Load()
	if a == nil || a.authenticated.Load() {
		return false
	}
	if r.SQE[0] == fabrics.OpcodeFabrics {
		switch fabrics.FCType(r.SQE[4]) {
		case fabrics.FCTypeAuthSend, fabrics.FCTypeAuthReceive, fabrics.FCTypeDisconnect, fabrics.FCTypeConnect:
			return false
		}
	}
	q.complete(r, dnr(fabrics.StatusAuthenticationRequired), locOpcode, 0)
	return true
}

// authDeadline is how long a queue may stay unauthenticated after its
// Connect.
func (t *Target) authDeadline() time.Duration {
	if d := t.opts.AuthDeadline; d > 0 {
		return d
	}
	return DefaultAuthDeadline
}

// authOK reports whether the queue may act for its controller: it needs
// no authentication or has authenticated. A queue that has not yet must
// not affect the controller's other queues (issue 22).
func (q *queue) authOK() bool {
	a := q.auth.Load()
	return a == nil || a.authenticated.Load()
}

// authTimeoutLocked is how long a transaction may take (c.mu held).
func (c *controller) authTimeoutLocked() time.Duration {
	if d := c.t.opts.AuthTimeout; d > 0 {
		return d
	}
	if c.kato > 0 {
		return c.kato
	}
	return DefaultAuthTimeout
}

func (c *controller) authTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authTimeoutLocked()
}

// armAuthTimerLocked starts the transaction timer unless it runs (a.mu
// held).
func (q *queue) armAuthTimerLocked(a *queueAuth, c *controller, d time.Duration) {
	if a.timer != nil {
		return
	}
	gen := a.gen
	a.timer = time.AfterFunc(d, func() { q.authExpired(c, a, gen) })
}

func (a *queueAuth) stopTimerLocked() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.gen++
}

// authExpired ends a transaction that did not finish in time: a queue
// never authenticated is refused (its controller torn down for the admin
// queue); an authenticated queue only forgets the stalled
// re-authentication, as Linux nvmet_auth_expired_work.
func (q *queue) authExpired(c *controller, a *queueAuth, gen uint64) {
	a.mu.Lock()
	if gen != a.gen {
		a.mu.Unlock()
		return
	}
	a.timer, a.ctl = nil, nil
	a.gen++
	ok := a.authenticated.Load()
	a.mu.Unlock()
	remote := q.tq.Remote().String()
	if ok {
		c.log.Warn("re-authentication timed out; transaction reset", "qid", q.qid, "remote", remote)
		return
	}
	c.subsys.stats.authFailed.Add(1)
	c.log.Warn("authentication timed out; queue refused", "qid", q.qid, "remote", remote)
	q.refuseAuth(c, "authentication timed out")
}

// refuseAuth closes a queue whose authentication failed or did not end
// in time: the controller with its admin queue, an I/O queue alone.
// Linux nvmet_ctrl_fatal_error tears the whole controller down for a
// failure on any queue; an I/O queue's peer may not be the host that
// authenticated the admin queue, only one that knows its NQN and guessed
// its controller ID (issue 22), and SPDK also closes the queue only.
func (q *queue) refuseAuth(c *controller, reason string) {
	if q.qid == 0 {
		c.shutdown(reason)
		return
	}
	c.ioQueueClosed(q)
	q.tq.Close()
}

// handleAuth runs Authentication Send and Receive (Linux
// nvmet_execute_auth_send / nvmet_execute_auth_receive).
func (c *controller) handleAuth(q *queue, r *fabrics.Request) {
	cmd := fabrics.AuthCommand(r.SQE[:])
	switch {
	case cmd.SECP() != auth.SECP:
		q.complete(r, dnr(nvme.StatusInvalidField), locSECP, 0)
		return
	case cmd.SPSP0() != auth.SPSP0:
		q.complete(r, dnr(nvme.StatusInvalidField), locSPSP0, 0)
		return
	case cmd.SPSP1() != auth.SPSP1:
		q.complete(r, dnr(nvme.StatusInvalidField), locSPSP1, 0)
		return
	case cmd.TL() == 0:
		q.complete(r, dnr(nvme.StatusInvalidField), locTLAL, 0)
		return
	case uint64(len(r.Data)) != uint64(cmd.TL()):
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	a := q.auth.Load()
	if a == nil {
		// A queue that needed no authentication: the host may still run a
		// transaction; a failure tears it down as on any queue.
		a = &queueAuth{}
		a.authenticated.Store(true)
		if !q.auth.CompareAndSwap(nil, a) {
			a = q.auth.Load()
		}
	}
	a.mu.Lock()
	send := fabrics.FCType(r.SQE[4]) == fabrics.FCTypeAuthSend
	if send {
		h, err := auth.ParseHeader(r.Data)
		if a.ctl == nil || (err == nil && h.Type() == auth.TypeCommon && h.ID() == auth.MsgNegotiate) {
			a.ctl = c.newAuthController()
		}
		a.ctl.Send(r.Data)
	} else {
		if a.ctl == nil {
			a.ctl = c.newAuthController() // answers Failure1, as Linux for an unexpected step
		}
		msg, err := a.ctl.Receive(len(r.Data))
		if err != nil {
			a.mu.Unlock()
			c.log.Warn("Authentication Receive refused", "qid", q.qid, "err", err)
			q.complete(r, dnr(nvme.StatusInvalidField), locTLAL, 0)
			return
		}
		n := copy(r.Data, msg)
		clear(r.Data[n:])
	}
	ctl := a.ctl
	failed, lost := false, false
	switch ctl.Outcome() {
	case auth.Succeeded:
		c.subsys.stats.authOK.Add(1)
		a.stopTimerLocked()
		a.ctl = nil
		first := !a.authenticated.Swap(true)
		if first && q.qid != 0 && !c.installIOQueue(q) {
			// Another queue took the QID first: this one goes (the host
			// connected it twice; a peer without the key never gets here).
			failed, lost = true, true
		} else if first || q.qid == 0 {
			c.log.Info("queue authenticated", "qid", q.qid, "hash", ctl.Hash().String(),
				"dhgroup", ctl.DHGroup().String(), "bidirectional", ctl.Bidirectional(),
				"remote", q.tq.Remote().String())
		}
	case auth.Failed:
		c.subsys.stats.authFailed.Add(1)
		a.stopTimerLocked()
		a.ctl = nil
		a.authenticated.Store(false)
		failed = true
	default:
		q.armAuthTimerLocked(a, c, c.authTimeout())
	}
	a.mu.Unlock()
	q.ok(r)
	if !failed {
		return
	}
	remote := q.tq.Remote().String()
	switch {
	case lost:
		c.log.Warn("queue authenticated after another took its QID; queue closed", "qid", q.qid, "remote", remote)
	default:
		var e *auth.Error
		reason := "unknown"
		if errors.As(ctl.Err(), &e) {
			reason = e.Reason.String()
		}
		msg := "authentication failed; controller refused"
		if q.qid != 0 {
			msg = "authentication failed; I/O queue closed, the controller's other queues stay"
		}
		if e != nil && e.Remote { // the host's AUTH_Failure2: it refused the controller
			msg += " (the host refused the controller: wrong dhchap_ctrl_key?)"
		}
		c.log.Warn(msg, "qid", q.qid, "remote", remote, "reason", reason, "err", ctl.Err())
	}
	// After the completion, as Disconnect: the host gets its answer.
	go q.refuseAuth(c, "authentication failed")
}

// newAuthController starts a transaction with the host's configuration as
// it is now (a reload applies to the next transaction).
func (c *controller) newAuthController() *auth.Controller {
	var cfg auth.ControllerConfig
	if !c.subsys.disc {
		if h, ok := c.t.auth.lookup(c.hostNQN); ok {
			cfg = auth.ControllerConfig{HostKey: h.Key, CtrlKey: h.CtrlKey, Hash: h.Hash, DHGroup: h.DHGroup}
		}
	}
	cfg.HostNQN, cfg.SubsysNQN = c.hostNQN, c.subsys.nqn
	ctl, err := auth.NewController(cfg)
	if err != nil {
		// SetHostAuth validated the hash and group: fall back to defaults,
		// which fail the transaction for want of the right key at worst.
		c.log.Error("authentication configuration", "err", err)
		ctl, _ = auth.NewController(auth.ControllerConfig{HostNQN: c.hostNQN, SubsysNQN: c.subsys.nqn})
	}
	return ctl
}

// authQueueClosed stops the queue's transaction timer and says so when a
// queue that had to authenticate goes away before it did (a host without
// a key gives up at once: nvme_auth_negotiate's "no key").
func (q *queue) authQueueClosed(c *controller) {
	a := q.auth.Load()
	if a == nil {
		return
	}
	a.mu.Lock()
	a.stopTimerLocked()
	a.ctl = nil
	a.mu.Unlock()
	if !a.authenticated.Load() {
		c.log.Warn("authentication failed: queue closed before the host authenticated (does it have a key?)",
			"qid", q.qid, "remote", q.tq.Remote().String())
	}
}
