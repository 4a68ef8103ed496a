package nvme_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

// leAt returns size zero bytes with v stored little-endian in width bytes at off.
func leAt(size, off, width int, v uint64) []byte {
	b := make([]byte, size)
	for i := 0; i < width; i++ {
		b[off+i] = byte(v >> (8 * i))
	}
	return b
}

func TestSQEFields(t *testing.T) {
	tests := []struct {
		name  string
		off   int
		width int
		v     uint64
		set   func(nvme.SQE, uint64)
		get   func(nvme.SQE) uint64
	}{
		{"Opcode", 0, 1, 0x7f, func(s nvme.SQE, v uint64) { s.SetOpcode(uint8(v)) }, func(s nvme.SQE) uint64 { return uint64(s.Opcode()) }},
		{"CID", 2, 2, 0xbeef, func(s nvme.SQE, v uint64) { s.SetCID(uint16(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CID()) }},
		{"NSID", 4, 4, 0xffffffff, func(s nvme.SQE, v uint64) { s.SetNSID(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.NSID()) }},
		{"CDW2", 8, 4, 0x01020304, func(s nvme.SQE, v uint64) { s.SetCDW2(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW2()) }},
		{"CDW3", 12, 4, 0x05060708, func(s nvme.SQE, v uint64) { s.SetCDW3(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW3()) }},
		{"MPTR", 16, 8, 0x1122334455667788, func(s nvme.SQE, v uint64) { s.SetMPTR(v) }, func(s nvme.SQE) uint64 { return s.MPTR() }},
		{"PRP1", 24, 8, 0xff00ff00ff00ff00, func(s nvme.SQE, v uint64) { s.SetPRP1(v) }, func(s nvme.SQE) uint64 { return s.PRP1() }},
		{"PRP2", 32, 8, 0x0102030405060708, func(s nvme.SQE, v uint64) { s.SetPRP2(v) }, func(s nvme.SQE) uint64 { return s.PRP2() }},
		{"CDW10", 40, 4, 0xa0a0a0a1, func(s nvme.SQE, v uint64) { s.SetCDW10(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW10()) }},
		{"CDW11", 44, 4, 0xa0a0a0a2, func(s nvme.SQE, v uint64) { s.SetCDW11(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW11()) }},
		{"CDW12", 48, 4, 0xa0a0a0a3, func(s nvme.SQE, v uint64) { s.SetCDW12(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW12()) }},
		{"CDW13", 52, 4, 0xa0a0a0a4, func(s nvme.SQE, v uint64) { s.SetCDW13(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW13()) }},
		{"CDW14", 56, 4, 0xa0a0a0a5, func(s nvme.SQE, v uint64) { s.SetCDW14(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW14()) }},
		{"CDW15", 60, 4, 0xa0a0a0a6, func(s nvme.SQE, v uint64) { s.SetCDW15(uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW15()) }},
		{"CDW(13)", 52, 4, 0x12345678, func(s nvme.SQE, v uint64) { s.SetCDW(13, uint32(v)) }, func(s nvme.SQE) uint64 { return uint64(s.CDW(13)) }},
		{"Fuse", 1, 1, 0x02, func(s nvme.SQE, v uint64) { s.SetFuse(nvme.Fuse(v)) }, func(s nvme.SQE) uint64 { return uint64(s.Fuse()) }},
		{"PSDT", 1, 1, 0x40, func(s nvme.SQE, v uint64) { s.SetPSDT(nvme.PSDT(v >> 6)) }, func(s nvme.SQE) uint64 { return uint64(s.PSDT()) << 6 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := nvme.NewSQE()
			tt.set(s, tt.v)
			if want := leAt(nvme.SQESize, tt.off, tt.width, tt.v); !bytes.Equal(s, want) {
				t.Errorf("bytes % x\nwant  % x", []byte(s), want)
			}
			if got := tt.get(s); got != tt.v {
				t.Errorf("got 0x%x, want 0x%x", got, tt.v)
			}
		})
	}
}

func TestSQEFlags(t *testing.T) {
	s := nvme.NewSQE()
	s.SetFuse(nvme.FuseSecond)
	s.SetPSDT(nvme.PSDTSGLMPTRAddress)
	if s[1] != 0x42 || s.Fuse() != nvme.FuseSecond || s.PSDT() != nvme.PSDTSGLMPTRAddress || s.Flags() != 0x42 {
		t.Fatalf("flags byte 0x%02x, fuse %d psdt %d", s[1], s.Fuse(), s.PSDT())
	}
	s.SetFuse(nvme.FuseNone)
	if s[1] != 0x40 {
		t.Fatalf("SetFuse(0) left 0x%02x", s[1])
	}
	s.SetFlags(0xc3)
	if s.Fuse() != 3 || s.PSDT() != 3 {
		t.Fatalf("fuse %d psdt %d from 0xc3", s.Fuse(), s.PSDT())
	}
}

func TestSQEDPTRIsAView(t *testing.T) {
	buf := make([]byte, 100) // SQE plus in-capsule data
	s, err := nvme.ParseSQE(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != nvme.SQESize || cap(s) != nvme.SQESize {
		t.Fatalf("ParseSQE returned len %d cap %d", len(s), cap(s))
	}
	sgl := s.SGL1()
	if len(sgl) != 16 || cap(sgl) != 16 {
		t.Fatalf("SGL1 len %d cap %d", len(sgl), cap(sgl))
	}
	sgl[15] = 0x40 // keyed data block descriptor type
	binary.LittleEndian.PutUint64(sgl, 0xdeadbeef)
	if buf[39] != 0x40 || s.PRP1() != 0xdeadbeef {
		t.Fatalf("SGL1 writes did not reach the SQE")
	}
	if _, err := nvme.ParseSQE(buf[:63]); !errors.Is(err, nvme.ErrTruncated) {
		t.Fatalf("ParseSQE(63 bytes) = %v", err)
	}
	s.Clear()
	if !bytes.Equal(buf[:64], make([]byte, 64)) {
		t.Fatal("Clear left bytes")
	}
	if got := nvme.SQE(buf[:10]).String(); got != "SQE(10 bytes)" {
		t.Errorf("String of a short SQE: %q", got)
	}
}

func TestRWCommand(t *testing.T) {
	tests := []struct {
		name         string
		slba         uint64
		blocks       uint32
		fua, lr      bool
		deac, stc    bool
		prinfo       uint8
		dtype        uint8
		dsm          uint8
		dspec        uint16
		cdw10, cdw11 uint32
		cdw12, cdw13 uint32
	}{
		{name: "one block", slba: 0, blocks: 1, cdw12: 0},
		{name: "64 KiB at 8 MiB", slba: 16384, blocks: 128, cdw10: 16384, cdw12: 127},
		{name: "high LBA", slba: 0x1_0000_0002, blocks: 65536, cdw10: 2, cdw11: 1, cdw12: 0xffff},
		{name: "FUA", slba: 7, blocks: 8, fua: true, cdw10: 7, cdw12: 1<<30 | 7},
		{name: "LR PRINFO", blocks: 2, lr: true, prinfo: 0xf, cdw12: 1<<31 | 0xf<<26 | 1},
		{name: "DEAC STC DTYPE", blocks: 1, deac: true, stc: true, dtype: 1, cdw12: 1<<25 | 1<<24 | 1<<20},
		{name: "DSM DSPEC", blocks: 1, dsm: 0x5, dspec: 0xabcd, cdw13: 0xabcd<<16 | 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nvme.RWCommand{SQE: nvme.NewSQE()}
			c.SetOpcode(uint8(nvme.IOWrite))
			c.SetSLBA(tt.slba)
			if err := c.SetBlocks(tt.blocks); err != nil {
				t.Fatal(err)
			}
			c.SetFUA(tt.fua)
			c.SetLR(tt.lr)
			c.SetDEAC(tt.deac)
			c.SetSTC(tt.stc)
			c.SetPRINFO(tt.prinfo)
			c.SetDTYPE(tt.dtype)
			c.SetDSM(tt.dsm)
			c.SetDSPEC(tt.dspec)
			if c.CDW10() != tt.cdw10 || c.CDW11() != tt.cdw11 || c.CDW12() != tt.cdw12 || c.CDW13() != tt.cdw13 {
				t.Errorf("CDW10-13 = %#x %#x %#x %#x, want %#x %#x %#x %#x", c.CDW10(), c.CDW11(), c.CDW12(), c.CDW13(), tt.cdw10, tt.cdw11, tt.cdw12, tt.cdw13)
			}
			if c.SLBA() != tt.slba || c.Blocks() != tt.blocks || c.NLB() != uint16(tt.blocks-1) || c.FUA() != tt.fua ||
				c.LR() != tt.lr || c.DEAC() != tt.deac || c.STC() != tt.stc || c.PRINFO() != tt.prinfo ||
				c.DTYPE() != tt.dtype || c.DSM() != tt.dsm || c.DSPEC() != tt.dspec {
				t.Errorf("round trip: slba %d blocks %d fua %v lr %v deac %v stc %v prinfo %d dtype %d dsm %d dspec %d",
					c.SLBA(), c.Blocks(), c.FUA(), c.LR(), c.DEAC(), c.STC(), c.PRINFO(), c.DTYPE(), c.DSM(), c.DSPEC())
			}
		})
	}
	c := nvme.RWCommand{SQE: nvme.NewSQE()}
	for _, n := range []uint32{0, 65537} {
		if err := c.SetBlocks(n); !errors.Is(err, nvme.ErrMalformed) {
			t.Errorf("SetBlocks(%d) = %v", n, err)
		}
	}
}

func TestIdentifyCommand(t *testing.T) {
	c := nvme.IdentifyCommand{SQE: nvme.NewSQE()}
	c.SetCNS(nvme.CNSCSController)
	c.SetCNTID(0x1234)
	c.SetCNSSID(0x5678)
	c.SetCSI(nvme.CSIZNS)
	c.SetUUIDIndex(0x7f)
	if c.CDW10() != 0x12340006 || c.CDW11() != 0x02005678 || c.CDW14() != 0x7f {
		t.Fatalf("CDW10 %#x CDW11 %#x CDW14 %#x", c.CDW10(), c.CDW11(), c.CDW14())
	}
	if c.CNS() != 6 || c.CNTID() != 0x1234 || c.CNSSID() != 0x5678 || c.CSI() != 2 || c.UUIDIndex() != 0x7f {
		t.Fatal("round trip")
	}
	c.SetCNS(nvme.CNSController)
	if c.CDW10() != 0x12340001 {
		t.Fatalf("SetCNS clobbered CNTID: %#x", c.CDW10())
	}
}

func TestGetLogPageCommand(t *testing.T) {
	tests := []struct {
		name         string
		lid          nvme.LogPageID
		lsp          uint8
		rae          bool
		length       uint64
		lsi          uint16
		lpo          uint64
		cdw10, cdw11 uint32
		cdw12, cdw13 uint32
	}{
		// The kernel host's reads in the RDMA capture.
		{name: "discovery header", lid: nvme.LIDDiscovery, rae: true, length: 1024, cdw10: 0x00ff8070},
		{name: "ANA", lid: nvme.LIDANA, length: 8208, cdw10: 0x0803000c},
		{name: "SMART", lid: nvme.LIDSMART, length: 512, cdw10: 0x007f0002},
		{name: "effects", lid: nvme.LIDCommandEffects, length: 4096, cdw10: 0x03ff0005},
		{name: "ANA RGO", lid: nvme.LIDANA, lsp: nvme.ANALSPRGO, length: 4, cdw10: 0x0000010c},
		{name: "large with offset", lid: nvme.LIDError, lsp: 0x7f, length: 4 << 20, lsi: 0xbeef, lpo: 0x1_0000_1000,
			cdw10: 0xffff7f01, cdw11: 0xbeef000f, cdw12: 0x1000, cdw13: 1},
		{name: "max", lid: 0xff, length: 4 << 32, cdw10: 0xffff00ff, cdw11: 0xffff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nvme.GetLogPageCommand{SQE: nvme.NewSQE()}
			c.SetLID(tt.lid)
			c.SetLSP(tt.lsp)
			c.SetRAE(tt.rae)
			if err := c.SetLength(tt.length); err != nil {
				t.Fatal(err)
			}
			c.SetLSI(tt.lsi)
			c.SetLPO(tt.lpo)
			if c.CDW10() != tt.cdw10 || c.CDW11() != tt.cdw11 || c.CDW12() != tt.cdw12 || c.CDW13() != tt.cdw13 {
				t.Errorf("CDW10-13 %#x %#x %#x %#x, want %#x %#x %#x %#x", c.CDW10(), c.CDW11(), c.CDW12(), c.CDW13(), tt.cdw10, tt.cdw11, tt.cdw12, tt.cdw13)
			}
			if c.LID() != tt.lid || c.LSP() != tt.lsp || c.RAE() != tt.rae || c.Length() != tt.length ||
				c.Dwords() != tt.length/4 || c.LSI() != tt.lsi || c.LPO() != tt.lpo {
				t.Errorf("round trip: %v lsp %d rae %v len %d lsi %d lpo %d", c.LID(), c.LSP(), c.RAE(), c.Length(), c.LSI(), c.LPO())
			}
			if uint64(c.NUMDU())<<16|uint64(c.NUMDL()) != tt.length/4-1 {
				t.Errorf("NUMDU %d NUMDL %d", c.NUMDU(), c.NUMDL())
			}
		})
	}
	c := nvme.GetLogPageCommand{SQE: nvme.NewSQE()}
	for _, n := range []uint64{0, 3, 4<<32 + 4} {
		if err := c.SetLength(n); !errors.Is(err, nvme.ErrMalformed) {
			t.Errorf("SetLength(%d) = %v", n, err)
		}
	}
	c.SetUUIDIndex(5)
	c.SetOT(true)
	c.SetCSI(nvme.CSIZNS)
	if c.CDW14() != 0x02800005 || c.UUIDIndex() != 5 || !c.OT() || c.CSI() != 2 {
		t.Errorf("CDW14 %#x", c.CDW14())
	}
}

