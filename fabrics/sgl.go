package fabrics

import (
	"encoding/binary"
	"fmt"

	"github.com/nvmeof/nvmeof/nvme"
)

// SGLLen is the size of an SGL descriptor.
const SGLLen = 16

// SGLType is the SGL Descriptor Type (byte 15 bits 7:4).
type SGLType uint8

// SGL descriptor types (NVMe base 2.0 figure 114; Linux NVME_SGL_FMT_*_DESC).
const (
	SGLTypeDataBlock          SGLType = 0x0
	SGLTypeBitBucket          SGLType = 0x1
	SGLTypeSegment            SGLType = 0x2
	SGLTypeLastSegment        SGLType = 0x3
	SGLTypeKeyedDataBlock     SGLType = 0x4
	SGLTypeTransportDataBlock SGLType = 0x5
)

var sglTypeNames = map[SGLType]string{
	SGLTypeDataBlock:          "Data Block",
	SGLTypeBitBucket:          "Bit Bucket",
	SGLTypeSegment:            "Segment",
	SGLTypeLastSegment:        "Last Segment",
	SGLTypeKeyedDataBlock:     "Keyed Data Block",
	SGLTypeTransportDataBlock: "Transport Data Block",
}

// String returns the descriptor type's name.
func (t SGLType) String() string {
	if s, ok := sglTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("SGL type %#x", uint8(t))
}

// SGL descriptor subtypes (byte 15 bits 3:0).
const (
	SGLSubtypeAddress           = 0x0 // the address field is a memory address
	SGLSubtypeOffset            = 0x1 // the address field is an offset into the in-capsule data
	SGLSubtypeTransportSpecific = 0xa // transport specific (NVMe/TCP transport data block)
	SGLSubtypeInvalidateKey     = 0xf // keyed data block: address, and invalidate the key on completion
)

// SGLIdentifier returns SGL byte 15 for a type and subtype.
func SGLIdentifier(t SGLType, subtype uint8) uint8 { return uint8(t)<<4 | subtype&0xf }

// Byte offsets in an SGL descriptor.
const (
	sglAddr   = 0
	sglLength = 8
	sglKey    = 11 // keyed data block
	sglID     = 15
)

// SGL is a view of a 16-byte SGL descriptor. Views returned by ParseSGL,
// the New functions or Command.SGL1 are exactly 16 bytes; the accessors
// assume that.
type SGL []byte

// ParseSGL checks the length of b and returns a view of its first 16 bytes.
// It accepts every type and subtype: Validate says whether a controller
// can act on the descriptor.
func ParseSGL(b []byte) (SGL, error) {
	if len(b) < SGLLen {
		return nil, fmt.Errorf("fabrics: SGL descriptor of %d bytes: %w", len(b), ErrShort)
	}
	return SGL(b[:SGLLen:SGLLen]), nil
}

// Identifier returns byte 15 (type in bits 7:4, subtype in bits 3:0).
func (s SGL) Identifier() uint8 { return s[sglID] }

// Type returns the descriptor type.
func (s SGL) Type() SGLType { return SGLType(s[sglID] >> 4) }

// Subtype returns the descriptor subtype.
func (s SGL) Subtype() uint8 { return s[sglID] & 0xf }

// Address returns bytes 7:0: a memory address, or for the offset subtype
// the offset into the in-capsule data.
func (s SGL) Address() uint64 { return binary.LittleEndian.Uint64(s[sglAddr:]) }

// Length returns the data length: 3 bytes (10:8) for a keyed data block, 4
// bytes (11:8) for the other types.
func (s SGL) Length() uint32 {
	if s.Type() == SGLTypeKeyedDataBlock {
		return s.KeyedLength()
	}
	return binary.LittleEndian.Uint32(s[sglLength:])
}

// KeyedLength returns the 24-bit length of a keyed data block (bytes 10:8).
func (s SGL) KeyedLength() uint32 {
	return uint32(s[sglLength]) | uint32(s[sglLength+1])<<8 | uint32(s[sglLength+2])<<16
}

// Key returns the 32-bit key of a keyed data block (bytes 14:11), the
// rkey of the host's memory region on RDMA.
func (s SGL) Key() uint32 { return binary.LittleEndian.Uint32(s[sglKey:]) }

// Invalidate reports a keyed data block with the invalidate-key subtype.
func (s SGL) Invalidate() bool {
	return s.Type() == SGLTypeKeyedDataBlock && s.Subtype() == SGLSubtypeInvalidateKey
}

// InCapsule reports a data block with the offset subtype: data that comes
// in the command capsule.
func (s SGL) InCapsule() bool {
	return s.Type() == SGLTypeDataBlock && s.Subtype() == SGLSubtypeOffset
}

// SetIdentifier sets byte 15 from a type and subtype.
func (s SGL) SetIdentifier(t SGLType, subtype uint8) { s[sglID] = SGLIdentifier(t, subtype) }

