package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Host defaults.
const (
	// DefaultHostMaxTransfer is the most data one command moves unless
	// HostConfig says otherwise (the initiator also splits at MDTS).
	DefaultHostMaxTransfer = 1 << 20
	// AdminInCapsuleDataSize is the in-capsule data size of an admin
	// queue: the NVMe/TCP specification fixes it at 8 KiB (Linux
	// NVME_TCP_ADMIN_CCSZ), so Connect's data goes in its capsule.
	AdminInCapsuleDataSize = 8192
	// MinMaxH2CData is the smallest MAXH2CDATA a controller may announce.
	MinMaxH2CData = 4096
	// hostMaxDepth bounds a host queue's depth (Linux nvme-tcp's 1024).
	hostMaxDepth = 1024
)

// HostConfig configures the host side of NVMe/TCP.
type HostConfig struct {
	// HeaderDigest and DataDigest ask for CRC-32C header and data digests
	// on every queue (nvme-cli's --hdr-digest and --data-digest). A
	// controller that does not grant what was asked fails the dial, as
	// with Linux.
	HeaderDigest, DataDigest bool
	// MaxTransfer is the most data one command moves (0 means
	// DefaultHostMaxTransfer).
	MaxTransfer int
	// MaxInlineDataSize caps the in-capsule data of an I/O command below
	// what the controller's IOCCSZ allows (0: no cap; negative: none).
	MaxInlineDataSize int
	// LocalAddr is the source address of the connections (nvme-cli's
	// --host-traddr); the zero value lets the kernel choose.
	LocalAddr netip.Addr
	// TOS, when SetTOS, is the IP type of service (IPv6 traffic class)
	// of the connections' packets (nvme-cli's --tos).
	TOS    uint8
	SetTOS bool
	Logger hclog.Logger
}

// Dialer opens NVMe/TCP queues from a host. It implements fabrics.Dialer.
type Dialer struct{ Config HostConfig }

// NewDialer returns a dialer for cfg.
func NewDialer(cfg HostConfig) *Dialer { return &Dialer{Config: cfg} }

var _ fabrics.Dialer = (*Dialer)(nil)

// hostParams are what ICReq/ICResp settled for a connection.
type hostParams struct {
	hdgst, ddgst bool
	cpda         uint8  // controller PDU data alignment, 0's based dwords
	maxH2CData   uint32 // most data bytes in one H2CData PDU
}

// Dial implements fabrics.Dialer: it opens one TCP connection to addr and
// initializes it (ICReq/ICResp); the initiator then sends Connect on it.
func (d *Dialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	cfg := d.Config
	if cfg.MaxTransfer <= 0 {
		cfg.MaxTransfer = DefaultHostMaxTransfer
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if p.SQSize < 2 || p.SQSize > hostMaxDepth+1 {
		return nil, fmt.Errorf("nvme-tcp: queue %d: SQ size %d outside 2..%d", p.QID, p.SQSize, hostMaxDepth+1)
	}
	if addr.ServiceID == 0 {
		addr.ServiceID = fabrics.DefaultServiceID
	}
	nd := net.Dialer{Control: cfg.control}
	if cfg.LocalAddr.IsValid() {
		nd.LocalAddr = &net.TCPAddr{IP: cfg.LocalAddr.AsSlice()}
	}
	where := netip.AddrPortFrom(addr.Addr, addr.ServiceID).String()
	conn, err := nd.DialContext(ctx, "tcp", where)
	if err != nil {
		return nil, fmt.Errorf("nvme-tcp: queue %d to %s: %w", p.QID, addr, err)
	}
	tc := conn.(*net.TCPConn)
	hp, err := hostHandshake(ctx, tc, cfg.HeaderDigest, cfg.DataDigest)
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("nvme-tcp: queue %d to %s: %w", p.QID, addr, err)
	}
	// Out of the netpoller from here on (host_sock.go): the handshake
	// above used it for its deadlines and context.
	sock, err := detach(tc)
	if err != nil {
		return nil, fmt.Errorf("nvme-tcp: queue %d to %s: %w", p.QID, addr, err)
	}
	q := newHostQueue(cfg, addr, p, sock, hp)
	cfg.Logger.Debug("queue connected", "qid", p.QID, "target", where, "depth", q.depth,
		"hdgst", hp.hdgst, "ddgst", hp.ddgst, "cpda", hp.cpda, "maxh2cdata", hp.maxH2CData)
	go q.readLoop()
	go q.writeLoop()
	return q, nil
}

