//go:build rbd

package bdev

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/cephtest"
)

// The rbd tests share one throwaway cluster, started by TestMain
// (ceph-up.sh, memstore, about 10-30 s) and purged at the end.
var (
	cluster     *cephtest.Cluster
	clusterSkip string // why the rbd tests skip
)

func TestMain(m *testing.M) {
	os.Exit(runWithCluster(m))
}

func runWithCluster(m *testing.M) int {
	dir, err := os.MkdirTemp("", "bdev-ceph-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cluster, err = cephtest.Start(dir + "/cluster")
	switch {
	case errors.Is(err, cephtest.ErrNoCeph):
		clusterSkip = err.Error()
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		defer func() {
			if err := cluster.Purge(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	return m.Run()
}

// rbdImage creates an image of size bytes and opens it as a Device,
// closed at the end of the test.
func rbdImage(t *testing.T, name string, size int64) *RBD {
	t.Helper()
	if cluster == nil {
		t.Skip(clusterSkip)
	}
	if err := cluster.CreateImage(name, size); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Kind: KindRBD, Pool: "rbd", Image: name, CephConf: cluster.Conf}
	if err := Check(spec); err != nil {
		t.Fatalf("Check: %v", err)
	}
	d, err := Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*RBD)
}

// waitResult is a Completion a test waits on.
type waitResult chan error

func (w waitResult) Complete(err error) { w <- err }

func (w waitResult) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no completion in 30 s")
		return nil
	}
}

func rbdPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// TestRBDIO runs the Device and Async operations on an image and checks
// the image's bytes (rbd export) at the end.
func TestRBDIO(t *testing.T) {
	const size = 16 << 20
	d := rbdImage(t, "bdev-io", size)
	if d.Size() != size || d.BlockSize() != DefaultBlockSize {
		t.Fatalf("size %d block %d", d.Size(), d.BlockSize())
	}
	if d.ExclusiveLock() {
		t.Error("image created with layering only reports exclusive-lock")
	}
	want := make([]byte, size)
	w1 := rbdPattern(64<<10, 1)
	if n, err := d.WriteAt(w1, 4096); err != nil || n != len(w1) {
		t.Fatalf("WriteAt: %d %v", n, err)
	}
	copy(want[4096:], w1)
	w2 := rbdPattern(8192, 2)
	res := make(waitResult, 1)
	d.WriteAsync(w2, 5<<20, res)
	if err := res.wait(t); err != nil {
		t.Fatalf("WriteAsync: %v", err)
	}
	copy(want[5<<20:], w2)
	d.FlushAsync(res)
	if err := res.wait(t); err != nil {
		t.Fatalf("FlushAsync: %v", err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	d.ReadAsync(got, 5<<20, res)
	if err := res.wait(t); err != nil || !bytes.Equal(got, w2) {
		t.Fatalf("ReadAsync: %v, equal %v", err, bytes.Equal(got, w2))
	}
	// Write zeroes inside the first pattern, sync and async.
	if err := d.WriteZeroes(8192, 4096); err != nil {
		t.Fatal(err)
	}
	clear(want[8192 : 8192+4096])
	d.WriteZeroesAsync(16384, 512, res)
	if err := res.wait(t); err != nil {
		t.Fatal(err)
	}
	clear(want[16384 : 16384+512])
	// A whole object discarded reads back zeroes (librbd removes it).
	big := rbdPattern(4<<20, 3)
	if _, err := d.WriteAt(big, 8<<20); err != nil {
		t.Fatal(err)
	}
	copy(want[8<<20:], big)
	d.DiscardAsync(8<<20, 4<<20, res)
	if err := res.wait(t); err != nil {
		t.Fatal(err)
	}
	clear(want[8<<20 : 12<<20])
	if err := d.Discard(12<<20, 0); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, size)
	if _, err := d.ReadAt(all, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(all, want) {
		t.Fatal("ReadAt of the whole image differs from what was written")
	}
	exp, err := cluster.Export("bdev-io")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exp, want) {
		t.Fatalf("rbd export (%d bytes) differs from what was written", len(exp))
	}
}

// TestRBDErrors: out-of-range and closed-device errors, sync and async.
func TestRBDErrors(t *testing.T) {
	d := rbdImage(t, "bdev-errors", 4<<20)
	res := make(waitResult, 1)
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"read past end", func() error { _, err := d.ReadAt(make([]byte, 1024), 4<<20-512); return err }, ErrOutOfRange},
		{"write negative", func() error { _, err := d.WriteAt(make([]byte, 512), -512); return err }, ErrOutOfRange},
		{"async read past end", func() error { d.ReadAsync(make([]byte, 512), 4<<20, res); return res.wait(t) }, ErrOutOfRange},
		{"async discard past end", func() error { d.DiscardAsync(0, 8<<20, res); return res.wait(t) }, ErrOutOfRange},
		{"write zeroes past end", func() error { return d.WriteZeroes(4<<20, 512) }, ErrOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
	d.WriteAsync(make([]byte, 512), 0, res)
	if err := res.wait(t); !errors.Is(err, ErrClosed) {
		t.Errorf("async write after close: %v", err)
	}
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second close: %v", err)
	}
}

