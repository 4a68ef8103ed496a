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
	var out []T
	for _, r := range recs {
		if r.Kind != kind {
			continue
		}
		var v T
		if err := r.Decode(&v); err != nil {
			t.Fatalf("%s record: %v", kind, err)
		}
		out = append(out, v)
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
	rec oracleTCPPDU
}

// key returns the PDU's stream.
func (p *tcpPDU) key() streamKey { return streamKey{p.Stream.Src, p.Stream.Dst} }

// tcpPDUs reassembles the NVMe/TCP streams of the capture, cuts them into
// PDUs by PLEN and pairs each PDU with its tcp_pdu oracle record, in the
// oracle's order. The cut must agree with the record (stream, frames of the
// first and last byte, PDU type, PLEN) and the capture must be clean: every
// stream starts with its SYN and has no retransmitted, reordered or missing
// segment.
func tcpPDUs(t testing.TB, frames []capture.Frame, recs []capture.Record) []tcpPDU {
	t.Helper()
	cut, err := capture.NVMeTCPPDUs(frames, 4420)
	if err != nil {
		t.Fatal(err)
	}
	oracle := oracleRecords[oracleTCPPDU](t, recs, "tcp_pdu")
	if len(cut) != len(oracle) {
		t.Fatalf("%d PDUs cut from the capture, the oracle has %d", len(cut), len(oracle))
	}
	out := make([]tcpPDU, len(cut))
	for i, r := range oracle {
		p := cut[i]
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
	return out
}

// Oracle record shapes (testdata/pcap ORACLE.md). Every 64-bit value is a
// uint64 so that encoding/json keeps it exact.

type oracleSGL struct {
	Addr    uint64 `json:"addr"`
	Length  uint64 `json:"length"`
	Type    uint64 `json:"type"`
	Subtype uint64 `json:"subtype"`
	RawHex  string `json:"raw_hex"`
}

type oracleSQE struct {
	Opcode uint64    `json:"opcode"`
	Fuse   uint64    `json:"fuse"`
	PSDT   uint64    `json:"psdt"`
	CID    uint64    `json:"cid"`
	NSID   uint64    `json:"nsid"`
	CDW2   uint64    `json:"cdw2"`
	CDW3   uint64    `json:"cdw3"`
	MPTR   uint64    `json:"mptr"`
	SGL    oracleSGL `json:"sgl"`
	CDW10  uint64    `json:"cdw10"`
	CDW11  uint64    `json:"cdw11"`
	CDW12  uint64    `json:"cdw12"`
	CDW13  uint64    `json:"cdw13"`
	CDW14  uint64    `json:"cdw14"`
	CDW15  uint64    `json:"cdw15"`
}

type oracleCQE struct {
	DW0       uint64 `json:"dw0"`
	DW1       uint64 `json:"dw1"`
	SQHD      uint64 `json:"sqhd"`
	SQID      uint64 `json:"sqid"`
	CID       uint64 `json:"cid"`
	Phase     uint64 `json:"phase"`
	StatusRaw uint64 `json:"status_raw"`
	SCT       uint64 `json:"sct"`
	SC        uint64 `json:"sc"`
	CRD       uint64 `json:"crd"`
	More      uint64 `json:"more"`
	DNR       uint64 `json:"dnr"`
}

// oracleConnectData is the part of the Connect data the tests use.
type oracleConnectData struct {
	SubNQN string `json:"subnqn"`
}

type oracleCapsule struct {
	Frames       []int              `json:"frames"`
	ConnectData  *oracleConnectData `json:"connect_data"`
	DQPN         uint64             `json:"dqpn"`
	QID          *uint64            `json:"qid"`
	SQE          oracleSQE          `json:"sqe"`
	IncapsuleLen int                `json:"incapsule_len"`
}

type oracleCQERecord struct {
	Frames    []int     `json:"frames"`
	DQPN      uint64    `json:"dqpn"`
	CQE       oracleCQE `json:"cqe"`
	ForOpcode *uint64   `json:"for_opcode"`
	ForFrames []int     `json:"for_frames"`
}

type oracleRDMAData struct {
	Frames      []int              `json:"frames"`
	Op          string             `json:"op"`
	DQPN        uint64             `json:"dqpn"`
	QID         *uint64            `json:"qid"`
	Len         int                `json:"len"`
	SHA256      string             `json:"sha256"`
	ForCID      *uint64            `json:"for_cid"`
	ForOpcode   *uint64            `json:"for_opcode"`
	ForFrames   []int              `json:"for_frames"`
	Offset      uint64             `json:"offset"`
	ConnectData *oracleConnectData `json:"connect_data"`
}

type oracleTCPPDU struct {
	FrameFirst int    `json:"frame_first"`
	FrameLast  int    `json:"frame_last"`
	Src        string `json:"src"`
	Sport      uint16 `json:"sport"`
	Dst        string `json:"dst"`
	Dport      uint16 `json:"dport"`
	Hdr        struct {
		Type uint8  `json:"type"`
		HLen uint8  `json:"hlen"`
		PDO  uint8  `json:"pdo"`
		PLen uint32 `json:"plen"`
	} `json:"hdr"`
	TypeName     string    `json:"type_name"`
	QID          *uint64   `json:"qid"`
	SQE          oracleSQE `json:"sqe"`
	IncapsuleLen int       `json:"incapsule_len"`
	CQE          oracleCQE `json:"cqe"`
	Data         struct {
		CCCID uint16 `json:"cccid"`
		DataO uint32 `json:"datao"`
		DataL uint32 `json:"datal"`
		Len   int    `json:"len"`
	} `json:"data"`
	ForOpcode   *uint64            `json:"for_opcode"`
	ForFrames   []int              `json:"for_frames"`
	ConnectData *oracleConnectData `json:"connect_data"`
}
