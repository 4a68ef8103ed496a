// Package control serves nvmetd's control API: JSON-RPC 2.0 on a Unix
// socket (as SPDK's rpc.py speaks to its target), one request object a
// line, to create, list, change and delete ports, subsystems, namespaces,
// hosts and allow-list entries of the running target, list and disconnect
// controllers, show the ports' RDMA device counters, and save the running
// configuration. docs/control-api.md
// documents every method.
//
// Every change copies the configuration tree the target runs, changes the
// copy, validates it as a configuration file is validated and applies it
// with server.Server.Apply: all or nothing, raising the asynchronous
// events a reload raises. Service.Apply serializes these changes with the
// daemon's reloads.
package control

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target/reconcile"
	"github.com/nvmeof/nvmeof/target/server"
)

// DefaultSocket is where nvmetd serves the control API by default.
const DefaultSocket = "/run/nvmetd/nvmetd.sock"

// Limits of a connection: a client must not hang the daemon or exhaust
// its memory.
const (
	// MaxRequestSize bounds one request line.
	MaxRequestSize = 1 << 20
	// ReadTimeout bounds the wait for a whole request line, and for the
	// next one on an idle connection.
	ReadTimeout = 30 * time.Second
	// FirstRequestTimeout bounds the wait for the first request line of a
	// new connection (a client connects to send one at once).
	FirstRequestTimeout = 5 * time.Second
	// WriteTimeout bounds writing a response.
	WriteTimeout = 30 * time.Second
	// MaxConns bounds the connections served at once. A new one past it
	// takes the slot of the connection idle longest (waiting for a
	// request); when every one has a request under way it is answered
	// with CodeBusy and closed.
	MaxConns = 32
)

// Options configure a Service.
type Options struct {
	Logger hclog.Logger
	// Loader validates changed configurations as the daemon validates its
	// configuration file (cmd/nvmetd's checks the provider).
	Loader configfs.Loader
	// Load loads the daemon's configuration file for Reload (SIGHUP,
	// config.reload); nil when the daemon has none.
	Load func() (*configfs.Tree, error)
	// ReadTimeout overrides the package's ReadTimeout (tests).
	ReadTimeout time.Duration
	// FirstRequestTimeout overrides the package's FirstRequestTimeout
	// (tests); it is never longer than ReadTimeout.
	FirstRequestTimeout time.Duration
}

// Service is the control API of a running server.
type Service struct {
	srv  *server.Server
	log  hclog.Logger
	opts Options

	// mu serializes "take the applied tree, change it, Apply": a reload
	// between would be undone.
	mu sync.Mutex
	// unsaved counts the changes applied since the last Apply or
	// config.save to a file (mu held): a reload drops them, and says so.
	unsaved int
	// applied: Apply ran once (mu held). Before, the tree the target runs
	// is not the daemon's configuration yet: a change would be lost, a
	// config.save to a file would write an empty configuration.
	applied bool
	// testHookChanged, if set, runs after a change is applied and the
	// lock released, before the method answers (tests: a change racing
	// another).
	testHookChanged func()

	// refusals logs refused connections, rate-limited.
	refusals *rateLog

	lnMu   sync.Mutex
	ln     *listener
	conns  map[*conn]struct{}
	wg     sync.WaitGroup
	closed bool
}

// New returns the control API of srv; Listen and Serve make it reachable.
func New(srv *server.Server, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = ReadTimeout
	}
	if opts.FirstRequestTimeout <= 0 {
		opts.FirstRequestTimeout = FirstRequestTimeout
	}
	opts.FirstRequestTimeout = min(opts.FirstRequestTimeout, opts.ReadTimeout)
	log := opts.Logger.Named("control")
	return &Service{srv: srv, log: log, opts: opts, conns: map[*conn]struct{}{},
		refusals: newRateLog(log, refusalLogBurst, refusalLogInterval, "control connections refused, not logged")}
}

// Apply applies tree to the server (server.Server.Apply), serialized with
// the control API's changes: cmd/nvmetd applies its configuration and
// reloads through it.
func (s *Service) Apply(tree *configfs.Tree) error {
	_, err := s.apply(tree)
	return err
}

// apply is Apply; it also returns the number of unsaved changes the tree
// replaced (none when nothing was applied).
func (s *Service) apply(tree *configfs.Tree) (dropped int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsaved > 0 {
		s.log.Warn("the configuration applied replaces changes made through the control API and not saved since", "changes", s.unsaved)
	}
	err = s.srv.Apply(tree)
	s.applied = true
	var na *reconcile.NotAppliedError
	if !errors.As(err, &na) {
		dropped, s.unsaved = s.unsaved, 0
	}
	return dropped, err
}

// errNotStarted answers changes made before the daemon applied its
// configuration (cmd/nvmetd listens first, so that its socket exists when
// it reports ready).
func errNotStarted() *Error {
	return errorf(CodeNotApplied, "not applied, nothing changed: nvmetd has not applied its configuration yet; try again")
}

// Tree returns a copy of the configuration the target runs, detached from
// its file (errors name configfs paths, not file positions).
func (s *Service) Tree() *configfs.Tree {
	return s.srv.Reconciler.Applied().Detached()
}

// change applies what edit does to a copy of the running tree: validated
// as a configuration file, then applied all or nothing. Once applied, res
// answers with the lock still held: a change that came next (ns.del after
// ns.add) must not turn the answer into "gone".
func (s *Service) change(edit func(t *configfs.Tree) error, res result) (any, *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.applied {
		return nil, errNotStarted()
	}
	tree := s.Tree()
	if err := edit(tree); err != nil {
		return nil, asError(err)
	}
	if err := s.opts.Loader.Validate(tree); err != nil {
		return nil, configError(CodeInvalidConfig, "invalid configuration", err)
	}
	err := s.srv.Apply(tree)
	var na *reconcile.NotAppliedError
	if !errors.As(err, &na) {
		s.unsaved++
	}
	switch {
	case err == nil:
		return res()
	case errors.As(err, &na):
		return nil, configError(CodeNotApplied, "not applied, nothing changed", err)
	default:
		return nil, configError(CodePartlyApplied, "partly applied", err)
	}
}

func notFound(format string, args ...any) *Error {
	return errorf(CodeNotFound, format, args...)
}

func exists(format string, args ...any) *Error {
	return errorf(CodeExists, format, args...)
}

func invalidParams(format string, args ...any) *Error {
	return &Error{Code: CodeInvalidParams, Message: "invalid params: " + fmt.Sprintf(format, args...)}
}
