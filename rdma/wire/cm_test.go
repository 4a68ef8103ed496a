package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// field is one numeric field of a wire view, named by its decode-oracle key.
type field struct {
	key  string
	bits int
	get  func(b []byte) uint64
	set  func(b []byte, v uint64)
}

type integer interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

// fld adapts a getter/setter pair given as method expressions.
func fld[V ~[]byte, T integer](key string, n int, get func(V) T, set func(V, T)) field {
	return field{key, n, func(b []byte) uint64 { return uint64(get(V(b))) }, func(b []byte, v uint64) { set(V(b), T(v)) }}
}

// flag adapts a boolean getter/setter pair.
func flag[V ~[]byte](key string, get func(V) bool, set func(V, bool)) field {
	return field{key, 1, func(b []byte) uint64 {
		if get(V(b)) {
			return 1
		}
		return 0
	}, func(b []byte, v uint64) { set(V(b), v&1 != 0) }}
}

// gidField is a 16-byte GID field, named by its oracle key.
type gidField struct {
	key string
	get func(b []byte) wire.GID
	set func(b []byte, g wire.GID)
}

var pathFields = []field{
	fld("local_lid", 16, wire.REQPath.LocalLID, wire.REQPath.SetLocalLID),
	fld("remote_lid", 16, wire.REQPath.RemoteLID, wire.REQPath.SetRemoteLID),
	fld("flow_label", 20, wire.REQPath.FlowLabel, wire.REQPath.SetFlowLabel),
	fld("packet_rate", 6, wire.REQPath.PacketRate, wire.REQPath.SetPacketRate),
	fld("traffic_class", 8, wire.REQPath.TrafficClass, wire.REQPath.SetTrafficClass),
	fld("hop_limit", 8, wire.REQPath.HopLimit, wire.REQPath.SetHopLimit),
	fld("sl", 4, wire.REQPath.SL, wire.REQPath.SetSL),
	flag("subnet_local", wire.REQPath.SubnetLocal, wire.REQPath.SetSubnetLocal),
	fld("local_ack_timeout", 5, wire.REQPath.LocalACKTimeout, wire.REQPath.SetLocalACKTimeout),
}

func reqPathFields(prefix string, path func(wire.REQ) wire.REQPath) []field {
	var fs []field
	for _, f := range pathFields {
		fs = append(fs, field{prefix + f.key, f.bits,
			func(b []byte) uint64 { return f.get(path(wire.REQ(b))) },
			func(b []byte, v uint64) { f.set(path(wire.REQ(b)), v) }})
	}
	return fs
}

func reqPathGIDs(prefix string, path func(wire.REQ) wire.REQPath) []gidField {
	return []gidField{
		{prefix + "local_gid", func(b []byte) wire.GID { return path(wire.REQ(b)).LocalGID() },
			func(b []byte, g wire.GID) { path(wire.REQ(b)).SetLocalGID(g) }},
		{prefix + "remote_gid", func(b []byte) wire.GID { return path(wire.REQ(b)).RemoteGID() },
			func(b []byte, g wire.GID) { path(wire.REQ(b)).SetRemoteGID(g) }},
	}
}

// cmMsg describes one CM message view for the table-driven tests.
type cmMsg struct {
	attr    wire.CMAttr
	parse   func([]byte) error
	fields  []field
	gids    []gidField
	private func(b []byte) []byte
	setPriv func(b []byte, p []byte) error
	privLen int
	bytes   []bytesField // other byte fields (REJ ARI)
}

type bytesField struct {
	key  string
	get  func(b []byte) []byte
	set  func(b []byte, p []byte) error
	size int
}

func parseErr[V any](f func([]byte) (V, error)) func([]byte) error {
	return func(b []byte) error { _, err := f(b); return err }
}