// control sets the socket options of a connection before it connects:
// the IP TOS (IPv6 traffic class) when asked.
func (cfg *HostConfig) control(network, _ string, rc syscall.RawConn) error {
	if !cfg.SetTOS {
		return nil
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		if network == "tcp6" {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, int(cfg.TOS))
		} else {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, int(cfg.TOS))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("set TOS %d: %w", cfg.TOS, err)
	}
	return nil
}

// ErrTerminated is wrapped by the error of a connection the controller
// ended with a C2HTermReq.
var ErrTerminated = errors.New("nvme-tcp: connection terminated by the controller")

// hostHandshake sends ICReq (PFV 0, HPDA 0, one R2T per command, the
// digests asked for) and checks the ICResp, within ctx.
func hostHandshake(ctx context.Context, conn net.Conn, hdgst, ddgst bool) (hostParams, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		stop()
		conn.SetDeadline(time.Time{})
	}()
	req := New(TypeICReq, 0)
	ic := req.ICReq()
	ic.SetPFV(0)
	ic.SetHPDA(0)
	ic.SetMaxR2T(0) // one R2T outstanding per command, as Linux
	var dg uint8
	if hdgst {
		dg |= DGSTHeader
	}
	if ddgst {
		dg |= DGSTData
	}
	ic.SetDGST(dg)
	if _, err := conn.Write(req); err != nil {
		return hostParams{}, handshakeErr(ctx, "send ICReq", err)
	}
	buf := make([]byte, MaxTermReqLen)
	if _, err := io.ReadFull(conn, buf[:CommonHeaderLen]); err != nil {
		return hostParams{}, handshakeErr(ctx, "read ICResp", err)
	}
	plen := Header(buf).PLen()
	if plen < CommonHeaderLen || plen > uint32(len(buf)) {
		return hostParams{}, fmt.Errorf("ICResp: %s with PLEN %d", Header(buf).Type(), plen)
	}
	if _, err := io.ReadFull(conn, buf[CommonHeaderLen:plen]); err != nil {
		return hostParams{}, handshakeErr(ctx, "read ICResp", err)
	}
	return parseICResp(buf[:plen], hdgst, ddgst)
}

func handshakeErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline is the context's: it may trip
		// before the context's own timer.
		return fmt.Errorf("%s: %w", what, context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// parseICResp checks the controller's answer to ICReq: an ICResp of PFV 0
// that grants exactly the digests asked for (nvme_tcp_init_connection),
// with a MAXH2CDATA of at least 4 KiB in whole dwords, or a C2HTermReq.
func parseICResp(b []byte, hdgst, ddgst bool) (hostParams, error) {
	p, err := Parse(b)
	if err != nil {
		return hostParams{}, fmt.Errorf("ICResp: %w", err)
	}
	switch p.Type() {
	case TypeICResp:
	case TypeC2HTermReq:
		tr := p.TermReq()
		return hostParams{}, fmt.Errorf("ICReq refused: FES %#x FEI %#x: %w", tr.FES(), tr.FEI(), ErrTerminated)
	default:
		return hostParams{}, fmt.Errorf("%s in answer to ICReq", p.Type())
	}
	r := p.ICResp()
	if r.PFV() != 0 {
		return hostParams{}, fmt.Errorf("ICResp: PDU format version %d, want 0", r.PFV())
	}
	hp := hostParams{
		hdgst:      r.DGST()&DGSTHeader != 0,
		ddgst:      r.DGST()&DGSTData != 0,
		cpda:       r.CPDA(),
		maxH2CData: r.MaxH2CData(),
	}
	if hp.hdgst != hdgst {
		return hostParams{}, fmt.Errorf("ICResp: header digest %s, asked %s", onOff(hp.hdgst), onOff(hdgst))
	}
	if hp.ddgst != ddgst {
		return hostParams{}, fmt.Errorf("ICResp: data digest %s, asked %s", onOff(hp.ddgst), onOff(ddgst))
	}
	if hp.cpda > 31 {
		return hostParams{}, fmt.Errorf("ICResp: CPDA %d above 31", hp.cpda)
	}
	if hp.maxH2CData < MinMaxH2CData || hp.maxH2CData%4 != 0 {
		return hostParams{}, fmt.Errorf("ICResp: MAXH2CDATA %d (want a multiple of 4, at least %d)", hp.maxH2CData, MinMaxH2CData)
	}
	return hp, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
