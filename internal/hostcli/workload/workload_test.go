package workload

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// memNS is an in-memory namespace for the workload; corruptAt, when set,
// flips a byte in reads covering it.
type memNS struct {
	mu        sync.Mutex
	data      []byte
	dlfeat    uint8
	corruptAt int64
	zeroes    int
}

func (m *memNS) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := copy(p, m.data[off:])
	if m.corruptAt >= off && m.corruptAt < off+int64(len(p)) {
		p[m.corruptAt-off] ^= 0x40
	}
	return n, nil
}

func (m *memNS) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(m.data[off:], p), nil
}

func (m *memNS) Flush() error { return nil }

func (m *memNS) Trim(off, n int64) error {
	if m.dlfeat&7 == 1 {
		m.mu.Lock()
		clear(m.data[off : off+n])
		m.mu.Unlock()
	}
	return nil // else deallocated blocks keep their data
}

func (m *memNS) WriteZeroes(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.zeroes++
	clear(m.data[off : off+n])
	return nil
}

func (m *memNS) Size() int64    { return int64(len(m.data)) }
func (m *memNS) BlockSize() int { return 512 }
func (m *memNS) NSID() uint32   { return 1 }
func (m *memNS) Identify() nvme.IdentifyNamespace {
	n := nvme.NewIdentifyNamespace()
	n.SetDLFEAT(m.dlfeat)
	return n
}

func TestWorkloadVerifies(t *testing.T) {
	cfg := Config{Size: 8 << 20, Seed: 9, QueueDepth: 4}
	tests := []struct {
		name      string
		ns        *memNS
		wantErr   bool
		wantZeroW bool // Write Zeroes used because DLFEAT promises nothing
	}{
		{"trim reads zeroes", &memNS{data: make([]byte, 8<<20), dlfeat: 1, corruptAt: -1}, false, false},
		{"trim keeps data", &memNS{data: make([]byte, 8<<20), dlfeat: 0, corruptAt: -1}, false, true},
		{"corrupted byte", &memNS{data: make([]byte, 8<<20), dlfeat: 1, corruptAt: 5<<20 + 123}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := New(tc.ns, cfg, time.Now().Add(20*time.Second)).Run(&out)
			if tc.wantErr {
				if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", 5<<20+123)) {
					t.Fatalf("run() = %v, want a mismatch at byte %d", err, 5<<20+123)
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if (tc.ns.zeroes > 0) != tc.wantZeroW {
				t.Errorf("Write Zeroes used %d times, want used: %v", tc.ns.zeroes, tc.wantZeroW)
			}
		})
	}
}

func TestWorkloadPartition(t *testing.T) {
	wl := &Workload{region: 10<<20 + 4096*3, unit: 4096, rng: rand.New(rand.NewPCG(1, 2))}
	exts := wl.partition()
	covered := make([]bool, wl.region/wl.unit)
	for _, e := range exts {
		if e.len < wl.unit || e.len > maxIO || e.len%wl.unit != 0 || e.off%wl.unit != 0 {
			t.Fatalf("bad extent %+v", e)
		}
		for u := e.off / wl.unit; u < (e.off+e.len)/wl.unit; u++ {
			if covered[u] {
				t.Fatalf("unit %d covered twice", u)
			}
			covered[u] = true
		}
	}
	for u, c := range covered {
		if !c {
			t.Fatalf("unit %d not covered", u)
		}
	}
}
