package soft

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// roceToolPath returns the shared, independent RoCEv2 capture checker
// (Python): in $KPEER_DIR, or in ../shared/kernel-peer beside the
// repository (tests run in this package's directory).
func roceToolPath() string {
	dir := os.Getenv("KPEER_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "kernel-peer")
	}
	return filepath.Join(dir, "tools", "roce-pcap.py")
}

// mixedCapture runs a workload covering every packet kind the device
// sends between two devices and returns device A's capture (what A sent
// and received): CM REQ, REP, RTU, DREQ and DREP on QP1; SEND (Only,
// First/Middle/Last, with immediate, with invalidate) and RDMA WRITE
// (Only, First/Middle/Last, with immediate, zero-length) both ways; RDMA
// READ requests and responses (Only, First/Middle/Last); ACKs; an RNR
// NAK; a NAK PSN sequence error; a NAK remote access error.
func mixedCapture(t *testing.T) []byte {
	t.Helper()
	var capA bytes.Buffer
	a, b := openPairAt(t, Config{Addr: addrRNRA, Pcap: &capA}, Config{Addr: addrRNRB})
	ea, eb, ca, _ := cmConnect(t, a, b, 7174, qpOpts{mtu: rdma.MTU1024})
	all := rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite
	memA := regMR(t, ea.pd, 64<<10, all)
	memB := regMR(t, eb.pd, 64<<10, all)
	invB := regMR(t, eb.pd, 64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	fill(memA.Bytes(), 1)
	fill(memB.Bytes(), 2)
	const slot = 4096
	recvB := func(k int) { postRecv(t, eb.qp, uint64(k), sge(memB, 32<<10+(k%8)*slot, slot)) }
	for k := 0; k < 6; k++ {
		recvB(k)
	}

	// A to B: every request kind, all signaled.
	wrs := []rdma.SendWR{
		{Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(memA, 0, 100)}},
		{Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(memA, 0, 3000)}},
		{Opcode: rdma.WRSendWithImm, Imm: 0x01020304, SGL: []rdma.SGE{sge(memA, 0, 10)}},
		{Opcode: rdma.WRSendWithInv, InvalidateRKey: invB.RKey(), SGL: []rdma.SGE{sge(memA, 0, 20)}},
		{Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(memA, 0, 200)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
		{Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(memA, 0, 2500)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
		{Opcode: rdma.WRRDMAWriteWithImm, Imm: 7, SGL: []rdma.SGE{sge(memA, 0, 1500)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
		{Opcode: rdma.WRRDMAWrite, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
		{Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(memA, 8192, 100)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
		{Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(memA, 8192, 5000)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()},
	}
	for i := range wrs {
		wrs[i].WRID, wrs[i].Flags = uint64(i), rdma.SendSignaled
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	postSend(t, ea.qp, &wrs[0])
	for i, wc := range poll(t, ea.scq, len(wrs), 5*time.Second) {
		checkWC(t, wc, uint64(i), rdma.Success)
	}
	poll(t, eb.rcq, 5, 5*time.Second)

	// B to A: a SEND and a READ.
	postRecv(t, ea.qp, 100, sge(memA, 16<<10, slot))
	postSend(t, eb.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(memB, 0, 500)},
		Next: &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(memB, 20<<10, 2000)},
			RemoteAddr: memA.Addr(), RKey: memA.RKey()}})
	checkWC(t, poll(t, eb.scq, 1, 5*time.Second)[0], 2, rdma.Success)
	poll(t, ea.rcq, 1, 5*time.Second)

	// RNR NAK: one receive left at B for two SENDs.
	postSend(t, ea.qp, &rdma.SendWR{WRID: 20, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(memA, 0, 64)},
		Next: &rdma.SendWR{WRID: 21, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(memA, 0, 64)}}})
	waitUntil(t, 5*time.Second, "an RNR NAK from B", func() bool { return b.Stats().RNRNAKsSent > 0 })
	recvB(6)
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 21, rdma.Success)

	// NAK PSN sequence error: A's send path drops one WRITE; the next
	// one arrives after a gap.
	a.SetFaults(&FaultConfig{Drop: 1}, nil)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 30, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(memA, 0, 100)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()})
	a.SetFaults(nil, nil)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 31, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(memA, 0, 100)}, RemoteAddr: memB.Addr(), RKey: memB.RKey()})
	checkWC(t, poll(t, ea.scq, 1, 10*time.Second)[0], 31, rdma.Success)

	// NAK remote access error: a WRITE with a wrong rkey fails the QP.
	postSend(t, ea.qp, &rdma.SendWR{WRID: 40, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(memA, 0, 100)}, RemoteAddr: memB.Addr(), RKey: memB.RKey() ^ 0x5a5a00})
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 40, rdma.RemoteAccessError)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ca.Disconnect(ctx); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	sa, sb := a.Stats(), b.Stats()
	if sb.SeqNAKsSent == 0 || sb.ErrNAKsSent == 0 || sa.ICRCErrors+sb.ICRCErrors != 0 {
		t.Fatalf("workload: A %+v\nB %+v", sa, sb)
	}
	a.Close()
	b.Close()
	return capA.Bytes()
}

