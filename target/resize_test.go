package target

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// resizeConfig is a subsystem with a file (1), a memory (2) and a null (3)
// namespace of the sizes given, on a loop port.
func resizeConfig(t *testing.T, path string, file, mem, null string, grow bool) *configfs.Tree {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(fmt.Sprintf(`
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
`, testSubNQN, path, file, grow, mem, null)), "resize.hcl")
	must(t, err)
	return tree
}

// runningNamespace returns the namespace object nsid of the test
// subsystem: the same pointer before and after a change means it was
// never removed.
func runningNamespace(t *testing.T, tgt *Target, nsid uint32) *namespace {
	t.Helper()
	tgt.mu.RLock()
	defer tgt.mu.RUnlock()
	s, err := tgt.subsystemLocked(testSubNQN)
	must(t, err)
	return s.table().byID[nsid]
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

func startReader(io *hq, nsids ...uint32) *reader {
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
			nsid := nsids[i%len(nsids)]
			var res result
			select {
			case res = <-io.submit(rwSQE(nvme.IORead, nsid, 0, 8), buf, fabrics.DirCtrlToHost):
			case <-time.After(10 * time.Second):
				res.err = errors.New("read timed out")
			}
			if res.err == nil && res.status() != 0 {
				res.err = fmt.Errorf("status %v", res.status())
			}
			if res.err != nil {
				r.mu.Lock()
				r.fail = fmt.Errorf("read %d of namespace %d: %w", i, nsid, res.err)
				r.mu.Unlock()
				return
			}
			r.n.Add(1)
		}
	}()
	return r
}