// SetAddress sets bytes 7:0.
func (s SGL) SetAddress(a uint64) { binary.LittleEndian.PutUint64(s[sglAddr:], a) }

// SetLength sets the 4-byte length (bytes 11:8) of a non-keyed descriptor.
func (s SGL) SetLength(n uint32) { binary.LittleEndian.PutUint32(s[sglLength:], n) }

// SetKeyedLength sets the 24-bit length of a keyed data block (bytes 10:8);
// bits above 23 are dropped.
func (s SGL) SetKeyedLength(n uint32) {
	s[sglLength], s[sglLength+1], s[sglLength+2] = byte(n), byte(n>>8), byte(n>>16)
}

// SetKey sets the key of a keyed data block (bytes 14:11).
func (s SGL) SetKey(k uint32) { binary.LittleEndian.PutUint32(s[sglKey:], k) }

// MaxKeyedLength is the largest length a keyed data block holds (24 bits).
const MaxKeyedLength = 1<<24 - 1

// PutDataBlock writes a data block descriptor with a memory address.
func (s SGL) PutDataBlock(addr uint64, length uint32) {
	s.put(SGLTypeDataBlock, SGLSubtypeAddress, addr, length)
}

// PutInCapsule writes a data block descriptor with the offset subtype: the
// data is length bytes at offset in the capsule's in-capsule data.
func (s SGL) PutInCapsule(offset uint64, length uint32) {
	s.put(SGLTypeDataBlock, SGLSubtypeOffset, offset, length)
}

// PutBitBucket writes a bit bucket descriptor: length bytes to discard.
func (s SGL) PutBitBucket(length uint32) { s.put(SGLTypeBitBucket, SGLSubtypeAddress, 0, length) }

// PutSegment writes a segment descriptor pointing at the next SGL segment.
func (s SGL) PutSegment(addr uint64, length uint32, subtype uint8) {
	s.put(SGLTypeSegment, subtype, addr, length)
}

// PutLastSegment writes a last segment descriptor pointing at the last SGL segment.
func (s SGL) PutLastSegment(addr uint64, length uint32, subtype uint8) {
	s.put(SGLTypeLastSegment, subtype, addr, length)
}

// PutKeyed writes a keyed data block descriptor (length must fit 24
// bits), with the invalidate-key subtype if invalidate.
func (s SGL) PutKeyed(addr uint64, length, key uint32, invalidate bool) {
	sub := uint8(SGLSubtypeAddress)
	if invalidate {
		sub = SGLSubtypeInvalidateKey
	}
	s.SetAddress(addr)
	s.SetKeyedLength(length)
	s.SetKey(key)
	s.SetIdentifier(SGLTypeKeyedDataBlock, sub)
}

// PutTransportDataBlock writes the NVMe/TCP transport data block
// descriptor (type 5, subtype 0xA): the data moves in H2CData/C2HData PDUs.
func (s SGL) PutTransportDataBlock(length uint32) {
	s.put(SGLTypeTransportDataBlock, SGLSubtypeTransportSpecific, 0, length)
}

func (s SGL) put(t SGLType, subtype uint8, addr uint64, length uint32) {
	clear(s[:SGLLen])
	s.SetAddress(addr)
	s.SetLength(length)
	s.SetIdentifier(t, subtype)
}

// NewDataBlock returns a data block descriptor with a memory address.
func NewDataBlock(addr uint64, length uint32) SGL {
	s := make(SGL, SGLLen)
	s.PutDataBlock(addr, length)
	return s
}

// NewInCapsule returns a data block descriptor with the offset subtype.
func NewInCapsule(offset uint64, length uint32) SGL {
	s := make(SGL, SGLLen)
	s.PutInCapsule(offset, length)
	return s
}

// NewBitBucket returns a bit bucket descriptor.
func NewBitBucket(length uint32) SGL {
	s := make(SGL, SGLLen)
	s.PutBitBucket(length)
	return s
}

// NewSegment returns a segment descriptor (subtype address or offset).
func NewSegment(addr uint64, length uint32, subtype uint8) SGL {
	s := make(SGL, SGLLen)
	s.PutSegment(addr, length, subtype)
	return s
}

// NewLastSegment returns a last segment descriptor (subtype address or offset).
func NewLastSegment(addr uint64, length uint32, subtype uint8) SGL {
	s := make(SGL, SGLLen)
	s.PutLastSegment(addr, length, subtype)
	return s
}

// NewKeyed returns a keyed data block descriptor.
func NewKeyed(addr uint64, length, key uint32, invalidate bool) SGL {
	s := make(SGL, SGLLen)
	s.PutKeyed(addr, length, key, invalidate)
	return s
}

// NewTransportDataBlock returns the NVMe/TCP transport data block descriptor.
func NewTransportDataBlock(length uint32) SGL {
	s := make(SGL, SGLLen)
	s.PutTransportDataBlock(length)
	return s
}

