package blockdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Generic netlink, just enough to resolve a family and send it commands.
// Netlink fields are in host byte order.

const (
	nlmsgHdrLen = 16 // struct nlmsghdr
	genlHdrLen  = 4  // struct genlmsghdr
	nlaHdrLen   = 4  // struct nlattr
)

// nlAttrs builds a netlink attribute stream.
type nlAttrs []byte

func nlaAlign(n int) int { return (n + 3) &^ 3 }

// put appends one attribute, padded to 4 bytes.
func (a *nlAttrs) put(typ uint16, v []byte) {
	var h [nlaHdrLen]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(nlaHdrLen+len(v)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	*a = append(*a, h[:]...)
	*a = append(*a, v...)
	for len(*a)%4 != 0 {
		*a = append(*a, 0)
	}
}

func (a *nlAttrs) putU32(typ uint16, v uint32) {
	a.put(typ, binary.NativeEndian.AppendUint32(nil, v))
}

func (a *nlAttrs) putU64(typ uint16, v uint64) {
	a.put(typ, binary.NativeEndian.AppendUint64(nil, v))
}

// putString appends a NUL-terminated string (NLA_STRING / NLA_NUL_STRING).
func (a *nlAttrs) putString(typ uint16, s string) { a.put(typ, append([]byte(s), 0)) }

// nest appends a nested attribute whose payload build writes.
func (a *nlAttrs) nest(typ uint16, build func(*nlAttrs)) {
	var inner nlAttrs
	build(&inner)
	a.put(typ|unix.NLA_F_NESTED, inner)
}

// nlAttr is one parsed attribute.
type nlAttr struct {
	Type  uint16 // without the NESTED and NET_BYTEORDER bits
	Value []byte
}

// parseNLAttrs splits an attribute stream; it rejects truncated or
// malformed attributes instead of reading past the buffer.
func parseNLAttrs(b []byte) ([]nlAttr, error) {
	var out []nlAttr
	for len(b) > 0 {
		if len(b) < nlaHdrLen {
			return nil, fmt.Errorf("netlink: %d trailing bytes, short of an attribute header", len(b))
		}
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < nlaHdrLen || l > len(b) {
			return nil, fmt.Errorf("netlink: attribute %d length %d outside the %d bytes left", typ, l, len(b))
		}
		out = append(out, nlAttr{Type: typ, Value: b[nlaHdrLen:l]})
		b = b[min(nlaAlign(l), len(b)):]
	}
	return out, nil
}

// genlMessage builds a generic netlink request: nlmsghdr, genlmsghdr, attributes.
func genlMessage(family uint16, flags uint16, seq uint32, cmd, version uint8, attrs []byte) []byte {
	msg := make([]byte, nlmsgHdrLen+genlHdrLen, nlmsgHdrLen+genlHdrLen+len(attrs))
	msg = append(msg, attrs...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], family)
	binary.NativeEndian.PutUint16(msg[6:], flags)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	binary.NativeEndian.PutUint32(msg[12:], 0) // port id: the kernel fills ours in
	msg[16] = cmd
	msg[17] = version
	return msg
}

// genlConn is a NETLINK_GENERIC socket.
type genlConn struct {
	fd  int
	seq uint32
}

// dialGenl opens a generic netlink socket with a bounded receive wait.
func dialGenl() (*genlConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("netlink: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: bind: %w", err)
	}
	tv := unix.NsecToTimeval(int64(10 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: SO_RCVTIMEO: %w", err)
	}
	return &genlConn{fd: fd, seq: uint32(time.Now().UnixNano())}, nil
}

func (g *genlConn) Close() error { return unix.Close(g.fd) }

// request sends one command with NLM_F_ACK and returns the attributes of
// each reply message (after the genl header) until the kernel's ACK; a
// negative ACK returns its errno.
func (g *genlConn) request(family uint16, cmd, version uint8, attrs []byte) ([][]byte, error) {
	g.seq++
	seq := g.seq
	msg := genlMessage(family, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, cmd, version, attrs)
	if err := unix.Sendto(g.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink: send: %w", err)
	}
	var replies [][]byte
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(g.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, fmt.Errorf("netlink: receive: %w", err)
		}
		msgs, err := parseNLMessages(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Seq != seq {
				continue
			}
			switch m.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("netlink: short NLMSG_ERROR")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return replies, syscall.Errno(-e)
				}
				return replies, nil
			case unix.NLMSG_DONE:
				return replies, nil
			case unix.NLMSG_NOOP:
			default:
				if len(m.Data) < genlHdrLen {
					return nil, errors.New("netlink: reply shorter than the genl header")
				}
				// Copy: buf is reused by the next receive.
				replies = append(replies, append([]byte(nil), m.Data[genlHdrLen:]...))
			}
		}
	}
}

// nlMessage is one parsed netlink message.
type nlMessage struct {
	Type uint16
	Seq  uint32
	Data []byte
}

// parseNLMessages splits a datagram into messages, rejecting bad lengths.
func parseNLMessages(b []byte) ([]nlMessage, error) {
	var out []nlMessage
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return nil, fmt.Errorf("netlink: message length %d outside the %d bytes left", l, len(b))
		}
		out = append(out, nlMessage{
			Type: binary.NativeEndian.Uint16(b[4:]),
			Seq:  binary.NativeEndian.Uint32(b[8:]),
			Data: b[nlmsgHdrLen:l],
		})
		b = b[min(nlaAlign(l), len(b)):]
	}
	return out, nil
}

// errNoFamily is a generic netlink family the kernel does not have.
var errNoFamily = errors.New("netlink: no such generic netlink family")

// family resolves a generic netlink family name to its id
// (CTRL_CMD_GETFAMILY).
func (g *genlConn) family(name string) (uint16, error) {
	var a nlAttrs
	a.putString(unix.CTRL_ATTR_FAMILY_NAME, name)
	replies, err := g.request(unix.GENL_ID_CTRL, unix.CTRL_CMD_GETFAMILY, 2, a)
	if errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("%w: %q", errNoFamily, name)
	}
	if err != nil {
		return 0, fmt.Errorf("netlink: resolve family %q: %w", name, err)
	}
	for _, r := range replies {
		attrs, err := parseNLAttrs(r)
		if err != nil {
			return 0, err
		}
		for _, at := range attrs {
			if at.Type == unix.CTRL_ATTR_FAMILY_ID && len(at.Value) >= 2 {
				return binary.NativeEndian.Uint16(at.Value), nil
			}
		}
	}
	return 0, fmt.Errorf("netlink: family %q: no CTRL_ATTR_FAMILY_ID in the reply", name)
}
