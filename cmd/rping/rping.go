package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibcm"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

// The rping protocol of rdma-core's librdmacm/examples/rping.c, spoken
// over either RDMA provider (rdma/provider):
//
//	client SEND  {start buf, rkey, size}     (struct rping_rdma_info, big-endian)
//	server RDMA READ of the client's start buffer
//	server SEND  "go ahead"
//	client SEND  {rdma buf, rkey, size}
//	server RDMA WRITE of what it read into the client's rdma buffer
//	server SEND  "go ahead"
//	client compares start and rdma buffers (-V), prints (-v), repeats
//
// The connection uses rdma_cm's RDMA_PS_TCP port space (service ID
// 0x0000000001060000 + port) with responder resources and initiator depth
// 1 and retry/RNR retry counts 7, as rping_init_conn_param.

// Limits and defaults of rping.c.
const (
	defaultPort  = 7174
	defaultSize  = 64
	rpingBufSize = 64 * 1024 // RPING_BUFSIZE: sizes must stay below it
	rpingMinSize = 26        // RPING_MIN_BUFSIZE: sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	sqDepth      = 16        // RPING_SQ_DEPTH
	infoLen      = 16        // sizeof(struct rping_rdma_info)
)

// config is what the command line asks for.
type config struct {
	server     bool
	addr       netip.Addr // -a: the server's address
	source     netip.Addr // -I: the client's address (default: the route's source)
	port       uint16
	count      int // 0: forever
	size       int
	verbose    bool
	validate   bool
	persistent bool
	mtu        int    // soft device MTU cap (0: from the interface)
	provider   string // RDMA provider: auto ("" too), soft or ibverbs
	device     string // ibverbs device name ("": the one holding the address)
	tos        int    // IP type of service (-t); negative: the provider's default
	log        hclog.Logger
	out        io.Writer // ping data (-v)
	errOut     io.Writer // rping's stderr messages
	listening  func()    // called once the server listens (tests)
}

// rdmaInfo is struct rping_rdma_info: be64 buf, be32 rkey, be32 size.
type rdmaInfo struct {
	buf  uint64
	rkey uint32
	size uint32
}

func (i rdmaInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], i.buf)
	binary.BigEndian.PutUint32(b[8:], i.rkey)
	binary.BigEndian.PutUint32(b[12:], i.size)
}

func parseInfo(b []byte) rdmaInfo {
	return rdmaInfo{binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

// device opens the RDMA device on a with cfg's provider and returns it
// with its connection manager: the device's own if it has one (ibverbs
// has librdmacm, soft its InfiniBand CM), else one of rdma/ibcm made here.
func device(cfg *config, a netip.Addr) (rdma.Device, rdma.ConnManager, func(), error) {
	log := cfg.log
	pc := provider.Config{Provider: cfg.provider, Device: cfg.device, Addr: a, MTU: cfg.mtu, Logger: log.Named("rdma")}
	if cfg.tos >= 0 {
		pc.TOS, pc.SetTOS = uint8(cfg.tos), true
	}
	dev, err := provider.Open(pc)
	if err != nil {
		return nil, nil, nil, err
	}
	log.Debug("RDMA device", provider.Describe(dev).LogArgs()...)
	cm, err := dev.ConnManager()
	if errors.Is(err, rdma.ErrNotSupported) {
		m, merr := ibcm.New(dev, ibcm.Options{Logger: log.Named("cm")})
		if merr != nil {
			dev.Close()
			return nil, nil, nil, merr
		}
		return dev, m, func() { m.Destroy(); dev.Close() }, nil
	}
	if err != nil {
		dev.Close()
		return nil, nil, nil, err
	}
	return dev, cm, func() { cm.Close(); dev.Close() }, nil
}

// routeSource returns the local address the kernel would send from to
// reach dst (a connected UDP socket sends nothing).
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.Dial("udp", net.JoinHostPort(dst.String(), "4791"))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, err
	}
	return ap.Addr().Unmap(), nil
}

// endpoint is one side's verbs objects for one connection.
type endpoint struct {
	cfg     *config
	pd      rdma.PD
	cq      rdma.CQ
	qp      rdma.QP
	recvMR  rdma.MR // struct rping_rdma_info received
	sendMR  rdma.MR // struct rping_rdma_info sent
	rdmaMR  rdma.MR // the sink: RDMA READ target (server), RDMA WRITE target (client)
	startMR rdma.MR // the client's source, read by the server
	wc      [4]rdma.WorkCompletion
	pending []rdma.WorkCompletion
}

func newEndpoint(cfg *config, dev rdma.Device) (*endpoint, error) {
	e := &endpoint{cfg: cfg}
	port := provider.Describe(dev).PortNum()
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(sqDepth * 2); err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: rdma.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if e.recvMR, err = e.pd.RegMR(make([]byte, infoLen), rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	if e.sendMR, err = e.pd.RegMR(make([]byte, infoLen), 0); err != nil {
		return nil, err
	}
	remote := rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite
	if e.rdmaMR, err = e.pd.RegMR(make([]byte, cfg.size), remote); err != nil {
		return nil, err
	}
	if !cfg.server {
		if e.startMR, err = e.pd.RegMR(make([]byte, cfg.size), remote); err != nil {
			return nil, err
		}
	}
	// INIT now, so that the receive is posted before the peer can send
	// (rdma_create_qp leaves the QP in INIT the same way).
	if err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, Port: uint8(port), AccessFlags: rdma.AccessRemoteRead | rdma.AccessRemoteWrite},
		rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags); err != nil {
		return nil, err
	}
	return e, e.postRecv()
}

