//go:build linux

package soft

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Per-QP UDP source ports (flow entropy).
//
// RoCEv2 carries the flow label in the UDP source port: switches hash the
// UDP 5-tuple to pick an ECMP path, and a receiver's NIC or kernel hashes
// it to pick a queue. As Linux rxe does, every QP sends from its own
// source port in [0xC000, 0xFFFF], to destination port 4791:
//
//   - At creation (every QP type), rxe_qp_init_req's
//     0xC000 + hash_32(qpn, 14).
//   - An RC QP modified with an address vector gets rxe_modify_qp's
//     rdma_get_udp_sport(flow label, qpn, dest QPN): the flow label the
//     connection manager put in the path (ibcm copies rdma_cm's), or, if
//     it is 0, rdma_calc_flow_label(qpn, dest QPN), which both ends of
//     a connection compute alike.
//
// Sending from a port other than the device's needs a socket bound to
// it: a UDP socket cannot pick its source port per datagram. The device
// keeps one send-only UDP socket per source port in use (sockets are
// shared by QPs whose ports collide and closed with the last of them),
// bound to addr:port with the options of the main socket and a drop-all
// filter (nothing is ever sent to it; bound, it keeps the kernel from
// answering ICMP port unreachable should anything be). It needs no
// privilege on any address. If the port cannot be bound (another socket
// holds it: these are ephemeral ports), the QP sends from the device's
// port, as before, and Stats.SourcePortFallbacks counts it.
// Config.FixedSourcePort sends every packet from the device's port.
//
// Receivers do not care which source port a packet comes from: the ICRC
// covers it, and a soft device in GSO mode rebuilds it from msg_name.

const (
	// sportBase is RXE_ROCE_V2_SPORT and IB_ROCE_UDP_ENCAP_VALID_PORT_MIN.
	sportBase = 0xc000
	// goldenRatio32 is the kernel's GOLDEN_RATIO_32 (hash_32_generic).
	goldenRatio32 = 0x61c88647
	// flowLabelMask is IB_GRH_FLOWLABEL_MASK.
	flowLabelMask = 0xfffff
)

// qpSourcePort returns the UDP source port rxe gives a new QP
// (rxe_qp_init_req): 0xC000 + hash_32(qpn, 14).
func qpSourcePort(qpn uint32) uint16 {
	return sportBase + uint16((qpn*goldenRatio32)>>(32-14))&0x3fff
}

// calcFlowLabel is rdma_calc_flow_label: a flow label both ends of a
// connection compute alike from the two QP numbers.
func calcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & flowLabelMask)
}

// flowLabelSourcePort is rdma_flow_label_to_udp_sport: the 20-bit flow
// label folded into the 14 low bits of a port in [0xC000, 0xFFFF].
func flowLabelSourcePort(fl uint32) uint16 {
	low, high := fl&0x3fff, fl&0xfc000
	low ^= high >> 14
	return uint16(low | sportBase)
}

// rcSourcePort is rdma_get_udp_sport: the source port of an RC QP lqpn
// connected to rqpn with flow label fl (0: none).
func rcSourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = calcFlowLabel(lqpn, rqpn)
	}
	return flowLabelSourcePort(fl)
}

// srcSock is a send-only UDP socket bound to one source port, shared by
// the QPs sending from that port.
type srcSock struct {
	port uint16
	// rc is the socket, outside the netpoller (sockConn): in it, every
	// datagram sent would wake the runtime's epoll when its buffer is
	// freed (EPOLLOUT).
	rc   *sockConn
	refs int // under sockets.srcMu
}

// setSourcePort makes q send from UDP port port: it takes the port's
// socket (opening it if need be) and lets go of the one q used before.
// q.mu is held.
func (q *qp) setSourcePort(port uint16) {
	d := q.dev
	if d.cfg.FixedSourcePort || (q.src != nil && q.src.port == port) {
		return
	}
	old := q.src
	q.src = d.socks.acquireSource(d.addr, port, &d.stats)
	d.socks.releaseSource(old)
}