func TestFeaturesAbortDSMCommands(t *testing.T) {
	f := nvme.FeaturesCommand{SQE: nvme.NewSQE()}
	f.SetFID(nvme.FeatKeepAliveTimer)
	f.SetSV(true)
	if f.CDW10() != 0x8000000f || f.FID() != nvme.FeatKeepAliveTimer || !f.SV() {
		t.Errorf("Set Features CDW10 %#x", f.CDW10())
	}
	f.SetSV(false)
	f.SetSEL(nvme.SelectSupportedCapabilities)
	f.SetUUIDIndex(3)
	if f.CDW10() != 0x30f || f.SEL() != nvme.SelectSupportedCapabilities || f.CDW14() != 3 || f.UUIDIndex() != 3 {
		t.Errorf("Get Features CDW10 %#x CDW14 %#x", f.CDW10(), f.CDW14())
	}

	a := nvme.AbortCommand{SQE: nvme.NewSQE()}
	a.SetSQID(3)
	a.SetAbortCID(0x1001)
	if a.CDW10() != 0x10010003 || a.SQID() != 3 || a.AbortCID() != 0x1001 {
		t.Errorf("Abort CDW10 %#x", a.CDW10())
	}

	d := nvme.DSMCommand{SQE: nvme.NewSQE()}
	d.SetNR(255)
	d.SetAD(true)
	d.SetIDW(true)
	if d.CDW10() != 0xff || d.CDW11() != 0x6 || d.Ranges() != 256 || d.DataLength() != 4096 || !d.AD() || !d.IDW() || d.IDR() {
		t.Errorf("DSM CDW10 %#x CDW11 %#x", d.CDW10(), d.CDW11())
	}
	d.SetIDR(true)
	d.SetAD(false)
	if d.CDW11() != 0x3 {
		t.Errorf("DSM CDW11 %#x", d.CDW11())
	}
}

