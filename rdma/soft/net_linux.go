//go:build linux

package soft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// This file holds the device's sockets and the only use of package unsafe
// in the provider: handing mmsghdr arrays (with their control messages
// and addresses) to recvmmsg(2) and sendmmsg(2), which golang.org/x/sys/unix
// does not wrap. No wire data is converted with unsafe.
//
// Sending (IPv4): an unconnected UDP socket bound to addr:4791 with
// IP_MTU_DISCOVER=IP_PMTUDISC_DO, so Linux sends every datagram with DF
// set and IP ID 0 (ip_select_ident gives ID 0 to DF datagrams of
// unconnected sockets): the ICRC can be computed before sending.
//
// An IPv4 device with Config.DisableGSO (raw mode; the wire format of
// rxe, exactly):
//
//   - The UDP checksum is disabled (SO_NO_CHECK), as rxe sends it; the
//     ICRC is the end-to-end check. One datagram per packet.
//   - The UDP socket only keeps port 4791 bound, so that the kernel does
//     not answer ICMP port unreachable; a drop-all socket filter keeps
//     its receive queue empty.
//   - Receiving: a raw IPv4 socket for protocol UDP bound to addr (it
//     needs CAP_NET_RAW), whose classic BPF filter accepts only
//     unfragmented UDP datagrams to addr port 4791. It delivers the IP
//     header the sender's kernel wrote, which the ICRC covers (rxe
//     senders use changing IP IDs). What the socket queued before its
//     bind and filter took effect is drained at open.
//
// An IPv4 device on 127.0.0.0/8 without DisableGSO (GSO mode; gso.go has the
// rules, and the assumption about the senders):
//
//   - The UDP checksum stays on: udp_send_skb refuses GSO on a socket
//     with SO_NO_CHECK (on lo it is free, CHECKSUM_PARTIAL; the ICRC
//     masks it). Runs of packets to a loopback destination leave as one
//     sendmmsg message with a UDP_SEGMENT control message and one iovec
//     per packet (no copy). If the kernel refuses a GSO send, the device
//     goes back to one datagram per packet.
//   - Receiving: the UDP socket itself, with UDP_GRO (so the kernel hands
//     it GSO sends whole instead of segmenting them), no filter, and
//     recvmmsg with msg_name (source address and port) and a control
//     buffer for the UDP_GRO message (the segment size). Each buffer
//     leaves rxHeadroom bytes before the payload for the rebuilt IPv4
//     and UDP headers. No raw socket: opening such a device needs no
//     CAP_NET_RAW, nor any other privilege (port 4791 is not privileged;
//     checked as user nobody with no capabilities). If the kernel refuses
//     UDP_GRO (before Linux 5.0), the device opens in raw mode.

// An IPv4 device on any other address without DisableGSO (udp4 mode:
// GSO mode between machines, next to raw mode for rxe's packets):
//
//   - Sending as in GSO mode: runs of packets to any destination leave
//     as UDP GSO sends with the UDP checksum on (a NIC or the stack
//     segments them before the wire, giving segment k IP ID k; between
//     network namespaces a veth hands the receiver the send whole).
//   - Receiving: the UDP sockets, with UDP_GRO as in GSO mode and a
//     filter that takes only datagrams whose IP ID is 0 (read through
//     SKF_NET_OFF): those of soft devices, whose headers the receiver
//     rebuilds (gso.go). GRO may merge a flow of equal DF datagrams with
//     a fixed ID as well as counting IDs, so packet k > 0 of a merged
//     datagram that fails the ICRC with ID k is checked again with ID 0.
//   - One raw socket more (the last receive queue, CAP_NET_RAW) takes
//     the datagrams whose IP ID is not 0, rxe's, with the header they
//     came with, as in raw mode. A datagram goes to one path or the
//     other, never both. A GRO merge that starts after the first packet
//     of a GSO send (ID not 0, several packets in one datagram) cannot be
//     split there: its ICRC fails, and the requester's retransmission
//     recovers.

