package target

import (
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// ioLoop runs one I/O command again and again on a host queue, reusing
// the command: what it allocates is what the transport and target do.
type ioLoop struct {
	q    fabrics.HostQueue
	cmd  fabrics.HostCommand
	done chan struct{}
}

func newIOLoop(tb testing.TB, s *session, op nvme.IOOpcode, blocks int) *ioLoop {
	l := &ioLoop{q: s.io.q, done: make(chan struct{}, 1)}
	l.cmd.SQE = rwSQE(op, 1, 8, uint32(blocks))
	l.cmd.Data = make([]byte, blocks*512)
	l.cmd.Direction = fabrics.DirCtrlToHost
	if op == nvme.IOWrite {
		l.cmd.Direction = fabrics.DirHostToCtrl
	}
	l.cmd.Done = func(*fabrics.HostCommand) { l.done <- struct{}{} }
	return l
}

func (l *ioLoop) once(tb testing.TB) {
	if err := l.q.Submit(&l.cmd); err != nil {
		tb.Fatal(err)
	}
	<-l.done
	if l.cmd.Err != nil || nvme.CQE(l.cmd.CQE[:]).Status() != 0 {
		tb.Fatalf("I/O failed: %v %v", l.cmd.Err, nvme.CQE(l.cmd.CQE[:]))
	}
}

// TestIOAllocs checks that the I/O path allocates nothing per command.
func TestIOAllocs(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	for _, op := range []nvme.IOOpcode{nvme.IORead, nvme.IOWrite} {
		l := newIOLoop(t, s, op, 8)
		for range 100 { // warm up: chunks, free lists, FIFO
			l.once(t)
		}
		if n := testing.AllocsPerRun(1000, func() { l.once(t) }); n != 0 {
			t.Errorf("%v: %.2f allocations per command, want 0", op, n)
		}
	}
}

func benchIO(b *testing.B, op nvme.IOOpcode, blocks int) {
	f := newFixture(b)
	s := f.session()
	l := newIOLoop(b, s, op, blocks)
	l.once(b)
	b.SetBytes(int64(blocks * 512))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.once(b)
	}
}

func BenchmarkRead4K(b *testing.B)   { benchIO(b, nvme.IORead, 8) }
func BenchmarkWrite4K(b *testing.B)  { benchIO(b, nvme.IOWrite, 8) }
func BenchmarkRead128K(b *testing.B) { benchIO(b, nvme.IORead, 256) }

// BenchmarkReadQD32 keeps 32 reads in flight on one queue.
func BenchmarkReadQD32(b *testing.B) {
	f := newFixture(b)
	s := f.session()
	const qd = 32
	done := make(chan *fabrics.HostCommand, qd)
	cmds := make([]fabrics.HostCommand, qd)
	for i := range cmds {
		cmds[i].SQE = rwSQE(nvme.IORead, 1, uint64(i*8), 8)
		cmds[i].Data = make([]byte, 4096)
		cmds[i].Direction = fabrics.DirCtrlToHost
		cmds[i].Tag = uint16(i)
		cmds[i].Done = func(c *fabrics.HostCommand) { done <- c }
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := range cmds {
		if n < b.N {
			if err := s.io.q.Submit(&cmds[i]); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	for range b.N {
		c := <-done
		if c.Err != nil || nvme.CQE(c.CQE[:]).Status() != 0 {
			b.Fatalf("I/O failed: %v", c.Err)
		}
		if n < b.N {
			if err := s.io.q.Submit(c); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
}