func TestDSMRanges(t *testing.T) {
	buf := make([]byte, 2*nvme.DSMRangeSize+5)
	rs, err := nvme.DecodeDSMRanges(buf, 2)
	if err != nil {
		t.Fatal(err)
	}
	rs[1].SetContextAttributes(0x01020304)
	rs[1].SetLength(8)
	rs[1].SetSLBA(0x1122334455667788)
	want := []byte{4, 3, 2, 1, 8, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}
	if !bytes.Equal(buf[16:32], want) {
		t.Fatalf("range bytes % x", buf[16:32])
	}
	if rs[1].ContextAttributes() != 0x01020304 || rs[1].Length() != 8 || rs[1].SLBA() != 0x1122334455667788 {
		t.Fatal("round trip")
	}
	if _, err := nvme.DecodeDSMRanges(buf, 3); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("3 ranges in %d bytes: %v", len(buf), err)
	}
	for _, n := range []int{0, 257} {
		if _, err := nvme.DecodeDSMRanges(make([]byte, 8192), n); !errors.Is(err, nvme.ErrMalformed) {
			t.Errorf("%d ranges: %v", n, err)
		}
	}
}

func TestOpcodes(t *testing.T) {
	admin := []struct {
		op   nvme.AdminOpcode
		name string
		dir  nvme.DataDirection
	}{
		{nvme.AdminDeleteIOSQ, "Delete I/O Submission Queue", nvme.DataNone},
		{nvme.AdminGetLogPage, "Get Log Page", nvme.DataControllerToHost},
		{nvme.AdminIdentify, "Identify", nvme.DataControllerToHost},
		{nvme.AdminAbort, "Abort", nvme.DataNone},
		{nvme.AdminSetFeatures, "Set Features", nvme.DataHostToController},
		{nvme.AdminGetFeatures, "Get Features", nvme.DataControllerToHost},
		{nvme.AdminAsyncEventRequest, "Asynchronous Event Request", nvme.DataNone},
		{nvme.AdminFirmwareImageDownload, "Firmware Image Download", nvme.DataHostToController},
		{nvme.AdminKeepAlive, "Keep Alive", nvme.DataNone},
		{nvme.AdminDoorbellBufferConfig, "Doorbell Buffer Config", nvme.DataNone},
		{nvme.AdminFabrics, "Fabrics Command", nvme.DataBidirectional},
		{nvme.AdminFormatNVM, "Format NVM", nvme.DataNone},
		{nvme.AdminSecuritySend, "Security Send", nvme.DataHostToController},
		{nvme.AdminSecurityReceive, "Security Receive", nvme.DataControllerToHost},
		{nvme.AdminSanitize, "Sanitize", nvme.DataNone},
		{nvme.AdminGetLBAStatus, "Get LBA Status", nvme.DataControllerToHost},
		{0x03, "Unknown Admin Command 0x03", nvme.DataBidirectional},
		{0xc1, "Vendor Specific Admin Command 0xc1", nvme.DataHostToController},
	}
	for _, tt := range admin {
		if got := tt.op.String(); got != tt.name {
			t.Errorf("admin 0x%02x: %q, want %q", uint8(tt.op), got, tt.name)
		}
		if got := tt.op.DataDirection(); got != tt.dir {
			t.Errorf("admin %v: direction %v, want %v", tt.op, got, tt.dir)
		}
	}
	io := []struct {
		op   nvme.IOOpcode
		name string
		dir  nvme.DataDirection
	}{
		{nvme.IOFlush, "Flush", nvme.DataNone},
		{nvme.IOWrite, "Write", nvme.DataHostToController},
		{nvme.IORead, "Read", nvme.DataControllerToHost},
		{nvme.IOWriteUncorrectable, "Write Uncorrectable", nvme.DataNone},
		{nvme.IOCompare, "Compare", nvme.DataHostToController},
		{nvme.IOWriteZeroes, "Write Zeroes", nvme.DataNone},
		{nvme.IODatasetManagement, "Dataset Management", nvme.DataHostToController},
		{nvme.IOVerify, "Verify", nvme.DataNone},
		{nvme.IOReservationRegister, "Reservation Register", nvme.DataHostToController},
		{nvme.IOReservationReport, "Reservation Report", nvme.DataControllerToHost},
		{nvme.IOReservationAcquire, "Reservation Acquire", nvme.DataHostToController},
		{nvme.IOReservationRelease, "Reservation Release", nvme.DataHostToController},
		{nvme.IOCopy, "Copy", nvme.DataHostToController},
		{nvme.IOFabrics, "Fabrics Command", nvme.DataBidirectional},
		{0x03, "Unknown I/O Command 0x03", nvme.DataBidirectional},
		{0x81, "Vendor Specific I/O Command 0x81", nvme.DataHostToController},
	}
	for _, tt := range io {
		if got := tt.op.String(); got != tt.name {
			t.Errorf("I/O 0x%02x: %q, want %q", uint8(tt.op), got, tt.name)
		}
		if got := tt.op.DataDirection(); got != tt.dir {
			t.Errorf("I/O %v: direction %v, want %v", tt.op, got, tt.dir)
		}
	}
	if !nvme.AdminKeepAlive.Known() || nvme.AdminOpcode(0x03).Known() || !nvme.IOCopy.Known() || nvme.IOOpcode(0x03).Known() {
		t.Error("Known")
	}
	for d, s := range map[nvme.DataDirection]string{nvme.DataNone: "none", nvme.DataHostToController: "host-to-controller",
		nvme.DataControllerToHost: "controller-to-host", nvme.DataBidirectional: "bidirectional", 9: "DataDirection(9)"} {
		if d.String() != s {
			t.Errorf("%d: %q", d, d.String())
		}
	}
}
