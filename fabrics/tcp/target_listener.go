package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Defaults of a target port, as Linux nvmet-tcp has them where it has them.
const (
	// AdminQueueDepth is the largest admin queue (NVME_AQ_DEPTH).
	AdminQueueDepth = 32
	// AdminInlineDataSize is the in-capsule data an admin queue command
	// may carry: the Linux host assumes 8 KiB (NVME_TCP_ADMIN_CCSZ)
	// without asking.
	AdminInlineDataSize = 8192
	// DefaultInlineDataSize is the in-capsule data an I/O queue command
	// may carry (nvmet-tcp: 4 pages).
	DefaultInlineDataSize = 16384
	// MaxInlineDataSize bounds the configurable in-capsule data size.
	MaxInlineDataSize = 1 << 20
	// DefaultMaxQueueSize is the largest I/O queue a host may open (as
	// nvmet-tcp and the target's default MQES). Slots get their buffers
	// when first used, and the most recently freed is used first, so a
	// queue holds buffers for the commands the host keeps in flight.
	DefaultMaxQueueSize = 1024
	// DefaultMaxTransfer is the most data one command moves.
	DefaultMaxTransfer = 128 << 10
	// MaxH2CData is the most data the host may put in one H2CData PDU
	// (ICResp MAXH2CDATA; nvmet-tcp's value).
	MaxH2CData = 0x400000
	// DefaultConnectTimeout bounds the time from the TCP connection to
	// the success of the queue's Fabrics Connect.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMaxPending bounds the connections of a port between TCP
	// accept and the ICReq/first capsule exchange.
	DefaultMaxPending = 256
)

// targetPreConnectData bounds the data of a command before the queue's Connect
// succeeded: the Connect's 1024 bytes fit, and the admin queue's
// in-capsule size is what a host may send regardless.
const targetPreConnectData = AdminInlineDataSize

// ErrConnectTimeout is why the target closes a queue whose Fabrics
// Connect did not succeed within the connect timeout.
var ErrConnectTimeout = errors.New("nvme-tcp: no Fabrics Connect within the connect timeout")

// ErrListenerClosed is returned by Accept after Close.
var ErrListenerClosed = errors.New("nvme-tcp: listener closed")

// TargetConfig configures an NVMe/TCP target port.
type TargetConfig struct {
	// Addr is the address to listen on; ServiceID the TCP port (4420 by
	// default; 0 after normalisation never: use Listener.Address for the
	// port an ephemeral listen got).
	Addr      netip.Addr
	ServiceID uint16
	// Ephemeral listens on a free port instead of ServiceID (tests).
	Ephemeral bool
	// InlineDataSize is the in-capsule data size of I/O queues (0 means
	// DefaultInlineDataSize; negative means none).
	InlineDataSize int
	MaxQueueSize   int // 0 means DefaultMaxQueueSize
	MaxTransfer    int // 0 means DefaultMaxTransfer
	// ConnectTimeout bounds the time from TCP accept to the success of the
	// queue's Fabrics Connect; 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxPending bounds the connections still in their ICReq exchange;
	// beyond it new connections are closed at once. 0 means
	// DefaultMaxPending.
	MaxPending int
	// TOS sets the IP type of service (DSCP and ECN) of the port's
	// connections; negative leaves the system default.
	TOS    int
	Logger hclog.Logger
}

