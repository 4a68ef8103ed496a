// Package bpfsys is the little of bpf(2) the soft RoCE provider needs to
// steer datagrams between processes that share one UDP port: creating and
// finding a map, putting sockets in it, and loading a program assembled
// from Insn values. It wraps the system call and nothing more; the
// programs themselves live with their users.
//
// It builds on 64-bit little-endian Linux, where the instruction's
// register nibbles and the attribute layouts below are as written; every
// other platform gets ErrUnsupported.
package bpfsys
