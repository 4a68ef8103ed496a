package target

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// infoLog is an Info-level log (nvmetd's default) kept for inspection.
type infoLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *infoLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the lines holding every one of words.
func (l *infoLog) lines(words ...string) []string {
	l.mu.Lock()
	s := l.b.String()
	l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(s, "\n") {
		ok := ln != ""
		for _, w := range words {
			ok = ok && strings.Contains(ln, w)
		}
		if ok {
			out = append(out, ln)
		}
	}
	return out
}

func (l *infoLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newInfoLog() (*infoLog, hclog.Logger) {
	l := &infoLog{}
	return l, hclog.New(&hclog.LoggerOptions{Output: l, Level: hclog.Info})
}

// TestBackendErrorsLogged: a read past the end of a file truncated under
// the file backend fails the command and is logged at Info level with the
// namespace, operation and offset; once the file is also unlinked, the
// next error notices it and the namespace's stats say so.
func TestBackendErrorsLogged(t *testing.T) {
	log, lg := newInfoLog()
	f := newFixtureWith(t, Options{Logger: lg})
	path := filepath.Join(t.TempDir(), "ns2.img")
	dev, err := bdev.OpenFile(bdev.Spec{Kind: bdev.KindFile, Path: path, Size: 1 << 20})
	must(t, err)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
	s := f.session()

	must(t, os.Truncate(path, 4096))
	if r := s.io.read(2, 1024, 8); r.err != nil || r.cqe.Status() == 0 {
		t.Fatalf("read past the truncated end: %v, status %#x", r.err, r.cqe.Status())
	}
	if got := log.lines("backend I/O error", "subsys="+testSubNQN, "nsid=2", "op=Read", "offset=524288", "length=4096"); len(got) != 1 {
		t.Fatalf("want one backend error line, log:\n%s", log)
	}

	must(t, os.Remove(path))
	s.io.read(2, 1024, 8)
	if got := log.lines("[WARN]", "backing file unlinked", "nsid=2", path); len(got) != 1 {
		t.Fatalf("want the unlinked warning, log:\n%s", log)
	}
	ns := namespaceStats(t, f.tgt, 2)
	if !ns.BackendUnlinked || ns.BackendErrors != 2 {
		t.Fatalf("stats %+v, want BackendUnlinked and 2 BackendErrors", ns)
	}
}

// namespaceStats returns the stats of namespace nsid of the test subsystem.
func namespaceStats(t *testing.T, tgt *Target, nsid uint32) NamespaceStats {
	t.Helper()
	for _, s := range tgt.Stats().Subsystems {
		if s.NQN != testSubNQN {
			continue
		}
		for _, n := range s.Namespaces {
			if n.NSID == nsid {
				return n
			}
		}
	}
	t.Fatalf("namespace %d not in the stats", nsid)
	return NamespaceStats{}
}

// TestReservationFileDeleted: a reservation file deleted while PTPL is on
// is a warning, and the check writes it again, so that the registrations
// survive the next restart instead of silently going; a file missing when
// the namespace is created is logged too.
func TestReservationFileDeleted(t *testing.T) {
	log, lg := newInfoLog()
	f := newFixtureWith(t, Options{Logger: lg}, func(s *SubsystemConfig, _ *PortConfig) { s.AllowAnyHost = true })
	file := filepath.Join(t.TempDir(), "ns3.resv")
	const nsid = 3
	add := func() {
		mem, err := bdev.NewMemory(1<<20, 512)
		must(t, err)
		must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: nsid, Device: mem, Reservations: true, ReservationFile: file}))
	}
	add()
	if got := log.lines("[INFO]", "reservation file", "not found", file); len(got) != 1 {
		t.Fatalf("want a note that the file was not there, log:\n%s", log)
	}
	a := f.connectAs(t, hostANQN, hostA)
	sqe := newSQE(uint8(nvme.IOReservationRegister), nsid)
	cmd := nvme.ReservationCommand{SQE: nvme.SQE(sqe[:])}
	cmd.SetAction(nvme.ResvRegister)
	cmd.SetCPTPL(nvme.CPTPLSet)
	expect(t, a.io.run(sqe, resvData(0, 0xa), fabrics.DirHostToCtrl), 0, "A registers, PTPL on")

	must(t, os.Remove(file))
	ns := func() *namespace {
		f.tgt.mu.RLock()
		defer f.tgt.mu.RUnlock()
		s, err := f.tgt.subsystemLocked(testSubNQN)
		must(t, err)
		return s.activeNamespace(nsid)
	}()
	ns.checkReservationFile()
	if got := log.lines("[WARN]", "reservation file missing", file); len(got) != 1 {
		t.Fatalf("want a warning for the deleted file, log:\n%s", log)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("file not written again: %v", err)
	}
	ns.checkReservationFile()
	if got := log.lines("reservation file missing"); len(got) != 1 {
		t.Fatalf("warned again with the file back, log:\n%s", log)
	}

	// As after a restart: the registration is back.
	must(t, f.tgt.RemoveNamespace(testSubNQN, nsid))
	add()
	sqe = newSQE(uint8(nvme.IOReservationReport), nsid)
	rc := nvme.ReservationReportCommand{SQE: nvme.SQE(sqe[:])}
	rc.SetLength(4096)
	rc.SetEDS(true)
	r := a.io.run(sqe, make([]byte, 4096), fabrics.DirCtrlToHost)
	expect(t, r, 0, "report")
	st, err := nvme.ParseReservationStatus(r.data, true)
	must(t, err)
	if st.Registrants != 1 || !st.PTPLS {
		t.Fatalf("after re-creation %+v, want A registered with PTPL", st)
	}
}
