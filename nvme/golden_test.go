package nvme_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// sqeFields are the SQE fields the oracle decodes for every command (SGL1
// is compared as bytes).
type sqeFields struct {
	Opcode, Fuse, PSDT                       uint8
	CID                                      uint16
	NSID, CDW2, CDW3                         uint32
	MPTR                                     uint64
	CDW10, CDW11, CDW12, CDW13, CDW14, CDW15 uint32
}

// checkSQE compares every SQE field the oracle decodes with our view.
func checkSQE(t *testing.T, where string, s nvme.SQE, want *capture.OracleSQE) {
	t.Helper()
	got := sqeFields{
		Opcode: s.Opcode(), Fuse: uint8(s.Fuse()), PSDT: uint8(s.PSDT()), CID: s.CID(),
		NSID: s.NSID(), CDW2: s.CDW2(), CDW3: s.CDW3(), MPTR: s.MPTR(),
		CDW10: s.CDW10(), CDW11: s.CDW11(), CDW12: s.CDW12(), CDW13: s.CDW13(), CDW14: s.CDW14(), CDW15: s.CDW15(),
	}
	w := sqeFields{
		Opcode: want.Opcode, Fuse: want.Fuse, PSDT: want.PSDT, CID: want.CID,
		NSID: want.NSID, CDW2: want.CDW2, CDW3: want.CDW3, MPTR: want.MPTR,
		CDW10: want.CDW10, CDW11: want.CDW11, CDW12: want.CDW12, CDW13: want.CDW13, CDW14: want.CDW14, CDW15: want.CDW15,
	}
	if got != w {
		t.Errorf("%s: SQE\n got %+v\nwant %+v", where, got, w)
	}
	if h := hex.EncodeToString(s.DPTR()); h != want.SGL.RawHex {
		t.Errorf("%s: SGL1 %s, oracle %s", where, h, want.SGL.RawHex)
	}
	if len(s.SGL1()) != nvme.DPTRSize || &s.SGL1()[0] != &s[24] {
		t.Errorf("%s: SGL1 is not a view of SQE bytes 39:24", where)
	}
}

// checkCQE compares every CQE field the oracle decodes with our view.
func checkCQE(t *testing.T, where string, c nvme.CQE, want *capture.OracleCQE) {
	t.Helper()
	b2u := func(b bool) uint8 {
		if b {
			return 1
		}
		return 0
	}
	got := capture.OracleCQE{
		DW0:       c.DW0(),
		DW1:       c.DW1(),
		SQHD:      c.SQHD(),
		SQID:      c.SQID(),
		CID:       c.CID(),
		Phase:     b2u(c.Phase()),
		StatusRaw: c.StatusRaw(),
		SCT:       uint8(c.SCT()),
		SC:        c.SC(),
		CRD:       c.CRD(),
		More:      b2u(c.More()),
		DNR:       b2u(c.DNR()),
	}
	if got != *want {
		t.Errorf("%s: CQE\n got %+v\nwant %+v", where, got, *want)
	}
	if st := c.Status(); st.SCT() != nvme.StatusCodeType(want.SCT) || st.SC() != want.SC {
		t.Errorf("%s: Status %v, oracle SCT %d SC 0x%x", where, st, want.SCT, want.SC)
	}
	if (c.Err() == nil) != (want.SCT == 0 && want.SC == 0) {
		t.Errorf("%s: Err() = %v for SCT %d SC 0x%x", where, c.Err(), want.SCT, want.SC)
	}
}

