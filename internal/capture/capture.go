// Package capture reads the golden packet captures under testdata/pcap for
// tests: pcapng frames (optionally gzip-compressed) with their Ethernet, IP
// and UDP/TCP headers located, and the independent decode oracle records
// (*.decoded.jsonl) that sit beside each capture.
package capture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gopacket/gopacket/pcapgo"
)

// Frame is one captured Ethernet frame with its layers located.
type Frame struct {
	Number  int    // 1-based, as Wireshark numbers frames
	Data    []byte // the whole Ethernet frame
	IPOff   int    // offset of the IP header in Data
	IP      []byte // the IPv4 or IPv6 header (nil for other EtherTypes)
	IPv6    bool   // IP is an IPv6 header
	Proto   uint8  // IP protocol (17 UDP, 6 TCP)
	L4      []byte // the UDP or TCP header
	Payload []byte // what follows the UDP or TCP header, up to the IP length
}

// UDPDstPort returns the UDP destination port, or 0 when the frame is not UDP.
func (f *Frame) UDPDstPort() uint16 {
	if f.Proto != 17 || len(f.L4) < 8 {
		return 0
	}
	return binary.BigEndian.Uint16(f.L4[2:4])
}

// IsRoCEv2 reports whether the frame is a RoCEv2 packet (UDP destination port 4791).
func (f *Frame) IsRoCEv2() bool { return f.UDPDstPort() == 4791 }

// IPOnward returns the IP header, the UDP or TCP header and the payload,
// contiguous as in Data: for RoCEv2, everything the ICRC covers and the ICRC.
func (f *Frame) IPOnward() []byte {
	return f.Data[f.IPOff : f.IPOff+len(f.IP)+len(f.L4)+len(f.Payload)]
}

// Root returns the repository root: the nearest parent directory of the
// working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("capture: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Path returns the path of a file in the repository's testdata/pcap, e.g.
// Path("kernel-nvme-rdma-rxe.pcapng.gz").
func Path(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "pcap", name), nil
}

// open opens a file of testdata/pcap by name, or any file by path (a name
// with a path separator), decompressing .gz files. It returns the path.
func open(nameOrPath string) (io.ReadCloser, string, error) {
	path := nameOrPath
	if !strings.ContainsRune(nameOrPath, filepath.Separator) {
		p, err := Path(nameOrPath)
		if err != nil {
			return nil, "", err
		}
		path = p
	}
	rc, err := openFile(path)
	return rc, path, err
}

func openFile(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// Load reads every frame of a pcapng capture (a name in testdata/pcap or a
// path; .gz is decompressed).
func Load(nameOrPath string) ([]Frame, error) {
	rc, path, err := open(nameOrPath)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := pcapgo.NewNgReader(rc, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %w", path, err)
	}
	var frames []Frame
	for n := 1; ; n++ {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("capture: %s frame %d: %w", path, n, err)
		}
		f := Frame{Number: n, Data: data}
		locate(&f)
		frames = append(frames, f)
	}
	return frames, nil
}

// locate finds the IP and L4 headers of an Ethernet frame.
func locate(f *Frame) {
	d := f.Data
	if len(d) < 14 {
		return
	}
	off := 12
	etype := binary.BigEndian.Uint16(d[off:])
	off += 2
	for etype == 0x8100 || etype == 0x88a8 {
		if len(d) < off+4 {
			return
		}
		etype = binary.BigEndian.Uint16(d[off+2:])
		off += 4
	}
	var l4 []byte
	f.IPOff = off
	switch etype {
	case 0x0800:
		if len(d) < off+20 {
			return
		}
		ihl := int(d[off]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(d[off+2:]))
		if ihl < 20 || total < ihl || len(d) < off+total {
			return
		}
		f.IP = d[off : off+ihl : off+ihl]
		f.Proto = d[off+9]
		l4 = d[off+ihl : off+total]
	case 0x86dd:
		if len(d) < off+40 {
			return
		}
		plen := int(binary.BigEndian.Uint16(d[off+4:]))
		if len(d) < off+40+plen {
			return
		}
		f.IP = d[off : off+40 : off+40]
		f.IPv6 = true
		f.Proto = d[off+6]
		l4 = d[off+40 : off+40+plen]
	default:
		return
	}
	switch f.Proto {
	case 17:
		if len(l4) < 8 {
			return
		}
		f.L4, f.Payload = l4[:8:8], l4[8:]
	case 6:
		if len(l4) < 20 {
			return
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || len(l4) < doff {
			return
		}
		f.L4, f.Payload = l4[:doff:doff], l4[doff:]
	}
}

// Record is one line of a *.decoded.jsonl oracle file.
type Record struct {
	Kind string          // "roce", "cm", "capsule", "cqe", "rdma_data", "tcp_pdu", …
	Raw  json.RawMessage // the whole line; decode 64-bit fields into uint64
}

// Decode unmarshals the record into v (a pointer to a struct whose uint64
// fields keep 64-bit values exact), such as the record types of
// oracle_types.go.
func (r Record) Decode(v any) error { return json.Unmarshal(r.Raw, v) }

// DecodeStrict is Decode failing on any key v has no field for, so that a
// test checking every field of v leaves no key of the oracle unchecked.
func (r Record) DecodeStrict(v any) error {
	dec := json.NewDecoder(bytes.NewReader(r.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("capture: %s record: %w", r.Kind, err)
	}
	return nil
}

// Records decodes the records of one kind (KindCapsule, …) into T, in
// order.
func Records[T any](recs []Record, kind string) ([]T, error) {
	var out []T
	for i, r := range recs {
		if r.Kind != kind {
			continue
		}
		var v T
		if err := r.Decode(&v); err != nil {
			return nil, fmt.Errorf("capture: record %d (%s): %w", i+1, kind, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// LoadOracle reads a decode oracle (a name in testdata/pcap or a path; .gz
// is decompressed).
func LoadOracle(nameOrPath string) ([]Record, error) {
	rc, path, err := open(nameOrPath)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var recs []Record
	for line := 1; sc.Scan(); line++ {
		raw := append(json.RawMessage(nil), sc.Bytes()...)
		var k struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("capture: %s:%d: %w", path, line, err)
		}
		recs = append(recs, Record{Kind: k.Kind, Raw: raw})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("capture: %s: %w", path, err)
	}
	return recs, nil
}