// A device on an IPv6 address (udp6 mode; any address, loopback or not):
//
//   - One UDP socket bound to [addr]:4791 does everything. An IPv6 header
//     has no field a receiver cannot know that the ICRC covers: traffic
//     class, flow label and hop limit are masked, the payload length is
//     the UDP length (rxe sends no extension headers, and a datagram that
//     came with some fails the ICRC, as in rxe, which reads the UDP header
//     right after the fixed header), next header is UDP, the source
//     address and port come in msg_name, and the destination address is
//     the one the socket is bound to (a socket bound to a unicast address
//     only receives datagrams to that address). So the receiver rebuilds
//     the exact header the ICRC covers from a plain UDP socket: no raw
//     socket, no CAP_NET_RAW, and every packet's ICRC is verified against
//     what came over the network (IPv6 raw sockets would not even show
//     the IPv6 header).
//   - UDP checksums: sent (Linux's default for IPv6, needed for GSO, and
//     required by receivers unless they opt out; rxe's tunnel socket
//     accepts both). Received: rxe sends checksum 0 over IPv6 too
//     (prepare_udp_hdr), which a UDP socket drops unless UDP_NO_CHECK6_RX
//     is set: it is. Non-zero checksums are still verified by the kernel.
//   - IPV6_MTU_DISCOVER=IPV6_PMTUDISC_DO (no local fragmentation) and
//     IPV6_AUTOFLOWLABEL off, so packets leave with flow label 0 as rxe's
//     do (the ICRC masks it either way).
//   - UDP_GRO on the socket unless Config.DisableGSO: a GSO send (from a
//     soft device on ::1 or across a veth) or a GRO merge arrives whole
//     with its segment size, and is cut and checked per segment as in GSO
//     mode; nothing about the sender is assumed, since no IPv6 field
//     differs between segments but the lengths. GSO sends go to any
//     destination (tx.go gsoRun): the kernel segments them for a
//     receiver without UDP_GRO (rxe), a NIC or the stack before the wire.

// Receive queues (Config.RecvQueues; rx.go and progress.go serve them): a
// device may read through several sockets, each served by its own
// receive goroutine. In GSO mode and on IPv6 they are UDP sockets bound
// to the same address and port with SO_REUSEPORT, with a classic BPF
// program (SO_ATTACH_REUSEPORT_CBPF) that picks the socket from the
// destination QP number of the first packet in the datagram; in raw mode,
// one raw socket per queue whose filter also requires destination QPN
// mod queues = its index. Either way every packet for one QP is read by
// one goroutine, in order.

// sockets is one device's sockets.
type sockets struct {
	// udp is the UDP socket packets leave from (unless a QP has a
	// source port of its own, sport.go), bound to port.
	udp  *sockConn
	port uint16
	// recv are the receive queues' sockets: in GSO mode and on IPv6,
	// recv[0] is udp and the others share its port (SO_REUSEPORT); in raw
	// mode raw sockets. None is in the netpoller (sockConn).
	recv []*sockConn
	// loopback: addr is in 127.0.0.0/8 (or ::1).
	loopback bool
	// v6: an IPv6 device (udp6 mode): it receives on its UDP socket.
	v6 bool
	// gsoMode: an IPv4 loopback device that sends runs with UDP GSO and
	// receives through its UDP socket (gso.go), otherwise raw mode; an
	// IPv6 device whose socket has UDP_GRO and that sends runs to ::1
	// with UDP GSO.
	gsoMode bool
	gso     gsoCounters
	// share is the device's place among the shared devices of its
	// address (nil: the device binds the port alone).
	share *shareGroup
	// assist: udp4 mode, an IPv4 device off loopback in GSO mode. Its
	// UDP sockets take the datagrams with IP ID 0 (every soft device
	// sends those, GSO runs included: gso.go), and one raw socket, receive
	// queue assistQueue, the others (rdma_rxe's, whose IDs the ICRC covers
	// and a UDP socket does not show).
	assist      bool
	assistQueue int
	// netns is the network namespace the sockets were opened in, where
	// sockets opened later go too (inNetns, sport.go).
	netns              *os.File
	netnsDev, netnsIno uint64

	// Source port sockets (sport.go), by port.
	srcMu  sync.Mutex
	srcs   map[uint16]*srcSock
	closed bool
}

