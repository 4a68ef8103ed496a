package target

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Port is a target port: an address, its transport parameters and the
// subsystems it exports. Hosts reach it through the listener Serve gets.
type Port struct {
	t   *Target
	id  uint16
	cfg PortConfig // guarded by t.mu
	// ana is the port's state of each ANA group (ana.go); replaced whole
	// with t.mu held, read without it.
	ana atomic.Pointer[anaStates]

	done     chan struct{}
	doneOnce sync.Once

	mu     sync.Mutex
	queues map[*queue]struct{} // every queue accepted and not yet closed
}

func newPort(t *Target, cfg PortConfig) *Port {
	p := &Port{t: t, id: cfg.ID, cfg: cfg, done: make(chan struct{}), queues: map[*queue]struct{}{}}
	st, err := newANAStates(cfg.ANAGroups)
	if err != nil { // normalize checked them
		st, _ = newANAStates(nil)
	}
	p.ana.Store(st)
	return p
}

// ID returns the port's identifier.
func (p *Port) ID() uint16 { return p.id }

// exports reports whether the port exports subsystem nqn (t.mu held).
func (p *Port) exports(nqn string) bool { return slices.Contains(p.cfg.Subsystems, nqn) }

// unlink removes nqn from the exported subsystems (t.mu held).
func (p *Port) unlink(nqn string) bool {
	i := slices.Index(p.cfg.Subsystems, nqn)
	if i < 0 {
		return false
	}
	p.cfg.Subsystems = slices.Delete(p.cfg.Subsystems, i, i+1)
	return true
}

// controllersOfLocked returns the controllers of s connected through p.
func (p *Port) controllersOfLocked(s *Subsystem) []*controller {
	if s == nil {
		return nil
	}
	var out []*controller
	for _, c := range s.ctrls {
		if c.port == p {
			out = append(out, c)
		}
	}
	return out
}

// controllersLocked returns every controller connected through p.
func (p *Port) controllersLocked() []*controller {
	out := p.controllersOfLocked(p.t.disc)
	for _, s := range p.t.subsys {
		out = append(out, p.controllersOfLocked(s)...)
	}
	return out
}

// close stops Serve and closes every queue of the port.
func (p *Port) close() {
	p.doneOnce.Do(func() { close(p.done) })
	p.mu.Lock()
	qs := make([]*queue, 0, len(p.queues))
	for q := range p.queues {
		qs = append(qs, q)
	}
	p.mu.Unlock()
	// All at once: a queue's close may wait (bounded) for responses
	// still in flight to a host, and a target stopping must not wait
	// for them queue after queue.
	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Go(func() { q.tq.Close() })
	}
	wg.Wait()
}

func (p *Port) serve(ctx context.Context, l fabrics.Listener) error {
	defer l.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := p.t.log.With("port", p.id)
	log.Info("serving port", "addr", l.Address().String())
	for {
		tq, err := l.Accept(ctx)
		if err != nil {
			select {
			case <-p.done:
				log.Info("port removed, stop serving")
				return nil
			default:
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("target: port %d: accept: %w", p.id, err)
		}
		if !p.attach(tq) {
			tq.Close()
			return nil
		}
	}
}

// attach starts serving a queue a host opened.
func (p *Port) attach(tq fabrics.TargetQueue) bool {
	q := newQueue(p, tq)
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return false
	default:
	}
	p.queues[q] = struct{}{}
	p.mu.Unlock()
	q.log.Debug("queue accepted", "qid", tq.Params().QID, "sqsize", tq.Params().SQSize, "remote", tq.Remote().String())
	tq.Serve(q)
	return true
}

func (p *Port) detach(q *queue) {
	p.mu.Lock()
	delete(p.queues, q)
	p.mu.Unlock()
}