// releaseSourcePort lets go of q's source port socket (Destroy).
func (q *qp) releaseSourcePort() {
	q.dev.socks.releaseSource(q.src)
	q.src = nil
}

// sourcePort returns the UDP port packets sent through src leave from.
func (d *Device) sourcePort(src *srcSock) uint16 {
	if src == nil {
		return d.port
	}
	return src.port
}

// acquireSource returns the socket bound to addr:port, opening it on first
// use, or nil (send from the main socket) if the port cannot be bound or
// is the device's own.
func (s *sockets) acquireSource(addr netip.Addr, port uint16, st *counters) *srcSock {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	if s.closed || port == s.localPort() {
		return nil
	}
	if c := s.srcs[port]; c != nil {
		c.refs++
		return c
	}
	c, err := s.openSource(addr, port)
	if err != nil {
		st.sourcePortFallbacks.Add(1)
		return nil
	}
	if s.srcs == nil {
		s.srcs = make(map[uint16]*srcSock)
	}
	s.srcs[port] = c
	return c
}

// releaseSource drops one reference to c (nil: none), closing it with the
// last one.
func (s *sockets) releaseSource(c *srcSock) {
	if c == nil {
		return
	}
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	c.refs--
	if c.refs > 0 {
		return
	}
	if s.srcs[c.port] == c {
		delete(s.srcs, c.port)
	}
	c.rc.close()
}

// closeSources closes every source port socket (device Close); QPs that
// still hold one get send errors from then on.
func (s *sockets) closeSources() {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	s.closed = true
	for p, c := range s.srcs {
		c.rc.close()
		delete(s.srcs, p)
	}
}

// openSource opens the send-only socket of source port port: the main
// socket's send options (net_linux.go), a drop-all filter, no
// SO_REUSEADDR (a socket sharing the port could lose its datagrams to
// ours).
func (s *sockets) openSource(addr netip.Addr, port uint16) (*srcSock, error) {
	v6, noCheck := s.v6, !s.gsoMode && !s.v6
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = setSendOptions(fd, v6)
			if serr == nil && noCheck {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
			}
			if serr == nil {
				serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &dropAll[0]})
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	network := "udp4"
	if v6 {
		network = "udp6"
	}
	var pc net.PacketConn
	err := s.inNetns(func() (err error) {
		pc, err = lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, port).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("soft: source port socket %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	c := &srcSock{port: port, refs: 1}
	if c.rc, err = detach(pc); err != nil {
		return nil, fmt.Errorf("soft: source port socket %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	return c, nil
}

// inNetns runs f, which opens a socket, in the network namespace the
// device's sockets were opened in: on the calling thread if it is there
// (as in any process that stays in one namespace), else on a thread that
// enters it and ends with f. A source port socket opened in another
// namespace would send from another host.
func (s *sockets) inNetns(f func() error) error {
	if s.netns == nil {
		return f()
	}
	runtime.LockOSThread()
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil || (st.Dev == s.netnsDev && st.Ino == s.netnsIno) {
		defer runtime.UnlockOSThread()
		return f()
	}
	runtime.UnlockOSThread()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Setns(int(s.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("soft: entering the device's network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// openNetns records the network namespace of the calling thread, where
// the device's sockets are opened, for inNetns (nothing if it cannot be
// read: then later sockets open wherever the caller is).
func (s *sockets) openNetns() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		f.Close()
		return
	}
	s.netns, s.netnsDev, s.netnsIno = f, st.Dev, st.Ino
}

// setSendOptions sets what every sending socket of a device needs: no
// local fragmentation (so DF and, on IPv4, IP ID 0), on IPv6 flow label
// 0 as rxe sends, and a 4 MiB send buffer.
func setSendOptions(fd uintptr, v6 bool) error {
	if v6 {
		if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return err
		}
		// Before Linux 4.16 there is no such option: then the flow
		// label may be automatic, which the ICRC masks.
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_AUTOFLOWLABEL, 0)
	} else if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return err
	}
	if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	return nil
}
