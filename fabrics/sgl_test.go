package fabrics

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestSGLConstructors(t *testing.T) {
	tests := []struct {
		name    string
		s       SGL
		raw     string // wire bytes
		typ     SGLType
		subtype uint8
		addr    uint64
		length  uint32
	}{
		// The kernel host's descriptors in testdata/pcap (sqe.sgl.raw_hex).
		{"keyed invalidate", NewKeyed(0xff45c9860c117c00, 1024, 0x3c5, true),
			"007c110c86c945ff000400c50300004f", SGLTypeKeyedDataBlock, 0xf, 0xff45c9860c117c00, 1024},
		{"keyed, no data", NewKeyed(0, 0, 0, false),
			"00000000000000000000000000000040", SGLTypeKeyedDataBlock, 0, 0, 0},
		{"in-capsule", NewInCapsule(0, 1024),
			"00000000000000000004000000000001", SGLTypeDataBlock, 1, 0, 1024},
		{"transport data block", NewTransportDataBlock(0x10000),
			"0000000000000000000001000000005a", SGLTypeTransportDataBlock, 0xa, 0, 0x10000},
		{"data block", NewDataBlock(0x1000, 512),
			"00100000000000000002000000000000", SGLTypeDataBlock, 0, 0x1000, 512},
		{"bit bucket", NewBitBucket(8),
			"00000000000000000800000000000010", SGLTypeBitBucket, 0, 0, 8},
		{"segment", NewSegment(0x2000, 32, SGLSubtypeOffset),
			"00200000000000002000000000000021", SGLTypeSegment, 1, 0x2000, 32},
		{"last segment", NewLastSegment(0x3000, 48, SGLSubtypeAddress),
			"00300000000000003000000000000030", SGLTypeLastSegment, 0, 0x3000, 48},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hex.EncodeToString(tt.s); got != tt.raw {
				t.Errorf("bytes %s, want %s", got, tt.raw)
			}
			s, err := ParseSGL(mustHex(t, tt.raw))
			if err != nil {
				t.Fatal(err)
			}
			if s.Type() != tt.typ || s.Subtype() != tt.subtype || s.Address() != tt.addr || s.Length() != tt.length ||
				s.Identifier() != SGLIdentifier(tt.typ, tt.subtype) {
				t.Errorf("decoded %v", s)
			}
		})
	}
	k := NewKeyed(1, MaxKeyedLength, 0xdeadbeef, false)
	if k.KeyedLength() != MaxKeyedLength || k.Key() != 0xdeadbeef || k.Invalidate() || k.InCapsule() {
		t.Errorf("keyed %v", k)
	}
	if _, err := ParseSGL(make([]byte, 15)); !errors.Is(err, ErrShort) {
		t.Errorf("15 bytes: %v", err)
	}
}

func TestSGLValidate(t *testing.T) {
	rdma := RDMASGLLimits(8192, 1<<20)
	tcp := TCPSGLLimits(16384, 1<<20)
	// The Linux host's in-capsule write descriptor with 0x44 left in
	// reserved byte 12 (testdata/pcap/kernel-nvme-rdma-rxe).
	linuxInCapsule, _ := ParseSGL(mustHex(t, "00000000000000000010000044000001"))
	withSubtype := func(s SGL, sub uint8) SGL { s.SetIdentifier(s.Type(), sub); return s }
	tests := []struct {
		name   string
		s      SGL
		lim    SGLLimits
		dir    DataDirection
		status nvme.Status // StatusSuccess: valid
	}{
		{"keyed read", NewKeyed(0x1000, 4096, 7, true), rdma, DirCtrlToHost, nvme.StatusSuccess},
		{"keyed write", NewKeyed(0x1000, 65536, 7, false), rdma, DirHostToCtrl, nvme.StatusSuccess},
		{"keyed no data", NewKeyed(0, 0, 0, false), rdma, DirNone, nvme.StatusSuccess},
		{"in-capsule write", NewInCapsule(0, 4096), rdma, DirHostToCtrl, nvme.StatusSuccess},
		{"Linux reserved byte 12", linuxInCapsule, rdma, DirHostToCtrl, nvme.StatusSuccess},
		{"in-capsule whole size", NewInCapsule(0, 8192), rdma, DirHostToCtrl, nvme.StatusSuccess},
		{"in-capsule length 0 for a read", NewInCapsule(0, 0), rdma, DirCtrlToHost, nvme.StatusSuccess},
		{"TCP transport block", NewTransportDataBlock(65536), tcp, DirCtrlToHost, nvme.StatusSuccess},
		{"TCP in-capsule", NewInCapsule(0, 16384), tcp, DirHostToCtrl, nvme.StatusSuccess},

		{"in-capsule too long", NewInCapsule(0, 8193), rdma, DirHostToCtrl, nvme.StatusDataSGLLengthInvalid},
		{"in-capsule offset beyond", NewInCapsule(8192, 1), rdma, DirHostToCtrl, nvme.StatusSGLOffsetInvalid},
		{"in-capsule on admin queue", NewInCapsule(0, 1024), RDMASGLLimits(0, 0), DirHostToCtrl, nvme.StatusSGLOffsetInvalid},
		{"in-capsule for a read", NewInCapsule(0, 512), rdma, DirCtrlToHost, nvme.StatusInvalidField},
		{"keyed too long", NewKeyed(0, 1<<20+1, 1, true), rdma, DirCtrlToHost, nvme.StatusDataSGLLengthInvalid},
		{"transport block too long", NewTransportDataBlock(1<<20 + 1), tcp, DirCtrlToHost, nvme.StatusDataSGLLengthInvalid},
		{"keyed on TCP", NewKeyed(0x1000, 4096, 7, false), tcp, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"transport block on RDMA", NewTransportDataBlock(4096), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"keyed bad subtype", withSubtype(NewKeyed(0x1000, 4096, 7, false), 1), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"transport bad subtype", withSubtype(NewTransportDataBlock(4096), 0), tcp, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"data block address", NewDataBlock(0x1000, 4096), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"bit bucket", NewBitBucket(4096), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"segment", NewSegment(0x1000, 32, 0), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"last segment", NewLastSegment(0x1000, 32, 1), tcp, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
		{"type 6", SGL(mustHex(t, "00000000000000000010000000000060")), rdma, DirCtrlToHost, nvme.StatusSGLDescriptorTypeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate(tt.lim, tt.dir)
			if got := nvme.StatusOf(err); got != tt.status {
				t.Fatalf("%v: %v, want %v", tt.s, err, tt.status)
			}
			if err != nil && !nvme.AsError(err).DNR {
				t.Errorf("%v: no DNR", err)
			}
		})
	}
}

func TestSGLString(t *testing.T) {
	tests := []struct {
		s    SGL
		want string
	}{
		{NewKeyed(0x1000, 4096, 0x3c5, true), "Keyed Data Block addr 0x1000 len 4096 key 0x3c5 invalidate"},
		{NewInCapsule(0, 1024), "In-capsule Data Block offset 0 len 1024"},
		{NewTransportDataBlock(512), "Transport Data Block subtype 0xa addr 0x0 len 512"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}