// checkCommand cross-checks the command-specific helpers with what the
// capsule carries: the data length in SGL1 (or in the capsule) must be what
// the command's own fields ask for.
func checkCommand(t *testing.T, where string, qid uint16, s nvme.SQE, sgl capture.OracleSGL, incapsule int, blockSize uint32) {
	t.Helper()
	dataLen := uint64(sgl.Length)
	if qid != 0 {
		switch nvme.IOOpcode(s.Opcode()) {
		case nvme.IORead, nvme.IOWrite:
			rw := nvme.RWCommand{SQE: s}
			if got := uint64(rw.Blocks()) * uint64(blockSize); got != dataLen {
				t.Errorf("%s: %v of %d blocks = %d bytes, SGL1 length %d", where, nvme.IOOpcode(s.Opcode()), rw.Blocks(), got, dataLen)
			}
			if sgl.Type == 0 && sgl.Subtype == 1 && uint64(incapsule) != dataLen {
				t.Errorf("%s: in-capsule %d bytes, SGL1 length %d", where, incapsule, dataLen)
			}
			if rw.SLBA() != uint64(s.CDW11())<<32|uint64(s.CDW10()) || uint32(rw.NLB()) != s.CDW12()&0xffff {
				t.Errorf("%s: SLBA %d NLB %d do not match CDW10-12", where, rw.SLBA(), rw.NLB())
			}
			if rw.FUA() || rw.LR() || rw.PRINFO() != 0 {
				t.Errorf("%s: FUA %v LR %v PRINFO %d set by the kernel host?", where, rw.FUA(), rw.LR(), rw.PRINFO())
			}
			if want := nvme.DataControllerToHost; nvme.IOOpcode(s.Opcode()) == nvme.IOWrite {
				if nvme.IOOpcode(s.Opcode()).DataDirection() != nvme.DataHostToController {
					t.Errorf("%s: Write is not host-to-controller", where)
				}
			} else if nvme.IOOpcode(s.Opcode()).DataDirection() != want {
				t.Errorf("%s: Read is not controller-to-host", where)
			}
		case nvme.IOFlush:
			if dataLen != 0 || nvme.IOFlush.DataDirection() != nvme.DataNone {
				t.Errorf("%s: Flush with %d data bytes", where, dataLen)
			}
		}
		return
	}
	switch nvme.AdminOpcode(s.Opcode()) {
	case nvme.AdminIdentify:
		id := nvme.IdentifyCommand{SQE: s}
		if dataLen != nvme.IdentifyDataSize {
			t.Errorf("%s: Identify CNS %d with %d data bytes", where, id.CNS(), dataLen)
		}
		switch id.CNS() {
		case nvme.CNSNamespace, nvme.CNSController, nvme.CNSActiveNSList, nvme.CNSNSDescriptorList, nvme.CNSCSController:
		default:
			t.Errorf("%s: Identify CNS 0x%02x not seen in the capture's README", where, id.CNS())
		}
		if id.CNTID() != 0 || id.CSI() != nvme.CSINVM {
			t.Errorf("%s: Identify CNTID %d CSI %d", where, id.CNTID(), id.CSI())
		}
	case nvme.AdminGetLogPage:
		lp := nvme.GetLogPageCommand{SQE: s}
		if lp.Length() != dataLen {
			t.Errorf("%s: Get Log Page %v of %d bytes (NUMD %d), SGL1 length %d", where, lp.LID(), lp.Length(), lp.NUMD(), dataLen)
		}
		if lp.LPO() != 0 {
			t.Errorf("%s: Get Log Page offset %d", where, lp.LPO())
		}
		// Linux sets RAE only when it reads the Discovery log header
		// (CDW10 0x00ff8070 in the RDMA capture).
		if lp.RAE() && lp.LID() != nvme.LIDDiscovery {
			t.Errorf("%s: Get Log Page %v with RAE %v", where, lp.LID(), lp.RAE())
		}
		switch lp.LID() {
		case nvme.LIDDiscovery, nvme.LIDANA, nvme.LIDSMART, nvme.LIDCommandEffects:
		default:
			t.Errorf("%s: Get Log Page %v not seen in the capture's README", where, lp.LID())
		}
	case nvme.AdminSetFeatures:
		f := nvme.FeaturesCommand{SQE: s}
		if dataLen != 0 || f.SV() {
			t.Errorf("%s: Set Features %v with %d bytes, SV %v", where, f.FID(), dataLen, f.SV())
		}
		switch f.FID() {
		case nvme.FeatNumberOfQueues:
			// One I/O queue (the guests have one CPU), 0's based.
			if nsq, ncq := nvme.NumQueues(f.CDW11()); nsq != 1 || ncq != 1 {
				t.Errorf("%s: Number of Queues asks for %d/%d", where, nsq, ncq)
			}
		case nvme.FeatAsyncEventConfig:
			// Discovery controller: discovery log change; I/O controller: the
			// notices its OAES advertises (namespace attribute, ANA change).
			v := f.CDW11()
			if v != nvme.AECDiscoveryLogPageChange && v != nvme.AECNamespaceAttribute|nvme.AECANAChange {
				t.Errorf("%s: Asynchronous Event Configuration 0x%x", where, v)
			}
		default:
			t.Errorf("%s: Set Features %v not expected", where, f.FID())
		}
	case nvme.AdminAsyncEventRequest:
		if dataLen != 0 || s.CDW10() != 0 {
			t.Errorf("%s: AER with data or CDW10", where)
		}
	case nvme.AdminFabrics:
	default:
		t.Errorf("%s: admin %v not expected", where, nvme.AdminOpcode(s.Opcode()))
	}
}

// The namespace of the captures has 512-byte logical blocks (nvme id-ns:
// lbaf 0 lbads 9).
const captureBlockSize = 512