// udpRecv reports whether the device receives on its UDP socket (GSO
// mode or IPv6) rather than through a raw socket.
func (s *sockets) udpRecv() bool { return s.gsoMode || s.v6 }

// localPort returns the UDP port the UDP socket is bound to.
func (s *sockets) localPort() uint16 { return s.port }

// openSockets opens the sockets of addr, binding UDP port port (0: any):
// for an IPv4 address in GSO mode if gso is set and addr is a loopback
// address, otherwise in raw mode; for an IPv6 address in udp6 mode (with
// UDP_GRO if gso is set); with queues receive sockets (at least 1).
// rcvbuf sets the receive buffer of each receiving socket
// (SO_RCVBUFFORCE, falling back to SO_RCVBUF).
//
// With share (a shared device, share_linux.go) every socket binds with
// SO_REUSEPORT, and the first device of the address checks that nothing
// else holds the port.
func openSockets(addr netip.Addr, port uint16, rcvbuf int, gso bool, queues int, share *shareGroup) (*sockets, error) {
	queues = max(queues, 1)
	s := &sockets{loopback: addr.IsLoopback(), v6: addr.Is6(), share: share, assistQueue: -1}
	s.gsoMode = gso
	s.assist = gso && !s.v6 && !s.loopback
	s.openNetns()
	reuse := share != nil || queues > 1 && s.udpRecv()
	if reuse && (share == nil || !share.others) {
		// SO_REUSEPORT would let a second device on the address join
		// the group instead of failing with EADDRINUSE: bind the port
		// once without it first (and learn it, if port is 0).
		p, err := probePort(addr, port)
		if err != nil {
			return nil, err
		}
		port = p
	}
	udp, err := s.listenUDP(addr, port, rcvbuf, reuse)
	if err != nil {
		return nil, err
	}
	s.udp = udp
	if s.udpRecv() {
		s.recv = append(s.recv, s.udp)
		if reuse {
			for i := 1; i < queues; i++ {
				u, err := s.listenUDP(addr, s.port, rcvbuf, true)
				if err != nil {
					s.close()
					return nil, err
				}
				s.recv = append(s.recv, u)
			}
			if share != nil {
				err = share.steerShared(s.recv)
			} else {
				err = s.steer(queues)
			}
			if err != nil {
				s.close()
				return nil, err
			}
		}
		if err := s.openAssist(addr, rcvbuf); err != nil {
			s.close()
			return nil, err
		}
		return s, nil
	}
	for i := 0; i < queues; i++ {
		if err := s.openRaw(addr, rcvbuf, rawFilterSpec{queue: i, queues: queues}); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// openAssist opens the raw socket of udp4 mode (an IPv4 device off
// loopback in GSO mode), which takes the datagrams whose IP ID is not 0,
// as its last receive queue; nothing for other devices.
func (s *sockets) openAssist(addr netip.Addr, rcvbuf int) error {
	if !s.assist || !s.gsoMode {
		s.assist = false
		return nil
	}
	if err := s.openRaw(addr, rcvbuf, rawFilterSpec{queue: -1, nonZeroID: true}); err != nil {
		return err
	}
	s.assistQueue = len(s.recv) - 1
	return nil
}

// queues returns the number of receive queues packets are steered to by
// QP number: all but udp4 mode's raw socket, which takes what is not a
// soft device's.
func (s *sockets) queues() int {
	if s.assistQueue >= 0 {
		return len(s.recv) - 1
	}
	return len(s.recv)
}

// hasRaw reports whether the device reads a raw socket (raw mode, or
// udp4 mode's assist socket).
func (s *sockets) hasRaw() bool { return !s.udpRecv() || s.assistQueue >= 0 }

// udpQueue reports whether receive queue i reads a UDP socket (GSO mode,
// IPv6) rather than a raw socket.
func (s *sockets) udpQueue(i int) bool { return s.udpRecv() && i != s.assistQueue }

// setRecvTOS asks the kernel for each datagram's IP TOS (IP_RECVTOS) or
// IPv6 traffic class (IPV6_RECVTCLASS) on UDP socket sc.
func setRecvTOS(sc *sockConn, v6 bool) error {
	var serr error
	err := sc.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("receiving the TOS: %w", err)
	}
	return nil
}

// probePort binds addr:port without SO_REUSEPORT and lets it go,
// returning the port bound.
func probePort(addr netip.Addr, port uint16) (uint16, error) {
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	pc, err := net.ListenPacket(network, netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return 0, fmt.Errorf("soft: UDP socket on %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	defer pc.Close()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port), nil
}

// listenUDP opens one UDP socket of the device on addr:port (with
// SO_REUSEPORT if reuse), outside the netpoller; the first sets s.port.
// On IPv4 it sets s.gsoMode false if the kernel refuses UDP_GRO, making it
// a raw mode socket.
func (s *sockets) listenUDP(addr netip.Addr, port uint16, rcvbuf int, reuse bool) (*sockConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = setSendOptions(fd, s.v6); serr != nil {
				return
			}
			if reuse {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
					return
				}
			}
			if s.v6 {
				if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); serr != nil {
					return
				}
				if s.gsoMode && unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) != nil {
					s.gsoMode = false
				}
				setRcvbuf(fd, rcvbuf)
				return
			}
			if s.gsoMode && unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
				setRcvbuf(fd, rcvbuf)
				if s.assist {
					serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
						&unix.SockFprog{Len: uint16(len(zeroIDOnly)), Filter: &zeroIDOnly[0]})
				}
				return
			}
			s.gsoMode = false
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); serr != nil {
				return
			}
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &dropAll[0]})
		})
		if err != nil {
			return err
		}
		return serr
	}}
	network := "udp4"
	if s.v6 {
		network = "udp6"
	}
	up, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return nil, fmt.Errorf("soft: UDP socket on %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	if s.port == 0 {
		s.port = uint16(up.LocalAddr().(*net.UDPAddr).Port)
	}
	sc, err := detach(up)
	if err != nil {
		return nil, fmt.Errorf("soft: UDP socket on %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	return sc, nil
}

// steer attaches the reuseport program that sends each datagram to the
// socket of its destination QPN mod queues.
func (s *sockets) steer(queues int) error {
	prog := reuseportProg(queues)
	var serr error
	err := s.udp.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
			&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("soft: steering program: %w", err)
	}
	return nil
}

