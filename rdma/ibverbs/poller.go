//go:build ibverbs && cgo

package ibverbs

import (
	"runtime"
	"sync"
)

// poller is poll mode (Config.Poll): one goroutine per device polls every
// CQ of the device in turn, without sleeping, the way an SPDK reactor
// does: no completion-channel wake-up, no re-arming system call, at the
// cost of a busy core.
type poller struct {
	mu    sync.Mutex // held during a round, and to change cqs
	cqs   []*cq
	start sync.Once
	quit  chan struct{}
	done  chan struct{}
}

func (d *device) addPolled(c *cq) {
	p := &d.poller
	p.start.Do(func() {
		p.mu.Lock()
		p.quit, p.done = make(chan struct{}), make(chan struct{})
		p.mu.Unlock()
		go p.run()
	})
	p.mu.Lock()
	p.cqs = append(p.cqs, c)
	p.mu.Unlock()
}

// removePolled takes c out; when it returns, the poller is not using c.
func (d *device) removePolled(c *cq) {
	p := &d.poller
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.cqs {
		if x == c {
			p.cqs = append(p.cqs[:i], p.cqs[i+1:]...)
			return
		}
	}
}

func (p *poller) run() {
	defer close(p.done)
	for {
		select {
		case <-p.quit:
			return
		default:
		}
		p.mu.Lock()
		for _, c := range p.cqs {
			c.pollOnce()
		}
		p.mu.Unlock()
		runtime.Gosched()
	}
}

// stop ends the poller, if it was started.
func (p *poller) stop() {
	p.mu.Lock()
	started := p.quit != nil
	p.mu.Unlock()
	if started {
		close(p.quit)
		<-p.done
	}
}