// SGLLimits says which SGL1 descriptors a transport's queue accepts.
type SGLLimits struct {
	Keyed     bool // keyed data blocks, subtype address or invalidate (RDMA)
	Transport bool // transport data blocks, subtype 0xA (TCP)
	// InCapsule is the in-capsule data size the queue accepts; data block
	// descriptors with the offset subtype must lie within it (0: none).
	InCapsule int
	// MaxTransfer is the largest data length accepted (0: no limit).
	MaxTransfer int
}

// RDMASGLLimits are the limits of an NVMe/RDMA queue with the given
// in-capsule data size.
func RDMASGLLimits(inCapsule, maxTransfer int) SGLLimits {
	return SGLLimits{Keyed: true, InCapsule: inCapsule, MaxTransfer: maxTransfer}
}

// TCPSGLLimits are the limits of an NVMe/TCP queue with the given
// in-capsule data size.
func TCPSGLLimits(inCapsule, maxTransfer int) SGLLimits {
	return SGLLimits{Transport: true, InCapsule: inCapsule, MaxTransfer: maxTransfer}
}

// Validate checks SGL1 of a command whose data moves in direction dir,
// the way a target must before it moves any data. A problem comes back as
// an error wrapping an *nvme.Error with the status to complete the
// command with, DNR set (nvme.AsError finds it):
//
//   - a type the queue does not take (bit bucket, segments, a keyed block
//     on TCP, a transport block on RDMA, a data block with a memory
//     address), or a subtype the type does not define: SGL Descriptor Type
//     Invalid. (Linux nvmet answers Invalid Field in Command for a bad
//     subtype; the specification names SGL Descriptor Type Invalid.)
//   - in-capsule data for a command that does not write: Invalid Field in
//     Command (as Linux nvmet).
//   - an in-capsule offset beyond the in-capsule data size: SGL Offset
//     Invalid; a length that runs past it, or past MaxTransfer: Data SGL
//     Length Invalid.
//
// Reserved bytes are not checked: the Linux host leaves byte 12 of
// in-capsule data block descriptors non-zero (0x44, the low byte of a
// key it used before; testdata/pcap/kernel-nvme-rdma-rxe), and a target
// that rejected that would fail its writes.
func (s SGL) Validate(lim SGLLimits, dir DataDirection) error {
	t, sub := s.Type(), s.Subtype()
	switch t {
	case SGLTypeDataBlock:
		if sub != SGLSubtypeOffset {
			return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s subtype %#x is not supported", t, sub)
		}
		off, n := s.Address(), uint64(s.Length())
		if n == 0 {
			return nil
		}
		if dir != DirHostToCtrl {
			return statusErr(nvme.StatusInvalidField, "in-capsule data for a command that does not write")
		}
		if off >= uint64(lim.InCapsule) {
			return statusErr(nvme.StatusSGLOffsetInvalid, "in-capsule offset %d beyond %d bytes of in-capsule data", off, lim.InCapsule)
		}
		if off+n > uint64(lim.InCapsule) {
			return statusErr(nvme.StatusDataSGLLengthInvalid, "in-capsule data %d+%d beyond %d bytes", off, n, lim.InCapsule)
		}
	case SGLTypeKeyedDataBlock:
		if !lim.Keyed {
			return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s is not supported by this transport", t)
		}
		if sub != SGLSubtypeAddress && sub != SGLSubtypeInvalidateKey {
			return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s subtype %#x is not supported", t, sub)
		}
	case SGLTypeTransportDataBlock:
		if !lim.Transport {
			return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s is not supported by this transport", t)
		}
		if sub != SGLSubtypeTransportSpecific {
			return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s subtype %#x is not supported", t, sub)
		}
	default:
		return statusErr(nvme.StatusSGLDescriptorTypeInvalid, "SGL1 %s is not supported", t)
	}
	if lim.MaxTransfer > 0 && uint64(s.Length()) > uint64(lim.MaxTransfer) {
		return statusErr(nvme.StatusDataSGLLengthInvalid, "data length %d exceeds the maximum transfer of %d bytes", s.Length(), lim.MaxTransfer)
	}
	return nil
}

// String describes the descriptor, e.g. "Keyed Data Block addr 0x1000 len 4096 key 0x3c5 invalidate".
func (s SGL) String() string {
	switch s.Type() {
	case SGLTypeKeyedDataBlock:
		inv := ""
		if s.Invalidate() {
			inv = " invalidate"
		}
		return fmt.Sprintf("%s addr %#x len %d key %#x%s", s.Type(), s.Address(), s.KeyedLength(), s.Key(), inv)
	case SGLTypeDataBlock:
		if s.InCapsule() {
			return fmt.Sprintf("In-capsule Data Block offset %d len %d", s.Address(), s.Length())
		}
	}
	return fmt.Sprintf("%s subtype %#x addr %#x len %d", s.Type(), s.Subtype(), s.Address(), s.Length())
}