func TestGoldenRDMACapsules(t *testing.T) {
	msgs := roceMessages(t, loadFrames(t, rdmaCapture))
	caps := oracleRecords[capture.CapsuleRecord](t, loadOracle(t, rdmaCapture), capture.KindCapsule)
	if len(caps) != 206 {
		t.Fatalf("%d capsule records, testdata/pcap/ORACLE.md says 206", len(caps))
	}
	single := 0
	for _, c := range caps {
		where := fmt.Sprintf("capsule frames %v", c.Frames)
		m := roceMessage(t, msgs, capture.MsgSend, c.Frames)
		msg := m.Payload
		if len(msg) != nvme.SQESize+c.IncapsuleLen {
			t.Errorf("%s: %d bytes, oracle says SQE + %d", where, len(msg), c.IncapsuleLen)
			continue
		}
		if len(c.Frames) == 1 {
			single++
			if op := m.LastOpcode; op != wire.RCSendOnly && op != wire.RCSendOnlyWithImmediate && op != wire.RCSendOnlyWithInvalidate {
				t.Errorf("%s: BTH opcode 0x%02x is not a SEND Only", where, uint8(op))
			}
		}
		s, err := nvme.ParseSQE(msg)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		checkSQE(t, where, s, &c.SQE)
		if c.QID == nil {
			t.Errorf("%s: no qid in the oracle", where)
			continue
		}
		checkCommand(t, where, *c.QID, s, c.SQE.SGL, c.IncapsuleLen, captureBlockSize)
	}
	if single != 185 {
		t.Errorf("%d single-packet capsules, testdata/pcap/ORACLE.md says 185", single)
	}
}

func TestGoldenRDMACompletions(t *testing.T) {
	msgs := roceMessages(t, loadFrames(t, rdmaCapture))
	recs := loadOracle(t, rdmaCapture)
	cqes := oracleRecords[capture.CQERecord](t, recs, capture.KindCQE)
	if len(cqes) != 204 {
		t.Fatalf("%d cqe records, testdata/pcap/ORACLE.md says 204", len(cqes))
	}
	caps := map[string]capture.CapsuleRecord{}
	for _, c := range oracleRecords[capture.CapsuleRecord](t, recs, capture.KindCapsule) {
		caps[frameKey(c.Frames)] = c
	}
	for _, r := range cqes {
		where := fmt.Sprintf("cqe frames %v", r.Frames)
		msg := roceMessage(t, msgs, capture.MsgSend, r.Frames).Payload
		if len(msg) != nvme.CQESize {
			t.Errorf("%s: %d bytes", where, len(msg))
			continue
		}
		c, err := nvme.ParseCQE(msg)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		checkCQE(t, where, c, &r.CQE)
		cmd, ok := caps[frameKey(r.ForFrames)]
		if !ok {
			t.Errorf("%s: no capsule at %v", where, r.ForFrames)
			continue
		}
		if c.CID() != cmd.SQE.CID {
			t.Errorf("%s: CID %d completes command CID %d", where, c.CID(), cmd.SQE.CID)
		}
		checkCompletionResult(t, where, cmd.QID, &cmd.SQE, c)
	}
}

// checkCompletionResult checks DW0 of completions whose meaning this
// package defines, for the command sqe on queue qid.
func checkCompletionResult(t *testing.T, where string, qid *uint16, sqe *capture.OracleSQE, c nvme.CQE) {
	t.Helper()
	if qid == nil || *qid != 0 || nvme.AdminOpcode(sqe.Opcode) != nvme.AdminSetFeatures {
		return
	}
	switch nvme.FeatureID(sqe.CDW10 & 0xff) {
	case nvme.FeatNumberOfQueues:
		// nvmet grants its subsystem's max_qid (default 128) queues.
		if nsq, ncq := nvme.NumQueues(c.DW0()); nsq != 128 || ncq != 128 {
			t.Errorf("%s: Number of Queues granted %d/%d, nvmet's default is 128/128", where, nsq, ncq)
		}
	case nvme.FeatAsyncEventConfig:
		if c.DW0() != sqe.CDW11 {
			t.Errorf("%s: AEC completion 0x%x for 0x%x", where, c.DW0(), sqe.CDW11)
		}
	}
}

