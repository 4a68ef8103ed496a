//go:build linux

package soft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// This file holds the device's sockets and the only use of package unsafe
// in the provider: handing mmsghdr arrays (with their UDP_SEGMENT control
// messages) to recvmmsg(2) and sendmmsg(2), which golang.org/x/sys/unix
// does not wrap. No wire data is converted with unsafe.
//
// Sending: an unconnected UDP socket bound to addr:4791 with
// IP_MTU_DISCOVER=IP_PMTUDISC_DO, so Linux sends every datagram with DF
// set and IP ID 0 (ip_select_ident gives ID 0 to DF datagrams of
// unconnected sockets): the ICRC can be computed before sending. The UDP
// checksum is disabled (SO_NO_CHECK), as rxe sends it, except on loopback
// devices (below); the ICRC is the end-to-end check. The socket also
// keeps UDP port 4791 bound so that the kernel does not answer ICMP port
// unreachable; a drop-all socket filter keeps its receive queue empty.
//
// Receiving: a raw IPv4 socket for protocol UDP bound to addr, whose
// classic BPF filter accepts only unfragmented UDP datagrams to addr port
// 4791. It delivers the IP header the sender's kernel wrote, which the
// ICRC covers (rxe senders use changing IP IDs). What the socket queued
// before its bind and filter took effect is drained at open.
//
// UDP GSO, loopback only (gso.go has the rule both sides follow): a
// device on 127.0.0.0/8 sends runs of packets to a loopback destination
// as one sendmmsg message with a UDP_SEGMENT control message and one
// iovec per packet (no copy). udp_send_skb refuses GSO on a socket with
// SO_NO_CHECK, so a loopback device keeps the UDP checksum on (free on
// lo, CHECKSUM_PARTIAL; the ICRC masks it). The super-datagram gets IP ID
// 0 and inet_gso_segment would give segment k ID k, so each packet's ICRC
// is computed for its ID. On lo nothing segments the super-datagram
// before the raw socket sees it: the receive path splits it (64 KiB
// receive buffers on loopback devices), rebuilding each segment's IP and
// UDP headers, and checks every packet's ICRC over them. The UDP socket
// sets UDP_GRO, which makes it accept GSO datagrams whole: without it the
// kernel segments every super-datagram for that socket only for its
// filter to drop the segments. If the kernel refuses a GSO send, the
// device goes back to one datagram per packet. Devices on other
// addresses (towards Linux rxe peers) never use GSO: one datagram per
// packet with SO_NO_CHECK, the wire format of rxe.
//
// GRO (coalescing received datagrams) is not used: it applies to UDP
// sockets only, and the raw socket is what keeps the sender's IP headers
// (needed for the ICRC).

// sockets is one device's pair of sockets.
type sockets struct {
	udp   *net.UDPConn
	udpRC syscall.RawConn
	raw   *net.IPConn
	rawRC syscall.RawConn
	// loopback: addr is in 127.0.0.0/8; received datagrams may be GSO
	// super-datagrams to split.
	loopback bool
	// gsoSend: send runs of packets to loopback destinations with UDP GSO.
	gsoSend bool
	gso     gsoCounters
}

// openSockets opens the sending UDP socket and the receiving raw socket
// of addr without GSO sends. rcvbuf sets the raw socket's receive buffer
// (SO_RCVBUFFORCE, falling back to SO_RCVBUF).
func openSockets(addr netip.Addr, rcvbuf int) (*sockets, error) {
	return openSocketsGSO(addr, rcvbuf, false)
}

// openSocketsGSO is openSockets; gso asks for UDP GSO sends, which only a
// loopback address gets.
func openSocketsGSO(addr netip.Addr, rcvbuf int, gso bool) (*sockets, error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("soft: %s: only IPv4 addresses are supported: %w", addr, syscall.EAFNOSUPPORT)
	}
	// The raw socket first: it needs CAP_NET_RAW and is the likelier failure.
	pc, err := net.ListenPacket("ip4:udp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("soft: raw socket on %s: %w", addr, err)
	}
	raw := pc.(*net.IPConn)
	s := &sockets{raw: raw, loopback: addr.IsLoopback()}
	s.gsoSend = gso && s.loopback
	if s.rawRC, err = raw.SyscallConn(); err != nil {
		raw.Close()
		return nil, fmt.Errorf("soft: raw socket on %s: %w", addr, err)
	}
	a4 := addr.As4()
	filter := rawFilter(binary.BigEndian.Uint32(a4[:]), wire.UDPPort)
	var serr error
	err = s.rawRC.Control(func(fd uintptr) {
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
		if rcvbuf > 0 {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("soft: filter on raw socket %s: %w", addr, err)
	}

	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); serr != nil {
				return
			}
			if s.gsoSend {
				// Not fatal: without it the kernel segments super-datagrams
				// for this socket before its filter drops them.
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
			} else if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); serr != nil {
				return
			}
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
			}
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &dropAll[0]})
		})
		if err != nil {
			return err
		}
		return serr
	}}
	up, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(addr, wire.UDPPort).String())
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("soft: UDP socket on %s:%d: %w", addr, wire.UDPPort, err)
	}
	s.udp = up.(*net.UDPConn)
	if s.udpRC, err = s.udp.SyscallConn(); err != nil {
		s.close()
		return nil, fmt.Errorf("soft: UDP socket on %s: %w", addr, err)
	}
	return s, nil
}

