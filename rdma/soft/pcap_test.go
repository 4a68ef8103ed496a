package soft

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// readPcap returns the packets of a pcap stream, checking its link type.
func readPcap(t *testing.T, b []byte) [][]byte {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeRaw {
		t.Fatalf("link type %v", r.LinkType())
	}
	var out [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if ci.Length != len(data) {
			t.Fatalf("record truncated: %d of %d bytes", len(data), ci.Length)
		}
		out = append(out, data)
	}
}

// TestPcap records a SEND, an RDMA WRITE and an RDMA READ on both sides:
// every record is an IPv4 datagram whose ICRC verifies, and tshark (if
// installed) decodes the records as InfiniBand over UDP 4791.
func TestPcap(t *testing.T) {
	var capA, capB bytes.Buffer
	a, b := openPair(t, Config{Pcap: &capA}, Config{Pcap: &capB})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024, timeout: 16})
	src := regMR(t, ea.pd, 3000, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, 3000, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	postRecv(t, eb.qp, 1, sge(mem, 0, 3000))
	wrs := []rdma.SendWR{
		{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 100)}},
		{WRID: 2, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, 2500)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()},
		{WRID: 3, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 2100)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()},
	}
	wrs[0].Next, wrs[1].Next = &wrs[1], &wrs[2]
	postSend(t, ea.qp, &wrs[0])
	poll(t, ea.scq, 1, 2*time.Second)
	a.Close()
	b.Close()
	ops := map[wire.Opcode]int{}
	for side, c := range map[string][]byte{"A": capA.Bytes(), "B": capB.Bytes()} {
		recs := readPcap(t, c)
		if len(recs) == 0 {
			t.Fatalf("%s: no records", side)
		}
		for i, r := range recs {
			if err := wire.CheckICRC(r); err != nil {
				t.Fatalf("%s record %d: %v", side, i, err)
			}
			_, _, pkt, _ := wire.SplitIPUDP(r)
			ops[wire.BTH(pkt).Opcode()]++
		}
	}
	// Each packet appears once as sent and once as received (twice each
	// if a slow machine made the requester retransmit).
	for _, op := range []wire.Opcode{wire.RCSendOnly, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast,
		wire.RCRDMAReadRequest, wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast} {
		if n := ops[op]; n < 2 || n%2 != 0 {
			t.Errorf("%s: %d records (all: %v)", op, n, ops)
		}
	}
	if ops[wire.RCAcknowledge] < 2 {
		t.Errorf("%d ACK records", ops[wire.RCAcknowledge])
	}

	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: decode not checked")
		return
	}
	f := filepath.Join(t.TempDir(), "a.pcap")
	if err := os.WriteFile(f, capA.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark, "-r", f, "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		seen[strings.Fields(line + " -")[0]] = true
	}
	// SEND Only, WRITE First/Middle/Last, READ Request and Response First/Middle/Last, Acknowledge.
	for _, op := range []string{"4", "6", "7", "8", "12", "13", "14", "15", "17"} {
		if !seen[op] {
			t.Errorf("tshark did not decode opcode %s; fields:\n%s", op, out)
		}
	}
}

// TestPcapStopsAtClose: a send still in flight when the device closes (an
// ACK timer's, past its QP's checks) records nothing once Close returned,
// when the caller reads the stream it gave (a race TestPcap met under -race).
func TestPcapStopsAtClose(t *testing.T) {
	var buf bytes.Buffer
	a, _ := openPair(t, Config{Pcap: &buf}, Config{})
	a.Close()
	n := buf.Len()
	// What the late sender would do after Close.
	a.pcap.writeReceived(make([]byte, wire.IPv4HeaderLen+wire.UDPHeaderLen+wire.BTHLen), csumAsIs)
	if buf.Len() != n {
		t.Fatalf("a record written after Close: %d bytes, then %d", n, buf.Len())
	}
}
