package bpfsys

import "encoding/binary"

// Insn is one eBPF instruction (struct bpf_insn): an opcode, the
// destination and source registers, a signed offset and an immediate.
type Insn struct {
	Op       uint8
	Dst, Src uint8
	Off      int16
	Imm      int32
}

// Registers.
const (
	R0 uint8 = iota
	R1
	R2
	R3
	R4
	R5
	R6
	R7
	R8
	R9
	R10 // the read-only frame pointer
)

// Opcodes used by this package's callers (linux/bpf_common.h, linux/bpf.h).
const (
	opMov64Imm = 0xb7 // BPF_ALU64 | BPF_MOV | BPF_K
	opMov64Reg = 0xbf // BPF_ALU64 | BPF_MOV | BPF_X
	opAdd64Imm = 0x07
	opAdd64Reg = 0x0f
	opAnd64Imm = 0x57
	opLsh64Imm = 0x67
	opRsh64Imm = 0x77
	opToBE     = 0xdc // BPF_ALU | BPF_END | BPF_TO_BE
	opLdxW     = 0x61 // BPF_LDX | BPF_MEM | BPF_W
	opStxW     = 0x63 // BPF_STX | BPF_MEM | BPF_W
	opLdImm64  = 0x18 // BPF_LD | BPF_DW | BPF_IMM
	opJa       = 0x05
	opJeqImm   = 0x15
	opJneImm   = 0x55
	opCall     = 0x85
	opExit     = 0x95

	pseudoMapFD = 1 // BPF_PSEUDO_MAP_FD
)

// Helper function numbers (enum bpf_func_id).
const (
	FuncSkbLoadBytes      = 26
	FuncSkSelectReuseport = 82
)

// Mov64Imm is dst = imm.
func Mov64Imm(dst uint8, imm int32) Insn { return Insn{Op: opMov64Imm, Dst: dst, Imm: imm} }

// Mov64Reg is dst = src.
func Mov64Reg(dst, src uint8) Insn { return Insn{Op: opMov64Reg, Dst: dst, Src: src} }

// Add64Imm is dst += imm.
func Add64Imm(dst uint8, imm int32) Insn { return Insn{Op: opAdd64Imm, Dst: dst, Imm: imm} }

// Add64Reg is dst += src.
func Add64Reg(dst, src uint8) Insn { return Insn{Op: opAdd64Reg, Dst: dst, Src: src} }

// And64Imm is dst &= imm.
func And64Imm(dst uint8, imm int32) Insn { return Insn{Op: opAnd64Imm, Dst: dst, Imm: imm} }

// Lsh64Imm is dst <<= imm.
func Lsh64Imm(dst uint8, imm int32) Insn { return Insn{Op: opLsh64Imm, Dst: dst, Imm: imm} }

// Rsh64Imm is dst >>= imm (logical).
func Rsh64Imm(dst uint8, imm int32) Insn { return Insn{Op: opRsh64Imm, Dst: dst, Imm: imm} }

// BE32 converts the low 32 bits of dst from big-endian to host order,
// clearing the high 32.
func BE32(dst uint8) Insn { return Insn{Op: opToBE, Dst: dst, Imm: 32} }

// LdxW is dst = *(u32 *)(src + off).
func LdxW(dst, src uint8, off int16) Insn { return Insn{Op: opLdxW, Dst: dst, Src: src, Off: off} }

// StxW is *(u32 *)(dst + off) = src.
func StxW(dst, src uint8, off int16) Insn { return Insn{Op: opStxW, Dst: dst, Src: src, Off: off} }

// LdMapFD loads map fd into dst; it takes two instruction slots.
func LdMapFD(dst uint8, fd int) [2]Insn {
	return [2]Insn{{Op: opLdImm64, Dst: dst, Src: pseudoMapFD, Imm: int32(fd)}, {}}
}

// Ja jumps off instructions forward.
func Ja(off int16) Insn { return Insn{Op: opJa, Off: off} }

// JeqImm jumps off instructions forward if dst == imm.
func JeqImm(dst uint8, imm int32, off int16) Insn {
	return Insn{Op: opJeqImm, Dst: dst, Imm: imm, Off: off}
}

// JneImm jumps off instructions forward if dst != imm.
func JneImm(dst uint8, imm int32, off int16) Insn {
	return Insn{Op: opJneImm, Dst: dst, Imm: imm, Off: off}
}

// Call calls helper function fn.
func Call(fn int32) Insn { return Insn{Op: opCall, Imm: fn} }

// Exit returns R0.
func Exit() Insn { return Insn{Op: opExit} }

// InsnSize is the size of an encoded instruction.
const InsnSize = 8

// Encode returns the instructions as the kernel reads them (little-endian
// hosts: the destination register in the low nibble).
func Encode(prog []Insn) []byte {
	b := make([]byte, len(prog)*InsnSize)
	for i, in := range prog {
		e := b[i*InsnSize:]
		e[0] = in.Op
		e[1] = in.Dst&0xf | in.Src<<4
		binary.LittleEndian.PutUint16(e[2:], uint16(in.Off))
		binary.LittleEndian.PutUint32(e[4:], uint32(in.Imm))
	}
	return b
}