// waitReads waits until the reader has done n more reads than now.
func (r *reader) waitReads(t *testing.T, n int64) {
	t.Helper()
	want := r.n.Load() + n
	waitUntil(t, fmt.Sprintf("%d reads", want), 20*time.Second, func() bool {
		select {
		case <-r.done:
			return true
		default:
		}
		return r.n.Load() >= want
	})
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
// reload while a host reads them: no read fails, the namespaces are the
// same objects (never removed), the host gets Namespace Attribute Changed
// and Identify Namespace shows the new size, the file has it, the memory
// namespace kept its data. A shrink is refused and changes nothing, except
// for memory and null namespaces, which are created again.
func TestResizeInPlace(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	f := configuredFixture(t, resizeConfig(t, img, "1MiB", "1MiB", "1MiB", false))
	tgt := f.tgt
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	io := f.connectIO(a, 1, 32)

	nsze := func(nsid uint32) uint64 {
		t.Helper()
		r := a.identify(nvme.CNSNamespace, nsid, 0)
		expect(t, r, 0, "Identify Namespace")
		return nvme.IdentifyNamespace(r.data).NSZE()
	}
	pattern := bytes.Repeat([]byte("resized?"), 512/8*8)
	expect(t, io.write(1, 100, pattern), 0, "write to the file")
	expect(t, io.write(2, 100, pattern), 0, "write to memory")
	before := map[uint32]*namespace{}
	for _, nsid := range []uint32{1, 2, 3} {
		before[nsid] = runningNamespace(t, tgt, nsid)
	}

	aer := a.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
	rd := startReader(io, 1, 2, 3)
	rd.waitReads(t, 30)
	_, err := tgt.ApplyConfig(resizeConfig(t, img, "2MiB", "2MiB", "4MiB", true))
	must(t, err)
	rd.waitReads(t, 30)
	rd.finish(t)

	r := a.wait(aer)
	expect(t, r, 0, "Asynchronous Event Request")
	if dw0, want := r.cqe.DW0(), uint32(aerTypeNotice|aerInfoNSChange<<8|logChangedNS<<16); dw0 != want {
		t.Errorf("event %#x, want Namespace Attribute Changed %#x", dw0, want)
	}
	r = a.getLog(nvme.LIDChangedNSList, 0, 4096, 0, false)
	expect(t, r, 0, "Changed Namespace List")
	if ids, _ := nvme.DecodeNSIDList(r.data); len(ids) != 3 {
		t.Errorf("Changed Namespace List %v, want namespaces 1, 2 and 3", ids)
	}
	for nsid, want := range map[uint32]uint64{1: 2 << 20 / 512, 2: 2 << 20 / 512, 3: 4 << 20 / 512} {
		if got := nsze(nsid); got != want {
			t.Errorf("namespace %d: NSZE %d after the resize, want %d", nsid, got, want)
		}
		if runningNamespace(t, tgt, nsid) != before[nsid] {
			t.Errorf("namespace %d was replaced, not resized in place", nsid)
		}
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 2<<20 {
		t.Errorf("file after the resize: %v, %v; want 2 MiB", st, err)
	}
	for _, nsid := range []uint32{1, 2} {
		r := io.read(nsid, 100, 8)
		if expect(t, r, 0, "read back"); !bytes.Equal(r.data, pattern) {
			t.Errorf("namespace %d lost its data in the resize", nsid)
		}
		expect(t, io.write(nsid, 4000, pattern), 0, "write past the old end")
	}

	// Shrinking the file: refused, nothing changes.
	_, err = tgt.ApplyConfig(resizeConfig(t, img, "1MiB", "2MiB", "4MiB", true))
	var na *NotAppliedError
	if !errors.As(err, &na) || !errors.Is(err, bdev.ErrShrink) || !strings.Contains(err.Error(), "resize.hcl:") ||
		!strings.Contains(err.Error(), "never shrunk") {
		t.Errorf("shrinking the file: %v; want a *NotAppliedError placed in resize.hcl matching bdev.ErrShrink", err)
	}
	if got := nsze(1); got != 2<<20/512 {
		t.Errorf("after the refused shrink: NSZE %d", got)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 2<<20 {
		t.Errorf("file after the refused shrink: %v, %v", st, err)
	}
	if tgt.applied.Subsystem(testSubNQN).Namespace(1).Size != 2<<20 {
		t.Error("the refused shrink is in the applied configuration")
	}

	// Growing a file without grow: refused as a new file's open would be.
	_, err = tgt.ApplyConfig(resizeConfig(t, img, "3MiB", "2MiB", "4MiB", false))
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "set grow") {
		t.Errorf("growing the file without grow: %v", err)
	}

	// Memory and null shrink: created again at the new size (memory empty).
	_, err = tgt.ApplyConfig(resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true))
	must(t, err)
	for _, nsid := range []uint32{2, 3} {
		if got := nsze(nsid); got != 1<<20/512 {
			t.Errorf("namespace %d shrunk: NSZE %d", nsid, got)
		}
		if runningNamespace(t, tgt, nsid) == before[nsid] {
			t.Errorf("namespace %d shrunk in place", nsid)
		}
	}
	if r := io.read(2, 100, 8); !bytes.Equal(r.data, make([]byte, len(pattern))) {
		t.Error("memory namespace created again is not empty")
	}
}

// TestResizeEnableInPlace resizes a namespace and disables it in one
// reload, then enables it again: it stays the same object.
func TestResizeEnableInPlace(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	tgt := New(Options{Logger: testLogger(t)})
	t.Cleanup(func() { tgt.Close() })
	tree := resizeConfig(t, img, "1MiB", "1MiB", "1MiB", true)
	_, err := tgt.ApplyConfig(tree)
	must(t, err)
	ns := runningNamespace(t, tgt, 1)
	tree2 := resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true)
	tree2.Subsystem(testSubNQN).Namespace(1).Enable = false
	_, err = tgt.ApplyConfig(tree2)
	must(t, err)
	if runningNamespace(t, tgt, 1) != ns || ns.enabled.Load() || ns.nblocks.Load() != 2<<20/512 {
		t.Errorf("resized and disabled: same %t, enabled %t, %d blocks", runningNamespace(t, tgt, 1) == ns, ns.enabled.Load(), ns.nblocks.Load())
	}
	_, err = tgt.ApplyConfig(resizeConfig(t, img, "2MiB", "1MiB", "1MiB", true))
	must(t, err)
	if runningNamespace(t, tgt, 1) != ns || !ns.enabled.Load() {
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
	f := configuredFixture(t, tree)
	tgt := f.tgt
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	nsze := func() uint64 {
		t.Helper()
		return nvme.IdentifyNamespace(a.identify(nvme.CNSNamespace, 1, 0).data).NSZE()
	}
	aer := a.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
	must(t, tgt.RevalidateNamespace(testSubNQN, 1)) // unchanged: no event
	select {
	case r := <-aer:
		t.Fatalf("event %#x without a change", r.cqe.DW0())
	default:
	}
	must(t, os.Truncate(img, 3<<20))
	must(t, tgt.RevalidateNamespace(testSubNQN, 1))
	expect(t, a.wait(aer), 0, "Namespace Attribute Changed")
	if got := nsze(); got != 3<<20/512 {
		t.Errorf("NSZE %d after the file grew, want %d", got, 3<<20/512)
	}
	must(t, os.Truncate(img, 2<<20))
	if err := tgt.RevalidateNamespace(testSubNQN, 1); !errors.Is(err, bdev.ErrShrink) {
		t.Errorf("file truncated outside: %v, want bdev.ErrShrink", err)
	}
	if got := nsze(); got != 3<<20/512 {
		t.Errorf("NSZE %d after a refused shrink", got)
	}
	if err := tgt.RevalidateNamespace(testSubNQN, 9); !errors.Is(err, ErrNotFound) {
		t.Errorf("namespace 9: %v", err)
	}
}