func TestGoldenTCPCapsules(t *testing.T) {
	frames, pdus := tcpPDUs(t)
	if len(pdus) != 595 {
		t.Fatalf("%d tcp_pdu records, testdata/pcap/ORACLE.md says 595", len(pdus))
	}
	var cmds, resps, singleCmds, singleResps int
	commands := map[string]capture.TCPPDURecord{}
	for _, p := range pdus {
		r := p.rec
		where := fmt.Sprintf("%s frames %d-%d", r.TypeName, r.FrameFirst, r.FrameLast)
		switch r.TypeName {
		case "CapsuleCmd":
			cmds++
			if r.FrameFirst == r.FrameLast {
				singleCmds++
				// A PDU in one segment: the brief's shortcut (PDU at the
				// TCP payload start) must agree for the first PDU of it.
				f := frameAt(t, frames, r.FrameFirst)
				if len(f.Payload) >= len(p.Data) && string(f.Payload[:len(p.Data)]) == string(p.Data) {
					if _, err := nvme.ParseSQE(f.Payload[8:]); err != nil {
						t.Errorf("%s: %v", where, err)
					}
				}
			}
			if r.SQE == nil || r.IncapsuleLen == nil {
				t.Fatalf("%s: no sqe or incapsule_len in the oracle", where)
			}
			// Common header (8 bytes), then the SQE; no header digest here.
			s, err := nvme.ParseSQE(p.Data[8:])
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			checkSQE(t, where, s, r.SQE)
			if r.QID != nil {
				checkCommand(t, where, *r.QID, s, r.SQE.SGL, *r.IncapsuleLen, captureBlockSize)
			}
			commands[frameKey(r.PDUFrames())] = r
		case "CapsuleResp":
			resps++
			if r.FrameFirst == r.FrameLast {
				singleResps++
			}
			if r.CQE == nil {
				t.Fatalf("%s: no cqe in the oracle", where)
			}
			c, err := nvme.ParseCQE(p.Data[8:])
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			checkCQE(t, where, c, r.CQE)
			if cmd, ok := commands[frameKey(r.ForFrames)]; ok {
				if c.CID() != cmd.SQE.CID {
					t.Errorf("%s: CID %d completes CID %d", where, c.CID(), cmd.SQE.CID)
				}
				checkCompletionResult(t, where, cmd.QID, cmd.SQE, c)
			} else {
				t.Errorf("%s: completes no command seen (%v)", where, r.ForFrames)
			}
		}
	}
	if cmds != 206 || resps != 206 || singleCmds != 169 || singleResps != 202 {
		t.Errorf("%d CapsuleCmd (%d in one segment), %d CapsuleResp (%d in one segment)", cmds, singleCmds, resps, singleResps)
	}
}

// identifyData is the data of one Identify or Get Log Page command found in
// a capture.
type identifyData struct {
	where  string
	cmd    nvme.SQE
	ioCtrl bool // the admin queue of the I/O controller (not discovery)
	first  int  // first frame of the data
	data   []byte
}

// commandSQE rebuilds a command from the oracle's decode of its SQE: the
// opcode, NSID and CDW10-15 that Identify and Get Log Page use.
func commandSQE(o *capture.OracleSQE) nvme.SQE {
	sqe := nvme.NewSQE()
	sqe.SetOpcode(o.Opcode)
	sqe.SetNSID(o.NSID)
	sqe.SetCDW10(o.CDW10)
	sqe.SetCDW11(o.CDW11)
	sqe.SetCDW12(o.CDW12)
	sqe.SetCDW13(o.CDW13)
	sqe.SetCDW14(o.CDW14)
	sqe.SetCDW15(o.CDW15)
	return sqe
}

// rdmaAdminData returns the data the target RDMA WRITEs for Identify and
// Get Log Page commands, checked against the oracle's SHA-256.
func rdmaAdminData(t *testing.T) []identifyData {
	t.Helper()
	msgs := roceMessages(t, loadFrames(t, rdmaCapture))
	recs := loadOracle(t, rdmaCapture)
	caps := map[string]capture.CapsuleRecord{}
	for _, c := range oracleRecords[capture.CapsuleRecord](t, recs, capture.KindCapsule) {
		caps[frameKey(c.Frames)] = c
	}
	// Which controller a queue belongs to: the SUBNQN of the Connect on
	// that QP (admin-queue Connect data comes by RDMA READ, I/O-queue
	// Connect data in the capsule).
	rdata := oracleRecords[capture.RDMADataRecord](t, recs, capture.KindRDMAData)
	subnqn := map[uint32]string{} // target QP -> subsystem NQN
	for _, c := range caps {
		if c.ConnectData != nil {
			subnqn[c.DQPN] = c.ConnectData.SubNQN
		}
	}
	for _, r := range rdata {
		if r.ConnectData != nil {
			subnqn[caps[frameKey(r.ForFrames)].DQPN] = r.ConnectData.SubNQN
		}
	}
	var out []identifyData
	for _, r := range rdata {
		if r.Op != "WRITE" || r.ForOpcode == nil || r.QID == nil || *r.QID != 0 {
			continue
		}
		if op := nvme.AdminOpcode(*r.ForOpcode); op != nvme.AdminIdentify && op != nvme.AdminGetLogPage {
			continue
		}
		data := roceMessage(t, msgs, capture.MsgWrite, r.Frames).Payload
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != r.SHA256 || len(data) != r.Len || (r.Offset != nil && *r.Offset != 0) {
			t.Fatalf("RDMA WRITE frames %v: reassembly does not match the oracle", r.Frames)
		}
		c := caps[frameKey(r.ForFrames)]
		nqn, ok := subnqn[c.DQPN]
		if !ok {
			t.Fatalf("RDMA WRITE frames %v: no Connect on QP %d", r.Frames, c.DQPN)
		}
		out = append(out, identifyData{
			where:  fmt.Sprintf("RDMA WRITE frames %v for command frame %v", r.Frames, r.ForFrames),
			cmd:    commandSQE(&c.SQE),
			ioCtrl: nqn != discoveryNQN,
			first:  r.Frames[0],
			data:   data,
		})
	}
	return out
}

