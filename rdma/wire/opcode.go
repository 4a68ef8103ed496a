package wire

import "fmt"

// Opcode is the BTH OpCode: transport class in bits 7:5, operation in 4:0.
type Opcode uint8

// Transport classes (opcode bits 7:5).
const (
	ClassRC Opcode = 0x00 // Reliable Connection
	ClassUC Opcode = 0x20 // Unreliable Connection
	ClassRD Opcode = 0x40 // Reliable Datagram
	ClassUD Opcode = 0x60 // Unreliable Datagram
	ClassCN Opcode = 0x80 // Congestion Notification
)

// RC and UD opcodes (IBA vol. 1 table 38; Linux include/rdma/ib_pack.h).
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastWithImmediate  Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyWithImmediate  Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastWithImmed Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0a
	RCRDMAWriteOnlyWithImmed Opcode = 0x0b
	RCRDMAReadRequest        Opcode = 0x0c
	RCRDMAReadResponseFirst  Opcode = 0x0d
	RCRDMAReadResponseMiddle Opcode = 0x0e
	RCRDMAReadResponseLast   Opcode = 0x0f
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastWithInvalidate Opcode = 0x16
	RCSendOnlyWithInvalidate Opcode = 0x17
	UDSendOnly               Opcode = 0x64
	UDSendOnlyWithImmediate  Opcode = 0x65
)

// Opcode table flags.
const (
	opFlagRETH      = 1 << 0
	opFlagAETH      = 1 << 1
	opFlagDETH      = 1 << 2
	opFlagImm       = 1 << 3
	opFlagIETH      = 1 << 4
	opFlagAtomicETH = 1 << 5
	opFlagAtomicAck = 1 << 6
	opFlagFirst     = 1 << 7
	opFlagMiddle    = 1 << 8
	opFlagLast      = 1 << 9
	opFlagSend      = 1 << 10
	opFlagWrite     = 1 << 11
	opFlagRead      = 1 << 12 // READ request
	opFlagReadResp  = 1 << 13
	opFlagAck       = 1 << 14
	opFlagAtomic    = 1 << 15
	opFlagPayload   = 1 << 16
	opFlagKnown     = 1 << 17
	opFlagCNP       = 1 << 18
	opFlagOnly      = opFlagFirst | opFlagLast
)

type opInfo struct {
	name  string
	flags uint32
}

var opTable = [256]opInfo{
	RCSendFirst:              {"RC SEND First", opFlagSend | opFlagFirst | opFlagPayload},
	RCSendMiddle:             {"RC SEND Middle", opFlagSend | opFlagMiddle | opFlagPayload},
	RCSendLast:               {"RC SEND Last", opFlagSend | opFlagLast | opFlagPayload},
	RCSendLastWithImmediate:  {"RC SEND Last with Immediate", opFlagSend | opFlagLast | opFlagImm | opFlagPayload},
	RCSendOnly:               {"RC SEND Only", opFlagSend | opFlagOnly | opFlagPayload},
	RCSendOnlyWithImmediate:  {"RC SEND Only with Immediate", opFlagSend | opFlagOnly | opFlagImm | opFlagPayload},
	RCRDMAWriteFirst:         {"RC RDMA WRITE First", opFlagWrite | opFlagFirst | opFlagRETH | opFlagPayload},
	RCRDMAWriteMiddle:        {"RC RDMA WRITE Middle", opFlagWrite | opFlagMiddle | opFlagPayload},
	RCRDMAWriteLast:          {"RC RDMA WRITE Last", opFlagWrite | opFlagLast | opFlagPayload},
	RCRDMAWriteLastWithImmed: {"RC RDMA WRITE Last with Immediate", opFlagWrite | opFlagLast | opFlagImm | opFlagPayload},
	RCRDMAWriteOnly:          {"RC RDMA WRITE Only", opFlagWrite | opFlagOnly | opFlagRETH | opFlagPayload},
	RCRDMAWriteOnlyWithImmed: {"RC RDMA WRITE Only with Immediate", opFlagWrite | opFlagOnly | opFlagRETH | opFlagImm | opFlagPayload},
	RCRDMAReadRequest:        {"RC RDMA READ Request", opFlagRead | opFlagOnly | opFlagRETH},
	RCRDMAReadResponseFirst:  {"RC RDMA READ Response First", opFlagReadResp | opFlagFirst | opFlagAETH | opFlagPayload},
	RCRDMAReadResponseMiddle: {"RC RDMA READ Response Middle", opFlagReadResp | opFlagMiddle | opFlagPayload},
	RCRDMAReadResponseLast:   {"RC RDMA READ Response Last", opFlagReadResp | opFlagLast | opFlagAETH | opFlagPayload},
	RCRDMAReadResponseOnly:   {"RC RDMA READ Response Only", opFlagReadResp | opFlagOnly | opFlagAETH | opFlagPayload},
	RCAcknowledge:            {"RC Acknowledge", opFlagAck | opFlagOnly | opFlagAETH},
	RCAtomicAcknowledge:      {"RC ATOMIC Acknowledge", opFlagAck | opFlagOnly | opFlagAETH | opFlagAtomicAck},
	RCCompareSwap:            {"RC CmpSwap", opFlagAtomic | opFlagOnly | opFlagAtomicETH},
	RCFetchAdd:               {"RC FetchAdd", opFlagAtomic | opFlagOnly | opFlagAtomicETH},
	RCSendLastWithInvalidate: {"RC SEND Last with Invalidate", opFlagSend | opFlagLast | opFlagIETH | opFlagPayload},
	RCSendOnlyWithInvalidate: {"RC SEND Only with Invalidate", opFlagSend | opFlagOnly | opFlagIETH | opFlagPayload},
	UDSendOnly:               {"UD SEND Only", opFlagSend | opFlagOnly | opFlagDETH | opFlagPayload},
	UDSendOnlyWithImmediate:  {"UD SEND Only with Immediate", opFlagSend | opFlagOnly | opFlagDETH | opFlagImm | opFlagPayload},
	OpCNP:                    {"CNP", opFlagCNP},
}