var cmMsgs = map[string]cmMsg{
	"REQ": {
		attr:  wire.CMAttrREQ,
		parse: parseErr(wire.ParseREQ),
		fields: append(append([]field{
			fld("local_comm_id", 32, wire.REQ.LocalCommID, wire.REQ.SetLocalCommID),
			fld("service_id", 64, wire.REQ.ServiceID, wire.REQ.SetServiceID),
			fld("local_ca_guid", 64, wire.REQ.LocalCAGUID, wire.REQ.SetLocalCAGUID),
			fld("local_qkey", 32, wire.REQ.LocalQKey, wire.REQ.SetLocalQKey),
			fld("local_qpn", 24, wire.REQ.LocalQPN, wire.REQ.SetLocalQPN),
			fld("responder_resources", 8, wire.REQ.ResponderResources, wire.REQ.SetResponderResources),
			fld("local_eecn", 24, wire.REQ.LocalEECN, wire.REQ.SetLocalEECN),
			fld("initiator_depth", 8, wire.REQ.InitiatorDepth, wire.REQ.SetInitiatorDepth),
			fld("remote_eecn", 24, wire.REQ.RemoteEECN, wire.REQ.SetRemoteEECN),
			fld("remote_cm_response_timeout", 5, wire.REQ.RemoteCMResponseTimeout, wire.REQ.SetRemoteCMResponseTimeout),
			fld("transport_service_type", 2, wire.REQ.TransportServiceType, wire.REQ.SetTransportServiceType),
			flag("end_to_end_flow_control", wire.REQ.EndToEndFlowControl, wire.REQ.SetEndToEndFlowControl),
			fld("starting_psn", 24, wire.REQ.StartingPSN, wire.REQ.SetStartingPSN),
			fld("local_cm_response_timeout", 5, wire.REQ.LocalCMResponseTimeout, wire.REQ.SetLocalCMResponseTimeout),
			fld("retry_count", 3, wire.REQ.RetryCount, wire.REQ.SetRetryCount),
			fld("pkey", 16, wire.REQ.PKey, wire.REQ.SetPKey),
			fld("path_mtu", 4, wire.REQ.PathMTU, wire.REQ.SetPathMTU),
			flag("rdc_exists", wire.REQ.RDCExists, wire.REQ.SetRDCExists),
			fld("rnr_retry_count", 3, wire.REQ.RNRRetryCount, wire.REQ.SetRNRRetryCount),
			fld("max_cm_retries", 4, wire.REQ.MaxCMRetries, wire.REQ.SetMaxCMRetries),
			flag("srq", wire.REQ.SRQ, wire.REQ.SetSRQ),
			fld("extended_transport_type", 3, wire.REQ.ExtendedTransportType, wire.REQ.SetExtendedTransportType),
			flag("sap_supported", wire.REQ.SAPSupported, wire.REQ.SetSAPSupported),
		}, reqPathFields("primary_", wire.REQ.Primary)...), reqPathFields("alternate_", wire.REQ.Alternate)...),
		gids:    append(reqPathGIDs("primary_", wire.REQ.Primary), reqPathGIDs("alternate_", wire.REQ.Alternate)...),
		private: func(b []byte) []byte { return wire.REQ(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.REQ(b).SetPrivateData(p) },
		privLen: wire.REQPrivateDataLen,
	},
	"REP": {
		attr:  wire.CMAttrREP,
		parse: parseErr(wire.ParseREP),
		fields: []field{
			fld("local_comm_id", 32, wire.REP.LocalCommID, wire.REP.SetLocalCommID),
			fld("remote_comm_id", 32, wire.REP.RemoteCommID, wire.REP.SetRemoteCommID),
			fld("local_qkey", 32, wire.REP.LocalQKey, wire.REP.SetLocalQKey),
			fld("local_qpn", 24, wire.REP.LocalQPN, wire.REP.SetLocalQPN),
			fld("local_eecn", 24, wire.REP.LocalEECN, wire.REP.SetLocalEECN),
			fld("starting_psn", 24, wire.REP.StartingPSN, wire.REP.SetStartingPSN),
			fld("responder_resources", 8, wire.REP.ResponderResources, wire.REP.SetResponderResources),
			fld("initiator_depth", 8, wire.REP.InitiatorDepth, wire.REP.SetInitiatorDepth),
			fld("target_ack_delay", 5, wire.REP.TargetACKDelay, wire.REP.SetTargetACKDelay),
			fld("failover_accepted", 2, wire.REP.FailoverAccepted, wire.REP.SetFailoverAccepted),
			flag("end_to_end_flow_control", wire.REP.EndToEndFlowControl, wire.REP.SetEndToEndFlowControl),
			fld("rnr_retry_count", 3, wire.REP.RNRRetryCount, wire.REP.SetRNRRetryCount),
			flag("srq", wire.REP.SRQ, wire.REP.SetSRQ),
			fld("local_ca_guid", 64, wire.REP.LocalCAGUID, wire.REP.SetLocalCAGUID),
		},
		private: func(b []byte) []byte { return wire.REP(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.REP(b).SetPrivateData(p) },
		privLen: wire.REPPrivateDataLen,
	},
	"RTU": {
		attr:  wire.CMAttrRTU,
		parse: parseErr(wire.ParseRTU),
		fields: []field{
			fld("local_comm_id", 32, wire.RTU.LocalCommID, wire.RTU.SetLocalCommID),
			fld("remote_comm_id", 32, wire.RTU.RemoteCommID, wire.RTU.SetRemoteCommID),
		},
		private: func(b []byte) []byte { return wire.RTU(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.RTU(b).SetPrivateData(p) },
		privLen: wire.RTUPrivateDataLen,
	},
	"REJ": {
		attr:  wire.CMAttrREJ,
		parse: parseErr(wire.ParseREJ),
		fields: []field{
			fld("local_comm_id", 32, wire.REJ.LocalCommID, wire.REJ.SetLocalCommID),
			fld("remote_comm_id", 32, wire.REJ.RemoteCommID, wire.REJ.SetRemoteCommID),
			fld("message_rejected", 2, wire.REJ.MessageRejected, wire.REJ.SetMessageRejected),
			fld("rejected_info_length", 7, wire.REJ.RejectedInfoLength, wire.REJ.SetRejectedInfoLength),
			fld("reason", 16, wire.REJ.Reason, wire.REJ.SetReason),
		},
		private: func(b []byte) []byte { return wire.REJ(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.REJ(b).SetPrivateData(p) },
		privLen: wire.REJPrivateDataLen,
		bytes: []bytesField{{"ari_hex", func(b []byte) []byte { return wire.REJ(b).ARI() },
			func(b, p []byte) error { return wire.REJ(b).SetARI(p) }, wire.REJARILen}},
	},
	"MRA": {
		attr:  wire.CMAttrMRA,
		parse: parseErr(wire.ParseMRA),
		fields: []field{
			fld("local_comm_id", 32, wire.MRA.LocalCommID, wire.MRA.SetLocalCommID),
			fld("remote_comm_id", 32, wire.MRA.RemoteCommID, wire.MRA.SetRemoteCommID),
			fld("message_mraed", 2, wire.MRA.MessageMRAed, wire.MRA.SetMessageMRAed),
			fld("service_timeout", 5, wire.MRA.ServiceTimeout, wire.MRA.SetServiceTimeout),
		},
		private: func(b []byte) []byte { return wire.MRA(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.MRA(b).SetPrivateData(p) },
		privLen: wire.MRAPrivateDataLen,
	},
	"DREQ": {
		attr:  wire.CMAttrDREQ,
		parse: parseErr(wire.ParseDREQ),
		fields: []field{
			fld("local_comm_id", 32, wire.DREQ.LocalCommID, wire.DREQ.SetLocalCommID),
			fld("remote_comm_id", 32, wire.DREQ.RemoteCommID, wire.DREQ.SetRemoteCommID),
			fld("remote_qpn", 24, wire.DREQ.RemoteQPN, wire.DREQ.SetRemoteQPN),
		},
		private: func(b []byte) []byte { return wire.DREQ(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.DREQ(b).SetPrivateData(p) },
		privLen: wire.DREQPrivateDataLen,
	},
	"DREP": {
		attr:  wire.CMAttrDREP,
		parse: parseErr(wire.ParseDREP),
		fields: []field{
			fld("local_comm_id", 32, wire.DREP.LocalCommID, wire.DREP.SetLocalCommID),
			fld("remote_comm_id", 32, wire.DREP.RemoteCommID, wire.DREP.SetRemoteCommID),
		},
		private: func(b []byte) []byte { return wire.DREP(b).PrivateData() },
		setPriv: func(b, p []byte) error { return wire.DREP(b).SetPrivateData(p) },
		privLen: wire.DREPPrivateDataLen,
	},
}

var madFields = []field{
	fld("base_version", 8, wire.MAD.BaseVersion, wire.MAD.SetBaseVersion),
	fld("mgmt_class", 8, wire.MAD.MgmtClass, wire.MAD.SetMgmtClass),
	fld("class_version", 8, wire.MAD.ClassVersion, wire.MAD.SetClassVersion),
	fld("method", 8, wire.MAD.Method, wire.MAD.SetMethod),
	fld("status", 16, wire.MAD.Status, wire.MAD.SetStatus),
	fld("class_specific", 16, wire.MAD.ClassSpecific, wire.MAD.SetClassSpecific),
	fld("tid", 64, wire.MAD.TID, wire.MAD.SetTID),
	fld("attr_id", 16, wire.MAD.AttrID, wire.MAD.SetAttrID),
	fld("resv", 16, wire.MAD.Resv, wire.MAD.SetResv),
	fld("attr_mod", 32, wire.MAD.AttrMod, wire.MAD.SetAttrMod),
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func widthMask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// fieldMask returns the bits a field's setter owns in a buffer of n bytes.
func fieldMask(f field, n int) []byte {
	b := make([]byte, n)
	f.set(b, ^uint64(0))
	return b
}

func popcount(b []byte) int {
	n := 0
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return n
}

// checkLayout checks that every field owns exactly its width in bits,
// that no two fields (numeric, GID, byte fields, private data) overlap,
// and that a setter changes only its own bits on a random background.
func checkLayout(t *testing.T, name string, size int, fields []field, extra [][2]int, rng *rand.Rand) {
	t.Helper()
	owner := make([]string, size*8)
	claim := func(key string, m []byte) {
		for i := range owner {
			if m[i/8]&(0x80>>(i%8)) == 0 {
				continue
			}
			if owner[i] != "" {
				t.Errorf("%s: %s and %s share byte %d bit %d", name, owner[i], key, i/8, i%8)
			}
			owner[i] = key
		}
	}
	for _, f := range fields {
		m := fieldMask(f, size)
		if popcount(m) != f.bits {
			t.Errorf("%s.%s: setter owns %d bits, want %d", name, f.key, popcount(m), f.bits)
		}
		claim(f.key, m)
		bg := randBytes(rng, size)
		after := append([]byte(nil), bg...)
		f.set(after, rng.Uint64())
		for i := range bg {
			if (bg[i]^after[i])&^m[i] != 0 {
				t.Errorf("%s.%s: setter changed byte %d outside the field", name, f.key, i)
			}
		}
	}
	for _, r := range extra { // byte ranges [off, off+len)
		m := make([]byte, size)
		for i := r[0]; i < r[0]+r[1]; i++ {
			m[i] = 0xff
		}
		claim("bytes", m)
	}
}

// roundTrip sets every field to a random value in random order on a
// random background and reads them all back.
func roundTrip(t *testing.T, name string, size int, fields []field, rng *rand.Rand) {
	t.Helper()
	for trial := 0; trial < 50; trial++ {
		b := randBytes(rng, size)
		want := make([]uint64, len(fields))
		for _, i := range rng.Perm(len(fields)) {
			v := rng.Uint64()
			fields[i].set(b, v)
			want[i] = v & widthMask(fields[i].bits)
		}
		for i, f := range fields {
			if got := f.get(b); got != want[i] {
				t.Fatalf("%s.%s: set %#x, got %#x", name, f.key, want[i], got)
			}
		}
	}
}

func TestMADRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	checkLayout(t, "MAD", wire.MADHdrLen, madFields, nil, rng)
	roundTrip(t, "MAD", wire.MADLen, madFields, rng)
	m := wire.MAD(randBytes(rng, wire.MADLen))
	m.InitCM(wire.CMAttrDREQ, 0x1122334455667788)
	if err := m.CheckCM(); err != nil {
		t.Fatal(err)
	}
	if m.Method() != wire.MethodSend || m.IsResponse() || m.AttrID() != uint16(wire.CMAttrDREQ) || m.TID() != 0x1122334455667788 ||
		m.Status() != 0 || m.AttrMod() != 0 || !bytes.Equal(m.Data(), make([]byte, wire.MADDataLen)) {
		t.Fatalf("InitCM: %v", m)
	}
	m.SetMethod(wire.MethodGetResp)
	if !m.IsResponse() {
		t.Fatal("GetResp is not a response")
	}
	m.SetClassVersion(1)
	if m.CheckCM() == nil {
		t.Fatal("CheckCM accepted class version 1")
	}
	if _, err := wire.ParseMAD(make([]byte, wire.MADLen-1)); !errors.Is(err, wire.ErrShort) {
		t.Fatalf("ParseMAD(255 bytes): %v", err)
	}
	if mm, err := wire.ParseMAD(make([]byte, 300)); err != nil || len(mm) != wire.MADLen {
		t.Fatalf("ParseMAD(300 bytes): %d, %v", len(mm), err)
	}
	if s := m.String(); !strings.Contains(s, "DREQ") {
		t.Errorf("String %q", s)
	}
}

func TestCMRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for name, msg := range cmMsgs {
		t.Run(name, func(t *testing.T) {
			b := make([]byte, wire.CMDataLen)
			if p := msg.private(b); len(p) != msg.privLen || &p[len(p)-1] != &b[len(b)-1] {
				t.Fatalf("private data is %d bytes, want %d at the end", len(p), msg.privLen)
			}
			extra := [][2]int{{wire.CMDataLen - msg.privLen, msg.privLen}}
			// GIDs as byte ranges: find them by setting all ones.
			for _, g := range msg.gids {
				z := make([]byte, wire.CMDataLen)
				var ones wire.GID
				for i := range ones {
					ones[i] = 0xff
				}
				g.set(z, ones)
				off := bytes.IndexByte(z, 0xff)
				if off < 0 || popcount(z) != 128 {
					t.Fatalf("%s: GID setter wrote %d bits", g.key, popcount(z))
				}
				extra = append(extra, [2]int{off, 16})
			}
			for _, bf := range msg.bytes {
				z := make([]byte, wire.CMDataLen)
				if err := bf.set(z, bytes.Repeat([]byte{0xff}, bf.size)); err != nil {
					t.Fatal(err)
				}
				extra = append(extra, [2]int{bytes.IndexByte(z, 0xff), bf.size})
			}
			checkLayout(t, name, wire.CMDataLen, msg.fields, extra, rng)
			roundTrip(t, name, wire.CMDataLen, msg.fields, rng)

			for trial := 0; trial < 20; trial++ {
				b := randBytes(rng, wire.CMDataLen)
				for _, g := range msg.gids {
					want := wire.GID(randBytes(rng, 16))
					g.set(b, want)
					if got := g.get(b); got != want {
						t.Fatalf("%s: set %v, got %v", g.key, want, got)
					}
				}
				p := randBytes(rng, rng.IntN(msg.privLen+1))
				if err := msg.setPriv(b, p); err != nil {
					t.Fatal(err)
				}
				got := msg.private(b)
				if !bytes.Equal(got[:len(p)], p) || !bytes.Equal(got[len(p):], make([]byte, msg.privLen-len(p))) {
					t.Fatalf("SetPrivateData(%d bytes) read back %x", len(p), got)
				}
				for _, bf := range msg.bytes {
					p := randBytes(rng, rng.IntN(bf.size+1))
					if err := bf.set(b, p); err != nil {
						t.Fatal(err)
					}
					got := bf.get(b)
					if !bytes.Equal(got[:len(p)], p) || !bytes.Equal(got[len(p):], make([]byte, bf.size-len(p))) {
						t.Fatalf("%s: set %d bytes, read back %x", bf.key, len(p), got)
					}
				}
			}
			if err := msg.setPriv(b, make([]byte, msg.privLen+1)); err == nil {
				t.Error("SetPrivateData accepted one byte too many")
			}
			for _, bf := range msg.bytes {
				if err := bf.set(b, make([]byte, bf.size+1)); err == nil {
					t.Errorf("%s: accepted one byte too many", bf.key)
				}
			}
			if err := msg.parse(make([]byte, wire.CMDataLen-1)); !errors.Is(err, wire.ErrShort) {
				t.Errorf("parse of %d bytes: %v", wire.CMDataLen-1, err)
			}
			if err := msg.parse(make([]byte, wire.CMDataLen)); err != nil {
				t.Errorf("parse of %d bytes: %v", wire.CMDataLen, err)
			}
		})
	}
}

// TestREJARISetsLength checks that SetARI also sets RejectedInfoLength.
func TestREJARISetsLength(t *testing.T) {
	r := wire.REJ(make([]byte, wire.CMDataLen))
	if err := r.SetARI([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if r.RejectedInfoLength() != 3 {
		t.Fatalf("RejectedInfoLength %d", r.RejectedInfoLength())
	}
}

func TestREJReasonString(t *testing.T) {
	tests := []struct {
		r    wire.REJReason
		want string
	}{
		{wire.REJNoQP, "no QP"},
		{wire.REJInvalidServiceID, "invalid service ID"},
		{wire.REJStaleConn, "stale conn"},
		{wire.REJConsumerDefined, "consumer defined"},
		{wire.REJDuplicateLocalCommID, "duplicate local comm ID"},
		{wire.REJVendorOptionNotSupported, "vendor option is not supported"},
		{34, "REJ reason 34"},
		{0, "REJ reason 0"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("REJReason(%d) = %q, want %q", uint16(tt.r), got, tt.want)
		}
	}
	for r := wire.REJReason(1); r <= 33; r++ {
		if strings.HasPrefix(r.String(), "REJ reason") {
			t.Errorf("reason %d has no name", r)
		}
	}
}

func TestCMAttrString(t *testing.T) {
	tests := []struct {
		a    wire.CMAttr
		want string
	}{
		{wire.CMAttrClassPortInfo, "ClassPortInfo"}, {wire.CMAttrREQ, "REQ"}, {wire.CMAttrMRA, "MRA"},
		{wire.CMAttrREJ, "REJ"}, {wire.CMAttrREP, "REP"}, {wire.CMAttrRTU, "RTU"}, {wire.CMAttrDREQ, "DREQ"},
		{wire.CMAttrDREP, "DREP"}, {wire.CMAttrSIDRREQ, "SIDR_REQ"}, {wire.CMAttrSIDRREP, "SIDR_REP"},
		{wire.CMAttrLAP, "LAP"}, {wire.CMAttrAPR, "APR"}, {0x0020, "attr 0x0020"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("CMAttr(%#x) = %q, want %q", uint16(tt.a), got, tt.want)
		}
	}
}

func TestCMHelpers(t *testing.T) {
	for _, tt := range []struct {
		n    int
		code uint8
	}{{256, 1}, {512, 2}, {1024, 3}, {2048, 4}, {4096, 5}} {
		if got := wire.MTUCode(tt.n); got != tt.code {
			t.Errorf("MTUCode(%d) = %d", tt.n, got)
		}
		if got := wire.MTUFromCode(tt.code); got != tt.n {
			t.Errorf("MTUFromCode(%d) = %d", tt.code, got)
		}
	}
	if wire.MTUCode(1500) != 0 || wire.MTUFromCode(0) != 0 || wire.MTUFromCode(6) != 0 {
		t.Error("invalid MTUs accepted")
	}
	if got := wire.CMTimeout(0); got != 4096*time.Nanosecond {
		t.Errorf("CMTimeout(0) = %v", got)
	}
	if got := wire.CMTimeout(20); got != 4096*time.Nanosecond<<20 { // Linux CMA_CM_RESPONSE_TIMEOUT: ~4.3 s
		t.Errorf("CMTimeout(20) = %v", got)
	}
	if wire.CMMessageREP.String() != "REP" || wire.CMMessage(3).String() != "CMMessage(3)" {
		t.Error("CMMessage.String")
	}
}

// TestGoldenCM decodes every CM MAD of the kernel captures and compares
// every field the oracle lists; it fails on oracle keys it does not check.
func TestGoldenCM(t *testing.T) {
	handled := map[string]bool{"kind": true, "frame": true, "src": true, "dst": true, "mad": true, "msg": true,
		"private_data_hex": true, "cma_hdr": true,
		// The NVMe/RDMA private data after cma_hdr is fabrics/rdma's business.
		"nvme_rdma_cm_req": true, "nvme_rdma_cm_rep": true, "nvme_rdma_cm_rej": true}
	seen := map[string]int{}
	for _, name := range []string{"kernel-nvme-rdma-rxe", "rxe-icrc-probe"} {
		frames, err := capture.Load(name + ".pcapng.gz")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := capture.LoadOracle(name + ".decoded.jsonl.gz")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind != "cm" {
				continue
			}
			o := decodeNumbers(t, r.Raw)
			frame := int(num(t, o, "frame"))
			seen[str(t, o, "msg")]++
			t.Run(name+"/"+str(t, o, "msg"), func(t *testing.T) {
				checkGoldenCM(t, frames[frame-1], o, handled)
			})
		}
	}
	want := map[string]int{"REQ": 5, "REP": 4, "RTU": 3, "REJ": 1, "DREQ": 3, "DREP": 3}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%d %s records, want %d (seen %v)", seen[k], k, v, seen)
		}
	}
}

func checkGoldenCM(t *testing.T, f capture.Frame, o map[string]any, handled map[string]bool) {
	frame := num(t, o, "frame")
	var p wire.Packet
	if err := p.Parse(f.Payload); err != nil {
		t.Fatalf("frame %d: %v", frame, err)
	}
	if p.Opcode() != wire.UDSendOnly || p.BTH.DestQP() != wire.GSIQPN || p.DETH.QKey() != wire.GSIQKey {
		t.Errorf("frame %d: %v qkey %#x: not a GSI MAD", frame, p.BTH, p.DETH.QKey())
	}
	m, err := wire.ParseMAD(p.Payload)
	if err != nil {
		t.Fatalf("frame %d: %v", frame, err)
	}
	if err := m.CheckCM(); err != nil {
		t.Errorf("frame %d: %v", frame, err)
	}
	mad := o["mad"].(map[string]any)
	for _, fl := range madFields {
		v, ok := mad[fl.key]
		if !ok {
			if fl.key == "resv" {
				continue // the oracle does not list the reserved field
			}
			t.Errorf("frame %d: oracle mad lacks %s", frame, fl.key)
			continue
		}
		if got, want := fl.get(m), toUint(t, v); got != want {
			t.Errorf("frame %d: mad.%s = %#x, oracle %#x", frame, fl.key, got, want)
		}
	}
	if len(mad) != len(madFields)-1 {
		t.Errorf("frame %d: oracle mad has %d keys, we check %d", frame, len(mad), len(madFields)-1)
	}
	msgName := str(t, o, "msg")
	if got := wire.CMAttr(m.AttrID()).String(); got != msgName {
		t.Errorf("frame %d: attribute %q, oracle %q", frame, got, msgName)
	}
	msg, ok := cmMsgs[msgName]
	if !ok {
		t.Fatalf("frame %d: no table for %s", frame, msgName)
	}
	data := m.Data()
	if err := msg.parse(data); err != nil {
		t.Fatalf("frame %d: %v", frame, err)
	}
	checked := map[string]bool{}
	for _, fl := range msg.fields {
		checked[fl.key] = true
		v, ok := o[fl.key]
		if !ok {
			t.Errorf("frame %d: oracle %s lacks %s", frame, msgName, fl.key)
			continue
		}
		if got, want := fl.get(data), toUint(t, v); got != want {
			t.Errorf("frame %d: %s.%s = %#x, oracle %#x", frame, msgName, fl.key, got, want)
		}
	}
	for _, g := range msg.gids {
		checked[g.key] = true
		if got, want := g.get(data).String(), str(t, o, g.key); got != want {
			t.Errorf("frame %d: %s.%s = %s, oracle %s", frame, msgName, g.key, got, want)
		}
	}
	for _, bf := range msg.bytes {
		checked[bf.key] = true
		if got, want := hex.EncodeToString(bf.get(data)), str(t, o, bf.key); got != want {
			t.Errorf("frame %d: %s.%s = %s, oracle %s", frame, msgName, bf.key, got, want)
		}
	}
	if got, want := hex.EncodeToString(msg.private(data)), str(t, o, "private_data_hex"); got != want {
		t.Errorf("frame %d: private data %s, oracle %s", frame, got, want)
	}
	for k := range o {
		if !checked[k] && !handled[k] {
			t.Errorf("frame %d: oracle key %q is not checked", frame, k)
		}
	}
	if msgName == "REQ" {
		checkGoldenREQ(t, wire.REQ(data), o)
	}
}

func checkGoldenREQ(t *testing.T, req wire.REQ, o map[string]any) {
	frame := num(t, o, "frame")
	// On RoCE the primary path GIDs are the IP addresses of the exchange.
	if got := req.Primary().LocalGID().Addr().String(); got != str(t, o, "src") {
		t.Errorf("frame %d: primary local GID %s, IP source %s", frame, got, str(t, o, "src"))
	}
	if !req.Alternate().LocalGID().IsZero() {
		t.Errorf("frame %d: alternate path present", frame)
	}
	port, ok := wire.PortFromServiceID(req.ServiceID())
	ch, hasCMA := o["cma_hdr"].(map[string]any)
	if ok != hasCMA || port != 4420 {
		t.Fatalf("frame %d: service ID %#x: port %d %t, oracle cma_hdr %t", frame, req.ServiceID(), port, ok, hasCMA)
	}
	h, err := wire.ParseCMAHdr(req.PrivateData())
	if err != nil {
		t.Fatalf("frame %d: %v", frame, err)
	}
	nums := []struct {
		key string
		got uint64
	}{
		{"cma_version", uint64(h.Version())}, {"ip_version", uint64(h.IPVersion())}, {"port", uint64(h.Port())},
	}
	for _, n := range nums {
		if want := toUint(t, ch[n.key]); n.got != want {
			t.Errorf("frame %d: cma_hdr.%s = %d, oracle %d", frame, n.key, n.got, want)
		}
	}
	if got, want := h.SrcAddr().String(), ch["src_ip"]; got != want {
		t.Errorf("frame %d: cma_hdr.src_ip %s, oracle %v", frame, got, want)
	}
	if got, want := h.DstAddr().String(), ch["dst_ip"]; got != want {
		t.Errorf("frame %d: cma_hdr.dst_ip %s, oracle %v", frame, got, want)
	}
	if len(ch) != 5 {
		t.Errorf("frame %d: oracle cma_hdr has %d keys, we check 5", frame, len(ch))
	}
	if h.SrcAddr() != req.Primary().LocalGID().Addr() || h.DstAddr() != req.Primary().RemoteGID().Addr() {
		t.Errorf("frame %d: cma_hdr addresses %v differ from the path GIDs", frame, h)
	}
}

func decodeNumbers(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var o map[string]any
	if err := d.Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

func toUint(t *testing.T, v any) uint64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("oracle value %v (%T) is not a number", v, v)
	}
	var u uint64
	if err := json.Unmarshal([]byte(n), &u); err != nil {
		t.Fatalf("oracle number %s: %v", n, err)
	}
	return u
}

func num(t *testing.T, o map[string]any, key string) uint64 { t.Helper(); return toUint(t, o[key]) }

func str(t *testing.T, o map[string]any, key string) string {
	t.Helper()
	s, ok := o[key].(string)
	if !ok {
		t.Fatalf("oracle %s = %v is not a string", key, o[key])
	}
	return s
}

// FuzzCM feeds arbitrary bytes to the MAD and CM decoders; whatever
// decodes must re-encode through the setters to the same field values.
func FuzzCM(f *testing.F) {
	for _, name := range []string{"kernel-nvme-rdma-rxe", "rxe-icrc-probe"} {
		frames, err := capture.Load(name + ".pcapng.gz")
		if err != nil {
			f.Fatal(err)
		}
		for _, fr := range frames {
			if fr.IsRoCEv2() && len(fr.Payload) >= 20+wire.MADLen && fr.Payload[0] == byte(wire.UDSendOnly) {
				f.Add(fr.Payload[20 : 20+wire.MADLen])
			}
		}
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wire.ParseMAD(b)
		if err != nil {
			if len(b) >= wire.MADLen {
				t.Fatal(err)
			}
			return
		}
		_ = m.String()
		_ = m.CheckCM()
		_ = wire.CMAttr(m.AttrID()).String()
		out := make([]byte, wire.MADLen)
		for _, fl := range madFields {
			fl.set(out, fl.get(m))
		}
		for _, fl := range madFields {
			if fl.get(out) != fl.get(m) {
				t.Fatalf("mad.%s does not round-trip", fl.key)
			}
		}
		for name, msg := range cmMsgs {
			data := m.Data()
			if err := msg.parse(data); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			enc := make([]byte, wire.CMDataLen)
			for _, bf := range msg.bytes { // before the fields: SetARI sets the REJ info length
				if err := bf.set(enc, bf.get(data)); err != nil {
					t.Fatal(err)
				}
			}
			for _, fl := range msg.fields {
				fl.set(enc, fl.get(data))
			}
			for _, g := range msg.gids {
				g.set(enc, g.get(data))
				_ = g.get(data).String()
			}
			if err := msg.setPriv(enc, msg.private(data)); err != nil {
				t.Fatal(err)
			}
			for _, fl := range msg.fields {
				if fl.get(enc) != fl.get(data) {
					t.Fatalf("%s.%s does not round-trip", name, fl.key)
				}
			}
			for _, g := range msg.gids {
				if g.get(enc) != g.get(data) {
					t.Fatalf("%s.%s does not round-trip", name, g.key)
				}
			}
			if !bytes.Equal(msg.private(enc), msg.private(data)) {
				t.Fatalf("%s private data does not round-trip", name)
			}
		}
		if h, err := wire.ParseCMAHdr(wire.REQ(m.Data()).PrivateData()); err == nil {
			_ = h.String()
		}
	})
}

func TestGID(t *testing.T) {
	tests := []struct {
		addr, str string
	}{
		{"192.0.2.1", "::ffff:192.0.2.1"},
		{"127.0.0.2", "::ffff:127.0.0.2"},
		{"2001:db8::1", "2001:db8::1"},
		{"fe80::1", "fe80::1"},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		g := wire.GIDFromAddr(a)
		if got := g.String(); got != tt.str {
			t.Errorf("GID(%s) = %s, want %s", tt.addr, got, tt.str)
		}
		if got := g.Addr(); got != a {
			t.Errorf("GID(%s).Addr() = %s", tt.addr, got)
		}
		if g.IsZero() {
			t.Errorf("GID(%s) is zero", tt.addr)
		}
	}
	g := wire.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))
	if want := (wire.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}); g != want {
		t.Errorf("IPv4-mapped GID bytes %x", g)
	}
	if z := wire.GIDFromAddr(netip.Addr{}); !z.IsZero() || z.String() != "::" {
		t.Errorf("zero GID %v", z)
	}
	if g := wire.GIDFromAddr(netip.MustParseAddr("fe80::1%eth0")); g.String() != "fe80::1" {
		t.Errorf("zoned address GID %v", g)
	}
}