// openRaw opens a raw socket for the device's UDP port that takes what
// spec says (its queue and queues, nonZeroID; the rest of spec is the
// device's), as the next receive queue.
func (s *sockets) openRaw(addr netip.Addr, rcvbuf int, spec rawFilterSpec) error {
	pc, err := net.ListenPacket("ip4:udp", addr.String())
	if err != nil {
		return fmt.Errorf("soft: raw socket on %s (needs CAP_NET_RAW): %w", addr, err)
	}
	rc, err := detach(pc)
	if err != nil {
		return fmt.Errorf("soft: raw socket on %s: %w", addr, err)
	}
	s.recv = append(s.recv, rc)
	a4 := addr.As4()
	spec.dst, spec.port = binary.BigEndian.Uint32(a4[:]), s.localPort()
	if s.share != nil {
		spec.slot = s.share.slot
	}
	filter := rawFilter(spec)
	var serr error
	err = rc.Control(func(fd uintptr) {
		prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); serr != nil {
			return
		}
		// Drop what the socket queued before it was bound and filtered.
		var one [1]byte
		for {
			if _, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_DONTWAIT); err != nil {
				break
			}
		}
		setRcvbuf(fd, rcvbuf)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("soft: filter on raw socket %s: %w", addr, err)
	}
	return nil
}

// setRcvbuf sets the receive buffer of socket fd to n bytes (n > 0).
func setRcvbuf(fd uintptr, n int) {
	if n > 0 && unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, n)
	}
}

// close closes every socket of the device.
func (s *sockets) close() {
	for _, c := range s.recv {
		c.close()
	}
	s.udp.close()
	s.closeSources()
	if s.netns != nil {
		s.netns.Close()
	}
}