func (e *endpoint) close() {
	if e.qp != nil {
		e.qp.Destroy()
	}
	for _, mr := range []rdma.MR{e.recvMR, e.sendMR, e.rdmaMR, e.startMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if e.cq != nil {
		e.cq.Destroy()
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
}

func sge(mr rdma.MR, n int) []rdma.SGE {
	return []rdma.SGE{{Addr: mr.Addr(), Length: uint32(n), LKey: mr.LKey()}}
}

func (e *endpoint) postRecv() error {
	return e.qp.PostRecv(&rdma.RecvWR{WRID: 1, SGL: sge(e.recvMR, infoLen)})
}

// sendInfo SENDs struct rping_rdma_info naming mr (rping_format_send).
func (e *endpoint) sendInfo(mr rdma.MR) error {
	if mr != nil {
		rdmaInfo{buf: mr.Addr(), rkey: mr.RKey(), size: uint32(e.cfg.size)}.put(e.sendMR.Bytes())
		e.cfg.log.Debug("RDMA addr", "addr", fmt.Sprintf("%#x", mr.Addr()), "rkey", fmt.Sprintf("%#x", mr.RKey()), "len", e.cfg.size)
	}
	return e.qp.PostSend(&rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: sge(e.sendMR, infoLen)})
}

// errDisconnected ends the ping loop when the peer disconnected.
var errDisconnected = errors.New("disconnected")

// next returns the next completion other than a SEND's, as
// rping_cq_event_handler handles them: receives are reposted at once.
func (e *endpoint) next(ctx context.Context) (rdma.WorkCompletion, error) {
	for {
		if len(e.pending) == 0 {
			n := e.cq.Poll(e.wc[:])
			if n == 0 {
				if err := e.cq.Wait(ctx); err != nil {
					return rdma.WorkCompletion{}, err
				}
				continue
			}
			e.pending = append(e.pending[:0], e.wc[:n]...)
		}
		wc := e.pending[0]
		e.pending = e.pending[1:]
		if wc.Status == rdma.WRFlushError {
			return wc, errDisconnected
		}
		if wc.Status != rdma.Success {
			return wc, fmt.Errorf("cq completion failed status %d (%s)", wc.Status, wc.Status)
		}
		switch wc.Opcode {
		case rdma.WCSend:
			e.cfg.log.Debug("send completion")
			continue
		case rdma.WCRecv:
			e.cfg.log.Debug("recv completion")
			if wc.ByteLen != infoLen {
				return wc, fmt.Errorf("received bogus data, size %d", wc.ByteLen)
			}
			if err := e.postRecv(); err != nil {
				return wc, fmt.Errorf("post recv error: %w", err)
			}
		case rdma.WCRDMARead:
			e.cfg.log.Debug("rdma read completion")
		case rdma.WCRDMAWrite:
			e.cfg.log.Debug("rdma write completion")
		default:
			return wc, fmt.Errorf("unknown completion opcode %v", wc.Opcode)
		}
		return wc, nil
	}
}

// expect waits for a completion of opcode op.
func (e *endpoint) expect(ctx context.Context, op rdma.WCOpcode, what string) (rdma.WorkCompletion, error) {
	wc, err := e.next(ctx)
	if err != nil {
		return wc, err
	}
	if wc.Opcode != op {
		return wc, fmt.Errorf("wait for %s: got a %v completion", what, wc.Opcode)
	}
	return wc, nil
}

func connParam() rdma.ConnParam {
	return rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, FlowControl: true}
}

// runServer listens on cfg.addr:cfg.port and serves one connection (or,
// persistent, every connection until ctx ends), as rping -s.
func runServer(ctx context.Context, cfg *config) error {
	dev, cm, closeDev, err := device(cfg, cfg.addr)
	if err != nil {
		return err
	}
	defer closeDev()
	l, err := cm.Listen(cfg.port)
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer l.Close()
	cfg.log.Debug("rdma_listen", "addr", l.Addr())
	if cfg.listening != nil {
		cfg.listening()
	}
	if !cfg.persistent {
		req, err := l.Next(ctx)
		if err != nil {
			return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
		}
		return serveConn(ctx, cfg, dev, req)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := l.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveConn(ctx, cfg, dev, req); err != nil {
				fmt.Fprintf(cfg.errOut, "rping server failed: %v\n", err)
			}
		}()
	}
}