func (s *sockets) close() {
	if s.raw != nil {
		s.raw.Close()
	}
	if s.udp != nil {
		s.udp.Close()
	}
}

// Classic BPF opcodes (linux/filter.h).
const (
	bpfLdAbsB = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
	bpfLdAbsH = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
	bpfLdAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfLdIndH = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
	bpfLdxMSH = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K
)

var dropAll = []unix.SockFilter{{Code: bpfRet, K: 0}}

// rawFilter returns the raw socket's filter: IPv4 protocol UDP, not a
// fragment, destination address dst, UDP destination port port. A raw
// socket's filter sees the packet from the IP header on.
func rawFilter(dst uint32, port uint16) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: bpfLdAbsB, K: 9},                       // 0: A = protocol
		{Code: bpfJeq, K: 17, Jt: 0, Jf: 8},           // 1: UDP?
		{Code: bpfLdAbsH, K: 6},                       // 2: A = flags | fragment offset
		{Code: bpfJset, K: 0x1fff, Jt: 6, Jf: 0},      // 3: a fragment after the first?
		{Code: bpfLdAbsW, K: 16},                      // 4: A = destination address
		{Code: bpfJeq, K: dst, Jt: 0, Jf: 4},          // 5
		{Code: bpfLdxMSH, K: 0},                       // 6: X = IP header length
		{Code: bpfLdIndH, K: 2},                       // 7: A = UDP destination port
		{Code: bpfJeq, K: uint32(port), Jt: 0, Jf: 1}, // 8
		{Code: bpfRet, K: 0x40000},                    // 9: accept
		{Code: bpfRet, K: 0},                          // 10: drop
	}
}

// mmsg drives recvmmsg or sendmmsg over a syscall.RawConn without
// allocating: the callbacks are bound once.
type mmsg struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	ctls  []udpSegmentCmsg // send only: each message's UDP_SEGMENT
	errs  []syscall.Errno  // send only: the error of each message sendBatch skipped
	off   int              // first header of the current call
	n     int              // headers in the current call
	res   int
	errno syscall.Errno

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

// newMmsg returns n message headers, each with one iovec. withNames
// prepares them for sending: destination addresses, control messages.
func newMmsg(n int, withNames bool) *mmsg {
	m := &mmsg{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	if withNames {
		m.names = make([]unix.RawSockaddrInet4, n)
		m.ctls = make([]udpSegmentCmsg, n)
		m.errs = make([]syscall.Errno, n)
	}
	for i := range m.hdrs {
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.Iovlen = 1
		if withNames {
			m.names[i].Family = unix.AF_INET
			m.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&m.names[i]))
			m.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		}
	}
	m.recvFn = m.recv
	m.sendFn = m.send
	return m
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
// j on, sent to addr:port. seg > 0 makes it a UDP GSO send of seg-byte
// segments.
func (m *mmsg) setMsg(i, j, n int, addr [4]byte, port uint16, seg int) {
	h := &m.hdrs[i].Hdr
	h.Iov = &m.iovs[j]
	h.SetIovlen(n)
	m.setDest(i, addr, port)
	if seg <= 0 {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	c := &m.ctls[i]
	c.hdr.Level = unix.SOL_UDP
	c.hdr.Type = unix.UDP_SEGMENT
	c.hdr.SetLen(unix.CmsgLen(2))
	c.size = uint16(seg)
	h.Control = (*byte)(unsafe.Pointer(c))
	h.SetControllen(unix.CmsgSpace(2))
}

// setDest sets the destination of message i.
func (m *mmsg) setDest(i int, addr [4]byte, port uint16) {
	m.names[i].Addr = addr
	// sockaddr_in holds the port in network byte order.
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], port)
	m.names[i].Port = binary.NativeEndian.Uint16(p[:])
}

func (m *mmsg) recv(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(m.n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	m.res, m.errno = int(r), e
	return true
}

func (m *mmsg) send(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[m.off])), uintptr(m.n), unix.MSG_DONTWAIT, 0, 0)
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
	if m.errs != nil {
		clear(m.errs[:n])
	}
	for i := 0; i < n; {
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