// Classic BPF opcodes (linux/filter.h).
const (
	bpfLdAbsB = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
	bpfLdAbsH = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
	bpfLdAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfLdIndH = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
	bpfLdIndW = unix.BPF_LD | unix.BPF_W | unix.BPF_IND
	bpfAnd    = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	bpfMod    = unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K
	bpfRetA   = unix.BPF_RET | unix.BPF_A
	bpfLdxMSH = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K
	bpfRsh    = unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K
	bpfJa     = unix.BPF_JMP | unix.BPF_JA
	bpfStM    = unix.BPF_ST
	bpfLdM    = unix.BPF_LD | unix.BPF_MEM
)

var dropAll = []unix.SockFilter{{Code: bpfRet, K: 0}}

// zeroIDOnly is the filter of a udp4 mode UDP socket: datagrams whose IP
// ID is 0 (read through SKF_NET_OFF, the network header), which every
// soft sender's are; the raw socket takes the others.
var zeroIDOnly = []unix.SockFilter{
	{Code: bpfLdAbsH, K: skfNetOff + 4},
	{Code: bpfJeq, K: 0, Jt: 0, Jf: 1},
	{Code: bpfRet, K: 0x40000},
	{Code: bpfRet, K: 0},
}

// skfNetOff is SKF_NET_OFF (-0x100000) as a uint32: classic BPF loads at
// this offset plus k read byte k of the network header.
const skfNetOff = 0xfff00000

// reuseportProg returns the program that picks, among the n sockets of a
// reuseport group, the one for a datagram: its destination QP number mod
// n. It sees the datagram from the UDP payload on (the BTH of its first
// packet); if the load fails (a datagram shorter than 8 bytes) it
// returns 0, the first socket.
func reuseportProg(n int) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: bpfLdAbsW, K: 4}, // A = BTH word 1: reserved, destination QP
		{Code: bpfAnd, K: wire.QPNMask},
		{Code: bpfMod, K: uint32(n)},
		{Code: bpfRetA},
	}
}

// mmsg drives recvmmsg or sendmmsg over a syscall.RawConn without
// allocating: the callbacks are bound once.
type mmsg struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4 // send: destinations; receive (GSO mode): sources
	// names6 replaces names on an IPv6 device.
	names6 []unix.RawSockaddrInet6
	ctls   []txCmsg // send only: each message's UDP_SEGMENT and IP_TOS / IPV6_TCLASS
	gro    []rxCmsg // receive (GSO mode) only: each message's UDP_GRO (and IP_TOS / IPV6_TCLASS)
	// ctlLen is the control buffer length recv offers: one control
	// message, or two when the socket also reports the TOS (recvTOS).
	ctlLen int
	errs   []syscall.Errno // send only: the error of each message sendBatch skipped
	off    int             // first header of the current call
	n      int             // headers in the current call
	res    int
	errno  syscall.Errno

	recvFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
}

// udpSegmentCmsg is a control message carrying UDP_SEGMENT: a cmsghdr
// followed by the segment size (CMSG_DATA starts right after the header,
// which is a multiple of the alignment on every Linux ABI).
type udpSegmentCmsg struct {
	hdr  unix.Cmsghdr
	size uint16
	_    [6]byte
}

// tosCmsg is a control message carrying IP_TOS or IPV6_TCLASS: a cmsghdr
// followed by the value as an int (both take an int; IP_TOS also a byte).
type tosCmsg struct {
	hdr unix.Cmsghdr
	tos int32
	_   [4]byte
}

// txCmsg is the control buffer of one sent message: UDP_SEGMENT, then
// IP_TOS / IPV6_TCLASS, contiguous, each CMSG_SPACE-sized, so a message
// can carry either or both.
type txCmsg struct {
	seg udpSegmentCmsg
	tos tosCmsg
}

// groCmsg is room for the control message recvmsg gives a UDP_GRO
// socket for a GSO super-datagram: a cmsghdr followed by the segment size
// (an int).
type groCmsg struct {
	hdr  unix.Cmsghdr
	size int32
	_    [4]byte
}

// rxCmsg is room for the control messages recvmsg gives a UDP socket:
// UDP_GRO for a GSO super-datagram, and IP_TOS (one byte) or
// IPV6_TCLASS (an int) when asked for (IP_RECVTOS, IPV6_RECVTCLASS),
// each CMSG_SPACE-sized, in either order.
type rxCmsg [2]groCmsg

