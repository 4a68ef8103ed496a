// Package plugtest stands in for a backend behind fabrics.SubmitPlug in
// transport tests: it holds each command in the plug the command comes
// with and completes what it holds when the plug is flushed.
package plugtest

import (
	"sync"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Backend holds requests in their plugs (Hold) and completes them in
// FlushPlug, as an io_uring backend submits there. Safe for concurrent use.
type Backend struct {
	mu      sync.Mutex
	held    []*fabrics.Request
	noPlug  int
	flushed []int
}

// Hold joins r's plug and keeps r until the plug is flushed; a request
// without a plug is counted and completed at once.
func (b *Backend) Hold(r *fabrics.Request) {
	b.mu.Lock()
	if r.Plug == nil {
		b.noPlug++
		b.mu.Unlock()
		r.Complete()
		return
	}
	b.held = append(b.held, r)
	b.mu.Unlock()
	r.Plug.Join(b)
}

// FlushPlug completes the requests held, recording how many there were.
func (b *Backend) FlushPlug() {
	b.mu.Lock()
	held := b.held
	b.held = nil
	b.flushed = append(b.flushed, len(held))
	b.mu.Unlock()
	for _, r := range held {
		r.Complete()
	}
}

// Take returns the requests that came without a plug and the number held
// at each FlushPlug since the last Take, and starts both counts again.
// A FlushPlug records its count before it completes: once every request
// of a burst has completed, all of the burst's flushes are counted.
func (b *Backend) Take() (noPlug int, flushed []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	noPlug, flushed = b.noPlug, b.flushed
	b.noPlug, b.flushed = 0, nil
	return noPlug, flushed
}