// tcpAdminData returns the data of C2HData PDUs answering admin Identify
// and Get Log Page commands of the NVMe/TCP capture, with the command.
func tcpAdminData(t *testing.T) []identifyData {
	t.Helper()
	_, pdus := tcpPDUs(t)
	cmds := map[string]capture.TCPPDURecord{}
	subnqn := map[streamKey]string{} // host -> target stream -> subsystem NQN
	var out []identifyData
	for _, p := range pdus {
		r := p.rec
		if r.TypeName == "CapsuleCmd" {
			cmds[frameKey(r.PDUFrames())] = r
			if r.ConnectData != nil {
				subnqn[p.key()] = r.ConnectData.SubNQN
			}
			continue
		}
		if r.TypeName != "C2HData" || r.QID == nil || *r.QID != 0 || r.ForOpcode == nil {
			continue
		}
		if op := nvme.AdminOpcode(*r.ForOpcode); op != nvme.AdminIdentify && op != nvme.AdminGetLogPage {
			continue
		}
		if r.Data == nil {
			t.Fatalf("C2HData frames %d-%d: no data in the oracle", r.FrameFirst, r.FrameLast)
		}
		if r.Data.DataO != 0 || int(r.Hdr.PDO)+int(r.Data.DataL) != len(p.Data) {
			t.Fatalf("C2HData frames %d-%d: offset %d length %d in a %d-byte PDU", r.FrameFirst, r.FrameLast, r.Data.DataO, r.Data.DataL, len(p.Data))
		}
		c := cmds[frameKey(r.ForFrames)]
		if c.SQE == nil {
			t.Fatalf("C2HData frames %d-%d: for frames %v is no command", r.FrameFirst, r.FrameLast, r.ForFrames)
		}
		k := p.key()
		nqn, ok := subnqn[streamKey{k.dst, k.src}]
		if !ok {
			t.Fatalf("C2HData frames %d-%d: no Connect on the connection", r.FrameFirst, r.FrameLast)
		}
		out = append(out, identifyData{
			where:  fmt.Sprintf("C2HData frames %d-%d", r.FrameFirst, r.FrameLast),
			cmd:    commandSQE(c.SQE),
			ioCtrl: nqn != discoveryNQN,
			first:  r.FrameFirst,
			data:   p.Data[r.Hdr.PDO:],
		})
	}
	return out
}

const discoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// TestGoldenIdentify decodes the Identify data the Linux target sent and
// checks it against nvme-cli's output in testdata/pcap/*.guest-b.log
// (id-ctrl, id-ns), the kernel-peer README (IOCCSZ 260, IORCSZ 1, MSDBD 1,
// SGLS 0x100005, MDTS 8, MAXCMD 1024, KAS 10) and the target configuration
// (model kpeer-linux-nvmet, serial kpeer0001, NGUID/UUID
// 6b706565-7200-4000-8000-000000000001, 64 MiB of 512-byte blocks).
func TestGoldenIdentify(t *testing.T) {
	for _, capture := range []struct {
		name string
		data func(*testing.T) []identifyData
	}{{"rdma", rdmaAdminData}, {"tcp", tcpAdminData}} {
		t.Run(capture.name, func(t *testing.T) {
			seen := map[string]int{}
			for _, d := range capture.data(t) {
				switch nvme.AdminOpcode(d.cmd.Opcode()) {
				case nvme.AdminIdentify:
					cns := nvme.IdentifyCommand{SQE: d.cmd}.CNS()
					seen[fmt.Sprintf("identify cns %d io %v", cns, d.ioCtrl)]++
					checkIdentify(t, capture.name, d, cns)
				case nvme.AdminGetLogPage:
					lid := nvme.GetLogPageCommand{SQE: d.cmd}.LID()
					seen[fmt.Sprintf("log %v", lid)]++
					checkLogPage(t, capture.name, d, lid)
				}
			}
			// Each structure was seen at least once.
			for _, k := range []string{
				"identify cns 1 io false", "identify cns 1 io true", "identify cns 0 io true",
				"identify cns 2 io true", "identify cns 3 io true",
				"log " + nvme.LIDSMART.String(), "log " + nvme.LIDANA.String(), "log " + nvme.LIDCommandEffects.String(),
			} {
				if seen[k] == 0 {
					t.Errorf("%s: no %s in the capture (seen %v)", capture.name, k, seen)
				}
			}
		})
	}
}