// TestRBDOpenErrors: a missing image or pool, a size that is not the
// image's, a bad keyring.
func TestRBDOpenErrors(t *testing.T) {
	if cluster == nil {
		t.Skip(clusterSkip)
	}
	if err := cluster.CreateImage("bdev-open", 4<<20); err != nil {
		t.Fatal(err)
	}
	base := Spec{Kind: KindRBD, Pool: "rbd", Image: "bdev-open", CephConf: cluster.Conf}
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no image", func(s *Spec) { s.Image = "missing" }, "open image"},
		{"no pool", func(s *Spec) { s.Pool = "nopool" }, "open pool nopool"},
		{"wrong size", func(s *Spec) { s.Size = 8 << 20 }, "the image has 4194304 bytes"},
		{"bad block size", func(s *Spec) { s.BlockSize = 1000 }, "not a power of two"},
		{"missing conf", func(s *Spec) { s.CephConf = "/nonexistent/ceph.conf" }, "read ceph conf"},
		{"unknown client", func(s *Spec) { s.ClientID = "nobody" }, "connect as client.nobody"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.edit(&s)
			for what, f := range map[string]func() error{
				"Check": func() error { return Check(s) },
				"Open": func() error {
					d, err := Open(s)
					if err == nil {
						d.Close()
					}
					return err
				},
			} {
				if err := f(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.want)) {
					t.Errorf("%s: error %v, want %q", what, err, tt.want)
				}
			}
		})
	}
}

// TestRBDResize: a resize with rbd resize is seen by the size watcher.
func TestRBDResize(t *testing.T) {
	old := RBDPollInterval
	RBDPollInterval = 20 * time.Millisecond
	t.Cleanup(func() { RBDPollInterval = old })
	d := rbdImage(t, "bdev-resize", 4<<20)
	changed := make(chan int64, 4)
	d.WatchSize(func() { changed <- d.Size() })
	for _, sz := range []int64{8 << 20, 6 << 20} {
		if _, err := cluster.RBD("resize", "--allow-shrink", "--size", fmt.Sprint(sz>>20)+"M", "rbd/bdev-resize"); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-changed:
			if got != sz {
				t.Fatalf("size after resize %d, want %d", got, sz)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("resize to %d not seen in 30 s", sz)
		}
	}
	// The new end is writable, beyond it is out of range.
	if _, err := d.WriteAt(make([]byte, 512), 6<<20-512); err != nil {
		t.Error(err)
	}
	if _, err := d.WriteAt(make([]byte, 512), 6<<20); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("write past the new end: %v", err)
	}
}

// TestRBDConcurrent: many asynchronous writes and reads in flight at once
// (more than one chunk of slots), each checked.
func TestRBDConcurrent(t *testing.T) {
	const n, bs = 512, 4096
	d := rbdImage(t, "bdev-conc", n*bs)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	done := make(waitResult, n)
	bufs := make([][]byte, n)
	for i := range n {
		bufs[i] = rbdPattern(bs, byte(i))
		d.WriteAsync(bufs[i], int64(i*bs), done)
	}
	for range n {
		if err := done.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]byte, bs)
			if _, err := d.ReadAt(got, int64(i*bs)); err != nil {
				errs <- err
			} else if !bytes.Equal(got, bufs[i]) {
				errs <- fmt.Errorf("block %d differs", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRBDAllocs: the Go side allocates nothing per operation (the slot
// table, its channels and runtime.Pinner's bookkeeping are reused; librbd
// allocates its completion in C).
func TestRBDAllocs(t *testing.T) {
	d := rbdImage(t, "bdev-allocs", 4<<20)
	buf := rbdPattern(4096, 9)
	res := make(waitResult, 1)
	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"async write", func() { d.WriteAsync(buf, 8192, res); <-res }},
		{"async read", func() { d.ReadAsync(buf, 8192, res); <-res }},
		{"async flush", func() { d.FlushAsync(res); <-res }},
	} {
		n := testing.AllocsPerRun(50, tc.op)
		t.Logf("%s: %.1f allocations per operation", tc.name, n)
		if n != 0 {
			t.Errorf("%s: %.1f allocations per operation, want 0", tc.name, n)
		}
	}
}
