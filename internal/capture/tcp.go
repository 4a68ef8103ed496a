package capture

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sort"
)

// TCP header flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// TCPStream is one direction of a TCP connection, its payload put together
// in sequence-number order.
type TCPStream struct {
	Src, Dst netip.AddrPort
	// SYN reports that the stream's SYN is in the capture; Active that it
	// was a SYN without ACK (this side opened the connection). Without a
	// SYN the stream starts at the first payload byte seen.
	SYN, Active bool
	// Data is the payload in sequence order.
	Data []byte
	// Duplicate counts payload bytes received again (retransmitted or
	// overlapping) and dropped.
	Duplicate int
	// Missing counts payload bytes buffered beyond a hole that was never
	// filled (0 for a complete stream).
	Missing int
	// Reordered counts segments that arrived beyond a hole and waited for
	// the bytes before them (0 for a stream captured in sequence order).
	Reordered int

	base    uint32 // sequence number of Data[0]
	started bool
	chunks  []streamChunk // which frame carried Data[off:], ascending off
	pending []pendingSeg  // segments beyond the reassembled end
}

type streamChunk struct{ off, frame int }

type pendingSeg struct {
	off   int64
	data  []byte
	frame int
}

// FrameAt returns the number of the frame whose segment put byte off of
// Data into the stream (the first copy, for retransmitted bytes), or 0 when
// off is out of range.
func (s *TCPStream) FrameAt(off int) int {
	if off < 0 || off >= len(s.Data) {
		return 0
	}
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].off > off })
	return s.chunks[i-1].frame
}

// String names the stream, e.g. "192.0.2.3:40976 -> 192.0.2.2:4420".
func (s *TCPStream) String() string { return fmt.Sprintf("%s -> %s", s.Src, s.Dst) }

// accept adds the payload of a segment at stream offset off.
func (s *TCPStream) accept(off int64, data []byte, frame int) {
	end := int64(len(s.Data))
	if off+int64(len(data)) <= end {
		s.Duplicate += len(data)
		return
	}
	if off > end {
		s.Reordered++
		s.pending = append(s.pending, pendingSeg{off: off, data: data, frame: frame})
		return
	}
	if off < end {
		s.Duplicate += int(end - off)
		data = data[end-off:]
	}
	s.chunks = append(s.chunks, streamChunk{off: len(s.Data), frame: frame})
	s.Data = append(s.Data, data...)
	// Segments that were waiting for this one.
	for {
		progressed := false
		end = int64(len(s.Data))
		for i := 0; i < len(s.pending); i++ {
			p := s.pending[i]
			if p.off > end {
				continue
			}
			s.pending = slices.Delete(s.pending, i, i+1)
			i--
			if p.off+int64(len(p.data)) <= end {
				s.Duplicate += len(p.data)
				continue
			}
			d := p.data[end-p.off:]
			s.Duplicate += int(end - p.off)
			s.chunks = append(s.chunks, streamChunk{off: len(s.Data), frame: p.frame})
			s.Data = append(s.Data, d...)
			end = int64(len(s.Data))
			progressed = true
		}
		if !progressed {
			break
		}
	}
}

type streamKey struct{ src, dst netip.AddrPort }

// TCPStreams reassembles every TCP stream of a capture, one per direction,
// in the order their first segment appears. Data is ordered by sequence
// number (relative to the SYN, or to the first payload when the SYN was
// not captured, with 32-bit wraparound); retransmitted and overlapping
// bytes are dropped (the first copy wins), out-of-order segments wait for
// the bytes before them.
func TCPStreams(frames []Frame) ([]*TCPStream, error) {
	streams := map[streamKey]*TCPStream{}
	var order []*TCPStream
	for i := range frames {
		f := &frames[i]
		if f.Proto != 6 || len(f.L4) < 20 || f.IP == nil {
			continue
		}
		var src, dst netip.Addr
		if f.IPv6 {
			if len(f.IP) < 40 {
				continue
			}
			src, dst = netip.AddrFrom16([16]byte(f.IP[8:24])), netip.AddrFrom16([16]byte(f.IP[24:40]))
		} else {
			if len(f.IP) < 20 {
				continue
			}
			src, dst = netip.AddrFrom4([4]byte(f.IP[12:16])), netip.AddrFrom4([4]byte(f.IP[16:20]))
		}
		th := f.L4
		k := streamKey{
			src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(th[0:])),
			dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(th[2:])),
		}
		seq := binary.BigEndian.Uint32(th[4:])
		flags := th[13]
		s := streams[k]
		if s == nil {
			s = &TCPStream{Src: k.src, Dst: k.dst}
			streams[k] = s
			order = append(order, s)
		}
		payload := f.Payload
		if flags&tcpSYN != 0 {
			if !s.started {
				s.started, s.SYN, s.Active, s.base = true, true, flags&tcpACK == 0, seq+1
			}
			seq++ // data in a SYN follows the SYN's sequence number
		}
		if len(payload) == 0 || flags&tcpRST != 0 {
			continue
		}
		if !s.started {
			s.started, s.base = true, seq
		}
		off := int64(int32(seq - s.base))
		s.accept(off, payload, f.Number)
	}
	for _, s := range order {
		for _, p := range s.pending {
			s.Missing += len(p.data)
		}
		s.pending = nil
	}
	return order, nil
}

