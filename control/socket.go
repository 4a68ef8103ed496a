package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Disabled reports whether a --control-socket value turns the API off.
func Disabled(path string) bool { return path == "" || path == "none" }

type listener struct {
	ln   *net.UnixListener
	path string
	// accept is ln.AcceptUnix (a test makes it fail).
	accept func() (*net.UnixConn, error)
	// peer is peerAllowed (a test refuses every peer).
	peer func(*net.UnixConn) error
}

// ErrSocketInUse is Listen's error when another process answers on the
// socket.
var ErrSocketInUse = errors.New("socket in use")

// Listen creates the control socket at path (mode 0600; its directory is
// created with mode 0700). A socket another process serves (another
// nvmetd) is an error; a stale one, left by a daemon that died, is
// removed. Serve then answers on it.
func (s *Service) Listen(path string) error {
	if Disabled(path) {
		return errors.New("control: no socket path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("control: socket directory: %w", err)
	}
	if err := removeStale(path); err != nil {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		// Another daemon bound it between the probe and here.
		return fmt.Errorf("control: %s: %w: %w", path, ErrSocketInUse, err)
	}
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("control: %w", err)
	}
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.closed || s.ln != nil {
		ln.Close()
		return errors.New("control: closed or listening already")
	}
	s.ln = &listener{ln: ln, path: path, accept: ln.AcceptUnix, peer: peerAllowed}
	// Logged here, not in Serve's goroutine: clients may connect from
	// now on (the backlog holds them), and the line comes before the
	// daemon's "serving" lines, always.
	s.log.Info("control API listening", "socket", path)
	return nil
}

// removeStale removes a socket at path nobody answers on; one that
// answers means another daemon serves it.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("control: %s exists and is not a socket: not removed", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("control: another process (nvmetd?) serves %s: stop it, or give this one another --control-socket: %w", path, ErrSocketInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control: removing the stale socket: %w", err)
	}
	return nil
}

// Addr returns the socket path, or "" before Listen.
func (s *Service) Addr() string {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.path
}