// TestCaptureDecodes checks a capture of the mixed workload three ways:
// our own parser (every record an IPv4 RoCEv2 datagram with a valid
// ICRC, and every packet kind present), tshark (every frame dissected as
// InfiniBand, none malformed, no expert warning or error) and the shared
// roce-pcap.py (every ICRC correct, no header problems).
func TestCaptureDecodes(t *testing.T) {
	capture := mixedCapture(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "soft.pcap")
	if err := os.WriteFile(raw, capture, 0o644); err != nil {
		t.Fatal(err)
	}
	recs := readPcap(t, capture)
	seen := map[string]int{}
	for i, r := range recs {
		if err := wire.CheckICRC(r); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		_, _, pkt, err := wire.SplitIPUDP(r)
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		var p wire.Packet
		if err := p.Parse(pkt); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		seen[p.Opcode().String()]++
		switch {
		case p.Opcode() == wire.RCAcknowledge:
			seen[p.AETH.Syndrome().String()]++
		case p.BTH.DestQP() == 1:
			m, err := wire.ParseMAD(p.Payload)
			if err != nil {
				t.Fatalf("record %d: %v", i+1, err)
			}
			seen["CM "+wire.CMAttr(m.AttrID()).String()]++
		}
	}
	var want []string
	for _, op := range []wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly,
		wire.RCSendOnlyWithImmediate, wire.RCSendOnlyWithInvalidate, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle,
		wire.RCRDMAWriteLast, wire.RCRDMAWriteLastWithImmed, wire.RCRDMAWriteOnly, wire.RCRDMAReadRequest,
		wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast,
		wire.RCRDMAReadResponseOnly, wire.RCAcknowledge, wire.UDSendOnly} {
		want = append(want, op.String())
	}
	rnr := wire.Syndrome(wire.SyndromeRNR | rnrTimerCode(DefaultMinRNRTimer))
	for _, s := range []wire.Syndrome{ackSyndrome, rnr, wire.Syndrome(wire.SyndromeNAK | wire.NAKPSNSequenceError), wire.Syndrome(wire.SyndromeNAK | wire.NAKRemoteAccessError)} {
		want = append(want, s.String())
	}
	for _, a := range []wire.CMAttr{wire.CMAttrREQ, wire.CMAttrREP, wire.CMAttrRTU, wire.CMAttrDREQ, wire.CMAttrDREP} {
		want = append(want, "CM "+a.String())
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("no %s in the capture", w)
		}
	}
	if t.Failed() {
		t.Fatalf("capture holds %v", seen)
	}
	t.Logf("%d records: %v", len(recs), seen)

	t.Run("tshark", func(t *testing.T) { checkTshark(t, raw, len(recs)) })
	t.Run("roce-pcap", func(t *testing.T) { checkRocePcap(t, dir, capture, len(recs)) })
}

