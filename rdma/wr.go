package rdma

import "fmt"

// SGE is a scatter/gather element: Length bytes at virtual address Addr
// of the memory region whose local key is LKey (struct ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite        WROpcode = 0 // write the local SGL to RemoteAddr/RKey
	WRRDMAWriteWithImm WROpcode = 1 // RDMA WRITE that also consumes a receive at the peer and delivers Imm
	WRSend             WROpcode = 2 // send the local SGL into the peer's next receive
	WRSendWithImm      WROpcode = 3 // SEND carrying Imm
	WRRDMARead         WROpcode = 4 // read RemoteAddr/RKey into the local SGL
	WRAtomicCmpSwp     WROpcode = 5 // (not implemented by every provider)
	WRAtomicFetchAdd   WROpcode = 6 // (not implemented by every provider)
	WRLocalInv         WROpcode = 7 // invalidate the local MR whose rkey is InvalidateRKey
	WRBindMW           WROpcode = 8 // bind a memory window (Bind): providers with MWAllocator PDs
	WRSendWithInv      WROpcode = 9 // SEND that invalidates InvalidateRKey at the peer
)

// String names the opcode as the verbs do ("SEND", "RDMA_WRITE", ...).
func (o WROpcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendWithImm:
		return "SEND_WITH_IMM"
	case WRRDMARead:
		return "RDMA_READ"
	case WRAtomicCmpSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WRAtomicFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WRLocalInv:
		return "LOCAL_INV"
	case WRBindMW:
		return "BIND_MW"
	case WRSendWithInv:
		return "SEND_WITH_INV"
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // wait for earlier RDMA READs and atomics to complete first
	SendSignaled  SendFlags = 1 << 1 // generate a completion on success (failures always complete)
	SendSolicited SendFlags = 1 << 2 // set the solicited-event bit
	SendInline    SendFlags = 1 << 3 // copy the data at post time; SGE lkeys are ignored
)

// SendWR is a send work request (struct ibv_send_wr). The structs, their
// SGL and the Next chain are read during PostSend only.
type SendWR struct {
	WRID   uint64
	Next   *SendWR
	SGL    []SGE
	Opcode WROpcode
	Flags  SendFlags
	// Imm is the immediate data of *WithImm opcodes, as the big-endian
	// number on the wire.
	Imm uint32
	// InvalidateRKey is the rkey a SEND with Invalidate invalidates at the
	// peer, or the local rkey a LOCAL_INV invalidates.
	InvalidateRKey uint32
	// RemoteAddr and RKey name the peer's memory for RDMA READ and WRITE.
	RemoteAddr uint64
	RKey       uint32
	// UD only: the destination address, QP number and Q_Key. A RemoteQKey
	// with the top bit set means "use the QP's own Q_Key".
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// Bind is the operation of a WRBindMW request; the request carries
	// no SGL.
	Bind MWBind
}

// MWBind binds a type-2 memory window (struct ibv_mw_bind with its
// ibv_mw_bind_info): MW takes rkey RKey over Length bytes at Addr of MR,
// with the remote rights Access. The provider makes RKey the window's
// RKey when the request is posted.
type MWBind struct {
	MW MW
	// RKey is the window's new rkey: IncRKey(MW.RKey()).
	RKey uint32
	// MR is the region the window lies in, registered with AccessMWBind
	// (and LocalWrite when Access holds RemoteWrite).
	MR MR
	// Addr is the virtual address of the window's first byte, within MR.
	Addr   uint64
	Length uint64
	// Access is the remote rights (RemoteRead, RemoteWrite, RemoteAtomic).
	Access Access
}

// RecvWR is a receive work request (struct ibv_recv_wr): where the data of
// one incoming SEND (or the GRH and data of one UD datagram) goes.
type RecvWR struct {
	WRID uint64
	Next *RecvWR
	SGL  []SGE
}

// GRHLen is the size of the Global Routing Header a UD receive buffer
// starts with; on RoCEv2 over IPv4 its last 20 bytes hold the IPv4 header.
const GRHLen = 40

// QKeyGSI is the well-known Q_Key of QP1 (the GSI), used by the CM.
const QKeyGSI = 0x80010000
