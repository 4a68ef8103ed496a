package capture

import (
	"fmt"
	"net/netip"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// MessageKind says what a reassembled RoCEv2 message is.
type MessageKind int

// Kinds of reassembled messages.
const (
	MsgSend         MessageKind = iota // RC SEND First..Last or Only (any variant)
	MsgWrite                           // RC RDMA WRITE First..Last or Only
	MsgReadResponse                    // RC RDMA READ Response First..Last or Only
)

// Message is one RC SEND, RDMA WRITE or RDMA READ response message put
// together from its packets.
type Message struct {
	Kind       MessageKind
	Frames     []int // frame numbers of its packets, in order
	Src, Dst   netip.Addr
	DestQP     uint32
	LastOpcode wire.Opcode
	Payload    []byte
	Invalidate bool   // SEND with Invalidate
	IETHRKey   uint32 // when Invalidate
	HasImm     bool
	Imm        uint32
	// RDMA WRITE: the RETH of the first packet.
	VA     uint64
	RKey   uint32
	DMALen uint32
}

type flowKey struct {
	dst  netip.Addr
	dqpn uint32
	resp bool // READ responses travel beside the peer's own requests
}

// Messages reassembles the RC SEND, RDMA WRITE and RDMA READ response
// messages of a capture in the order their last packet appears. The golden
// captures are clean (no loss or retransmission); a packet out of sequence
// is an error.
func Messages(frames []Frame) ([]Message, error) {
	open := map[flowKey]*Message{}
	var out []Message
	for i := range frames {
		f := &frames[i]
		if !f.IsRoCEv2() || f.IPv6 || len(f.IP) < 20 {
			continue
		}
		var p wire.Packet
		if err := p.Parse(f.Payload); err != nil {
			return nil, fmt.Errorf("capture: frame %d: %w", f.Number, err)
		}
		op := p.Opcode()
		if op.Class() != wire.ClassRC || !(op.IsSend() || op.IsWrite() || op.IsReadResponse()) {
			continue
		}
		src := netip.AddrFrom4([4]byte(f.IP[12:16]))
		dst := netip.AddrFrom4([4]byte(f.IP[16:20]))
		k := flowKey{dst: dst, dqpn: p.BTH.DestQP(), resp: op.IsReadResponse()}
		m := open[k]
		if op.IsFirst() {
			if m != nil {
				return nil, fmt.Errorf("capture: frame %d: %s while a message from frame %d is open", f.Number, op, m.Frames[0])
			}
			m = &Message{Src: src, Dst: dst, DestQP: k.dqpn}
			switch {
			case op.IsSend():
				m.Kind = MsgSend
			case op.IsWrite():
				m.Kind = MsgWrite
				m.VA, m.RKey, m.DMALen = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
			default:
				m.Kind = MsgReadResponse
			}
			open[k] = m
		} else if m == nil {
			return nil, fmt.Errorf("capture: frame %d: %s without a first packet", f.Number, op)
		}
		m.Frames = append(m.Frames, f.Number)
		m.Payload = append(m.Payload, p.Payload...)
		if op.IsLast() {
			m.LastOpcode = op
			if p.IETH != nil {
				m.Invalidate, m.IETHRKey = true, p.InvalidateRKey()
			}
			if p.ImmDt != nil {
				m.HasImm, m.Imm = true, p.Imm()
			}
			out = append(out, *m)
			delete(open, k)
		}
	}
	return out, nil
}
