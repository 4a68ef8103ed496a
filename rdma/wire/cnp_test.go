package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// TestCNPLayout checks PutCNP against the annex A17.9.3 layout written
// out byte by byte, and the views and Packet.Parse on it.
func TestCNPLayout(t *testing.T) {
	var b [wire.CNPLen]byte
	for i := range b {
		b[i] = 0xee // PutCNP must clear what it does not set
	}
	n, err := wire.PutCNP(b[:], 0x12345678, 0xffff)
	if err != nil || n != 32 || wire.CNPLen != 32 {
		t.Fatalf("PutCNP: %d, %v", n, err)
	}
	want := []byte{
		0x81, 0x00, 0xff, 0xff, // opcode CNP; SE, M, pad, TVer 0; P_Key
		0x40, 0x34, 0x56, 0x78, // FECN 0, BECN 1; DestQP (24 bits)
		0x00, 0x00, 0x00, 0x00, // AckReq 0, PSN 0
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 16 reserved bytes
		0, 0, 0, 0, // ICRC, filled by the sender
	}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("CNP\n got % x\nwant % x", b[:], want)
	}
	c, err := wire.ParseCNP(b[:])
	if err != nil {
		t.Fatal(err)
	}
	bth := c.BTH()
	if c.DestQP() != 0x345678 || c.PKey() != 0xffff || !bth.BECN() || bth.FECN() || bth.PSN() != 0 || bth.AckReq() || len(c.Reserved()) != 16 || len(c.ICRC()) != 4 {
		t.Fatalf("views: %v", bth)
	}
	op := wire.OpCNP
	if !op.Known() || !op.IsCNP() || op.RequiresPSNAck() || op.HasPayload() || op.Class() != wire.ClassCN || op.HeaderLen() != 28 || op.String() != "CNP" {
		t.Fatalf("opcode table: known %t cnp %t psnack %t hl %d %q", op.Known(), op.IsCNP(), op.RequiresPSNAck(), op.HeaderLen(), op)
	}
	var p wire.Packet
	if err := p.Parse(b[:]); err != nil || len(p.Payload) != 0 || len(p.ICRC) != 4 {
		t.Fatalf("Packet.Parse: %v payload %d", err, len(p.Payload))
	}
	if _, err := wire.PutCNP(b[:31], 1, 0xffff); !errors.Is(err, wire.ErrShort) {
		t.Fatalf("short buffer: %v", err)
	}
}

func TestParseCNPErrors(t *testing.T) {
	good := make([]byte, wire.CNPLen)
	if _, err := wire.PutCNP(good, 7, 0xffff); err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", good[:11], "too short"},
		{"truncated", good[:31], "CNP of 31 bytes"},
		{"long", append(append([]byte(nil), good...), 0, 0, 0, 0), "CNP of 36 bytes"},
		{"opcode", mod(func(b []byte) []byte { b[0] = 0x11; return b }), "not a CNP"},
		{"tver", mod(func(b []byte) []byte { b[1] = 1; return b }), "version 1"},
		{"pad", mod(func(b []byte) []byte { b[1] = 0x30; return b }), "pad count 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.ParseCNP(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// cnpDatagram returns a CNP from 198.51.100.1 to 198.51.100.2 in an
// IPv4 and UDP header, its ICRC computed.
func cnpDatagram(t *testing.T, destQP uint32) []byte {
	t.Helper()
	pkt := make([]byte, wire.CNPLen)
	if _, err := wire.PutCNP(pkt, destQP, 0xffff); err != nil {
		t.Fatal(err)
	}
	dg := make([]byte, 20+8+len(pkt))
	ip, udp := dg[:20], dg[20:28]
	ip[0], ip[1] = 0x45, 0xc0 // CNPs go with DSCP 48 (mlx5's np_cnp_dscp), Not-ECT
	binary.BigEndian.PutUint16(ip[2:], uint16(len(dg)))
	ip[6], ip[8], ip[9] = 0x40, 64, 17
	copy(ip[12:], []byte{198, 51, 100, 1, 198, 51, 100, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(pkt)))
	copy(dg[28:], pkt)
	if err := wire.PutICRC(dg[28:], wire.ICRC(ip, udp, dg[28:len(dg)-4])); err != nil {
		t.Fatal(err)
	}
	if err := wire.CheckICRC(dg); err != nil {
		t.Fatal(err)
	}
	return dg
}

// TestCNPTshark writes a CNP to a pcap and checks that tshark's RoCE
// dissector (an independent decoder) reads it as a CNP with our fields.
func TestCNPTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	dg := cnpDatagram(t, 0xabcdef)
	var f bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 101) // LINKTYPE_RAW
	f.Write(hdr)
	rec := make([]byte, 16)
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(dg)))
	binary.LittleEndian.PutUint32(rec[12:], uint32(len(dg)))
	f.Write(rec)
	f.Write(dg)
	path := filepath.Join(t.TempDir(), "cnp.pcap")
	if err := os.WriteFile(path, f.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	text := string(out)
	// tshark 4.0 knows the BTH of opcode 129 but not its name, nor FECN
	// and BECN outside InfiniBand: it shows byte 4 whole as Reserved
	// (0x40, BECN alone) and the rest, the 16 reserved bytes and the
	// ICRC, as data. Later versions name it.
	icrc := hex.EncodeToString(dg[len(dg)-4:])
	for _, want := range []string{
		"Dst Port: 4791",
		"Opcode: ",
		"(129)",
		"Partition Key: 65535",
		"Destination Queue Pair: 0xabcdef",
		"Acknowledge Request: False",
		"Packet Sequence Number: 0\n",
		"00000000000000000000000000000000" + icrc,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("tshark's decode lacks %q", want)
		}
	}
	if !strings.Contains(text, "Reserved: 40") && !strings.Contains(text, "BECN: True") {
		t.Errorf("tshark's decode shows neither BECN set nor byte 4 as 0x40")
	}
	if strings.Contains(text, "FECN: True") {
		t.Errorf("tshark decodes FECN set")
	}
	if t.Failed() {
		t.Logf("tshark -V:\n%s", text)
	}
}

// FuzzParseCNP checks that ParseCNP never panics, accepts only what
// PutCNP could have written (up to reserved bytes, BECN and P_Key), and
// that Packet.Parse agrees on every CNP it accepts.
func FuzzParseCNP(f *testing.F) {
	good := make([]byte, wire.CNPLen)
	if _, err := wire.PutCNP(good, 0x11, 0xffff); err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:12])
	f.Add([]byte{0x81})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := wire.ParseCNP(b)
		if err != nil {
			return
		}
		if len(c) != wire.CNPLen || c.BTH().Opcode() != wire.OpCNP || c.BTH().TVer() != 0 {
			t.Fatalf("accepted % x", b)
		}
		var p wire.Packet
		if err := p.Parse(b); err != nil {
			t.Fatalf("ParseCNP accepts what Packet.Parse rejects: %v", err)
		}
		again := make([]byte, wire.CNPLen)
		if _, err := wire.PutCNP(again, c.DestQP(), c.PKey()); err != nil {
			t.Fatal(err)
		}
		canonical := b[1] == 0 && b[4]&0xff == 0x40 && b[8]|b[9]|b[10]|b[11] == 0
		if canonical && !bytes.Equal(again[:12], b[:12]) {
			t.Fatalf("re-encoding differs: % x vs % x", again[:12], b[:12])
		}
	})
}
