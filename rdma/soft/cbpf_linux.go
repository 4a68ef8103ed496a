//go:build linux

package soft

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// cbpf assembles a classic BPF program whose conditional jumps name
// labels: "" is the next instruction, and the labels "accept" and "drop"
// are the program's two returns, appended by done.
type cbpf struct {
	ins    []unix.SockFilter
	jumps  []cbpfJump
	labels map[string]int
}

type cbpfJump struct {
	at   int
	t, f string
	ja   bool // an unconditional jump to t (offset in K)
}

// op appends an instruction without jumps.
func (c *cbpf) op(code uint16, k uint32) { c.ins = append(c.ins, unix.SockFilter{Code: code, K: k}) }

// jmp appends a conditional jump to t if the condition holds, else to f.
func (c *cbpf) jmp(code uint16, k uint32, t, f string) {
	c.jumps = append(c.jumps, cbpfJump{at: len(c.ins), t: t, f: f})
	c.op(code, k)
}

// ja appends an unconditional jump to label to.
func (c *cbpf) ja(to string) {
	c.jumps = append(c.jumps, cbpfJump{at: len(c.ins), t: to, ja: true})
	c.op(bpfJa, 0)
}

// label names the next instruction.
func (c *cbpf) label(name string) {
	if c.labels == nil {
		c.labels = map[string]int{}
	}
	c.labels[name] = len(c.ins)
}

// done appends the returns (accept the whole packet, drop) and resolves
// the jumps.
func (c *cbpf) done() []unix.SockFilter {
	c.label("accept")
	c.op(bpfRet, 0x40000)
	c.label("drop")
	c.op(bpfRet, 0)
	for _, j := range c.jumps {
		if j.ja {
			c.ins[j.at].K = uint32(c.target(j.at, j.t))
			continue
		}
		c.ins[j.at].Jt, c.ins[j.at].Jf = c.target(j.at, j.t), c.target(j.at, j.f)
	}
	return c.ins
}

func (c *cbpf) target(at int, name string) uint8 {
	if name == "" {
		return 0
	}
	to, ok := c.labels[name]
	if !ok || to <= at || to-at-1 > 255 {
		panic(fmt.Sprintf("cbpf: bad jump from %d to %q", at, name))
	}
	return uint8(to - at - 1)
}

// rawFilterSpec says which datagrams a raw socket of a device takes.
type rawFilterSpec struct {
	dst  uint32 // the device's IPv4 address
	port uint16 // its UDP port
	// queue, queues: with queues > 1, only packets for QPs of receive
	// queue queue (QPN mod queues, or shareQueue for a shared device);
	// queue -1 takes every queue's.
	queue, queues int
	// slot: a shared device's slot (0: not shared): only packets for its
	// QPs and CM MADs for its communication IDs.
	slot uint8
	// nonZeroID: only datagrams whose IP ID is not 0 (the raw socket of
	// an IPv4 device in GSO mode off loopback, whose UDP socket takes the
	// others).
	nonZeroID bool
}

// rawFilter returns the filter of a raw socket: IPv4 protocol UDP, not a
// fragment, to the device's address and port, and then spec's checks. A
// raw socket's filter sees the packet from the IP header on.
func rawFilter(spec rawFilterSpec) []unix.SockFilter {
	var c cbpf
	c.op(bpfLdAbsB, 9) // protocol
	c.jmp(bpfJeq, 17, "", "drop")
	c.op(bpfLdAbsH, 6) // flags | fragment offset
	c.jmp(bpfJset, 0x1fff, "drop", "")
	c.op(bpfLdAbsW, 16) // destination address
	c.jmp(bpfJeq, spec.dst, "", "drop")
	if spec.nonZeroID {
		c.op(bpfLdAbsH, 4) // IP ID
		c.jmp(bpfJeq, 0, "drop", "")
	}
	c.op(bpfLdxMSH, 0) // X = IP header length
	c.op(bpfLdIndH, 2) // UDP destination port
	c.jmp(bpfJeq, uint32(spec.port), "", "drop")
	if spec.slot == 0 && (spec.queue < 0 || spec.queues <= 1) {
		return c.done()
	}
	c.op(bpfLdIndW, shareQPNOff) // BTH word 1: destination QP
	c.op(bpfAnd, wire.QPNMask)
	if spec.slot == 0 {
		c.op(bpfMod, uint32(spec.queues))
		c.jmp(bpfJeq, uint32(spec.queue), "accept", "drop")
		return c.done()
	}
	c.jmp(bpfJeq, 1, "cm", "")
	c.op(bpfStM, 0)
	c.op(bpfRsh, shareQPNBits)
	c.op(bpfAnd, 0xff)
	c.jmp(bpfJeq, uint32(spec.slot), "", "drop")
	if spec.queue >= 0 {
		c.op(bpfLdM, 0)
		c.op(bpfAnd, shareKeys-1)
		c.jmp(bpfJeq, uint32(spec.queue), "accept", "drop")
	} else {
		c.ja("accept")
	}
	c.label("cm")
	c.op(bpfLdIndW, shareCommIDOff)
	c.op(bpfRsh, 24)
	if spec.queue >= 0 && shareQueue(1) != spec.queue {
		c.ja("drop") // another queue reads QP 1
	} else {
		c.jmp(bpfJeq, uint32(spec.slot), "accept", "drop")
	}
	return c.done()
}
