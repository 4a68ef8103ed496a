package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// resizeConfig is a subsystem with a file (1), a memory (2) and a null (3)
// namespace of the sizes given, on a loop port.
func resizeConfig(t *testing.T, path string, file, mem, null string, grow bool) *configfs.Tree {
	t.Helper()
	return parse(t, fmt.Sprintf(`
port "p1" {
  transport = "loop"
  address   = "127.0.77.1"
}
subsystem "%s" {
  ports          = ["p1"]
  allow_any_host = true
  namespace "1" {
    path = "%s"
    size = "%s"
    grow = %t
  }
  namespace "2" {
    backend = "memory"
    size    = "%s"
  }
  namespace "3" {
    backend = "null"
    size    = "%s"
  }
}
`, testSubNQN, path, file, grow, mem, null), "resize.hcl")
}

// reader reads namespaces from its own goroutine until stopped, and
// keeps the first failure.
type reader struct {
	n    atomic.Int64
	mu   sync.Mutex
	fail error
	stop chan struct{}
	done chan struct{}
}

func startReader(nss ...*initiator.Namespace) *reader {
	r := &reader{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 8*512)
		for i := 0; i < 1_000_000; i++ { // bounded; stopped long before
			select {
			case <-r.stop:
				return
			default:
			}
			ns := nss[i%len(nss)]
			if _, err := ns.ReadAt(buf, 0); err != nil {
				r.mu.Lock()
				r.fail = fmt.Errorf("read %d of namespace %d: %w", i, ns.NSID(), err)
				r.mu.Unlock()
				return
			}
			r.n.Add(1)
		}
	}()
	return r
}

// waitReads waits until the reader has done n more reads than now (or
// stopped).
func (r *reader) waitReads(t *testing.T, n int64) {
	t.Helper()
	want := r.n.Load() + n
	deadline := time.Now().Add(20 * time.Second)
	for r.n.Load() < want {
		select {
		case <-r.done:
			return
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads: timed out at %d", want, r.n.Load())
		}
	}
}

func (r *reader) finish(t *testing.T) {
	t.Helper()
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		t.Errorf("a read during the resize failed: %v", r.fail)
	}
}

// TestResizeInPlace grows a file, a memory and a null namespace by a
// reload while a host reads them: no read fails, the namespaces keep their
// backends (never removed), the host gets Namespace Attribute Changed and
// Identify Namespace shows the new size, the file has it, the memory
// namespace kept its data. A shrink is refused and changes nothing, except
// for memory and null namespaces, which are created again.
func TestResizeInPlace(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	f := newFixture(t)
	c, events := f.hostOn(resizeConfig(t, img, "1MiB", "1MiB", "1MiB", false))
	nss := c.Namespaces()
	if len(nss) != 3 {
		t.Fatalf("%d namespaces", len(nss))
	}
	pattern := bytes.Repeat([]byte("resized?"), 512/8*8)
	for _, ns := range nss[:2] {
		if _, err := ns.WriteAt(pattern, 100*512); err != nil {
			t.Fatalf("write to namespace %d: %v", ns.NSID(), err)
		}
	}
	before := map[uint32]bdev.Device{}
	for _, nsid := range []uint32{1, 2, 3} {
		before[nsid] = f.tgt.NamespaceDevice(testSubNQN, nsid)
	}

	rd := startReader(nss...)
	rd.waitReads(t, 30)
	_, err := f.rc.Apply(resizeConfig(t, img, "2MiB", "2MiB", "4MiB", true))
	must(t, err)
	rd.waitReads(t, 30)
	rd.finish(t)

	ev := waitEvent(t, events, nvme.AENNamespaceChanged)
	if slices.Sort(ev.ChangedNSIDs); !slices.Equal(ev.ChangedNSIDs, []uint32{1, 2, 3}) {
		t.Errorf("Changed Namespace List %v, want namespaces 1, 2 and 3", ev.ChangedNSIDs)
	}
	for nsid, want := range map[uint32]uint64{1: 2 << 20 / 512, 2: 2 << 20 / 512, 3: 4 << 20 / 512} {
		if got := nsze(t, c, nsid); got != want {
			t.Errorf("namespace %d: NSZE %d after the resize, want %d", nsid, got, want)
		}
		if f.tgt.NamespaceDevice(testSubNQN, nsid) != before[nsid] {
			t.Errorf("namespace %d was replaced, not resized in place", nsid)
		}
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 2<<20 {
		t.Errorf("file after the resize: %v, %v; want 2 MiB", st, err)
	}
	must(t, c.Rescan(ctxT(t)))
	for _, nsid := range []uint32{1, 2} {
		ns, err := c.Namespace(nsid)
		must(t, err)
		got := make([]byte, len(pattern))
		if _, err := ns.ReadAt(got, 100*512); err != nil || !bytes.Equal(got, pattern) {
			t.Errorf("namespace %d lost its data in the resize: %v", nsid, err)
		}
		if _, err := ns.WriteAt(pattern, 4000*512); err != nil {
			t.Errorf("write past the old end of namespace %d: %v", nsid, err)
		}
	}

	// Shrinking the file: refused, nothing changes.
	_, err = f.rc.Apply(resizeConfig(t, img, "1MiB", "2MiB", "4MiB", true))
	var na *NotAppliedError
	if !errors.As(err, &na) || !errors.Is(err, bdev.ErrShrink) || !strings.Contains(err.Error(), "resize.hcl:") ||
		!strings.Contains(err.Error(), "never shrunk") {
		t.Errorf("shrinking the file: %v; want a *NotAppliedError placed in resize.hcl matching bdev.ErrShrink", err)
	}
	if got := nsze(t, c, 1); got != 2<<20/512 {
		t.Errorf("after the refused shrink: NSZE %d", got)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 2<<20 {
		t.Errorf("file after the refused shrink: %v, %v", st, err)
	}
	if f.rc.Applied().Subsystem(testSubNQN).Namespace(1).Size != 2<<20 {
		t.Error("the refused shrink is in the applied configuration")
	}

	// Growing a file without grow: refused as a new file's open would be.
	_, err = f.rc.Apply(resizeConfig(t, img, "3MiB", "2MiB", "4MiB", false))
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "set grow") {
		t.Errorf("growing the file without grow: %v", err)
	}

	// Memory and null shrink: created again at the new size (memory empty).
	_, err = f.rc.Apply(resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true))
	must(t, err)
	for _, nsid := range []uint32{2, 3} {
		if got := nsze(t, c, nsid); got != 1<<20/512 {
			t.Errorf("namespace %d shrunk: NSZE %d", nsid, got)
		}
		if f.tgt.NamespaceDevice(testSubNQN, nsid) == before[nsid] {
			t.Errorf("namespace %d shrunk in place", nsid)
		}
	}
	got := make([]byte, len(pattern))
	if _, err := f.tgt.NamespaceDevice(testSubNQN, 2).ReadAt(got, 100*512); err != nil || !bytes.Equal(got, make([]byte, len(pattern))) {
		t.Errorf("memory namespace created again is not empty: %v", err)
	}
}