func init() {
	for i := range opTable {
		if opTable[i].name != "" {
			opTable[i].flags |= opFlagKnown
		}
	}
}

func (op Opcode) has(f uint32) bool { return opTable[op].flags&f != 0 }

// Known reports whether the opcode is one this package can parse.
func (op Opcode) Known() bool { return op.has(opFlagKnown) }

// Class returns the transport class (bits 7:5).
func (op Opcode) Class() Opcode { return op & 0xe0 }

// String returns the opcode's name as the IBA and Wireshark write it.
func (op Opcode) String() string {
	if n := opTable[op].name; n != "" {
		return n
	}
	return fmt.Sprintf("opcode(%#02x)", uint8(op))
}

// IsSend reports a SEND opcode (any class).
func (op Opcode) IsSend() bool { return op.has(opFlagSend) }

// IsWrite reports an RDMA WRITE opcode.
func (op Opcode) IsWrite() bool { return op.has(opFlagWrite) }

// IsReadRequest reports the RDMA READ Request opcode.
func (op Opcode) IsReadRequest() bool { return op.has(opFlagRead) }

// IsReadResponse reports an RDMA READ Response opcode.
func (op Opcode) IsReadResponse() bool { return op.has(opFlagReadResp) }

// IsAck reports an Acknowledge or ATOMIC Acknowledge opcode.
func (op Opcode) IsAck() bool { return op.has(opFlagAck) }

// IsAtomic reports an atomic request opcode.
func (op Opcode) IsAtomic() bool { return op.has(opFlagAtomic) }

// IsFirst reports a First or Only packet of a message.
func (op Opcode) IsFirst() bool { return op.has(opFlagFirst) }

// IsLast reports a Last or Only packet of a message.
func (op Opcode) IsLast() bool { return op.has(opFlagLast) }

// IsMiddle reports a Middle packet.
func (op Opcode) IsMiddle() bool { return op.has(opFlagMiddle) }

// IsOnly reports a single-packet message opcode.
func (op Opcode) IsOnly() bool { return op.IsFirst() && op.IsLast() }

// HasRETH reports whether the opcode carries a RETH.
func (op Opcode) HasRETH() bool { return op.has(opFlagRETH) }

// HasAETH reports whether the opcode carries an AETH.
func (op Opcode) HasAETH() bool { return op.has(opFlagAETH) }

// HasDETH reports whether the opcode carries a DETH.
func (op Opcode) HasDETH() bool { return op.has(opFlagDETH) }

// HasImmDt reports whether the opcode carries immediate data.
func (op Opcode) HasImmDt() bool { return op.has(opFlagImm) }

// HasIETH reports whether the opcode carries an IETH.
func (op Opcode) HasIETH() bool { return op.has(opFlagIETH) }

// HasAtomicETH reports whether the opcode carries an AtomicETH.
func (op Opcode) HasAtomicETH() bool { return op.has(opFlagAtomicETH) }

// HasAtomicAckETH reports whether the opcode carries an AtomicAckETH.
func (op Opcode) HasAtomicAckETH() bool { return op.has(opFlagAtomicAck) }

// IsCNP reports the Congestion Notification Packet opcode.
func (op Opcode) IsCNP() bool { return op.has(opFlagCNP) }

// HasPayload reports whether packets of this opcode may carry a payload.
func (op Opcode) HasPayload() bool { return op.has(opFlagPayload) }

// RequiresPSNAck reports whether a packet of this opcode is a request that
// consumes a PSN on an RC QP (everything but acknowledgements and READ responses).
func (op Opcode) RequiresPSNAck() bool {
	return op.Known() && !op.IsAck() && !op.IsReadResponse() && !op.IsCNP()
}

// HeaderLen returns the length of the BTH and the extended headers of op.
func (op Opcode) HeaderLen() int {
	n := BTHLen
	if op.HasDETH() {
		n += DETHLen
	}
	if op.HasRETH() {
		n += RETHLen
	}
	if op.HasAtomicETH() {
		n += AtomicETHLen
	}
	if op.HasAETH() {
		n += AETHLen
	}
	if op.HasAtomicAckETH() {
		n += AtomicAckETHLen
	}
	if op.HasImmDt() {
		n += ImmDtLen
	}
	if op.HasIETH() {
		n += IETHLen
	}
	if op.IsCNP() {
		n += CNPReservedLen
	}
	return n
}