func (c *TargetConfig) normalize() error {
	if c.ServiceID == 0 && !c.Ephemeral {
		c.ServiceID = fabrics.DefaultServiceID
	}
	switch {
	case c.InlineDataSize == 0:
		c.InlineDataSize = DefaultInlineDataSize
	case c.InlineDataSize < 0:
		c.InlineDataSize = 0
	case c.InlineDataSize > MaxInlineDataSize:
		return fmt.Errorf("nvme-tcp: target: inline data size %d exceeds %d", c.InlineDataSize, MaxInlineDataSize)
	}
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = DefaultMaxQueueSize
	}
	if c.MaxQueueSize < 2 || c.MaxQueueSize > 1024 {
		return fmt.Errorf("nvme-tcp: target: max queue size %d outside 2..1024", c.MaxQueueSize)
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = DefaultMaxTransfer
	}
	if c.MaxTransfer < 4096 || c.MaxTransfer > 16<<20 {
		return fmt.Errorf("nvme-tcp: target: max transfer %d outside 4 KiB..16 MiB", c.MaxTransfer)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.ConnectTimeout < 0 || c.MaxPending < 0 {
		return fmt.Errorf("nvme-tcp: target: negative connect timeout %v or pending limit %d", c.ConnectTimeout, c.MaxPending)
	}
	if c.TOS > 255 {
		return fmt.Errorf("nvme-tcp: target: tos %d outside 0..255", c.TOS)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}

// Listener is an NVMe/TCP target port. It implements fabrics.Listener.
type Listener struct {
	cfg  TargetConfig
	ln   net.Listener
	addr fabrics.Address
	log  hclog.Logger

	ready   chan *TargetQueue // queues past their ICReq and first capsule
	pending chan struct{}     // a token per connection in its handshake
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu         sync.Mutex
	handshakes map[*net.TCPConn]struct{} // connections in their handshake, closed by Close
}

var _ fabrics.Listener = (*Listener)(nil)

// Listen opens an NVMe/TCP target port.
func Listen(cfg TargetConfig) (*Listener, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{}
	if cfg.TOS >= 0 {
		tos := cfg.TOS
		lc.Control = func(network, _ string, c syscall.RawConn) error { return setTargetTOS(network, c, tos) }
	}
	ap := netip.AddrPortFrom(cfg.Addr, cfg.ServiceID)
	ln, err := lc.Listen(context.Background(), "tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("nvme-tcp: listen %s: %w", ap, err)
	}
	got := ln.Addr().(*net.TCPAddr).AddrPort()
	l := &Listener{
		cfg:     cfg,
		ln:      ln,
		addr:    fabrics.Address{Transport: fabrics.TransportTCP, Addr: cfg.Addr, ServiceID: got.Port()},
		log:     cfg.Logger,
		ready:   make(chan *TargetQueue),
		pending: make(chan struct{}, cfg.MaxPending),
		done:    make(chan struct{}),

		handshakes: map[*net.TCPConn]struct{}{},
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// setTargetTOS sets IP_TOS (IPv4) or IPV6_TCLASS on a socket; accepted sockets
// inherit it from the listening one.
func setTargetTOS(network string, c syscall.RawConn, tos int) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if network == "tcp6" {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, tos)
			return
		}
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, tos)
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("nvme-tcp: set tos %d: %w", tos, serr)
	}
	return nil
}

// Address implements fabrics.Listener.
func (l *Listener) Address() fabrics.Address { return l.addr }

// Accept implements fabrics.Listener: it returns a queue whose host has
// completed the ICReq exchange and sent its first command capsule, the
// Connect that names the queue (QID and size).
func (l *Listener) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	select {
	case q := <-l.ready:
		return q, nil
	case <-l.done:
		return nil, ErrListenerClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close implements fabrics.Listener: connections still in their handshake
// are closed; queues already accepted stay open.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.mu.Lock()
		for c := range l.handshakes {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
			default:
				l.log.Error("accept failed, port stops", "error", err)
			}
			return
		}
		select {
		case l.pending <- struct{}{}:
		default:
			l.log.Warn("too many connections in their handshake: connection closed", "remote", c.RemoteAddr().String(), "limit", l.cfg.MaxPending)
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(c.(*net.TCPConn))
	}
}

// handshake runs the ICReq exchange and reads the first capsule's header
// (the Connect's SQE) under the connect deadline, then hands the queue to
// Accept. It holds a pending token meanwhile.
func (l *Listener) handshake(c *net.TCPConn) {
	defer l.wg.Done()
	defer func() { <-l.pending }()
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		c.Close()
		return
	default:
	}
	l.handshakes[c] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.handshakes, c)
		l.mu.Unlock()
	}()
	start := time.Now()
	log := l.log.With("remote", c.RemoteAddr().String())
	c.SetDeadline(start.Add(l.cfg.ConnectTimeout))
	c.SetNoDelay(true)
	q, err := l.exchange(c, log)
	if err != nil {
		log.Warn("connection refused before its Connect", "error", err)
		c.Close()
		return
	}
	// The reader clears it once the Connect has succeeded; until then
	// it bounds the Connect's data too.
	q.connectBy = start.Add(l.cfg.ConnectTimeout)
	select {
	case l.ready <- q:
	case <-l.done:
		c.Close()
	}
}