// checkTshark runs tshark on the capture (LINKTYPE_RAW: IPv4 from the
// first byte) and checks that every frame is dissected as InfiniBand
// with no malformed-packet mark and no expert warning or error.
func checkTshark(t *testing.T, file string, frames int) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	fields := []string{"-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "_ws.expert.message"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		// Wireshark registers the InfiniBand dissector on UDP port 4791
		// (RoCEv2) by default: no -d is needed; the explicit one must
		// give the same result.
		{"default", nil},
		{"decode-as", []string{"-d", "udp.port==4791,infiniband"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"-n", "-r", file}, tc.args...), fields...)
			cmd := exec.Command(tshark, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			n := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Split(sc.Text(), "\t")
				for len(f) < 5 {
					f = append(f, "")
				}
				n++
				protos := strings.Split(f[1], ":")
				if len(protos) < 3 || protos[0] != "raw" || protos[1] != "ip" || protos[2] != "udp" || !contains(protos, "infiniband") {
					t.Errorf("frame %s: protocols %s, want raw:ip:udp:infiniband", f[0], f[1])
				}
				if f[2] != "" || contains(protos, "_ws.malformed") {
					t.Errorf("frame %s: malformed (%s)", f[0], f[4])
				}
				// Expert severities: chat 0x200000, note 0x400000,
				// warn 0x600000, error 0x800000.
				for _, s := range strings.Split(f[3], "|") {
					if v, err := strconv.ParseUint(s, 0, 32); err == nil && v >= 0x600000 {
						t.Errorf("frame %s: expert severity %s: %s", f[0], s, f[4])
					}
				}
			}
			if n != frames {
				t.Errorf("tshark read %d frames, the capture has %d", n, frames)
			}
			if s := strings.TrimSpace(stderr.String()); s != "" && !strings.Contains(s, "Running as user \"root\"") {
				t.Errorf("tshark: %s", s)
			}
		})
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// checkRocePcap runs the shared roce-pcap.py on the capture. The tool
// reads Ethernet (link type 1) frames only, so the LINKTYPE_RAW records
// are first given an Ethernet header.
func checkRocePcap(t *testing.T, dir string, capture []byte, frames int) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	roceTool := roceToolPath()
	if _, err := os.Stat(roceTool); err != nil {
		t.Skipf("%s: %v (set KPEER_DIR to the kernel-peer tooling to run this check)", roceTool, err)
	}
	eth := filepath.Join(dir, "soft-eth.pcap")
	if err := rawToEthernet(capture, eth); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, roceTool, eth).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", roceTool, err)
	}
	report := string(out)
	t.Logf("roce-pcap.py:\n%s", report)
	if err != nil {
		t.Errorf("roce-pcap.py exited with %v", err)
	}
	must := func(re string) []string {
		m := regexp.MustCompile(re).FindAllStringSubmatch(report, -1)
		if m == nil {
			t.Fatalf("roce-pcap.py report has no line matching %q", re)
		}
		return m[0]
	}
	m := must(`frames: (\d+), RoCEv2 \(UDP dport 4791\): (\d+)`)
	if m[1] != strconv.Itoa(frames) || m[2] != m[1] {
		t.Errorf("roce-pcap.py: %s frames, %s RoCEv2; the capture has %d", m[1], m[2], frames)
	}
	m = must(`ICRC: (\d+) correct, (\d+) wrong`)
	if m[1] != strconv.Itoa(frames) || m[2] != "0" {
		t.Errorf("roce-pcap.py: ICRC %s correct, %s wrong, of %d", m[1], m[2], frames)
	}
	for _, re := range []string{`MF/fragment offset in (\d+)`, `header checksum wrong in (\d+)`, `UDP checksum: zero in \d+, valid in \d+, wrong in (\d+)`} {
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(report, -1) {
			if m[1] != "0" {
				t.Errorf("roce-pcap.py: %s", m[0])
			}
		}
	}
	for _, m := range regexp.MustCompile(`DF set in (\d+)/(\d+)`).FindAllStringSubmatch(report, -1) {
		if m[1] != m[2] {
			t.Errorf("roce-pcap.py: %s", m[0])
		}
	}
	for _, cm := range []string{"(REQ)", "(REP)", "(RTU)", "(DREQ)", "(DREP)"} {
		if !strings.Contains(report, cm) {
			t.Errorf("roce-pcap.py counted no %s", cm)
		}
	}
}

// rawToEthernet rewrites a LINKTYPE_RAW capture as LINKTYPE_ETHERNET:
// each IPv4 record gets a 14-byte Ethernet header (locally administered
// MAC addresses, EtherType IPv4).
func rawToEthernet(capture []byte, path string) error {
	r, err := pcapgo.NewReader(bytes.NewReader(capture))
	if err != nil {
		return fmt.Errorf("read capture: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return err
	}
	hdr := []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00}
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		frame := append(append([]byte(nil), hdr...), data...)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
			return err
		}
	}
	return f.Close()
}
