package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime and process
// collectors and the given ones.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register collector: %w", err)
		}
	}
	return reg, nil
}

// Handler serves the registry's metrics at /metrics and, with pprof,
// net/http/pprof's profiles under /debug/pprof/.
func Handler(g prometheus.Gatherer, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "nvmeof metrics: /metrics")
		if withPprof {
			fmt.Fprintln(w, "profiles: /debug/pprof/")
		}
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// The endpoint's timeouts. Every one is set: a connection that sends
// nothing, or sends slowly, or does not read, holds a descriptor and a
// goroutine until one expires (and a slot of MaxConns until a new
// connection needs it).
var (
	// readHeaderTimeout bounds the wait for a request's headers, the
	// first and those after an idle keep-alive.
	readHeaderTimeout = 5 * time.Second
	// readTimeout and writeTimeout bound reading a request and writing
	// its response. Above a minute: pprof's default 30 s profile must fit
	// (it refuses seconds ≥ WriteTimeout, and the end of ReadTimeout
	// cancels the request's context).
	readTimeout  = time.Minute + 10*time.Second
	writeTimeout = time.Minute + 10*time.Second
	// idleTimeout closes keep-alive connections left idle: longer than
	// any scrape interval in use, short enough that abandoned connections
	// go (a variable for tests).
	idleTimeout = 5 * time.Minute
)

// Server is a running metrics endpoint.
type Server struct {
	ln   *capListener
	srv  *http.Server
	done chan struct{}
}

// Listen binds addr (HOST:PORT; port 0 picks one) and serves h on it
// until Close, holding at most MaxConns connections. Errors of the
// listener after start are logged.
func Listen(addr string, h http.Handler, log hclog.Logger) (*Server, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	ln := newCapListener(tl, MaxConns)
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			ConnState:         ln.connState,
			ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "error", err)
		}
	}()
	return s, nil
}

// Addr returns the address the endpoint listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the endpoint, letting scrapes in progress finish for up to
// a second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