// serveConn accepts req and runs rping_test_server until the client disconnects.
func serveConn(ctx context.Context, cfg *config, dev rdma.Device, req rdma.ConnRequest) error {
	cfg.log.Debug("child cma", "remote", req.RemoteAddr())
	e, err := newEndpoint(cfg, dev)
	if err != nil {
		req.Reject(nil)
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer e.close()
	conn, err := req.Accept(ctx, e.qp, nil, connParam())
	if err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	cfg.log.Debug("accepted", "remote", conn.RemoteAddr())
	err = testServer(ctx, e)
	if errors.Is(err, errDisconnected) {
		fmt.Fprintln(cfg.errOut, "server DISCONNECT EVENT...")
		err = nil
	}
	if derr := conn.Disconnect(ctx); err == nil && derr != nil && ctx.Err() == nil {
		err = derr
	}
	return err
}

// testServer is rping_test_server.
func testServer(ctx context.Context, e *endpoint) error {
	for {
		// The client's source advertisement.
		if _, err := e.expect(ctx, rdma.WCRecv, "RDMA_READ_ADV"); err != nil {
			return err
		}
		src := parseInfo(e.recvMR.Bytes())
		e.cfg.log.Debug("Received rkey addr len from peer", "rkey", fmt.Sprintf("%#x", src.rkey), "addr", fmt.Sprintf("%#x", src.buf), "len", src.size)
		n := min(int(src.size), e.rdmaMR.Len())
		if err := e.qp.PostSend(&rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: sge(e.rdmaMR, n),
			RemoteAddr: src.buf, RKey: src.rkey}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := e.expect(ctx, rdma.WCRDMARead, "RDMA_READ_COMPLETE"); err != nil {
			return err
		}
		data := e.rdmaMR.Bytes()
		if e.cfg.verbose {
			fmt.Fprintf(e.cfg.out, "server ping data: %s\n", cstring(data))
		}
		// Go ahead.
		if err := e.sendInfo(nil); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		// The client's sink advertisement.
		if _, err := e.expect(ctx, rdma.WCRecv, "RDMA_WRITE_ADV"); err != nil {
			return err
		}
		sink := parseInfo(e.recvMR.Bytes())
		n = min(len(cstring(data))+1, len(data), int(sink.size))
		if err := e.qp.PostSend(&rdma.SendWR{WRID: 4, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: sge(e.rdmaMR, n),
			RemoteAddr: sink.buf, RKey: sink.rkey}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := e.expect(ctx, rdma.WCRDMAWrite, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		// Go ahead again.
		if err := e.sendInfo(nil); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
	}
}

// cstring returns b up to its first NUL.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// fillPing writes ping number n into buf as rping_test_client does:
// "rdma-ping-N: " and then letters from start on, cycling 'A'..'z',
// with a terminating NUL.
func fillPing(buf []byte, n int, start byte) {
	cc := copy(buf, "rdma-ping-"+strconv.Itoa(n)+": ")
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	buf[len(buf)-1] = 0
}

// runClient connects to cfg.addr:cfg.port and pings, as rping -c.
func runClient(ctx context.Context, cfg *config) error {
	src := cfg.source
	if !src.IsValid() {
		var err error
		if src, err = routeSource(cfg.addr); err != nil {
			return fmt.Errorf("rdma_resolve_addr: %w", err)
		}
	}
	dev, cm, closeDev, err := device(cfg, src)
	if err != nil {
		return err
	}
	defer closeDev()
	e, err := newEndpoint(cfg, dev)
	if err != nil {
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer e.close()
	conn, err := cm.Connect(ctx, cfg.addr, cfg.port, e.qp, nil, connParam())
	if err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	cfg.log.Debug("rdma_connect successful", "local", conn.LocalAddr(), "remote", conn.RemoteAddr())
	err = testClient(ctx, e)
	if errors.Is(err, errDisconnected) {
		fmt.Fprintln(cfg.errOut, "client DISCONNECT EVENT...")
	}
	if derr := conn.Disconnect(ctx); err == nil {
		err = derr
	}
	return err
}

// testClient is rping_test_client.
func testClient(ctx context.Context, e *endpoint) error {
	start := byte(65)
	for ping := 0; e.cfg.count == 0 || ping < e.cfg.count; ping++ {
		fillPing(e.startMR.Bytes(), ping, start)
		start++
		if start > 122 {
			start = 65
		}
		if err := e.sendInfo(e.startMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		// Wait for the server to ACK (its RDMA READ is done).
		if _, err := e.expect(ctx, rdma.WCRecv, "RDMA_WRITE_ADV"); err != nil {
			return err
		}
		if err := e.sendInfo(e.rdmaMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		// Wait for the server to say the RDMA WRITE is complete.
		if _, err := e.expect(ctx, rdma.WCRecv, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		if e.cfg.validate && !bytes.Equal(e.startMR.Bytes(), e.rdmaMR.Bytes()) {
			fmt.Fprintln(e.cfg.errOut, "data mismatch!")
			return fmt.Errorf("ping %d: data mismatch", ping)
		}
		if e.cfg.verbose {
			fmt.Fprintf(e.cfg.out, "ping data: %s\n", cstring(e.rdmaMR.Bytes()))
		}
	}
	return nil
}
