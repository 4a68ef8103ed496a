package fabrics_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// decodedCapsule is what this test decoded of one capsule.
type decodedCapsule struct {
	sqe       nvme.SQE
	qid       uint16
	inCapsule []byte
}

// The host and target of the kernel captures.
const (
	hostAddr   = "192.0.2.3"
	targetAddr = "192.0.2.2"
)

func frameKey(frames []int) string { return fmt.Sprint(frames) }

// TestGoldenRDMA decodes every command capsule, completion and data
// transfer of the kernel NVMe/RDMA capture and compares every field with
// the decode oracle.
func TestGoldenRDMA(t *testing.T) {
	frames, err := capture.Load("kernel-nvme-rdma-rxe.pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := capture.Messages(frames)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := capture.LoadOracle("kernel-nvme-rdma-rxe.decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	byFrames := map[string]*capture.Message{}
	for i := range msgs {
		byFrames[frameKey(msgs[i].Frames)] = &msgs[i]
	}

	qidOfQP := map[uint32]uint16{} // target QP -> queue, from the Connect commands
	capsules := map[string]*decodedCapsule{}
	counts := map[string]int{}
	placement := map[string]int{}
	var nCapsule, nCQE, nData, nFields, nConnectData int
	var discoveryLogs [][]byte

	for _, r := range recs {
		var d diff
		var where string
		switch r.Kind {
		case "capsule":
			var o capture.CapsuleRecord
			if err := r.DecodeStrict(&o); err != nil {
				t.Fatal(err)
			}
			where = fmt.Sprintf("capsule frames %v", o.Frames)
			m := byFrames[frameKey(o.Frames)]
			if m == nil || m.Kind != capture.MsgSend {
				t.Errorf("%s: no SEND message with these frames", where)
				continue
			}
			nCapsule++
			checkSend(&d, m, &o.OracleRDMAMessage, "host->target", o.Invalidate, o.ImmDt)
			if o.IETHRKey != nil {
				d.eq("ieth_rkey", m.IETHRKey, *o.IETHRKey)
			}
			if len(m.Payload) < fabrics.SQELen {
				t.Errorf("%s: %d bytes", where, len(m.Payload))
				continue
			}
			sqe := nvme.SQE(m.Payload[:nvme.SQESize])
			nFields += checkSQE(&d, m.Payload, &o.SQE, true)
			in := m.Payload[fabrics.SQELen:]
			d.eq("incapsule_len", len(in), o.IncapsuleLen)
			if len(in) > 0 {
				d.eq("incapsule_sha256", sha(in), o.IncapsuleSHA256)
			}
			if sqe.Opcode() == fabrics.OpcodeFabrics && fabrics.FCType(m.Payload[4]) == fabrics.FCTypeConnect {
				qidOfQP[m.DestQP] = fabrics.ConnectCommand(m.Payload).QID()
			}
			qid, ok := qidOfQP[m.DestQP]
			if !ok {
				t.Errorf("%s: command before Connect on QP %d", where, m.DestQP)
			}
			if o.QID != nil {
				d.eq("qid", qid, *o.QID)
			}
			if o.ConnectData != nil {
				nFields += checkConnectData(&d, in, o.ConnectData)
				nConnectData++
			}
			capsules[frameKey(o.Frames)] = &decodedCapsule{sqe: sqe, qid: qid, inCapsule: in}
			name := commandName(sqe, qid)
			counts[name]++
			placement[name+", "+dataPlacement(sqe, len(in))]++

		case "cqe":
			var o capture.CQERecord
			if err := r.DecodeStrict(&o); err != nil {
				t.Fatal(err)
			}
			where = fmt.Sprintf("cqe frames %v", o.Frames)
			m := byFrames[frameKey(o.Frames)]
			if m == nil || m.Kind != capture.MsgSend || len(m.Payload) != nvme.CQESize {
				t.Errorf("%s: no 16-byte SEND message with these frames", where)
				continue
			}
			nCQE++
			checkSend(&d, m, &o.OracleRDMAMessage, "target->host", o.Invalidate, o.ImmDt)
			nFields += checkCQE(&d, m.Payload, &o.CQE)
			cqe := nvme.CQE(m.Payload)
			c := capsules[frameKey(o.ForFrames)]
			if c == nil {
				t.Errorf("%s: completes frames %v, not a capsule seen before", where, o.ForFrames)
				continue
			}
			// The oracle's link to the command agrees with what we decoded.
			d.eq("for_cid", cqe.CID(), deref(o.ForCID))
			d.eq("command cid", c.sqe.CID(), cqe.CID())
			d.eq("for_opcode", c.sqe.Opcode(), deref(o.ForOpcode))
			if c.sqe.Opcode() == fabrics.OpcodeFabrics {
				d.eq("for_fctype", c.sqe[4], deref(o.ForFCType))
			} else if o.ForFCType != nil {
				d.eq("for_fctype", "absent", *o.ForFCType)
			}
			if o.QID != nil {
				d.eq("qid", c.qid, *o.QID)
			}
			d.eq("sqid", cqe.SQID(), c.qid)
			if m.Invalidate {
				// SEND with Invalidate carries the rkey of the command's keyed SGL.
				d.eq("ieth_rkey", m.IETHRKey, deref(o.IETHRKey))
				d.eq("ieth_rkey = SGL key", m.IETHRKey, fabrics.SGL(c.sqe.SGL1()).Key())
			} else if o.IETHRKey != nil {
				d.eq("ieth_rkey", "absent", *o.IETHRKey)
			}
			checkCompletion(&d, c, cqe)

		case "rdma_data":
			var o capture.RDMADataRecord
			if err := r.DecodeStrict(&o); err != nil {
				t.Fatal(err)
			}
			where = fmt.Sprintf("rdma_data frames %v", o.Frames)
			m := byFrames[frameKey(o.Frames)]
			if m == nil {
				t.Errorf("%s: no message with these frames", where)
				continue
			}
			nData++
			wantKind := map[string]capture.MessageKind{"WRITE": capture.MsgWrite, "READ_RESPONSE": capture.MsgReadResponse}[o.Op]
			d.eq("op", m.Kind, wantKind)
			d.eq("src", m.Src, o.Src)
			d.eq("dst", m.Dst, o.Dst)
			d.eq("dqpn", m.DestQP, o.DQPN)
			d.eq("len", len(m.Payload), o.Len)
			d.eq("sha256", sha(m.Payload), o.SHA256)
			if o.ImmDt != nil {
				d.eq("immdt", m.Imm, *o.ImmDt)
			}
			va, rkey, dmalen := m.VA, m.RKey, m.DMALen
			if m.Kind == capture.MsgWrite {
				d.eq("dir", "target->host", o.Dir)
			} else {
				d.eq("dir", "host->target", o.Dir)
				// A READ response has no RETH: take it from the READ Request.
				va, rkey, dmalen = readRequest(&d, frames, deref(o.ReqFrame))
			}
			d.eq("va", va, o.VA)
			d.eq("rkey", rkey, o.RKey)
			d.eq("dmalen", dmalen, o.DMALen)
			c := capsules[frameKey(o.ForFrames)]
			if c == nil {
				t.Errorf("%s: for frames %v, not a capsule seen before", where, o.ForFrames)
				continue
			}
			sgl := fabrics.SGL(c.sqe.SGL1())
			d.eq("rkey = SGL key", rkey, sgl.Key())
			d.eq("offset", va-sgl.Address(), deref(o.Offset))
			d.eq("for_cid", c.sqe.CID(), deref(o.ForCID))
			d.eq("for_opcode", c.sqe.Opcode(), deref(o.ForOpcode))
			if o.ForFCType != nil {
				d.eq("for_fctype", c.sqe[4], *o.ForFCType)
			}
			if o.QID != nil {
				d.eq("qid", c.qid, *o.QID)
			}
			if o.ConnectData != nil {
				nFields += checkConnectData(&d, m.Payload, o.ConnectData)
				nConnectData++
			}
			if c.sqe.Opcode() == uint8(nvme.AdminGetLogPage) && c.qid == 0 && c.sqe.CDW10()&0xff == fabrics.LogPageDiscovery {
				discoveryLogs = append(discoveryLogs, m.Payload)
			}
		default:
			continue
		}
		if err := d.err(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	// testdata/pcap/ORACLE.md: 206 capsules, 204 CQEs, 158 rdma_data records.
	// Connect data: the I/O queue's in-capsule, the two admin queues' by RDMA READ.
	if nCapsule != 206 || nCQE != 204 || nData != 158 || nConnectData != 3 {
		t.Errorf("checked %d capsules, %d CQEs, %d data transfers, %d Connect data; want 206, 204, 158, 3",
			nCapsule, nCQE, nData, nConnectData)
	}
	t.Logf("%d capsules, %d CQEs, %d data transfers, %d SQE/CQE/Connect fields compared", nCapsule, nCQE, nData, nFields)

	// The command counts of testdata/pcap/README.md ("NVMe-oF command capsules").
	wantCounts := map[string]int{
		"I/O Read": 78, "I/O Write": 75, "admin Identify": 16, "Fabrics Property Get": 15,
		"admin Get Log Page": 7, "Fabrics Property Set": 6, "Fabrics Connect": 3,
		"admin Set Features": 3, "admin Asynchronous Event Request": 2, "I/O Flush": 1,
	}
	checkCounts(t, "commands", counts, wantCounts)
	// Its data placement table.
	wantPlacement := map[string]int{
		"Fabrics Connect, in-capsule data":                                1,
		"Fabrics Connect, keyed SGL, invalidate":                          2,
		"Fabrics Property Get, no data (keyed SGL, length 0)":             15,
		"Fabrics Property Set, no data (keyed SGL, length 0)":             6,
		"I/O Flush, no data (keyed SGL, length 0)":                        1,
		"I/O Read, keyed SGL, invalidate":                                 78,
		"I/O Write, in-capsule data":                                      20,
		"I/O Write, keyed SGL, invalidate":                                55,
		"admin Asynchronous Event Request, no data (keyed SGL, length 0)": 2,
		"admin Get Log Page, keyed SGL, invalidate":                       7,
		"admin Identify, keyed SGL, invalidate":                           16,
		"admin Set Features, no data (keyed SGL, length 0)":               3,
	}
	checkCounts(t, "data placement", placement, wantPlacement)

	if len(discoveryLogs) == 0 {
		t.Fatal("no discovery log page transfer found")
	}
	for _, b := range discoveryLogs {
		checkDiscoveryLog(t, b, fabrics.TRTypeRDMA)
	}
}

// checkSend compares a SEND message with the oracle's record of it: the
// direction the message goes, addresses, destination QP, invalidate flag
// and immediate data.
func checkSend(d *diff, m *capture.Message, o *capture.OracleRDMAMessage, dir string, invalidate bool, immdt *uint32) {
	d.eq("dir", dir, o.Dir)
	d.eq("src", m.Src, o.Src)
	d.eq("dst", m.Dst, o.Dst)
	d.eq("dqpn", m.DestQP, o.DQPN)
	d.eq("invalidate", m.Invalidate, invalidate)
	if immdt != nil {
		d.eq("immdt", m.Imm, *immdt)
	}
}

// dataPlacement says how a capsule's data moves, in the words of the
// capture README's table.
func dataPlacement(sqe nvme.SQE, inCapsule int) string {
	s := fabrics.SGL(sqe.SGL1())
	switch {
	case s.InCapsule() && inCapsule > 0:
		return "in-capsule data"
	case s.Type() == fabrics.SGLTypeKeyedDataBlock && s.Length() == 0:
		return "no data (keyed SGL, length 0)"
	case s.Invalidate():
		return "keyed SGL, invalidate"
	case s.Type() == fabrics.SGLTypeKeyedDataBlock:
		return "keyed SGL"
	}
	return s.String()
}

func checkCounts(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok && !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %q: %d, README says %d", what, k, got[k], want[k])
		}
	}
}

// readRequest returns the RETH of the RDMA READ Request in frame n.
func readRequest(d *diff, frames []capture.Frame, n int) (va uint64, rkey, dmalen uint32) {
	if n < 1 || n > len(frames) {
		d.eq("req_frame", n, "a frame of the capture")
		return
	}
	var p wire.Packet
	if err := p.Parse(frames[n-1].Payload); err != nil || p.RETH == nil {
		d.eq("READ Request", err, "a packet with a RETH")
		return
	}
	d.eq("req_frame opcode", p.Opcode().IsReadRequest(), true)
	return p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
}

// checkCompletion checks what a completion means for the command it
// completes, with package fabrics' helpers.
func checkCompletion(d *diff, c *decodedCapsule, cqe nvme.CQE) {
	if c.sqe.Opcode() != fabrics.OpcodeFabrics {
		return
	}
	cmd := fabrics.Command(c.sqe)
	switch cmd.FCType() {
	case fabrics.FCTypeConnect:
		// The kernel target gives controller IDs from 1 up; an I/O queue
		// Connect gets the admin queue's controller.
		if cqe.Status() != nvme.StatusSuccess || fabrics.ConnectResultCntlID(cqe.DW0()) == 0 ||
			fabrics.ConnectResultAuthReq(cqe.DW0()) != 0 {
			d.eq("Connect result", fmt.Sprintf("%v dw0 %#x", cqe.Status(), cqe.DW0()), "success with a controller ID")
		}
	case fabrics.FCTypePropertyGet:
		v := fabrics.PropertyGetValue(cqe.DW0(), cqe.DW1())
		d.eq("Property Get value = Result64", v, cqe.Result64())
		pg := cmd.PropertyGet()
		if pg.Size() == 4 && v>>32 != 0 {
			d.eq("4-byte property", fmt.Sprintf("%#x", v), "32 bits")
		}
		checkPropertyValue(d, pg.Offset(), v)
	}
}

// checkPropertyValue checks the property values the Linux target reports
// (drivers/nvme/target/core.c nvmet_init_cap; VS 1.3 by default).
func checkPropertyValue(d *diff, offset uint32, v uint64) {
	switch offset {
	case fabrics.PropCAP:
		c := fabrics.CAP(v)
		// nvmet_init_cap: CSS bits 37 and 43, TO 15, MQES = queue size - 1
		// (128 on RDMA, 1024 on TCP); CQR is not set.
		if c.CQR() || c.TO() != 15 || c.CSS() != fabrics.CAPCSSNVM|fabrics.CAPCSSIOCS || c.MPSMIN() != 0 ||
			c.MPSMAX() != 0 || c.DSTRD() != 0 || c.NSSRS() || c.CMBS() || (c.MQES() != 127 && c.MQES() != 1023) {
			d.eq("CAP", fmt.Sprintf("%+v", c.Fields()), "TO 15, CSS NVM+IOCS, MQES 127 (rdma) or 1023 (tcp)")
		}
		if fabrics.MakeCAP(c.Fields()) != c {
			d.eq("MakeCAP(Fields)", fmt.Sprintf("%#x", uint64(fabrics.MakeCAP(c.Fields()))), fmt.Sprintf("%#x", v))
		}
	case fabrics.PropVS:
		d.eq("VS", fabrics.VS(v), fabrics.VS13)
	case fabrics.PropCSTS:
		s := fabrics.CSTS(v)
		if s.CFS() || s.NSSRO() || s.PP() {
			d.eq("CSTS", fmt.Sprintf("%#x", v), "no fatal status, reset or pause")
		}
	case fabrics.PropCC:
		c := fabrics.CC(v)
		if c.IOSQES() != 6 || c.IOCQES() != 4 {
			d.eq("CC", fmt.Sprintf("%#x", v), "IOSQES 6, IOCQES 4")
		}
	}
}

// checkDiscoveryLog decodes the discovery log page the kernel target
// returned and checks its entries against what the capture shows: the
// target's port for the NVM subsystem, and since Linux 5.x the current
// discovery subsystem entry.
func checkDiscoveryLog(t *testing.T, b []byte, trtype fabrics.TRType) {
	t.Helper()
	l, err := fabrics.ParseDiscoveryLog(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("discovery log page of %d bytes: genctr %d numrec %d recfmt %d, %d entries", len(b), l.GenCtr, l.NumRec, l.RecFmt, len(l.Entries))
	if l.RecFmt != fabrics.DiscoveryRecFmt || l.NumRec == 0 {
		t.Errorf("discovery header: numrec %d recfmt %d", l.NumRec, l.RecFmt)
	}
	if len(b) == fabrics.DiscoveryHeaderLen {
		return // the host's first read: the header only
	}
	if uint64(len(l.Entries)) != l.NumRec {
		t.Errorf("%d entries in %d bytes, numrec %d", len(l.Entries), len(b), l.NumRec)
	}
	if len(l.Entries) != 2 {
		t.Fatalf("%d entries, want 2 (current discovery subsystem, kpeer-target)", len(l.Entries))
	}
	for i, e := range l.Entries {
		t.Logf("entry %d: %+v", i, struct {
			TRType, AdrFam, SubType      string
			TREQ                         uint8
			PortID, CntlID, ASQSZ, EFlag uint16
			TRSVCID, TRADDR, SubNQN      string
			TSAS                         []byte
		}{e.TRType.String(), e.AdrFam.String(), e.SubType.String(), e.TREQ, e.PortID, e.CntlID, e.ASQSZ, e.EFlags,
			e.TRSVCID, e.TRADDR, e.SubNQN, e.TSAS[:8]})
		if err := fabrics.ValidateNQN(e.SubNQN); err != nil {
			t.Errorf("entry %d: %v", i, err)
		}
		// Linux nvmet 6.1: port 1, dynamic controllers, admin queue size
		// 32, TREQ "not specified, SQ flow control disable supported".
		if e.TRType != trtype || e.AdrFam != fabrics.AdrFamIPv4 || e.TRADDR != targetAddr || e.TRSVCID != "4420" ||
			e.CntlID != fabrics.CntlIDDynamic || e.PortID != 1 || e.ASQSZ != 32 || e.EFlags != 0 ||
			e.TREQ != fabrics.TREQNotSpecified|fabrics.TREQDisableSQFlow {
			t.Errorf("entry %d: %+v", i, e)
		}
		if _, err := netip.ParseAddr(e.TRADDR); err != nil {
			t.Errorf("entry %d: TRADDR: %v", i, err)
		}
		switch trtype {
		case fabrics.TRTypeRDMA:
			if e.TSAS[0] != fabrics.RDMAQPTypeRC || e.TSAS[1] != fabrics.RDMAPRTypeNone || e.TSAS[2] != fabrics.RDMACMSRDMACM {
				t.Errorf("entry %d: RDMA TSAS % x", i, e.TSAS[:10])
			}
		case fabrics.TRTypeTCP:
			if e.TSAS[0] != fabrics.TCPSecTypeNone {
				t.Errorf("entry %d: TCP TSAS % x", i, e.TSAS[:4])
			}
		}
		switch i {
		case 0:
			if e.SubType != fabrics.SubTypeCurrentDiscovery || e.SubNQN != fabrics.DiscoveryNQN {
				t.Errorf("entry 0: %v %q, want the current discovery subsystem", e.SubType, e.SubNQN)
			}
		case 1:
			if e.SubType != fabrics.SubTypeNVM || e.SubNQN != "nqn.2014-08.org.nvmexpress:kpeer-target" {
				t.Errorf("entry 1: %v %q, want the NVM subsystem kpeer-target", e.SubType, e.SubNQN)
			}
		}
	}
	// Our encoder writes the log page byte for byte as the Linux target did.
	enc, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, b) {
		t.Errorf("Encode of the decoded log page differs from the kernel target's")
	}
}
