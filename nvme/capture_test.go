package nvme_test

// Test-only access to the golden captures through internal/capture: the
// RoCEv2 messages and NVMe/TCP PDUs that carry SQEs, CQEs and data, and the
// decode oracle records they are checked against.

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nvmeof/nvmeof/internal/capture"
)

const (
	rdmaCapture = "kernel-nvme-rdma-rxe"
	tcpCapture  = "kernel-nvme-tcp"
)

// loadFrames returns the frames of testdata/pcap/<name>.pcapng.gz: frame
// number n is frames[n-1].
func loadFrames(t testing.TB, name string) []capture.Frame {
	t.Helper()
	frames, err := capture.Load(name + ".pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		if frames[i].Number != i+1 {
			t.Fatalf("%s: frame %d at index %d", name, frames[i].Number, i)
		}
	}
	return frames
}

// frameAt returns frame number n.
func frameAt(t testing.TB, frames []capture.Frame, n int) *capture.Frame {
	t.Helper()
	if n < 1 || n > len(frames) {
		t.Fatalf("frame %d of %d", n, len(frames))
	}
	return &frames[n-1]
}

// loadOracle returns the records of testdata/pcap/<name>.decoded.jsonl.gz.
func loadOracle(t testing.TB, name string) []capture.Record {
	t.Helper()
	recs, err := capture.LoadOracle(name + ".decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// oracleRecords decodes the records of one kind into T.
func oracleRecords[T any](t testing.TB, recs []capture.Record, kind string) []T {
	t.Helper()
	out, err := capture.Records[T](recs, kind)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// frameKey names a list of frames as map keys do here: the oracle's
// frames and for_frames lists, and capture.Message.Frames.
func frameKey(frames []int) string { return fmt.Sprint(frames) }

// roceMessages reassembles the RC SEND, RDMA WRITE and READ response
// messages of a capture, by their frames.
func roceMessages(t testing.TB, frames []capture.Frame) map[string]*capture.Message {
	t.Helper()
	msgs, err := capture.Messages(frames)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*capture.Message, len(msgs))
	for i := range msgs {
		out[frameKey(msgs[i].Frames)] = &msgs[i]
	}
	return out
}

// roceMessage returns the message of the given kind made of exactly these
// frames.
func roceMessage(t testing.TB, msgs map[string]*capture.Message, kind capture.MessageKind, frames []int) *capture.Message {
	t.Helper()
	m := msgs[frameKey(frames)]
	if m == nil || m.Kind != kind {
		t.Fatalf("frames %v are not one RoCEv2 message of kind %d", frames, kind)
	}
	return m
}

// streamKey names one direction of a TCP connection.
type streamKey struct{ src, dst netip.AddrPort }

// tcpPDU is one NVMe/TCP PDU cut from the capture with its oracle record.
type tcpPDU struct {
	capture.TCPPDU
	rec capture.TCPPDURecord
}

// key returns the PDU's stream.
func (p *tcpPDU) key() streamKey { return streamKey{p.Stream.Src, p.Stream.Dst} }

// tcpPDUs reassembles the NVMe/TCP streams of the TCP capture, cuts them
// into PDUs by PLEN and pairs each PDU with its tcp_pdu oracle record, in
// the oracle's order; it returns the capture's frames too. The cut must
// agree with the record (stream, frames of the first and last byte, PDU
// type, PLEN) and the capture must be clean: every stream starts with its
// SYN and has no retransmitted, reordered or missing segment.
func tcpPDUs(t testing.TB) ([]capture.Frame, []tcpPDU) {
	t.Helper()
	g, err := capture.LoadTCPGolden(tcpCapture)
	if err != nil {
		t.Fatal(err)
	}
	oracle := oracleRecords[capture.TCPPDURecord](t, g.Records, capture.KindTCPPDU)
	out := make([]tcpPDU, len(g.PDUs))
	for i, r := range oracle {
		p := g.PDUs[i]
		s := p.Stream
		if !s.SYN || s.Duplicate != 0 || s.Reordered != 0 || s.Missing != 0 {
			t.Fatalf("%v: SYN %v, %d duplicate bytes, %d reordered segments, %d missing bytes (the capture should be clean)",
				s, s.SYN, s.Duplicate, s.Reordered, s.Missing)
		}
		src := netip.AddrPortFrom(netip.MustParseAddr(r.Src), r.Sport)
		dst := netip.AddrPortFrom(netip.MustParseAddr(r.Dst), r.Dport)
		if s.Src != src || s.Dst != dst || p.FirstFrame != r.FrameFirst || p.LastFrame != r.FrameLast ||
			p.Data[0] != r.Hdr.Type || uint32(len(p.Data)) != r.Hdr.PLen {
			t.Fatalf("oracle %s %v -> %v frames %d-%d: stream cut gives type %d, %d bytes in frames %d-%d of %v",
				r.TypeName, src, dst, r.FrameFirst, r.FrameLast, p.Data[0], len(p.Data), p.FirstFrame, p.LastFrame, s)
		}
		out[i] = tcpPDU{p, r}
	}
	return g.Frames, out
}