// TCPPDU is one NVMe/TCP PDU cut from a reassembled stream.
type TCPPDU struct {
	Stream *TCPStream
	Offset int    // of its first byte in Stream.Data
	Data   []byte // the whole PDU, PLEN bytes
	// FirstFrame and LastFrame carried the PDU's first and last byte.
	FirstFrame, LastFrame int
}

// SplitPDUs cuts a stream into NVMe/TCP PDUs by the PLEN of each common
// header (bytes 7:4, little-endian). rest is the number of bytes at the
// end that do not make a whole PDU. A PLEN below 8 is an error: the
// stream cannot be cut further.
func SplitPDUs(s *TCPStream) (pdus []TCPPDU, rest int, err error) {
	off := 0
	for len(s.Data)-off >= 8 {
		plen := int64(binary.LittleEndian.Uint32(s.Data[off+4:]))
		if plen < 8 {
			return pdus, len(s.Data) - off, fmt.Errorf("capture: %s offset %d: PDU length %d", s, off, plen)
		}
		if int64(len(s.Data)-off) < plen {
			break
		}
		end := off + int(plen)
		pdus = append(pdus, TCPPDU{
			Stream: s, Offset: off, Data: s.Data[off:end:end],
			FirstFrame: s.FrameAt(off), LastFrame: s.FrameAt(end - 1),
		})
		off = end
	}
	return pdus, len(s.Data) - off, nil
}

// NVMeTCPPDUs reassembles the TCP streams to or from port (4420 for
// NVMe/TCP) and returns their PDUs ordered as the decode oracle orders
// tcp_pdu records: by the frame carrying the last byte, then in stream
// order. The golden captures are clean: a stream with missing bytes or an
// incomplete PDU at its end is an error.
func NVMeTCPPDUs(frames []Frame, port uint16) ([]TCPPDU, error) {
	streams, err := TCPStreams(frames)
	if err != nil {
		return nil, err
	}
	var all []TCPPDU
	for _, s := range streams {
		if s.Src.Port() != port && s.Dst.Port() != port {
			continue
		}
		if s.Missing != 0 {
			return nil, fmt.Errorf("capture: %s: %d bytes after a hole", s, s.Missing)
		}
		pdus, rest, err := SplitPDUs(s)
		if err != nil {
			return nil, err
		}
		if rest != 0 {
			return nil, fmt.Errorf("capture: %s: %d bytes of an incomplete PDU at the end", s, rest)
		}
		all = append(all, pdus...)
	}
	slices.SortStableFunc(all, func(a, b TCPPDU) int {
		return cmp.Or(cmp.Compare(a.LastFrame, b.LastFrame), cmp.Compare(a.Offset, b.Offset))
	})
	return all, nil
}

// TCPGolden is an NVMe/TCP capture cut into PDUs beside its decode oracle.
type TCPGolden struct {
	Frames []Frame  // every frame: frame number n is Frames[n-1]
	PDUs   []TCPPDU // the NVMe/TCP PDUs (port 4420) in the oracle's order
	// Records are the tcp_pdu records, Records[i] for PDUs[i].
	Records []Record
}

// LoadTCPGolden reads testdata/pcap/<name>.pcapng.gz, cuts its NVMe/TCP
// streams (port 4420) into PDUs and reads the tcp_pdu records of
// <name>.decoded.jsonl.gz. A record count other than the PDU count is an
// error; whether each pair agrees is for the caller to check.
func LoadTCPGolden(name string) (*TCPGolden, error) {
	frames, err := Load(name + ".pcapng.gz")
	if err != nil {
		return nil, err
	}
	pdus, err := NVMeTCPPDUs(frames, 4420)
	if err != nil {
		return nil, err
	}
	all, err := LoadOracle(name + ".decoded.jsonl.gz")
	if err != nil {
		return nil, err
	}
	var recs []Record
	for _, r := range all {
		if r.Kind == KindTCPPDU {
			recs = append(recs, r)
		}
	}
	if len(pdus) != len(recs) {
		return nil, fmt.Errorf("capture: %s: %d PDUs, the oracle has %d tcp_pdu records", name, len(pdus), len(recs))
	}
	return &TCPGolden{Frames: frames, PDUs: pdus, Records: recs}, nil
}