// Serve answers on the socket Listen created until Close. It returns nil
// after Close.
func (s *Service) Serve() error {
	s.lnMu.Lock()
	l := s.ln
	s.lnMu.Unlock()
	if l == nil {
		return errors.New("control: Serve before Listen")
	}
	var backoff time.Duration
	for {
		nc, err := l.accept()
		if err != nil {
			s.lnMu.Lock()
			closed := s.closed
			s.lnMu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if !acceptRetryable(err) {
				return fmt.Errorf("control: %w", err)
			}
			// Out of descriptors or memory for a while: the API must
			// come back once the daemon has them again (as net/http).
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("control: accepting a connection failed; retrying", "error", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := &conn{s: s, nc: nc, idle: true, idleSince: time.Now()}
		if err := l.peer(nc); err != nil {
			s.refusals.Warn("control connection refused", "error", err)
			c.reply(nil, nil, errorf(CodeInternal, "%v", err))
			nc.Close()
			continue
		}
		s.lnMu.Lock()
		if s.closed {
			s.lnMu.Unlock()
			nc.Close()
			continue
		}
		if len(s.conns) >= MaxConns && !s.evictIdleLocked() {
			s.lnMu.Unlock()
			s.refusals.Warn("control connection refused: every connection has a request under way", "max", MaxConns)
			c.reply(nil, nil, errorf(CodeBusy, "busy: too many control connections (%d) with requests under way: try again", MaxConns))
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.lnMu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.lnMu.Lock()
			delete(s.conns, c)
			s.lnMu.Unlock()
		}()
	}
}

// evictIdleLocked closes the connection idle longest (waiting for a
// request, none under way) to make room for a new one: idle connections
// must not lock clients out until they time out. False when every
// connection has a request under way. lnMu held.
func (s *Service) evictIdleLocked() bool {
	var oldest *conn
	for c := range s.conns {
		if c.idle && !c.evicted && (oldest == nil || c.idleSince.Before(oldest.idleSince)) {
			oldest = c
		}
	}
	if oldest == nil {
		return false
	}
	oldest.evicted = true
	delete(s.conns, oldest)
	oldest.nc.Close() // its serve returns: its read fails
	s.log.Debug("idle control connection closed for a new one", "idle", time.Since(oldest.idleSince).Round(time.Millisecond))
	return true
}

// Close stops serving: the socket is removed and open connections closed
// (a request running completes first).
func (s *Service) Close() error {
	s.lnMu.Lock()
	if s.closed {
		s.lnMu.Unlock()
		return nil
	}
	s.closed = true
	l := s.ln
	for c := range s.conns {
		c.nc.CloseRead()
	}
	s.lnMu.Unlock()
	var err error
	if l != nil {
		err = l.ln.Close() // removes the socket file
	}
	s.wg.Wait()
	s.refusals.Flush()
	return err
}

// conn is one client connection.
type conn struct {
	s  *Service
	nc *net.UnixConn

	// Under s.lnMu: idle while waiting for the first byte of a request
	// (since idleSince); evicted once closed for a new connection.
	idle      bool
	idleSince time.Time
	evicted   bool
}

// setIdle marks c waiting for a request, or not; false when c was
// evicted meanwhile.
func (c *conn) setIdle(idle bool) bool {
	c.s.lnMu.Lock()
	defer c.s.lnMu.Unlock()
	if idle && !c.idle {
		c.idleSince = time.Now()
	}
	c.idle = idle
	return !c.evicted
}

// serve reads requests one line each and answers them in order.
func (c *conn) serve() {
	defer c.nc.Close()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	// A client connects to send a request: a new connection gets a
	// shorter wait for it than one between requests.
	for timeout := c.s.opts.FirstRequestTimeout; ; timeout = c.s.opts.ReadTimeout {
		c.nc.SetReadDeadline(time.Now().Add(timeout))
		if !c.setIdle(true) {
			return
		}
		_, err := r.Peek(1) // idle, evictable, until a request begins
		if !c.setIdle(false) {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.s.log.Debug("control connection closed: idle", "timeout", timeout)
			}
			return
		}
		line, err := readLine(r, MaxRequestSize)
		if errors.Is(err, errTooLarge) {
			c.reply(nil, nil, errorf(CodeInvalidRequest, "request larger than %d bytes", MaxRequestSize))
			return
		}
		// A line cut by the deadline or an error is not a request; one
		// cut by EOF is the client's last.
		if (err == nil || errors.Is(err, io.EOF)) && len(bytes.TrimSpace(line)) > 0 {
			if !c.handle(line) {
				return
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.s.log.Debug("control connection closed: request too slow", "timeout", timeout)
			}
			return
		}
	}
}

var errTooLarge = errors.New("request too large")

// acceptRetryable reports whether an accept error passes: descriptors or
// memory short, or the client gone before it was accepted.
func acceptRetryable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// readLine reads up to a newline (or EOF), at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, errTooLarge
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			return line, nil
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return line, io.EOF
		}
		return line, err
	}
}

// handle runs one request line and writes its response; false when the
// connection cannot be written to.
func (c *conn) handle(line []byte) bool {
	req, perr := parseRequest(line)
	if perr != nil {
		var id json.RawMessage
		if req != nil {
			id = req.ID
		}
		return c.reply(id, nil, perr)
	}
	result, err := c.s.call(req.Method, req.Params)
	if req.ID == nil { // a notification
		return true
	}
	return c.reply(req.ID, result, err)
}

func (c *conn) reply(id json.RawMessage, result any, rerr *Error) bool {
	resp := Response{JSONRPC: Version, ID: id, Error: rerr}
	if resp.ID == nil {
		resp.ID = json.RawMessage("null")
	}
	if rerr == nil {
		b, err := json.Marshal(result)
		if err != nil {
			resp.Error = errorf(CodeInternal, "encoding the result: %v", err)
		} else {
			resp.Result = b
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	c.nc.SetWriteDeadline(time.Now().Add(WriteTimeout))
	_, err = c.nc.Write(append(b, '\n'))
	return err == nil
}

// peerAllowed admits clients running as root or as the daemon's user: the
// socket's mode already says so, this holds if someone loosens it.
func peerAllowed(nc *net.UnixConn) error {
	raw, err := nc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("uid %d (pid %d) may not use the control API: root or uid %d only", cred.Uid, cred.Pid, os.Geteuid())
	}
	return nil
}