// newMmsg returns n message headers, each with one iovec. withNames
// prepares them for sending: destination addresses (IPv4), control
// messages.
func newMmsg(n int, withNames bool) *mmsg {
	return newMmsgFamily(n, withNames, false)
}

// newMmsgFamily is newMmsg with IPv6 destination addresses if v6.
func newMmsgFamily(n int, withNames, v6 bool) *mmsg {
	m := &mmsg{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	if withNames {
		if v6 {
			m.names6 = make([]unix.RawSockaddrInet6, n)
		} else {
			m.names = make([]unix.RawSockaddrInet4, n)
		}
		m.ctls = make([]txCmsg, n)
		m.errs = make([]syscall.Errno, n)
		// The control messages' headers are fixed: setMsg sets only
		// the values.
		tosLevel, tosType := int32(unix.IPPROTO_IP), int32(unix.IP_TOS)
		if v6 {
			tosLevel, tosType = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		for i := range m.ctls {
			c := &m.ctls[i]
			c.seg.hdr.Level, c.seg.hdr.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			c.seg.hdr.SetLen(unix.CmsgLen(2))
			c.tos.hdr.Level, c.tos.hdr.Type = tosLevel, tosType
			c.tos.hdr.SetLen(unix.CmsgLen(4))
		}
	}
	for i := range m.hdrs {
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.Iovlen = 1
		switch {
		case withNames && v6:
			m.names6[i].Family = unix.AF_INET6
			m.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&m.names6[i]))
			m.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		case withNames:
			m.names[i].Family = unix.AF_INET
			m.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&m.names[i]))
			m.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		}
	}
	m.recvFn = m.recv
	m.sendFn = m.send
	return m
}

// newRecvMmsg returns n message headers for recvmmsg on a UDP socket in
// GSO mode: each with one iovec (setBuf), the source address and room
// for a UDP_GRO control message.
func newRecvMmsg(n int) *mmsg {
	m := newMmsg(n, false)
	m.names = make([]unix.RawSockaddrInet4, n)
	m.gro = make([]rxCmsg, n)
	m.ctlLen = int(unsafe.Sizeof(groCmsg{}))
	return m
}

// newRecvMmsg6 is newRecvMmsg for the UDP socket of an IPv6 device.
func newRecvMmsg6(n int) *mmsg {
	m := newMmsg(n, false)
	m.names6 = make([]unix.RawSockaddrInet6, n)
	m.gro = make([]rxCmsg, n)
	m.ctlLen = int(unsafe.Sizeof(groCmsg{}))
	return m
}

// recvTOS makes recv offer room for the TOS control message as well.
func (m *mmsg) recvTOS() { m.ctlLen = int(unsafe.Sizeof(rxCmsg{})) }

// tos returns the IP TOS / IPv6 traffic class of received message i (of
// a newRecvMmsg after recvTOS), 0 if the kernel gave none.
func (m *mmsg) tos(i int) uint8 {
	n := int(m.hdrs[i].Hdr.Controllen)
	for k := range m.gro[i] {
		c := &m.gro[i][k]
		if n < k*int(unsafe.Sizeof(*c))+unix.CmsgLen(1) {
			return 0
		}
		switch {
		case c.hdr.Level == unix.IPPROTO_IP && c.hdr.Type == unix.IP_TOS && int(c.hdr.Len) >= unix.CmsgLen(1):
			return *(*uint8)(unsafe.Pointer(&c.size)) // one byte
		case c.hdr.Level == unix.IPPROTO_IPV6 && c.hdr.Type == unix.IPV6_TCLASS && int(c.hdr.Len) >= unix.CmsgLen(4):
			return uint8(c.size)
		}
	}
	return 0
}

// source returns the source address and port of received message i (of
// a newRecvMmsg), or false if the kernel gave no IPv4 address.
func (m *mmsg) source(i int) (addr [4]byte, port uint16, ok bool) {
	if int(m.hdrs[i].Hdr.Namelen) < unix.SizeofSockaddrInet4 || m.names[i].Family != unix.AF_INET {
		return addr, 0, false
	}
	// sockaddr_in holds the port in network byte order.
	var p [2]byte
	binary.NativeEndian.PutUint16(p[:], m.names[i].Port)
	return m.names[i].Addr, binary.BigEndian.Uint16(p[:]), true
}

