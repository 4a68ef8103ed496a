package soft

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Classic pcap file format constants.
const (
	pcapMagicNanos = 0xa1b23c4d // nanosecond-resolution timestamps
	pcapLinkRaw    = 101        // LINKTYPE_RAW: packets start with the IP header
	pcapSnapLen    = 65535
	ipv4DefaultTTL = 64 // Linux net.ipv4.ip_default_ttl
)

// pcapWriter writes every packet a device sends and receives.
type pcapWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

func newPcapWriter(w io.Writer) (*pcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:], pcapLinkRaw)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	return &pcapWriter{w: w, buf: make([]byte, 0, 16+wire.IPv4HeaderLen+wire.UDPHeaderLen+maxPacketSize)}, nil
}

// record starts a record of n bytes in p.buf.
func (p *pcapWriter) record(n int) {
	now := time.Now()
	p.buf = p.buf[:16]
	binary.LittleEndian.PutUint32(p.buf[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(p.buf[4:], uint32(now.Nanosecond()))
	binary.LittleEndian.PutUint32(p.buf[8:], uint32(min(n, pcapSnapLen)))
	binary.LittleEndian.PutUint32(p.buf[12:], uint32(n))
}

func (p *pcapWriter) flush() {
	if p.err != nil {
		return
	}
	_, p.err = p.w.Write(p.buf)
}

// writeSent records a packet this device sent: pkt is the UDP payload;
// the IPv4 and UDP headers are the ones Linux writes for it.
func (p *pcapWriter) writeSent(src, dst [4]byte, pkt []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := wire.IPv4HeaderLen + wire.UDPHeaderLen + len(pkt)
	p.record(n)
	p.buf = p.buf[:16+wire.IPv4HeaderLen+wire.UDPHeaderLen]
	putIPv4UDPHeader(p.buf[16:], src, dst, len(pkt))
	p.buf = append(p.buf, pkt...)
	p.flush()
}

// writeReceived records a received IP datagram.
func (p *pcapWriter) writeReceived(datagram []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record(len(datagram))
	p.buf = append(p.buf, datagram...)
	p.flush()
}

// putIPv4UDPHeader writes into h (28 bytes) the IPv4 and UDP headers
// Linux sends for a UDP payload of n bytes from this provider's socket:
// TOS 0, ID 0, DF, TTL 64, UDP ports 4791, UDP checksum 0 (SO_NO_CHECK).
func putIPv4UDPHeader(h []byte, src, dst [4]byte, n int) {
	ip := h[:wire.IPv4HeaderLen]
	clear(ip)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4HeaderLen+wire.UDPHeaderLen+n))
	ip[6] = 0x40 // DF
	ip[8] = ipv4DefaultTTL
	ip[9] = 17
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	udp := h[wire.IPv4HeaderLen : wire.IPv4HeaderLen+wire.UDPHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(wire.UDPHeaderLen+n))
	udp[6], udp[7] = 0, 0
}

// ipv4Checksum returns the Internet checksum of an IPv4 header whose
// checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