// exchange answers the ICReq and reads the first capsule header.
func (l *Listener) exchange(c *net.TCPConn, log hclog.Logger) (*TargetQueue, error) {
	var ic [ICReqLen]byte
	if _, err := io.ReadFull(c, ic[:CommonHeaderLen]); err != nil {
		return nil, fmt.Errorf("ICReq: %w", err)
	}
	h := Header(ic[:CommonHeaderLen])
	if h.Type() != TypeICReq || h.HLen() != ICReqLen || h.PLen() != ICReqLen {
		targetSendTermReq(c, FESInvalidHeaderField, icreqFEI(h), ic[:CommonHeaderLen])
		return nil, fmt.Errorf("first PDU %s hlen %d plen %d, want an ICReq", h.Type(), h.HLen(), h.PLen())
	}
	if _, err := io.ReadFull(c, ic[CommonHeaderLen:]); err != nil {
		return nil, fmt.Errorf("ICReq: %w", err)
	}
	req := ICReq(ic[:])
	hpda, fei, err := CheckICReq(req)
	if err != nil {
		targetSendTermReq(c, FESInvalidHeaderField, fei, ic[:])
		return nil, err
	}
	resp := ICResp(make([]byte, ICReqLen))
	rh := Header(resp)
	rh.SetType(TypeICResp)
	rh.SetHLen(ICReqLen)
	rh.SetPLen(ICReqLen)
	resp.SetPFV(0)
	resp.SetCPDA(0)
	resp.SetDGST(req.DGST() & (DGSTHeader | DGSTData))
	resp.SetMaxH2CData(MaxH2CData)
	if _, err := c.Write(resp); err != nil {
		return nil, fmt.Errorf("ICResp: %w", err)
	}
	q := newTargetQueue(l, c, hpda, req.DGST()&DGSTHeader != 0, req.DGST()&DGSTData != 0, log)
	if err := q.readFirstCapsule(); err != nil {
		return nil, err
	}
	log.Debug("queue handshake done", "qid", q.params.QID, "sqsize", q.params.SQSize,
		"hdgst", q.hdgst, "ddgst", q.ddgst, "hpda", hpda)
	return q, nil
}

// CheckICReq checks an ICReq as the target must (PFV 0, HPDA at most 31,
// reserved DGST bits clear) and returns its HPDA; on error fei is the
// byte offset of the bad field, for the C2HTermReq.
func CheckICReq(r ICReq) (hpda uint8, fei uint32, err error) {
	if len(r) < ICReqLen {
		return 0, 0, fmt.Errorf("nvme-tcp: ICReq of %d bytes: %w", len(r), ErrShort)
	}
	switch {
	case r.PFV() != 0:
		return 0, 8, fmt.Errorf("nvme-tcp: ICReq PFV %d, want 0", r.PFV())
	case r.HPDA() > 31:
		return 0, 10, fmt.Errorf("nvme-tcp: ICReq HPDA %d exceeds 31", r.HPDA())
	case r.DGST()&^(DGSTHeader|DGSTData) != 0:
		return 0, 11, fmt.Errorf("nvme-tcp: ICReq DGST %#x has reserved bits", r.DGST())
	}
	return r.HPDA(), 0, nil
}

// icreqFEI is the FEI of a first PDU that is no ICReq: the offset of its
// first bad field (type, then HLEN, then PLEN).
func icreqFEI(h Header) uint32 {
	switch {
	case h.Type() != TypeICReq:
		return 0
	case h.HLen() != ICReqLen:
		return 2
	}
	return 4
}

// targetSendTermReq writes a C2HTermReq carrying up to 128 bytes of the PDU
// header in error (no digests: termination requests carry none), best
// effort, before the caller closes the connection.
func targetSendTermReq(w io.Writer, fes uint16, fei uint32, bad []byte) {
	b := AppendTermReq(nil, TypeC2HTermReq, fes, fei, bad)
	w.Write(b)
}

// AppendTermReq appends an H2CTermReq or C2HTermReq (type t) with the
// fatal error status and information and up to 128 bytes of the PDU header
// in error.
func AppendTermReq(dst []byte, t PDUType, fes uint16, fei uint32, bad []byte) []byte {
	bad = bad[:min(len(bad), MaxTermReqLen-TermReqHLen)]
	var hdr [TermReqHLen]byte
	h := Header(hdr[:])
	h.SetType(t)
	h.SetHLen(TermReqHLen)
	if len(bad) > 0 {
		h.SetPDO(TermReqHLen)
	}
	h.SetPLen(uint32(TermReqHLen + len(bad)))
	binary.LittleEndian.PutUint16(hdr[8:], fes)
	binary.LittleEndian.PutUint32(hdr[10:], fei)
	dst = append(dst, hdr[:]...)
	return append(dst, bad...)
}