// source6 returns the source address and port of received message i (of
// a newRecvMmsg6), or false if the kernel gave no IPv6 address.
func (m *mmsg) source6(i int) (addr [16]byte, port uint16, ok bool) {
	if int(m.hdrs[i].Hdr.Namelen) < unix.SizeofSockaddrInet6 || m.names6[i].Family != unix.AF_INET6 {
		return addr, 0, false
	}
	// sockaddr_in6 holds the port in network byte order.
	var p [2]byte
	binary.NativeEndian.PutUint16(p[:], m.names6[i].Port)
	return m.names6[i].Addr, binary.BigEndian.Uint16(p[:]), true
}

// groSize returns the segment size of received message i (of a
// newRecvMmsg) if it is a GSO super-datagram, else 0.
func (m *mmsg) groSize(i int) int {
	c := &m.gro[i][0]
	if int(m.hdrs[i].Hdr.Controllen) < unix.CmsgLen(4) || int(c.hdr.Len) < unix.CmsgLen(4) ||
		c.hdr.Level != unix.SOL_UDP || c.hdr.Type != unix.UDP_GRO || c.size <= 0 {
		return 0
	}
	return int(c.size)
}

// setBuf makes message i the one buffer b.
func (m *mmsg) setBuf(i int, b []byte) {
	m.setIov(i, b)
	m.hdrs[i].Hdr.Iov = &m.iovs[i]
	m.hdrs[i].Hdr.Iovlen = 1
	m.hdrs[i].Hdr.Control = nil
	m.hdrs[i].Hdr.SetControllen(0)
}

// setIov points iovec j at b.
func (m *mmsg) setIov(j int, b []byte) {
	m.iovs[j].Base = &b[0]
	m.iovs[j].SetLen(len(b))
}

// setMsg makes message i (of an mmsg made withNames) the n iovecs from
// j on, sent to addr:port (an IPv4-mapped address for IPv4). seg > 0
// makes it a UDP GSO send of seg-byte segments; tos != 0 sends it with
// that IP TOS (IPv6: traffic class), per datagram: the sockets are
// shared by QPs of different traffic classes. TOS 0 is the socket's
// default and needs no control message.
func (m *mmsg) setMsg(i, j, n int, addr [16]byte, port uint16, seg int, tos uint8) {
	h := &m.hdrs[i].Hdr
	h.Iov = &m.iovs[j]
	h.SetIovlen(n)
	m.setDest(i, addr, port)
	if seg <= 0 && tos == 0 {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	c := &m.ctls[i]
	var ctl unsafe.Pointer
	size := 0
	if seg > 0 {
		c.seg.size = uint16(seg)
		ctl, size = unsafe.Pointer(&c.seg), unix.CmsgSpace(2)
	}
	if tos != 0 {
		c.tos.tos = int32(tos)
		if ctl == nil {
			ctl = unsafe.Pointer(&c.tos)
		}
		size += unix.CmsgSpace(4)
	}
	h.Control = (*byte)(ctl)
	h.SetControllen(size)
}

// setDest sets the destination of message i: addr is an IPv6 address,
// or an IPv4-mapped one on an mmsg for IPv4.
func (m *mmsg) setDest(i int, addr [16]byte, port uint16) {
	// sockaddr_in and sockaddr_in6 hold the port in network byte order.
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], port)
	if m.names6 != nil {
		m.names6[i].Addr = addr
		m.names6[i].Port = binary.NativeEndian.Uint16(p[:])
		return
	}
	m.names[i].Addr = [4]byte(addr[12:])
	m.names[i].Port = binary.NativeEndian.Uint16(p[:])
}

func (m *mmsg) recv(fd uintptr) bool { return m.recvFlags(fd, unix.MSG_DONTWAIT) }

