package soft

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// FaultConfig injects faults into a device's packets, for tests. Each
// probability is in [0, 1] and applies to every packet independently.
type FaultConfig struct {
	Drop      float64 // the packet is lost
	Duplicate float64 // the packet is delivered twice
	Reorder   float64 // the packet is delivered after the next one
	Corrupt   float64 // one bit of the packet (after the IP and UDP headers) is flipped
	// CEMark marks a received ECN-capable packet CE (Congestion
	// Experienced), as a switch queue past its threshold does (receive
	// side only; Not-ECT packets are left alone).
	CEMark float64
	// CEMarkNotECT lets CEMark mark Not-ECT packets too, which no switch
	// does: it makes a device send CNPs to a peer that never sends
	// ECN-capable packets (rxe), to see what the peer does with them.
	CEMarkNotECT bool
	Seed         uint64 // seeds the random source; equal seeds give equal decisions
}

// faultAction is a set of faults to apply to one packet.
type faultAction uint8

const (
	faultDrop faultAction = 1 << iota
	faultDuplicate
	faultReorder
	faultCorrupt
	faultCE
)

// faults is a FaultConfig with its random source.
type faults struct {
	mu  sync.Mutex
	cfg FaultConfig
	rng *rand.Rand
}

func newFaults(c *FaultConfig) *faults {
	if c == nil || (c.Drop <= 0 && c.Duplicate <= 0 && c.Reorder <= 0 && c.Corrupt <= 0 && c.CEMark <= 0) {
		return nil
	}
	return &faults{cfg: *c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))}
}

// decide draws the faults for one packet of n bytes; when it corrupts,
// bit is the bit index (within the n bytes) to flip.
func (f *faults) decide(n int) (a faultAction, bit int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() < f.cfg.Drop {
		return faultDrop, 0
	}
	if f.rng.Float64() < f.cfg.Corrupt && n > 0 {
		a |= faultCorrupt
		bit = f.rng.IntN(n * 8)
	}
	if f.rng.Float64() < f.cfg.Duplicate {
		a |= faultDuplicate
	}
	if f.rng.Float64() < f.cfg.Reorder {
		a |= faultReorder
	}
	// Drawn only when asked for, so that the other faults of a seed
	// stay as they were.
	if f.cfg.CEMark > 0 && f.rng.Float64() < f.cfg.CEMark {
		a |= faultCE
	}
	return a, bit
}

// markCE sets the ECN field of the IP datagram b to CE if it is
// ECN-capable (or anyway, with notECT), and reports whether it did.
func markCE(b []byte, notECT bool) bool {
	if len(b) < 2 || ipECN(b) == ecnNotECT && !notECT {
		return false
	}
	if b[0]>>4 == 6 {
		b[1] |= ecnCE << 4
		return true
	}
	b[1] |= ecnCE
	if hl := int(b[0]&0x0f) * 4; hl >= wire.IPv4HeaderLen && len(b) >= hl {
		b[10], b[11] = 0, 0
		binary.BigEndian.PutUint16(b[10:], ipv4Checksum(b[:hl]))
	}
	return true
}

// flipBit flips bit i of b.
func flipBit(b []byte, i int) { b[i/8] ^= 1 << (i % 8) }
