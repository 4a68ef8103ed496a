package fabrics_test

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/nvme"
)

// connKey names a TCP connection whichever way a PDU goes.
type connKey struct{ host, target netip.AddrPort }

// pduFrames is how the oracle names a PDU in for_frames.
func pduFrames(first, last int) string {
	if first == last {
		return frameKey([]int{first})
	}
	return frameKey([]int{first, last})
}

// TestGoldenTCP decodes every NVMe/TCP PDU of the kernel capture with
// package fabrics/tcp, the SQEs and CQEs with nvme and fabrics, and
// compares every field with the decode oracle.
func TestGoldenTCP(t *testing.T) {
	g, err := capture.LoadTCPGolden("kernel-nvme-tcp")
	if err != nil {
		t.Fatal(err)
	}
	pdus, recs := g.PDUs, g.Records
	qidOf := map[connKey]uint16{}
	capsules := map[string]*decodedCapsule{} // by connection and for_frames
	counts := map[string]int{}
	types := map[string]int{}
	placement := map[string]int{}
	var discoveryLogs [][]byte
	nConnectData := 0
	pending := map[string][]byte{} // Get Log Page 0x70 data by connection and CID

	for i, r := range recs {
		var o capture.TCPPDURecord
		if err := r.DecodeStrict(&o); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		cp := pdus[i]
		where := fmt.Sprintf("PDU frames %d..%d", o.FrameFirst, o.FrameLast)
		var d diff
		d.eq("frame_first", cp.FirstFrame, o.FrameFirst)
		d.eq("frame_last", cp.LastFrame, o.FrameLast)
		s := cp.Stream
		d.eq("src", s.Src.Addr(), o.Src)
		d.eq("sport", s.Src.Port(), o.Sport)
		d.eq("dst", s.Dst.Addr(), o.Dst)
		d.eq("dport", s.Dst.Port(), o.Dport)
		dir, conn := "target->host", connKey{host: s.Dst, target: s.Src}
		if s.Active {
			dir, conn = "host->target", connKey{host: s.Src, target: s.Dst}
		}
		d.eq("dir", dir, o.Dir)

		p, err := tcp.Parse(cp.Data)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		h := p.Header()
		d.eq("hdr.type", uint8(h.Type()), o.Hdr.Type)
		d.eq("hdr.flags", h.Flags(), o.Hdr.Flags)
		d.eq("hdr.hlen", h.HLen(), o.Hdr.HLen)
		d.eq("hdr.pdo", h.PDO(), o.Hdr.PDO)
		d.eq("hdr.plen", h.PLen(), o.Hdr.PLen)
		d.eq("type_name", h.Type(), o.TypeName)
		types[o.TypeName]++
		hd, hok := p.HeaderDigest()
		d.eq("hdgst present", hok, o.HDgst != nil)
		if hok && o.HDgst != nil {
			d.eq("hdgst", hd, *o.HDgst)
			d.eq("hdgst_ok", p.VerifyHeaderDigest() == nil, deref(o.HDgstOK))
		}
		dd, dok := p.DataDigest()
		d.eq("ddgst present", dok, o.DDgst != nil)
		if dok && o.DDgst != nil {
			d.eq("ddgst", dd, *o.DDgst)
			d.eq("ddgst_ok", p.VerifyDataDigest() == nil, deref(o.DDgstOK))
		}

		var forCmd *decodedCapsule
		switch h.Type() {
		case tcp.TypeICReq:
			q := p.ICReq()
			if o.ICReq == nil {
				d.eq("icreq", "present", "absent")
				break
			}
			d.eq("icreq.pfv", q.PFV(), o.ICReq.PFV)
			d.eq("icreq.hpda", q.HPDA(), o.ICReq.HPDA)
			d.eq("icreq.dgst", q.DGST(), o.ICReq.DGST)
			d.eq("icreq.hdgst_enable", b2u(q.DGST()&tcp.DGSTHeader != 0), o.ICReq.HDgstEnable)
			d.eq("icreq.ddgst_enable", b2u(q.DGST()&tcp.DGSTData != 0), o.ICReq.DDgstEnable)
			d.eq("icreq.maxr2t", q.MaxR2T(), o.ICReq.MaxR2T)
		case tcp.TypeICResp:
			q := p.ICResp()
			if o.ICResp == nil {
				d.eq("icresp", "present", "absent")
				break
			}
			d.eq("icresp.pfv", q.PFV(), o.ICResp.PFV)
			d.eq("icresp.cpda", q.CPDA(), o.ICResp.CPDA)
			d.eq("icresp.dgst", q.DGST(), o.ICResp.DGST)
			d.eq("icresp.hdgst_enable", b2u(q.DGST()&tcp.DGSTHeader != 0), o.ICResp.HDgstEnable)
			d.eq("icresp.ddgst_enable", b2u(q.DGST()&tcp.DGSTData != 0), o.ICResp.DDgstEnable)
			d.eq("icresp.maxh2cdata", q.MaxH2CData(), o.ICResp.MaxH2CData)
		case tcp.TypeH2CTermReq, tcp.TypeC2HTermReq:
			q := p.TermReq()
			if o.Term == nil {
				d.eq("term", "present", "absent")
				break
			}
			d.eq("term.fes", q.FES(), o.Term.FES)
			d.eq("term.fei", q.FEI(), o.Term.FEI)
			d.eq("term.hdr_hex", hex.EncodeToString(p.Data()), o.Term.HdrHex)
		case tcp.TypeCapsuleCmd:
			if o.SQE == nil {
				d.eq("sqe", "present", "absent")
				break
			}
			sqeBytes := p.CapsuleCmd().SQE()
			checkSQE(&d, sqeBytes, o.SQE, false)
			sqe := nvme.SQE(sqeBytes)
			in := p.Data()
			d.eq("incapsule_len", len(in), deref(o.IncapsuleLen))
			if len(in) > 0 {
				d.eq("incapsule_sha256", sha(in), o.IncapsuleSHA256)
			}
			if sqe.Opcode() == fabrics.OpcodeFabrics && fabrics.FCType(sqe[4]) == fabrics.FCTypeConnect {
				qidOf[conn] = fabrics.ConnectCommand(sqe).QID()
			}
			if o.ConnectData != nil {
				checkConnectData(&d, in, o.ConnectData)
				nConnectData++
			}
			qid, ok := qidOf[conn]
			if !ok {
				t.Errorf("%s: command before Connect", where)
			}
			c := &decodedCapsule{sqe: sqe, qid: qid, inCapsule: in}
			capsules[fmt.Sprint(conn)+pduFrames(cp.FirstFrame, cp.LastFrame)] = c
			name := commandName(sqe, qid)
			counts[name]++
			sgl := fabrics.SGL(sqe.SGL1())
			switch {
			case sgl.InCapsule() && len(in) > 0:
				placement[name+", in-capsule data"]++
			case sgl.Type() == fabrics.SGLTypeTransportDataBlock && sgl.Subtype() == fabrics.SGLSubtypeTransportSpecific:
				placement[name+", transport data block"]++
			default:
				placement[name+", "+sgl.String()]++
			}
			if sqe.Opcode() == uint8(nvme.AdminGetLogPage) && qid == 0 && sqe.CDW10()&0xff == fabrics.LogPageDiscovery {
				pending[fmt.Sprint(conn, sqe.CID())] = make([]byte, sgl.Length())
			}
		case tcp.TypeCapsuleResp:
			if o.CQE == nil {
				d.eq("cqe", "present", "absent")
				break
			}
			b := p.CapsuleResp().CQE()
			checkCQE(&d, b, o.CQE)
			cqe := nvme.CQE(b)
			forCmd = capsules[fmt.Sprint(conn)+frameKey(o.ForFrames)]
			if forCmd != nil {
				d.eq("command cid", forCmd.sqe.CID(), cqe.CID())
				d.eq("sqid", cqe.SQID(), forCmd.qid)
				checkCompletion(&d, forCmd, cqe)
				k := fmt.Sprint(conn, cqe.CID())
				if log, ok := pending[k]; ok {
					discoveryLogs = append(discoveryLogs, log)
					delete(pending, k)
				}
			}
			d.eq("for_cid", cqe.CID(), deref(o.ForCID))
		case tcp.TypeH2CData, tcp.TypeC2HData:
			if o.Data == nil {
				d.eq("data", "present", "absent")
				break
			}
			q := p.DataPDU()
			data := p.Data()
			d.eq("data.cccid", q.CCCID(), o.Data.CCCID)
			d.eq("data.ttag", q.TTag(), o.Data.TTag)
			d.eq("data.datao", q.DataO(), o.Data.DataO)
			d.eq("data.datal", q.DataL(), o.Data.DataL)
			d.eq("data.len", len(data), o.Data.Len)
			d.eq("data.datal = len", q.DataL(), len(data))
			d.eq("data.sha256", sha(data), o.Data.SHA256)
			d.eq("data.last_pdu", b2u(h.Flags()&tcp.FlagDataLast != 0), o.Data.LastPDU)
			if h.Type() == tcp.TypeC2HData {
				d.eq("data.success", b2u(h.Flags()&tcp.FlagDataSuccess != 0), deref(o.Data.Success))
			} else if o.Data.Success != nil {
				d.eq("data.success", "absent", *o.Data.Success)
			}
			d.eq("for_cid", q.CCCID(), deref(o.ForCID))
			forCmd = capsules[fmt.Sprint(conn)+frameKey(o.ForFrames)]
			if buf, ok := pending[fmt.Sprint(conn, q.CCCID())]; ok && uint64(q.DataO())+uint64(len(data)) <= uint64(len(buf)) {
				copy(buf[q.DataO():], data)
			}
		case tcp.TypeR2T:
			if o.R2T == nil {
				d.eq("r2t", "present", "absent")
				break
			}
			q := p.R2T()
			d.eq("r2t.cccid", q.CCCID(), o.R2T.CCCID)
			d.eq("r2t.ttag", q.TTag(), o.R2T.TTag)
			d.eq("r2t.r2to", q.R2TO(), o.R2T.R2TO)
			d.eq("r2t.r2tl", q.R2TL(), o.R2T.R2TL)
			d.eq("for_cid", q.CCCID(), deref(o.ForCID))
			forCmd = capsules[fmt.Sprint(conn)+frameKey(o.ForFrames)]
		}
		if o.ForFrames != nil {
			if forCmd == nil {
				t.Errorf("%s: for frames %v is not a command seen on this connection", where, o.ForFrames)
			} else {
				d.eq("for_cid = command cid", deref(o.ForCID), forCmd.sqe.CID())
				d.eq("for_opcode", forCmd.sqe.Opcode(), deref(o.ForOpcode))
				if forCmd.sqe.Opcode() == fabrics.OpcodeFabrics {
					d.eq("for_fctype", forCmd.sqe[4], deref(o.ForFCType))
				}
			}
		}
		// qid: the queue of the connection once its Connect went by.
		if q, ok := qidOf[conn]; ok {
			d.eq("qid", q, deref(o.QID))
			d.eq("qid present", true, o.QID != nil)
		} else if o.QID != nil {
			d.eq("qid", "null", *o.QID)
		}
		if err := d.err(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}

	if nConnectData != 3 {
		t.Errorf("%d Connect data blocks checked, want 3", nConnectData)
	}
	// testdata/pcap/README.md: PDUs per type and commands seen.
	checkCounts(t, "PDU types", types, map[string]int{
		"ICReq": 3, "ICResp": 3, "CapsuleCmd": 206, "CapsuleResp": 206, "H2CData": 38, "C2HData": 101, "R2T": 38,
	})
	checkCounts(t, "commands", counts, map[string]int{
		"I/O Read": 78, "I/O Write": 75, "Fabrics Property Set": 6, "admin Identify": 16, "Fabrics Property Get": 15,
		"Fabrics Connect": 3, "admin Set Features": 3, "admin Asynchronous Event Request": 2,
		"admin Get Log Page": 7, "I/O Flush": 1,
	})
	// testdata/pcap/ORACLE.md: 3 Connect data blocks in-capsule; the 4-16 KiB writes
	// carry their data in-capsule, the others use the transport data block.
	checkCounts(t, "data placement", placement, map[string]int{
		"Fabrics Connect, in-capsule data":                       3,
		"Fabrics Property Get, transport data block":             15,
		"Fabrics Property Set, transport data block":             6,
		"I/O Flush, transport data block":                        1,
		"I/O Read, transport data block":                         78,
		"I/O Write, in-capsule data":                             37,
		"I/O Write, transport data block":                        38,
		"admin Asynchronous Event Request, transport data block": 2,
		"admin Get Log Page, transport data block":               7,
		"admin Identify, transport data block":                   16,
		"admin Set Features, transport data block":               3,
	})
	if len(discoveryLogs) == 0 {
		t.Fatal("no discovery log page transfer found")
	}
	for _, b := range discoveryLogs {
		checkDiscoveryLog(t, b, fabrics.TRTypeTCP)
	}
}
