package nvme

import (
	"encoding/binary"
	"fmt"
)

// ANAState is the Asymmetric Namespace Access state of an ANA group.
type ANAState uint8

// ANA states (NVMe Base 2.0, "Asymmetric Namespace Access Reporting").
const (
	ANAOptimized      ANAState = 0x1
	ANANonOptimized   ANAState = 0x2
	ANAInaccessible   ANAState = 0x3
	ANAPersistentLoss ANAState = 0x4
	ANAChange         ANAState = 0xf
)

// String returns the state name as nvme-cli prints it, e.g. "optimized".
func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent-loss"
	case ANAChange:
		return "change"
	}
	return fmt.Sprintf("ANAState(0x%x)", uint8(s))
}

// ParseANAState returns the state String names ("optimized",
// "non-optimized", "inaccessible", "persistent-loss", "change": Linux's
// configfs ana_state values).
func ParseANAState(s string) (ANAState, bool) {
	for _, st := range []ANAState{ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange} {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// ANALSPRGO is the Log Specific Parameter bit of Get Log Page (LID 0Ch)
// asking for the group descriptors only: NNSIDS 0 and no NSID lists.
const ANALSPRGO = 1 << 0

// Sizes in the ANA log page (Linux struct nvme_ana_rsp_hdr and struct
// nvme_ana_group_desc).
const (
	ANALogHeaderSize     = 16 // CHGCNT (8), NGRPS (2), reserved (6)
	ANAGroupHeaderSize   = 32 // ANAGRPID (4), NNSIDS (4), CHGCNT (8), state (1), reserved (15)
	anaGroupStateOffset  = 16
	anaGroupChgcntOffset = 8
)

// ANAGroup is one ANA Group Descriptor of the ANA log page.
type ANAGroup struct {
	GroupID     uint32   // ANAGRPID
	ChangeCount uint64   // CHGCNT of this group
	State       ANAState // bits 3:0 of byte 16
	NSIDs       []uint32 // the group's attached namespaces (none when RGO is set)
}

// ANALog is the Asymmetric Namespace Access log page (LID 0Ch).
type ANALog struct {
	ChangeCount uint64 // CHGCNT
	Groups      []ANAGroup
}

// Size returns the number of bytes the log page takes.
func (l ANALog) Size() int {
	n := ANALogHeaderSize
	for _, g := range l.Groups {
		n += ANAGroupHeaderSize + 4*len(g.NSIDs)
	}
	return n
}

// AppendBinary appends the log page to b. It returns an error when the
// groups do not fit the 16-bit NGRPS field.
func (l ANALog) AppendBinary(b []byte) ([]byte, error) {
	if len(l.Groups) > 0xffff {
		return b, fmt.Errorf("nvme: ANA log with %d groups, NGRPS holds 65535: %w", len(l.Groups), ErrMalformed)
	}
	b = binary.LittleEndian.AppendUint64(b, l.ChangeCount)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(l.Groups)))
	b = append(b, make([]byte, 6)...)
	for _, g := range l.Groups {
		b = binary.LittleEndian.AppendUint32(b, g.GroupID)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g.NSIDs)))
		b = binary.LittleEndian.AppendUint64(b, g.ChangeCount)
		b = append(b, uint8(g.State)&0xf)
		b = append(b, make([]byte, 15)...)
		for _, id := range g.NSIDs {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
	}
	return b, nil
}

// DecodeANALog decodes an ANA log page. Bytes after the last group (the
// rest of the host's buffer) are ignored; a group header or NSID list that
// runs past b is an error.
func DecodeANALog(b []byte) (ANALog, error) {
	if err := need("ANA log header", b, ANALogHeaderSize); err != nil {
		return ANALog{}, err
	}
	l := ANALog{ChangeCount: binary.LittleEndian.Uint64(b)}
	ngrps := int(binary.LittleEndian.Uint16(b[8:]))
	// Every group takes at least its header: reject counts b cannot hold
	// before allocating for them.
	if ngrps > (len(b)-ANALogHeaderSize)/ANAGroupHeaderSize {
		return ANALog{}, fmt.Errorf("nvme: ANA log: %d groups do not fit in %d bytes: %w", ngrps, len(b), ErrTruncated)
	}
	if ngrps > 0 {
		l.Groups = make([]ANAGroup, 0, ngrps)
	}
	off := ANALogHeaderSize
	for i := 0; i < ngrps; i++ {
		if len(b)-off < ANAGroupHeaderSize {
			return ANALog{}, fmt.Errorf("nvme: ANA log: group %d header at byte %d runs past %d bytes: %w", i, off, len(b), ErrTruncated)
		}
		d := b[off:]
		g := ANAGroup{
			GroupID:     binary.LittleEndian.Uint32(d),
			ChangeCount: binary.LittleEndian.Uint64(d[anaGroupChgcntOffset:]),
			State:       ANAState(d[anaGroupStateOffset] & 0xf),
		}
		nnsids := uint64(binary.LittleEndian.Uint32(d[4:]))
		off += ANAGroupHeaderSize
		if nnsids > uint64(len(b)-off)/4 {
			return ANALog{}, fmt.Errorf("nvme: ANA log: group %d (ANAGRPID %d) lists %d NSIDs, %d bytes left: %w", i, g.GroupID, nnsids, len(b)-off, ErrTruncated)
		}
		if nnsids > 0 {
			g.NSIDs = make([]uint32, nnsids)
			for j := range g.NSIDs {
				g.NSIDs[j] = binary.LittleEndian.Uint32(b[off+4*j:])
			}
			off += 4 * int(nnsids)
		}
		l.Groups = append(l.Groups, g)
	}
	return l, nil
}
