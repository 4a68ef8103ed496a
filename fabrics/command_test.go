package fabrics

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The I/O queue Connect of testdata/pcap/kernel-nvme-rdma-rxe (the SQE
// bytes of frame 170 in the capture README's hex dump).
func TestConnectCommandFromCapture(t *testing.T) {
	// Frame 170: I/O queue Connect, cid 0, qid 1, sqsize 127, in-capsule SGL.
	sqe := mustHex(t, "7f40000001000000000000000000000000000000000000000000000000000000"+
		"0004000000000001"+"000001007f000000"+"00000000000000000000000000000000")
	c, err := ParseCommand(sqe)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Connect()
	if c.FCType() != FCTypeConnect || c.CID() != 0 || c.PSDT() != 1 || cc.RecFmt() != 0 || cc.QID() != 1 ||
		cc.SQSize() != 127 || cc.CAttr() != 0 || cc.KATO() != 0 {
		t.Errorf("Connect: fctype %v cid %d psdt %d recfmt %d qid %d sqsize %d cattr %d kato %d",
			c.FCType(), c.CID(), c.PSDT(), cc.RecFmt(), cc.QID(), cc.SQSize(), cc.CAttr(), cc.KATO())
	}
	if s := c.SGL1(); !s.InCapsule() || s.Address() != 0 || s.Length() != 1024 {
		t.Errorf("SGL1 %v", s)
	}
}

func TestCommandSetters(t *testing.T) {
	c := NewCommand(FCTypeConnect)
	c.SetCID(0x1234)
	c.SetPSDT(1)
	cc := c.Connect()
	cc.SetRecFmt(0)
	cc.SetQID(3)
	cc.SetSQSize(127)
	cc.SetCAttr(4)
	cc.SetKATO(120000)
	c.SGL1().PutInCapsule(0, ConnectDataLen)
	p, err := ParseCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.CID() != 0x1234 || p.PSDT() != 1 || p.Connect().QID() != 3 || p.Connect().SQSize() != 127 ||
		p.Connect().CAttr() != 4 || p.Connect().KATO() != 120000 || !p.SGL1().InCapsule() {
		t.Errorf("round trip: % x", []byte(p))
	}
	if got := nvme.SQE(c).CID(); got != 0x1234 {
		t.Errorf("nvme.SQE CID %#x", got)
	}

	ps := NewCommand(FCTypePropertySet).PropertySet()
	ps.SetAttrib(PropertyAttrib8)
	ps.SetOffset(PropCC)
	ps.SetValue(0x460061)
	if ps.Attrib() != 1 || ps.Size() != 8 || ps.Offset() != 0x14 || ps.Value() != 0x460061 {
		t.Errorf("Property Set % x", []byte(ps))
	}
	pg := NewCommand(FCTypePropertyGet).PropertyGet()
	pg.SetAttrib(AttribForSize(4))
	pg.SetOffset(PropCSTS)
	if pg.Size() != 4 || pg.Offset() != PropCSTS {
		t.Errorf("Property Get % x", []byte(pg))
	}
	a := NewCommand(FCTypeAuthSend).Auth()
	a.SetSPSP0(1)
	a.SetSPSP1(2)
	a.SetSECP(SECPNVMeAuth)
	a.SetTL(512)
	if a.SPSP0() != 1 || a.SPSP1() != 2 || a.SECP() != 0xe9 || a.TL() != 512 || a.AL() != 512 {
		t.Errorf("Auth % x", []byte(a))
	}
	a.SetAL(9)
	if a[44] != 9 {
		t.Errorf("AL at byte 44: % x", []byte(a[40:48]))
	}
	dc := NewCommand(FCTypeDisconnect).Disconnect()
	dc.SetRecFmt(0)
	if dc.RecFmt() != 0 || dc[0] != OpcodeFabrics || dc[4] != 8 {
		t.Errorf("Disconnect % x", []byte(dc))
	}
}

func TestParseCommandErrors(t *testing.T) {
	if _, err := ParseCommand(make([]byte, 63)); !errors.Is(err, ErrShort) {
		t.Errorf("63 bytes: %v", err)
	}
	b := make([]byte, 64)
	b[0] = 0x06
	if _, err := ParseCommand(b); err == nil {
		t.Error("Identify accepted as a Fabrics command")
	}
}

func TestFCTypeNames(t *testing.T) {
	tests := []struct {
		t    FCType
		name string
		dir  DataDirection
	}{
		{FCTypePropertySet, "Property Set", DirNone},
		{FCTypeConnect, "Connect", DirHostToCtrl},
		{FCTypePropertyGet, "Property Get", DirNone},
		{FCTypeAuthSend, "Authentication Send", DirHostToCtrl},
		{FCTypeAuthReceive, "Authentication Receive", DirCtrlToHost},
		{FCTypeDisconnect, "Disconnect", DirNone},
		{0x7, "FCType 0x07", DirBidirectional},
	}
	for _, tt := range tests {
		if tt.t.String() != tt.name || tt.t.Direction() != tt.dir {
			t.Errorf("%#x: %q %v, want %q %v", uint8(tt.t), tt.t, tt.t.Direction(), tt.name, tt.dir)
		}
	}
}

func TestPropertyGetValue(t *testing.T) {
	// CAP of the kernel RDMA target: dw0 0x0f00007f, dw1 0x820.
	v := PropertyGetValue(0x0f00007f, 0x820)
	if v != 0x00000820_0f00007f {
		t.Fatalf("%#x", v)
	}
	if lo, hi := PropertyGetResult(v); lo != 0x0f00007f || hi != 0x820 {
		t.Errorf("PropertyGetResult %#x %#x", lo, hi)
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		s    nvme.Status
		name string
	}{
		{StatusConnectIncompatibleFormat, "Connect Incompatible Format"},
		{StatusConnectControllerBusy, "Connect Controller Busy"},
		{StatusConnectInvalidParameters, "Connect Invalid Parameters"},
		{StatusConnectRestartDiscovery, "Connect Restart Discovery"},
		{StatusConnectInvalidHost, "Connect Invalid Host"},
		{StatusInvalidQueueType, "Invalid Queue Type"},
		{StatusDiscoverRestart, "Discover Restart"},
		{StatusAuthenticationRequired, "Authentication Required"},
		{nvme.StatusInvalidField, nvme.StatusInvalidField.Name()},
	}
	for _, tt := range tests {
		if got := StatusName(tt.s); got != tt.name {
			t.Errorf("%#x: %q, want %q", uint16(tt.s), got, tt.name)
		}
	}
	if StatusConnectInvalidParameters.SCT() != nvme.SCTCommandSpecific || StatusConnectInvalidParameters.SC() != 0x82 {
		t.Error("Connect Invalid Parameters is not SCT 1 SC 0x82")
	}
	if got := StatusString(StatusConnectInvalidHost); got != "Connect Invalid Host (SCT 1 SC 0x84)" {
		t.Errorf("StatusString %q", got)
	}
}

func TestConnectResult(t *testing.T) {
	if dw0 := ConnectResultDW0(1, 0); dw0 != 1 || ConnectResultCntlID(dw0) != 1 || ConnectResultAuthReq(dw0) != 0 {
		t.Errorf("dw0 %#x", dw0)
	}
	if dw0 := ConnectResultDW0(0x1234, 2); dw0 != 0x21234 || ConnectResultAuthReq(dw0) != 2 {
		t.Errorf("dw0 %#x", dw0)
	}
	// Linux IPO_IATTR_CONNECT_DATA(cntlid) and IPO_IATTR_CONNECT_SQE(qid).
	tests := []struct {
		p    InvalidParam
		dw0  uint32
		text string
	}{
		{InvalidParam{InData: true, Offset: ConnectDataOffCntlID}, 0x10010, "Connect data byte 16"},
		{InvalidParam{InData: true, Offset: ConnectDataOffSubNQN}, 0x10100, "Connect data byte 256"},
		{InvalidParam{InData: true, Offset: ConnectDataOffHostNQN}, 0x10200, "Connect data byte 512"},
		{InvalidParam{Offset: ConnectOffQID}, 42, "Connect SQE byte 42"},
		{InvalidParam{Offset: ConnectOffSQSize}, 44, "Connect SQE byte 44"},
	}
	for _, tt := range tests {
		if got := tt.p.DW0(); got != tt.dw0 {
			t.Errorf("%v: dw0 %#x, want %#x", tt.p, got, tt.dw0)
		}
		if got := ParseInvalidParam(tt.dw0); got != tt.p || got.String() != tt.text {
			t.Errorf("%#x: %+v %q", tt.dw0, got, got)
		}
	}
}
