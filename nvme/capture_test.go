package nvme_test

// Test-only access to the golden captures: pcapng frames, the RoCEv2 and
// NVMe/TCP payload framing needed to get at SQEs, CQEs and data, and the
// decode oracle. It is deliberately self-contained (gopacket's pcapgo and the
// standard library) so that the nvme package's tests depend on no other
// package of the module.

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

const (
	rdmaCapture = "kernel-nvme-rdma-rxe"
	tcpCapture  = "kernel-nvme-tcp"
)

// frame is one captured frame with its IPv4 and UDP/TCP fields located.
type frame struct {
	number       int
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
	payload      []byte // UDP or TCP payload
	tcpSeq       uint32
	tcpSYN       bool
	parsedOkay   bool
}

func testdataPath(name string) string {
	return filepath.Join("..", "testdata", "pcap", name)
}

func openMaybeGzip(t testing.TB, path string) io.ReadCloser {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		t.Fatalf("%s: %v", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}
}

func parseFrame(n int, d []byte) frame {
	f := frame{number: n}
	if len(d) < 14 || binary.BigEndian.Uint16(d[12:]) != 0x0800 {
		return f
	}
	ip := d[14:]
	if len(ip) < 20 {
		return f
	}
	ihl := int(ip[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ihl < 20 || total < ihl || total > len(ip) {
		return f
	}
	f.src = netip.AddrFrom4([4]byte(ip[12:16]))
	f.dst = netip.AddrFrom4([4]byte(ip[16:20]))
	f.proto = ip[9]
	l4 := ip[ihl:total]
	switch f.proto {
	case 17:
		if len(l4) < 8 {
			return f
		}
		f.sport, f.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		f.payload = l4[8:]
	case 6:
		if len(l4) < 20 {
			return f
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || doff > len(l4) {
			return f
		}
		f.sport, f.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		f.tcpSeq = binary.BigEndian.Uint32(l4[4:])
		f.tcpSYN = l4[13]&0x02 != 0
		f.payload = l4[doff:]
	default:
		return f
	}
	f.parsedOkay = true
	return f
}

var (
	framesOnce  sync.Map // capture name -> *framesResult
	oracleCache sync.Map // capture name -> *oracleResult
)

type framesResult struct {
	once   sync.Once
	frames []frame
	err    error
}

// loadFrames returns the frames of testdata/pcap/<name>.pcapng.gz, indexed
// by frame number (frames[0] is unused).
func loadFrames(t testing.TB, name string) []frame {
	t.Helper()
	v, _ := framesOnce.LoadOrStore(name, &framesResult{})
	r := v.(*framesResult)
	r.once.Do(func() {
		rc := openMaybeGzip(t, testdataPath(name+".pcapng.gz"))
		defer rc.Close()
		ng, err := pcapgo.NewNgReader(rc, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			r.err = err
			return
		}
		r.frames = []frame{{}}
		for n := 1; ; n++ {
			data, _, err := ng.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				r.err = fmt.Errorf("frame %d: %w", n, err)
				return
			}
			r.frames = append(r.frames, parseFrame(n, data))
		}
	})
	if r.err != nil {
		t.Fatalf("%s: %v", name, r.err)
	}
	return r.frames
}

type oracleResult struct {
	once sync.Once
	recs []json.RawMessage
	err  error
}

// loadOracle returns the lines of testdata/pcap/<name>.decoded.jsonl.gz.
func loadOracle(t testing.TB, name string) []json.RawMessage {
	t.Helper()
	v, _ := oracleCache.LoadOrStore(name, &oracleResult{})
	r := v.(*oracleResult)
	r.once.Do(func() {
		rc := openMaybeGzip(t, testdataPath(name+".decoded.jsonl.gz"))
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			r.recs = append(r.recs, append(json.RawMessage(nil), sc.Bytes()...))
		}
		r.err = sc.Err()
	})
	if r.err != nil {
		t.Fatalf("%s oracle: %v", name, r.err)
	}
	return r.recs
}

// oracleRecords decodes the records of one kind into T.
func oracleRecords[T any](t testing.TB, name, kind string) []T {
	t.Helper()
	var out []T
	for _, raw := range loadOracle(t, name) {
		var k struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &k); err != nil {
			t.Fatal(err)
		}
		if k.Kind != kind {
			continue
		}
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s record: %v", name, kind, err)
		}
		out = append(out, v)
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

// rocePayload returns the message payload of a RoCEv2 RC packet (the
// bytes after the BTH and the extended headers of its opcode, without pad
// and ICRC) and the BTH opcode. Only the RC opcodes of the capture are
// known here.
func rocePayload(t testing.TB, f frame) ([]byte, uint8) {
	t.Helper()
	p := f.payload
	if !f.parsedOkay || f.proto != 17 || f.dport != 4791 || len(p) < 12+4 {
		t.Fatalf("frame %d is not a RoCEv2 packet", f.number)
	}
	op := p[0]
	pad := int(p[1] >> 4 & 0x3)
	// Extended header bytes after the 12-byte BTH (IBTA vol. 1 table 38):
	// RETH 16, AETH 4, ImmDt 4, IETH 4.
	ext, ok := map[uint8]int{
		0x00: 0, 0x01: 0, 0x02: 0, 0x03: 4, 0x04: 0, 0x05: 4, // SEND First, Middle, Last, Last+Imm, Only, Only+Imm
		0x06: 16, 0x07: 0, 0x08: 0, 0x09: 4, 0x0a: 16, 0x0b: 20, // RDMA WRITE First .. Only with Immediate
		0x0d: 4, 0x0e: 0, 0x0f: 4, 0x10: 4, // RDMA READ Response First, Middle, Last, Only
		0x16: 4, 0x17: 4, // SEND Last / Only with Invalidate
	}[op]
	if !ok {
		t.Fatalf("frame %d: BTH opcode 0x%02x carries no message payload", f.number, op)
	}
	end := len(p) - 4 - pad
	if 12+ext > end {
		t.Fatalf("frame %d: %d bytes, too short for opcode 0x%02x", f.number, len(p), op)
	}
	return p[12+ext : end], op
}

// roceMessage concatenates the payloads of the frames of one message.
func roceMessage(t testing.TB, frames []frame, numbers []int) []byte {
	t.Helper()
	var msg []byte
	for _, n := range numbers {
		p, _ := rocePayload(t, frames[n])
		msg = append(msg, p...)
	}
	return msg
}

// tcpPDU is one NVMe/TCP PDU cut from a reassembled stream.
type tcpPDU struct {
	src, dst              netip.AddrPort
	frameFirst, frameLast int
	bytes                 []byte // the whole PDU (header and data)
}

type tcpStreamKey struct{ src, dst netip.AddrPort }

// tcpPDUs reassembles every TCP stream of the capture in sequence order and
// cuts it into NVMe/TCP PDUs by their PLEN. The golden captures are clean
// (no loss or retransmission); a gap or overlap fails the test.
func tcpPDUs(t testing.TB, frames []frame) map[tcpStreamKey][]tcpPDU {
	t.Helper()
	type stream struct {
		next    uint32
		started bool
		buf     []byte
		owner   []int // frame number of each byte in buf
	}
	streams := map[tcpStreamKey]*stream{}
	var order []tcpStreamKey
	for _, f := range frames[1:] {
		if !f.parsedOkay || f.proto != 6 {
			continue
		}
		k := tcpStreamKey{netip.AddrPortFrom(f.src, f.sport), netip.AddrPortFrom(f.dst, f.dport)}
		s := streams[k]
		if s == nil {
			s = &stream{}
			streams[k] = s
			order = append(order, k)
		}
		if f.tcpSYN {
			s.next, s.started = f.tcpSeq+1, true
			continue
		}
		if len(f.payload) == 0 {
			continue
		}
		if !s.started {
			t.Fatalf("frame %d: TCP data before the SYN of %v", f.number, k)
		}
		if f.tcpSeq != s.next {
			t.Fatalf("frame %d: TCP sequence %d, expected %d (the capture should be clean)", f.number, f.tcpSeq, s.next)
		}
		s.next += uint32(len(f.payload))
		s.buf = append(s.buf, f.payload...)
		for range f.payload {
			s.owner = append(s.owner, f.number)
		}
	}
	out := map[tcpStreamKey][]tcpPDU{}
	for _, k := range order {
		s := streams[k]
		for off := 0; off < len(s.buf); {
			if len(s.buf)-off < 8 {
				t.Fatalf("%v: %d bytes left after the last PDU", k, len(s.buf)-off)
			}
			plen := int(binary.LittleEndian.Uint32(s.buf[off+4:]))
			if plen < 8 || off+plen > len(s.buf) {
				t.Fatalf("%v: PDU at stream byte %d has PLEN %d, %d bytes left", k, off, plen, len(s.buf)-off)
			}
			out[k] = append(out[k], tcpPDU{
				src: k.src, dst: k.dst,
				frameFirst: s.owner[off], frameLast: s.owner[off+plen-1],
				bytes: s.buf[off : off+plen],
			})
			off += plen
		}
	}
	return out
}
