package ibcm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// The golden tests replay the CM exchange of the kernel capture
// (kernel-nvme-rdma-rxe: the 6.1 NVMe/RDMA host 192.0.2.3 connecting the
// discovery controller of the 6.1 nvmet target 192.0.2.2) against this
// manager and compare what it sends, field by field, with the oracle's
// decode of what the kernel sent in the same place.

const goldenCapture = "kernel-nvme-rdma-rxe"

// oracleCM is a "cm" oracle record with numbers kept exact.
type oracleCM map[string]any

func (o oracleCM) num(t testing.TB, key string) uint64 {
	t.Helper()
	v, ok := o[key]
	if !ok {
		t.Fatalf("oracle frame %v has no %q", o["frame"], key)
	}
	n, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
	if err != nil {
		t.Fatalf("oracle %q: %v", key, err)
	}
	return n
}

func (o oracleCM) str(key string) string { s, _ := o[key].(string); return s }

func (o oracleCM) sub(key string) oracleCM {
	m, _ := o[key].(map[string]any)
	return oracleCM(m)
}

// goldenFrames returns the oracle's cm records and the MADs of their
// frames, by frame number.
func goldenFrames(t testing.TB) (map[int]oracleCM, map[int]wire.MAD) {
	t.Helper()
	recs, err := capture.LoadOracle(goldenCapture + ".decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	frames, err := capture.Load(goldenCapture + ".pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	byNum := make(map[int]*capture.Frame, len(frames))
	for i := range frames {
		byNum[frames[i].Number] = &frames[i]
	}
	oracle := make(map[int]oracleCM)
	mads := make(map[int]wire.MAD)
	for _, r := range recs {
		if r.Kind != "cm" {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(r.Raw))
		dec.UseNumber()
		var o oracleCM
		if err := dec.Decode(&o); err != nil {
			t.Fatal(err)
		}
		n := int(o.num(t, "frame"))
		var p wire.Packet
		if err := p.Parse(byNum[n].Payload); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		mad, err := wire.ParseMAD(p.Payload)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		oracle[n], mads[n] = o, append(wire.MAD(nil), mad...)
	}
	return oracle, mads
}

// checkMADHeader compares a MAD header with the oracle's "mad" object.
func checkMADHeader(t *testing.T, what string, got wire.MAD, o oracleCM) {
	t.Helper()
	h := o.sub("mad")
	for _, f := range []struct {
		key string
		v   uint64
	}{
		{"base_version", uint64(got.BaseVersion())}, {"mgmt_class", uint64(got.MgmtClass())},
		{"class_version", uint64(got.ClassVersion())}, {"method", uint64(got.Method())},
		{"status", uint64(got.Status())}, {"class_specific", uint64(got.ClassSpecific())},
		{"attr_id", uint64(got.AttrID())}, {"attr_mod", uint64(got.AttrMod())},
	} {
		if want := h.num(t, f.key); f.v != want {
			t.Errorf("%s MAD %s = %d, kernel %d", what, f.key, f.v, want)
		}
	}
}

type goldenField struct {
	key string
	v   uint64
}

func checkFields(t *testing.T, what string, o oracleCM, fields []goldenField) {
	t.Helper()
	for _, f := range fields {
		if want := o.num(t, f.key); f.v != want {
			t.Errorf("%s %s = %d, kernel %d", what, f.key, f.v, want)
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// waitSent waits for the n-th MAD of attr on the fake network.
func waitSent(t *testing.T, n *fakeNet, attr wire.CMAttr, count int) sentMAD {
	t.Helper()
	s, ok := n.waitSent(attr, count, 5*time.Second)
	if !ok {
		t.Fatalf("no %v sent", attr)
	}
	return s
}

// TestGoldenPassive plays the kernel host's REQ, RTU and DREQ to a
// listener on the target's address and checks the request as parsed, the
// QP transitions, and our REP and DREP against the kernel target's.
func TestGoldenPassive(t *testing.T) {
	oracle, mads := goldenFrames(t)
	oREQ, oREP, oDREP := oracle[3], oracle[4], oracle[87]
	if oREQ.str("msg") != "REQ" || oREP.str("msg") != "REP" || oracle[5].str("msg") != "RTU" || oracle[86].str("msg") != "DREQ" || oDREP.str("msg") != "DREP" {
		t.Fatal("capture frames 3/4/5/86/87 are not REQ/REP/RTU/DREQ/DREP")
	}
	host, target := netip.MustParseAddr(oREQ.str("src")), netip.MustParseAddr(oREQ.str("dst"))
	n := newFakeNet()
	dev := n.newDev(target.String())
	defer dev.Close()
	// The kernel target's CA GUID, so that the REP compares whole.
	m, err := New(dev, Options{CAGUID: oREP.num(t, "local_ca_guid")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy()
	l, err := m.Listen(4420)
	if err != nil {
		t.Fatal(err)
	}
	n.transmit(host, target, mads[3])
	req, err := l.Next(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// The request as the application sees it.
	cma, nv := oREQ.sub("cma_hdr"), oREQ.sub("nvme_rdma_cm_req")
	if got, want := req.RemoteAddr(), netip.AddrPortFrom(netip.MustParseAddr(cma.str("src_ip")), uint16(cma.num(t, "port"))); got != want {
		t.Errorf("RemoteAddr %v, kernel %v", got, want)
	}
	if got, want := req.LocalAddr(), netip.AddrPortFrom(netip.MustParseAddr(cma.str("dst_ip")), 4420); got != want {
		t.Errorf("LocalAddr %v, want %v", got, want)
	}
	pd := req.PrivateData()
	rawPD, _ := hex.DecodeString(oREQ.str("private_data_hex"))
	if !bytes.Equal(pd, rawPD[wire.CMAHdrLen:]) {
		t.Errorf("private data %x, kernel %x", pd, rawPD[wire.CMAHdrLen:])
	}
	checkFields(t, "NVMe/RDMA CM request", nv, []goldenField{
		{"recfmt", uint64(binary.LittleEndian.Uint16(pd[0:]))}, {"qid", uint64(binary.LittleEndian.Uint16(pd[2:]))},
		{"hrqsize", uint64(binary.LittleEndian.Uint16(pd[4:]))}, {"hsqsize", uint64(binary.LittleEndian.Uint16(pd[6:]))},
	})
	p := req.Param()
	checkFields(t, "request", oREQ, []goldenField{
		{"responder_resources", uint64(p.ResponderResources)}, {"initiator_depth", uint64(p.InitiatorDepth)},
		{"retry_count", uint64(p.RetryCount)}, {"rnr_retry_count", uint64(p.RNRRetryCount)},
		{"end_to_end_flow_control", b2u(p.FlowControl)}, {"srq", b2u(p.SRQ)},
		{"local_qpn", uint64(p.QPN)}, {"starting_psn", uint64(p.StartingPSN)},
		{"path_mtu", uint64(p.PathMTU)}, {"primary_local_ack_timeout", uint64(p.LocalACKTimeout)},
	})

	// Accept as nvmet does: initiator depth up to the device's 128,
	// flow control, RNR retry 7, private data recfmt 0 + crqsize 32.
	qp := dev.newRCQP()
	crqsize := uint16(oREP.sub("nvme_rdma_cm_rep").num(t, "crqsize"))
	acceptPD := binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, 0), crqsize)
	type res struct {
		c   rdma.Conn
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := req.Accept(ctxT(t, 5*time.Second), qp, acceptPD,
			rdma.ConnParam{ResponderResources: 16, InitiatorDepth: 128, RNRRetryCount: 7, FlowControl: true})
		done <- res{c, err}
	}()
	sent := waitSent(t, n, wire.CMAttrREP, 1)
	if sent.dst != host {
		t.Errorf("REP sent to %v, want %v", sent.dst, host)
	}
	rep := wire.REP(sent.mad.Data())
	checkMADHeader(t, "REP", sent.mad, oREP)
	checkFields(t, "REP", oREP, []goldenField{
		{"remote_comm_id", uint64(rep.RemoteCommID())}, {"local_qkey", uint64(rep.LocalQKey())},
		{"local_qpn", uint64(rep.LocalQPN())}, {"local_eecn", uint64(rep.LocalEECN())},
		{"responder_resources", uint64(rep.ResponderResources())}, {"initiator_depth", uint64(rep.InitiatorDepth())},
		{"target_ack_delay", uint64(rep.TargetACKDelay())}, {"failover_accepted", uint64(rep.FailoverAccepted())},
		{"end_to_end_flow_control", b2u(rep.EndToEndFlowControl())}, {"rnr_retry_count", uint64(rep.RNRRetryCount())},
		{"srq", b2u(rep.SRQ())}, {"local_ca_guid", rep.LocalCAGUID()},
	})
	if want := oREP.sub("mad").num(t, "tid"); sent.mad.TID() != want {
		t.Errorf("REP TID %#x, kernel %#x", sent.mad.TID(), want)
	}
	if got := hex.EncodeToString(rep.PrivateData()); got != oREP.str("private_data_hex") {
		t.Errorf("REP private data %s, kernel %s", got, oREP.str("private_data_hex"))
	}
	if rep.LocalCommID() == 0 || rep.StartingPSN() > wire.PSNMask {
		t.Errorf("REP local comm ID %#x, PSN %#x", rep.LocalCommID(), rep.StartingPSN())
	}
	// RTR before the REP, with the REQ's values.
	rtr, ok := qp.call(rdma.QPSRTR)
	if !ok {
		t.Fatal("QP not moved to RTR before the REP")
	}
	// The passive side receives from the PSN its REP advertises (see
	// TestGoldenPSNs) and sends from the REQ's.
	if a := rtr.attr; a.DestQPN != uint32(oREQ.num(t, "local_qpn")) || a.RQPSN != rep.StartingPSN() ||
		a.PathMTU != rdma.MTU1024 || a.AH.DGID.Addr() != host || uint64(a.AH.FlowLabel) != oREQ.num(t, "primary_flow_label") ||
		a.AH.HopLimit != 64 || a.MaxDestRdAtomic != 0 {
		t.Errorf("RTR attributes %+v", a)
	}
	if _, ok := qp.call(rdma.QPSRTS); ok {
		t.Error("QP in RTS before the RTU")
	}

	// The kernel's RTU, addressed to our communication ID.
	rtu := wire.MAD(append([]byte(nil), mads[5]...))
	wire.RTU(rtu.Data()).SetRemoteCommID(rep.LocalCommID())
	n.transmit(host, target, rtu)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	rts, _ := qp.call(rdma.QPSRTS)
	if a := rts.attr; uint64(a.SQPSN) != oREQ.num(t, "starting_psn") || a.Timeout != 19 || a.RetryCount != 7 || a.RNRRetry != 7 || a.MaxRdAtomic != 128 {
		t.Errorf("RTS attributes %+v", a)
	}

	// The kernel's DREQ: our DREP must match the kernel target's.
	dreq := wire.MAD(append([]byte(nil), mads[86]...))
	wire.DREQ(dreq.Data()).SetRemoteCommID(rep.LocalCommID())
	n.transmit(host, target, dreq)
	sent = waitSent(t, n, wire.CMAttrDREP, 1)
	drep := wire.DREP(sent.mad.Data())
	checkMADHeader(t, "DREP", sent.mad, oDREP)
	checkFields(t, "DREP", oDREP, []goldenField{{"remote_comm_id", uint64(drep.RemoteCommID())}})
	if want := oDREP.sub("mad").num(t, "tid"); sent.mad.TID() != want {
		t.Errorf("DREP TID %#x, kernel %#x", sent.mad.TID(), want)
	}
	if drep.LocalCommID() != rep.LocalCommID() || hex.EncodeToString(drep.PrivateData()) != oDREP.str("private_data_hex") {
		t.Errorf("DREP local comm ID %#x, private data %x", drep.LocalCommID(), drep.PrivateData())
	}
	if qp.State() != rdma.QPSErr {
		t.Errorf("QP %v after the DREQ", qp.State())
	}
}

// TestGoldenActive connects from the host's address as the kernel host
// did and compares our REQ with the kernel's (frame 3), field by field,
// except the values that are random by design.
func TestGoldenActive(t *testing.T) {
	oracle, _ := goldenFrames(t)
	oREQ := oracle[3]
	host, target := netip.MustParseAddr(oREQ.str("src")), netip.MustParseAddr(oREQ.str("dst"))
	n := newFakeNet()
	dev := n.newDev(host.String())
	defer dev.Close()
	m, err := New(dev, Options{CAGUID: oREQ.num(t, "local_ca_guid")})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy()
	rawPD, _ := hex.DecodeString(oREQ.str("private_data_hex"))
	nvmeReq := rawPD[wire.CMAHdrLen : wire.CMAHdrLen+32]
	ctx, cancel := context.WithCancel(context.Background())
	errCh := make(chan error, 1)
	go func() {
		_, err := m.Connect(ctx, target, 4420, dev.newRCQP(), nvmeReq,
			rdma.ConnParam{ResponderResources: 128, InitiatorDepth: 0, RetryCount: 7, RNRRetryCount: 7, FlowControl: true})
		errCh <- err
	}()
	sent := waitSent(t, n, wire.CMAttrREQ, 1)
	cancel()
	<-errCh

	r := wire.REQ(sent.mad.Data())
	checkMADHeader(t, "REQ", sent.mad, oREQ)
	pp := r.Primary()
	alt := r.Alternate()
	checkFields(t, "REQ", oREQ, []goldenField{
		{"service_id", r.ServiceID()}, {"local_ca_guid", r.LocalCAGUID()}, {"local_qkey", uint64(r.LocalQKey())},
		{"local_qpn", uint64(r.LocalQPN())}, {"responder_resources", uint64(r.ResponderResources())},
		{"local_eecn", uint64(r.LocalEECN())}, {"initiator_depth", uint64(r.InitiatorDepth())},
		{"remote_eecn", uint64(r.RemoteEECN())}, {"remote_cm_response_timeout", uint64(r.RemoteCMResponseTimeout())},
		{"transport_service_type", uint64(r.TransportServiceType())}, {"end_to_end_flow_control", b2u(r.EndToEndFlowControl())},
		{"local_cm_response_timeout", uint64(r.LocalCMResponseTimeout())}, {"retry_count", uint64(r.RetryCount())},
		{"pkey", uint64(r.PKey())}, {"path_mtu", uint64(r.PathMTU())}, {"rdc_exists", b2u(r.RDCExists())},
		{"rnr_retry_count", uint64(r.RNRRetryCount())}, {"max_cm_retries", uint64(r.MaxCMRetries())},
		{"srq", b2u(r.SRQ())}, {"extended_transport_type", uint64(r.ExtendedTransportType())},
		{"primary_local_lid", uint64(pp.LocalLID())}, {"primary_remote_lid", uint64(pp.RemoteLID())},
		{"primary_packet_rate", uint64(pp.PacketRate())}, {"primary_traffic_class", uint64(pp.TrafficClass())},
		{"primary_hop_limit", uint64(pp.HopLimit())}, {"primary_sl", uint64(pp.SL())},
		{"primary_subnet_local", b2u(pp.SubnetLocal())}, {"primary_local_ack_timeout", uint64(pp.LocalACKTimeout())},
		{"alternate_local_lid", uint64(alt.LocalLID())}, {"alternate_remote_lid", uint64(alt.RemoteLID())},
		{"alternate_flow_label", uint64(alt.FlowLabel())}, {"alternate_hop_limit", uint64(alt.HopLimit())},
		{"alternate_local_ack_timeout", uint64(alt.LocalACKTimeout())}, {"sap_supported", b2u(r.SAPSupported())},
	})
	for _, g := range []struct {
		key string
		got wire.GID
	}{
		{"primary_local_gid", pp.LocalGID()}, {"primary_remote_gid", pp.RemoteGID()},
		{"alternate_local_gid", alt.LocalGID()}, {"alternate_remote_gid", alt.RemoteGID()},
	} {
		if g.got.String() != oREQ.str(g.key) {
			t.Errorf("REQ %s = %v, kernel %s", g.key, g.got, oREQ.str(g.key))
		}
	}
	// Random by design: communication ID, TID, starting PSN and the
	// rdma_cm source port, from which the flow label follows.
	hdr, err := wire.ParseCMAHdr(r.PrivateData())
	if err != nil {
		t.Fatal(err)
	}
	if fl := pp.FlowLabel(); fl != roceFlowLabel(hdr.Port(), 4420) {
		t.Errorf("flow label %d, want %d for source port %d", fl, roceFlowLabel(hdr.Port(), 4420), hdr.Port())
	}
	// The kernel's own flow label follows the same rule.
	kcma := oREQ.sub("cma_hdr")
	if want := uint64(roceFlowLabel(uint16(kcma.num(t, "port")), 4420)); want != oREQ.num(t, "primary_flow_label") {
		t.Errorf("kernel flow label %d, rule gives %d", oREQ.num(t, "primary_flow_label"), want)
	}
	if hdr.Version() != uint8(kcma.num(t, "cma_version")) || uint64(hdr.IPVersion()) != kcma.num(t, "ip_version") ||
		hdr.SrcAddr().String() != kcma.str("src_ip") || hdr.DstAddr().String() != kcma.str("dst_ip") {
		t.Errorf("rdma_cm header %v", hdr)
	}
	got := append([]byte(nil), r.PrivateData()...)
	copy(got[2:4], rawPD[2:4]) // the port
	if !bytes.Equal(got, rawPD) {
		t.Errorf("REQ private data\n%x\nkernel\n%x", got, rawPD)
	}
	if uint32(sent.mad.TID()) != r.LocalCommID() {
		t.Errorf("TID %#x does not end in the local comm ID %#x", sent.mad.TID(), r.LocalCommID())
	}
	// Cancelling sent a REJ "timeout" naming our CA GUID, as cm_destroy_id.
	rej := waitSent(t, n, wire.CMAttrREJ, 1)
	rr := wire.REJ(rej.mad.Data())
	if rr.Reason() != wire.REJTimeout || binary.BigEndian.Uint64(rr.ARI()) != m.CAGUID() || rr.RejectedInfoLength() != 8 || rr.LocalCommID() != r.LocalCommID() {
		t.Errorf("REJ on cancel: reason %v, ARI %x, local comm ID %#x", rr.Reason(), rr.ARI()[:8], rr.LocalCommID())
	}
}

// TestGoldenPSNs checks the meaning of the starting PSNs against the
// capture: the host's first RC request carries the PSN of the target's
// REP, the target's first the PSN of the host's REQ. So a REQ's or REP's
// starting PSN is the PSN its sender expects to receive, and this manager
// sets the QPs that way on both sides.
func TestGoldenPSNs(t *testing.T) {
	oracle, _ := goldenFrames(t)
	oREQ, oREP := oracle[3], oracle[4]
	recs, err := capture.LoadOracle(goldenCapture + ".decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]uint64{} // source address -> PSN of its first RC request after the RTU
	for _, r := range recs {
		if r.Kind != "roce" {
			continue
		}
		var o struct {
			Frame int    `json:"frame"`
			Src   string `json:"src"`
			BTH   struct {
				Opname string `json:"opname"`
				DQPN   uint32 `json:"dqpn"`
				PSN    uint64 `json:"psn"`
			} `json:"bth"`
		}
		if err := r.Decode(&o); err != nil {
			t.Fatal(err)
		}
		op := o.BTH.Opname
		if o.Frame <= 5 || o.BTH.DQPN == 1 || !strings.HasPrefix(op, "RC ") || strings.Contains(op, "Acknowledge") || strings.Contains(op, "Response") {
			continue
		}
		if _, ok := first[o.Src]; !ok {
			first[o.Src] = o.BTH.PSN
		}
	}
	if got, want := first[oREQ.str("src")], oREP.num(t, "starting_psn"); got != want {
		t.Errorf("host's first request PSN %d, REP starting PSN %d", got, want)
	}
	if got, want := first[oREQ.str("dst")], oREQ.num(t, "starting_psn"); got != want {
		t.Errorf("target's first request PSN %d, REQ starting PSN %d", got, want)
	}

	// Both sides of ours: RQ from their own message's PSN, SQ from the peer's.
	p := newPair(t, testOpts(), testOpts())
	l, _ := p.srv.Listen(4420)
	srvCh := p.serveOne(t, l, nil, rdma.ConnParam{}, 0, false)
	cqp := p.cliDev.newRCQP()
	conn, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, cqp, nil, rdma.ConnParam{})
	if err != nil {
		t.Fatal(err)
	}
	sr := <-srvCh
	if sr.err != nil {
		t.Fatal(sr.err)
	}
	reqPSN := wire.REQ(p.net.sent(wire.CMAttrREQ)[0].mad.Data()).StartingPSN()
	repPSN := wire.REP(p.net.sent(wire.CMAttrREP)[0].mad.Data()).StartingPSN()
	crtr, _ := cqp.call(rdma.QPSRTR)
	crts, _ := cqp.call(rdma.QPSRTS)
	srtr, _ := sr.qp.call(rdma.QPSRTR)
	srts, _ := sr.qp.call(rdma.QPSRTS)
	if crtr.attr.RQPSN != reqPSN || crts.attr.SQPSN != repPSN || srtr.attr.RQPSN != repPSN || srts.attr.SQPSN != reqPSN {
		t.Errorf("REQ PSN %#x, REP PSN %#x; client RQ %#x SQ %#x; server RQ %#x SQ %#x",
			reqPSN, repPSN, crtr.attr.RQPSN, crts.attr.SQPSN, srtr.attr.RQPSN, srts.attr.SQPSN)
	}
	if sr.conn.Param().StartingPSN != reqPSN || conn.Param().StartingPSN != repPSN {
		t.Errorf("Param().StartingPSN: server %#x, client %#x", sr.conn.Param().StartingPSN, conn.Param().StartingPSN)
	}
}