// recvWait is recv that sleeps until the first datagram arrives (on a
// blocking socket, up to its SO_RCVTIMEO) and then takes what else waits
// without sleeping (MSG_WAITFORONE). It reports false on the timeout
// (EAGAIN) and on a signal (EINTR).
func (m *mmsg) recvWait(fd uintptr) bool { return m.recvFlags(fd, unix.MSG_WAITFORONE) }

// recvFlags is recv and recvWait.
func (m *mmsg) recvFlags(fd uintptr, flags int) bool {
	if m.gro != nil {
		// recvmmsg wrote back the lengths of the address and control
		// buffers: give them their full size again.
		for i := range m.n {
			h := &m.hdrs[i].Hdr
			if m.names6 != nil {
				h.Name = (*byte)(unsafe.Pointer(&m.names6[i]))
				h.Namelen = unix.SizeofSockaddrInet6
			} else {
				h.Name = (*byte)(unsafe.Pointer(&m.names[i]))
				h.Namelen = unix.SizeofSockaddrInet4
			}
			m.gro[i][0].hdr = unix.Cmsghdr{}
			m.gro[i][1].hdr = unix.Cmsghdr{}
			h.Control = (*byte)(unsafe.Pointer(&m.gro[i]))
			h.SetControllen(m.ctlLen)
		}
	}
	// A raw system call (see send): with MSG_DONTWAIT it never sleeps;
	// recvWait's sleep is a poller's, on its own thread, as pollIn's.
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(m.n), uintptr(flags), 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	m.res, m.errno = int(r), e
	return true
}

// send sends messages [m.off, m.off+m.n) without blocking and reports
// false when the socket is full (EAGAIN).
//
// recv and send are raw system calls: with MSG_DONTWAIT neither sleeps,
// and a syscall.Syscall6 (entersyscall) of a process whose Ps were all
// idle wakes the runtime's sysmon thread, asleep since: a futex wake and
// a thread on another CPU for every I/O of a target at queue depth 1.
func (m *mmsg) send(fd uintptr) bool {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[m.off])), uintptr(m.n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	m.res, m.errno = int(r), e
	return true
}

// recvBatch receives up to n datagrams (at most len(m.hdrs)) into the
// buffers set with setBuf, blocking until at least one arrives. It returns
// their number; message lengths are in m.hdrs[i].Len.
func (m *mmsg) recvBatch(rc syscall.RawConn, n int) (int, error) {
	m.n = min(n, len(m.hdrs))
	m.res, m.errno = 0, 0
	if err := rc.Read(m.recvFn); err != nil {
		return 0, err
	}
	if m.errno != 0 {
		return 0, m.errno
	}
	return m.res, nil
}

// sendBatch sends messages [0, n), blocking while the socket is full. A
// message the kernel refuses is skipped and counted in failed, its error
// in m.errs (when made withNames); the first such error is returned along
// with the count of messages sent.
func (m *mmsg) sendBatch(rc syscall.RawConn, n int) (sent, failed int, err error) {
	return m.sendRange(rc, 0, n)
}

// sendRange is sendBatch for messages [lo, hi).
func (m *mmsg) sendRange(rc syscall.RawConn, lo, n int) (sent, failed int, err error) {
	if m.errs != nil {
		clear(m.errs[lo:n])
	}
	for i := lo; i < n; {
		m.off, m.n = i, n-i
		m.res, m.errno = 0, 0
		if werr := rc.Write(m.sendFn); werr != nil {
			m.setErrs(i, n, syscall.EBADF)
			return sent, failed + n - i, werr
		}
		switch {
		case m.errno != 0:
			// sendmmsg reports an error only when the first message failed.
			if err == nil {
				err = m.errno
			}
			m.setErrs(i, i+1, m.errno)
			failed++
			i++
		case m.res <= 0:
			m.setErrs(i, n, syscall.EIO)
			failed += n - i
			return sent, failed, err
		default:
			sent += m.res
			i += m.res
		}
	}
	return sent, failed, err
}

// setErrs records e as the error of messages [i, j).
func (m *mmsg) setErrs(i, j int, e syscall.Errno) {
	if m.errs == nil {
		return
	}
	for ; i < j; i++ {
		m.errs[i] = e
	}
}