// TestResizeEnableInPlace resizes a namespace and disables it in one
// reload, then enables it again: it keeps its backend.
func TestResizeEnableInPlace(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	f := newFixture(t)
	f.apply(resizeConfig(t, img, "1MiB", "1MiB", "1MiB", true))
	dev := f.tgt.NamespaceDevice(testSubNQN, 1)
	enabled := func() bool {
		for _, s := range f.tgt.Stats().Subsystems {
			for _, ns := range s.Namespaces {
				if s.NQN == testSubNQN && ns.NSID == 1 {
					return ns.Enabled
				}
			}
		}
		t.Fatal("namespace 1 not in Stats")
		return false
	}
	tree2 := resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true)
	tree2.Subsystem(testSubNQN).Namespace(1).Enable = false
	f.apply(tree2)
	if now := f.tgt.NamespaceDevice(testSubNQN, 1); now != dev || enabled() || now.Size() != 2<<20 {
		t.Errorf("resized and disabled: same %t, enabled %t, %d bytes", now == dev, enabled(), now.Size())
	}
	f.apply(resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true))
	if f.tgt.NamespaceDevice(testSubNQN, 1) != dev || !enabled() {
		t.Error("enabled again: replaced or still disabled")
	}
}

// TestRevalidateNamespace: a file namespace without a configured size
// follows its file grown outside the target (the event is raised, Identify
// shows the new size); a file truncated outside is refused and the
// namespace keeps its size.
func TestRevalidateNamespace(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	must(t, os.WriteFile(img, nil, 0o600))
	must(t, os.Truncate(img, 1<<20))
	tree := resizeConfig(t, img, "1MiB", "1MiB", "1MiB", false)
	tree.Subsystem(testSubNQN).Namespace(1).Size = 0
	f := newFixture(t)
	c, events := f.hostOn(tree)
	must(t, f.rc.RevalidateNamespace(testSubNQN, 1)) // unchanged: no event
	noEvent(t, events)
	must(t, os.Truncate(img, 3<<20))
	must(t, f.rc.RevalidateNamespace(testSubNQN, 1))
	waitEvent(t, events, nvme.AENNamespaceChanged)
	if got := nsze(t, c, 1); got != 3<<20/512 {
		t.Errorf("NSZE %d after the file grew, want %d", got, 3<<20/512)
	}
	must(t, os.Truncate(img, 2<<20))
	if err := f.rc.RevalidateNamespace(testSubNQN, 1); !errors.Is(err, bdev.ErrShrink) {
		t.Errorf("file truncated outside: %v, want bdev.ErrShrink", err)
	}
	if got := nsze(t, c, 1); got != 3<<20/512 {
		t.Errorf("NSZE %d after a refused shrink", got)
	}
	if err := f.rc.RevalidateNamespace(testSubNQN, 9); !errors.Is(err, target.ErrNotFound) {
		t.Errorf("namespace 9: %v", err)
	}
}
