package metrics

import (
	"net"
	"net/http"
	"sync"
)

// MaxConns bounds the connections the metrics endpoint holds open: a
// Prometheus server or two scraping, a person with curl, pprof.
const MaxConns = 64

// capListener holds at most max accepted connections. A new connection
// past it takes the place of the one that has waited longest without a
// request under way (new and not sending one, or idle between requests),
// which is closed; when every one has a request under way the new one is
// closed. Unlike golang.org/x/net/netutil.LimitListener, which stops
// accepting at the cap, a scraper is never queued in the kernel's backlog
// behind connections that send nothing until their ReadHeaderTimeout (22,000
// of those used all of nvmetd's descriptors; at a cap they would have
// delayed scrapes by their timeouts).
type capListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
	seq   uint64 // orders the waits: the lowest has waited longest
}

type connEntry struct {
	busy  bool   // a request under way (http.StateActive)
	since uint64 // when it started waiting (seq)
}

func newCapListener(ln net.Listener, max int) *capListener {
	return &capListener{Listener: ln, max: max, conns: map[net.Conn]*connEntry{}}
}

// Accept returns the next connection, making room for it.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= l.max && !l.evictLocked() {
			l.mu.Unlock()
			c.Close() // every slot is serving a request: shed the new one
			continue
		}
		l.seq++
		l.conns[c] = &connEntry{since: l.seq}
		l.mu.Unlock()
		return c, nil
	}
}

// evictLocked closes the connection waiting longest without a request
// under way; false if there is none.
func (l *capListener) evictLocked() bool {
	var oldest net.Conn
	var since uint64
	for c, e := range l.conns {
		if !e.busy && (oldest == nil || e.since < since) {
			oldest, since = c, e.since
		}
	}
	if oldest == nil {
		return false
	}
	delete(l.conns, oldest)
	oldest.Close() // its goroutine's read fails; the server forgets it
	return true
}

// connState is the http.Server's ConnState hook: it follows which
// connections have a request under way, and forgets the closed ones.
func (l *capListener) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if !ok {
		return // evicted
	}
	switch st {
	case http.StateActive:
		e.busy = true
	case http.StateIdle:
		l.seq++
		e.busy, e.since = false, l.seq
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
}
