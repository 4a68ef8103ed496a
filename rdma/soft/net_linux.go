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
// in the provider: handing mmsghdr arrays to recvmmsg(2) and sendmmsg(2),
// which golang.org/x/sys/unix does not wrap. No wire data is converted
// with unsafe.
//
// Sending: an unconnected UDP socket bound to addr:4791 with
// IP_MTU_DISCOVER=IP_PMTUDISC_DO, so Linux sends every datagram with DF
// set and IP ID 0 (ip_select_ident gives ID 0 to DF datagrams of
// unconnected sockets): the ICRC can be computed before sending. The UDP
// checksum is disabled (SO_NO_CHECK), as rxe sends it; the ICRC is the
// end-to-end check. The socket also keeps UDP port 4791 bound so that the
// kernel does not answer ICMP port unreachable; a drop-all socket filter
// keeps its receive queue empty.
//
// Receiving: a raw IPv4 socket for protocol UDP bound to addr, whose
// classic BPF filter accepts only unfragmented UDP datagrams to addr port
// 4791. It delivers the IP header the sender's kernel wrote, which the
// ICRC covers (rxe senders use changing IP IDs).
//
// UDP GSO and GRO are not used. Sending: with DF on an unconnected
// socket the super-packet's IP ID is 0 and inet_gso_segment gives the
// segments consecutive IDs from there, so per-segment ICRCs could be
// precomputed; but a GSO send carries equal-sized segments of one buffer,
// which fits RDMA WRITE and READ response bursts only, and a receiver
// without UDP_GRO drops a large share of a burst (DESIGN.md §6).
// Receiving: GRO coalesces datagrams before the raw socket sees them only
// for UDP sockets that enable it, and the raw socket is what keeps the
// sender's IP headers (needed for the ICRC). Neither was measured here;
// both stay off until a receive path that verifies ICRCs can use them.

// sockets is one device's pair of sockets.
type sockets struct {
	udp   *net.UDPConn
	udpRC syscall.RawConn
	raw   *net.IPConn
	rawRC syscall.RawConn
}

// openSockets opens the sending UDP socket and the receiving raw socket
// of addr. rcvbuf sets the raw socket's receive buffer (SO_RCVBUFFORCE,
// falling back to SO_RCVBUF).
func openSockets(addr netip.Addr, rcvbuf int) (*sockets, error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("soft: %s: only IPv4 addresses are supported: %w", addr, syscall.EAFNOSUPPORT)
	}
	// The raw socket first: it needs CAP_NET_RAW and is the likelier failure.
	pc, err := net.ListenPacket("ip4:udp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("soft: raw socket on %s: %w", addr, err)
	}
	raw := pc.(*net.IPConn)
	s := &sockets{raw: raw}
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
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); serr != nil {
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
	off   int // first header of the current call
	n     int // headers in the current call
	res   int
	errno syscall.Errno

	recvFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
}

func newMmsg(n int, withNames bool) *mmsg {
	m := &mmsg{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n)}
	if withNames {
		m.names = make([]unix.RawSockaddrInet4, n)
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

// setBuf points message i at b.
func (m *mmsg) setBuf(i int, b []byte) {
	m.iovs[i].Base = &b[0]
	m.iovs[i].SetLen(len(b))
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
// message the kernel refuses is skipped and counted in failed; the first
// such error is returned along with the count of messages sent.
func (m *mmsg) sendBatch(rc syscall.RawConn, n int) (sent, failed int, err error) {
	for i := 0; i < n; {
		m.off, m.n = i, n-i
		m.res, m.errno = 0, 0
		if werr := rc.Write(m.sendFn); werr != nil {
			return sent, failed + n - i, werr
		}
		switch {
		case m.errno != 0:
			// sendmmsg reports an error only when the first message failed.
			if err == nil {
				err = m.errno
			}
			failed++
			i++
		case m.res <= 0:
			failed += n - i
			return sent, failed, err
		default:
			sent += m.res
			i += m.res
		}
	}
	return sent, failed, err
}
