package nvme

import (
	"encoding/binary"
	"fmt"
)

// MaxNSIDListEntries is the number of NSIDs a namespace list (Identify CNS
// 02h, Changed Namespace List log page) holds: 4096 bytes of 32-bit NSIDs.
const MaxNSIDListEntries = 1024

// DecodeNSIDList returns the NSIDs of a namespace list (Identify Active
// Namespace ID list, CNS 02h, and the other NSID lists): 32-bit NSIDs, the
// list ending at the first zero entry or at the end of b. b must be a whole
// number of dwords.
func DecodeNSIDList(b []byte) ([]uint32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("nvme: namespace list of %d bytes, not a whole number of dwords: %w", len(b), ErrMalformed)
	}
	var ids []uint32
	for off := 0; off < len(b); off += 4 {
		id := binary.LittleEndian.Uint32(b[off:])
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// EncodeNSIDList writes ids as a namespace list into b and zeroes the rest
// of b (the terminating zero entry). The controller returns NSIDs in
// increasing order; the caller sorts. It returns an error when an id is 0
// (it would end the list) or the list does not fit in b.
func EncodeNSIDList(b []byte, ids []uint32) error {
	if 4*len(ids) > len(b) {
		return fmt.Errorf("nvme: namespace list of %d NSIDs does not fit in %d bytes: %w", len(ids), len(b), ErrMalformed)
	}
	for i, id := range ids {
		if id == 0 {
			return fmt.Errorf("nvme: namespace list entry %d is NSID 0: %w", i, ErrMalformed)
		}
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
	clear(b[4*len(ids):])
	return nil
}

// Namespace Identifier Types (NIDT) of Namespace Identification Descriptors.
const (
	NIDTEUI64 = 0x1 // IEEE Extended Unique Identifier, 8 bytes
	NIDTNGUID = 0x2 // Namespace Globally Unique Identifier, 16 bytes
	NIDTUUID  = 0x3 // Namespace UUID, 16 bytes
	NIDTCSI   = 0x4 // Command Set Identifier, 1 byte
)

// Lengths (NIDL) of the descriptor types.
const (
	NIDLEUI64 = 8
	NIDLNGUID = 16
	NIDLUUID  = 16
	NIDLCSI   = 1
)

// nsDescHeader is the size of a descriptor header: NIDT, NIDL, 2 reserved.
const nsDescHeader = 4

// NSDescriptor is one Namespace Identification Descriptor (Identify CNS
// 03h): a type (NIDT) and its identifier (NID, NIDL bytes).
type NSDescriptor struct {
	NIDT uint8
	NID  []byte
}

// NSDescriptorEUI64 returns an EUI-64 descriptor.
func NSDescriptorEUI64(eui [8]byte) NSDescriptor {
	return NSDescriptor{NIDT: NIDTEUI64, NID: eui[:]}
}

// NSDescriptorNGUID returns an NGUID descriptor.
func NSDescriptorNGUID(nguid [16]byte) NSDescriptor {
	return NSDescriptor{NIDT: NIDTNGUID, NID: nguid[:]}
}

// NSDescriptorUUID returns a UUID descriptor.
func NSDescriptorUUID(uuid [16]byte) NSDescriptor {
	return NSDescriptor{NIDT: NIDTUUID, NID: uuid[:]}
}

// NSDescriptorCSI returns a Command Set Identifier descriptor.
func NSDescriptorCSI(csi uint8) NSDescriptor {
	return NSDescriptor{NIDT: NIDTCSI, NID: []byte{csi}}
}

// nidlFor returns the length the specification gives a descriptor type, or
// 0 for a type it does not define.
func nidlFor(nidt uint8) int {
	switch nidt {
	case NIDTEUI64:
		return NIDLEUI64
	case NIDTNGUID:
		return NIDLNGUID
	case NIDTUUID:
		return NIDLUUID
	case NIDTCSI:
		return NIDLCSI
	}
	return 0
}

// String returns the descriptor as "type:hex".
func (d NSDescriptor) String() string {
	name := fmt.Sprintf("NIDT%d", d.NIDT)
	switch d.NIDT {
	case NIDTEUI64:
		name = "eui64"
	case NIDTNGUID:
		name = "nguid"
	case NIDTUUID:
		name = "uuid"
	case NIDTCSI:
		name = "csi"
	}
	return fmt.Sprintf("%s:%x", name, d.NID)
}

// DecodeNSDescriptors returns the descriptors of a Namespace Identification
// Descriptor list. The list ends at a descriptor with NIDT 0 or where no
// further header fits. NID slices alias b. A known type with the wrong
// length, a descriptor with NIDL 0 or one that runs past b is an error;
// descriptors of unknown types are returned as they are (hosts skip them).
func DecodeNSDescriptors(b []byte) ([]NSDescriptor, error) {
	var ds []NSDescriptor
	for off := 0; off+nsDescHeader <= len(b); {
		nidt, nidl := b[off], int(b[off+1])
		if nidt == 0 {
			break
		}
		if nidl == 0 {
			return nil, fmt.Errorf("nvme: namespace descriptor at byte %d: type %d with length 0: %w", off, nidt, ErrMalformed)
		}
		if want := nidlFor(nidt); want != 0 && nidl != want {
			return nil, fmt.Errorf("nvme: namespace descriptor at byte %d: type %d with length %d, want %d: %w", off, nidt, nidl, want, ErrMalformed)
		}
		end := off + nsDescHeader + nidl
		if end > len(b) {
			return nil, fmt.Errorf("nvme: namespace descriptor at byte %d: %d bytes run past the %d-byte list: %w", off, nidl, len(b), ErrTruncated)
		}
		ds = append(ds, NSDescriptor{NIDT: nidt, NID: b[off+nsDescHeader : end : end]})
		off = end
	}
	return ds, nil
}

// EncodeNSDescriptors writes the descriptors into b (normally the 4096-byte
// Identify buffer) and zeroes the rest, which terminates the list. It
// returns the number of bytes the descriptors take, or an error for a
// descriptor with NIDT 0, an NID of a wrong or zero length, or a list that
// does not fit.
func EncodeNSDescriptors(b []byte, ds []NSDescriptor) (int, error) {
	off := 0
	for i, d := range ds {
		n := len(d.NID)
		switch want := nidlFor(d.NIDT); {
		case d.NIDT == 0:
			return 0, fmt.Errorf("nvme: namespace descriptor %d: type 0 ends the list: %w", i, ErrMalformed)
		case n == 0 || n > 255:
			return 0, fmt.Errorf("nvme: namespace descriptor %d: NID of %d bytes: %w", i, n, ErrMalformed)
		case want != 0 && n != want:
			return 0, fmt.Errorf("nvme: namespace descriptor %d: type %d with %d bytes, want %d: %w", i, d.NIDT, n, want, ErrMalformed)
		case off+nsDescHeader+n > len(b):
			return 0, fmt.Errorf("nvme: namespace descriptors do not fit in %d bytes: %w", len(b), ErrMalformed)
		}
		b[off], b[off+1], b[off+2], b[off+3] = d.NIDT, byte(n), 0, 0
		copy(b[off+nsDescHeader:], d.NID)
		off += nsDescHeader + n
	}
	clear(b[off:])
	return off, nil
}