var (
	nsUUID = [16]byte{0x6b, 0x70, 0x65, 0x65, 0x72, 0x00, 0x40, 0x00, 0x80, 0x00, 0, 0, 0, 0, 0, 0x01}
)

func checkIdentify(t *testing.T, capture string, d identifyData, cns uint8) {
	t.Helper()
	where := capture + " " + d.where
	switch cns {
	case nvme.CNSController:
		c, err := nvme.ParseIdentifyController(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !d.ioCtrl {
			// Discovery controller (testdata/pcap/README.md, tshark's
			// decode of the TCP capture's frame 29: MN "Linux", MDTS 0,
			// CNTLID 1, VER 1.3, OAES 0x80000000, CMIC 0).
			checkEq(t, where, "CNTRLTYPE", c.CNTRLTYPE(), nvme.ControllerTypeDiscovery)
			checkEq(t, where, "MN", c.MN(), "Linux")
			checkEq(t, where, "MDTS", c.MDTS(), 0)
			checkEq(t, where, "CNTLID", c.CNTLID(), 1)
			checkEq(t, where, "VER", c.VER(), nvme.Version1_3)
			checkEq(t, where, "OAES", c.OAES(), nvme.AECDiscoveryLogPageChange)
			checkEq(t, where, "CMIC", c.CMIC(), 0)
			checkEq(t, where, "SUBNQN", c.SUBNQN(), discoveryNQN)
			checkEq(t, where, "NN", c.NN(), 0)
			if len(c.SN()) != 20 {
				t.Errorf("%s: discovery SN %q, want 20 hex digits", where, c.SN())
			}
			return
		}
		// nvme id-ctrl in kernel-nvme-*.guest-b.log.
		checks := []struct {
			field     string
			got, want any
		}{
			{"VID", c.VID(), uint16(0)}, {"SSVID", c.SSVID(), uint16(0)},
			{"SN", c.SN(), "kpeer0001"}, {"MN", c.MN(), "kpeer-linux-nvmet"}, {"FR", c.FR(), "6.1.0-57"},
			{"RAB", c.RAB(), uint8(6)}, {"IEEE", c.IEEE(), uint32(0)}, {"CMIC", c.CMIC(), uint8(0xb)},
			{"CNTLID", c.CNTLID(), uint16(1)}, {"VER", c.VER(), uint32(0x10300)},
			{"RTD3R", c.RTD3R(), uint32(0)}, {"RTD3E", c.RTD3E(), uint32(0)},
			{"OAES", c.OAES(), uint32(0x900)}, {"CTRATT", c.CTRATT(), uint32(0x41)}, {"RRLS", c.RRLS(), uint16(0)},
			{"CNTRLTYPE", c.CNTRLTYPE(), uint8(nvme.ControllerTypeIO)}, {"FGUID", c.FGUID(), [16]byte{}},
			{"CRDT1", c.CRDT1(), uint16(0)}, {"OACS", c.OACS(), uint16(0)}, {"ACL", c.ACL(), uint8(3)},
			{"AERL", c.AERL(), uint8(3)}, {"FRMW", c.FRMW(), uint8(3)}, {"LPA", c.LPA(), uint8(7)},
			{"ELPE", c.ELPE(), uint8(127)}, {"NPSS", c.NPSS(), uint8(0)}, {"AVSCC", c.AVSCC(), uint8(0)},
			{"WCTEMP", c.WCTEMP(), uint16(0)}, {"CCTEMP", c.CCTEMP(), uint16(0)},
			{"TNVMCAP", c.TNVMCAP(), nvme.Uint128{}}, {"KAS", c.KAS(), uint16(10)}, {"SANICAP", c.SANICAP(), uint32(0)},
			{"ANATT", c.ANATT(), uint8(10)}, {"ANACAP", c.ANACAP(), uint8(31)},
			{"ANAGRPMAX", c.ANAGRPMAX(), uint32(128)}, {"NANAGRPID", c.NANAGRPID(), uint32(128)},
			{"SQES", c.SQES(), uint8(0x66)}, {"CQES", c.CQES(), uint8(0x44)}, {"MAXCMD", c.MAXCMD(), uint16(1024)},
			{"NN", c.NN(), uint32(1024)}, {"ONCS", c.ONCS(), uint16(0xc)}, {"FUSES", c.FUSES(), uint16(0)},
			{"FNA", c.FNA(), uint8(0)}, {"VWC", c.VWC(), uint8(1)}, {"AWUN", c.AWUN(), uint16(0)},
			{"AWUPF", c.AWUPF(), uint16(0)}, {"NVSCC", c.NVSCC(), uint8(0)}, {"NWPC", c.NWPC(), uint8(1)},
			{"ACWU", c.ACWU(), uint16(0)}, {"OCFS", c.OCFS(), uint16(0)}, {"MNAN", c.MNAN(), uint32(1024)},
			{"SUBNQN", c.SUBNQN(), "nqn.2014-08.org.nvmexpress:kpeer-target"},
			{"IORCSZ", c.IORCSZ(), uint32(1)}, {"ICDOFF", c.ICDOFF(), uint16(0)}, {"FCATT", c.FCATT(), uint8(0)},
			{"MSDBD", c.MSDBD(), uint8(1)}, {"OFCS", c.OFCS(), uint16(0)},
			{"PS0 MP", c.PowerState(0).MP(), uint16(2500)}, {"PS0 ENLAT", c.PowerState(0).ENLAT(), uint32(16)},
			{"PS0 EXLAT", c.PowerState(0).EXLAT(), uint32(4)},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s: %s = %v, nvme id-ctrl says %v", where, ck.field, ck.got, ck.want)
			}
		}
		// Transport specific (nvme id-ctrl in each capture's guest-b log):
		// the RDMA port has 4096 bytes of in-capsule data (IOCCSZ 260 =
		// (64 + 4096) / 16), keyed SGLs and MDTS 8; the NVMe/TCP port 16384
		// bytes (IOCCSZ 1028), no keyed SGLs and no MDTS limit.
		want := map[string]struct {
			ioccsz, sgls uint32
			mdts         uint8
			mdtsBytes    uint64
		}{
			"rdma": {260, 0x100005, 8, 1 << 20},
			"tcp":  {1028, 0x100001, 0, 0},
		}[capture]
		checkEq(t, where, "IOCCSZ", c.IOCCSZ(), want.ioccsz)
		checkEq(t, where, "SGLS", c.SGLS(), want.sgls)
		checkEq(t, where, "MDTS", c.MDTS(), want.mdts)
		checkEq(t, where, "MDTSBytes", c.MDTSBytes(4096), want.mdtsBytes)
		if c.SGLS()&nvme.SGLSOffset == 0 || c.SGLS()&3 != nvme.SGLSSupported {
			t.Errorf("%s: SGLS 0x%x without SGLs or offset SGLs", where, c.SGLS())
		}
		if got := (c.SGLS()&nvme.SGLSKeyed != 0); got != (capture == "rdma") {
			t.Errorf("%s: SGLS 0x%x: keyed SGLs %v", where, c.SGLS(), got)
		}
	case nvme.CNSNamespace:
		n, err := nvme.ParseIdentifyNamespace(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		// nvme id-ns in kernel-nvme-rdma-rxe.guest-b.log.
		checks := []struct {
			field     string
			got, want any
		}{
			{"NSZE", n.NSZE(), uint64(0x20000)}, {"NCAP", n.NCAP(), uint64(0x20000)}, {"NUSE", n.NUSE(), uint64(0x20000)},
			{"NSFEAT", n.NSFEAT(), uint8(0x12)}, {"NLBAF", n.NLBAF(), uint8(0)}, {"FLBAS", n.FLBAS(), uint8(0)},
			{"MC", n.MC(), uint8(0)}, {"DPC", n.DPC(), uint8(0)}, {"DPS", n.DPS(), uint8(0)},
			{"NMIC", n.NMIC(), uint8(1)}, {"RESCAP", n.RESCAP(), uint8(0)}, {"DLFEAT", n.DLFEAT(), uint8(0)},
			{"NAWUN", n.NAWUN(), uint16(0)}, {"NOIOB", n.NOIOB(), uint16(0)}, {"NVMCAP", n.NVMCAP(), nvme.Uint128{}},
			{"ANAGRPID", n.ANAGRPID(), uint32(1)}, {"NSATTR", n.NSATTR(), uint8(0)},
			{"NVMSETID", n.NVMSETID(), uint16(0)}, {"ENDGID", n.ENDGID(), uint16(0)},
			{"NGUID", n.NGUID(), nsUUID}, {"EUI64", n.EUI64(), [8]byte{}},
			{"LBAF0", n.LBAF(0), nvme.LBAFormat{MS: 0, LBADS: 9, RP: 0}},
			{"FormatIndex", n.FormatIndex(), 0}, {"LBADataSize", n.LBADataSize(), uint32(512)},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s: %s = %v, nvme id-ns says %v", where, ck.field, ck.got, ck.want)
			}
		}
		if got := n.NSZE() * uint64(n.LBADataSize()); got != 64<<20 {
			t.Errorf("%s: namespace of %d bytes, the target made 64 MiB", where, got)
		}
	case nvme.CNSActiveNSList:
		ids, err := nvme.DecodeNSIDList(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(ids) != 1 || ids[0] != 1 {
			t.Errorf("%s: active namespaces %v, the target has namespace 1", where, ids)
		}
	case nvme.CNSNSDescriptorList:
		ds, err := nvme.DecodeNSDescriptors(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		want := []nvme.NSDescriptor{nvme.NSDescriptorUUID(nsUUID), nvme.NSDescriptorNGUID(nsUUID), nvme.NSDescriptorCSI(nvme.CSINVM)}
		if fmt.Sprint(ds) != fmt.Sprint(want) {
			t.Errorf("%s: descriptors %v, want %v", where, ds, want)
		}
		// Our encoder writes the same bytes.
		buf := make([]byte, nvme.IdentifyDataSize)
		if _, err := nvme.EncodeNSDescriptors(buf, ds); err != nil || string(buf) != string(d.data) {
			t.Errorf("%s: EncodeNSDescriptors differs from the target's list (%v)", where, err)
		}
	}
}

func checkLogPage(t *testing.T, capture string, d identifyData, lid nvme.LogPageID) {
	t.Helper()
	where := capture + " " + d.where
	switch lid {
	case nvme.LIDSMART:
		l, err := nvme.ParseSMARTLog(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		// nvmet reports no temperature, spare or wear, and counts reads.
		checkEq(t, where, "CriticalWarning", l.CriticalWarning(), 0)
		checkEq(t, where, "CompositeTemperature", l.CompositeTemperature(), 0)
		checkEq(t, where, "PercentageUsed", l.PercentageUsed(), 0)
		checkEq(t, where, "DataUnitsWritten", l.DataUnitsWritten(), nvme.U128(0))
		if r, ok := l.HostReadCommands().Uint64(); !ok || r == 0 || r > 100 {
			t.Errorf("%s: host read commands %v", where, l.HostReadCommands())
		}
		if capture == "rdma" && d.first == 323 {
			// The nvme smart-log of kernel-nvme-rdma-rxe.guest-b.log.
			checkEq(t, where, "DataUnitsRead", l.DataUnitsRead(), nvme.U128(1))
			checkEq(t, where, "HostReadCommands", l.HostReadCommands(), nvme.U128(6))
		}
	case nvme.LIDANA:
		l, err := nvme.DecodeANALog(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		want := nvme.ANALog{Groups: []nvme.ANAGroup{{GroupID: 1, State: nvme.ANAOptimized, NSIDs: []uint32{1}}}}
		if fmt.Sprint(l) != fmt.Sprint(want) {
			t.Errorf("%s: ANA log %+v, want %+v", where, l, want)
		}
		// The host asks for header + ANAGRPMAX groups + NN NSIDs.
		if got := (nvme.GetLogPageCommand{SQE: d.cmd}).Length(); got != 16+128*32+1024*4 {
			t.Errorf("%s: ANA log read of %d bytes", where, got)
		}
		enc, err := l.AppendBinary(nil)
		if err != nil || string(enc) != string(d.data[:len(enc)]) || len(enc) != l.Size() {
			t.Errorf("%s: AppendBinary differs from the target's log (%v)", where, err)
		}
	case nvme.LIDCommandEffects:
		l, err := nvme.ParseEffectsLog(d.data)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, op := range []nvme.AdminOpcode{nvme.AdminGetLogPage, nvme.AdminIdentify, nvme.AdminAbort, nvme.AdminSetFeatures, nvme.AdminGetFeatures, nvme.AdminAsyncEventRequest, nvme.AdminKeepAlive} {
			if l.ACS(op)&nvme.EffectsCSUPP == 0 {
				t.Errorf("%s: %v not supported", where, op)
			}
		}
		for _, op := range []nvme.IOOpcode{nvme.IOFlush, nvme.IOWrite, nvme.IORead, nvme.IOWriteZeroes, nvme.IODatasetManagement} {
			if l.IOCS(op)&nvme.EffectsCSUPP == 0 {
				t.Errorf("%s: %v not supported", where, op)
			}
		}
		if l.ACS(nvme.AdminFormatNVM) != 0 || l.IOCS(nvme.IOCompare) != 0 {
			t.Errorf("%s: Format NVM / Compare listed", where)
		}
	}
}

func checkEq[T comparable](t *testing.T, where, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %s = %v, want %v", where, field, got, want)
	}
}
