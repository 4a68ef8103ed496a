package target

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Persist Through Power Loss: a namespace with a reservation file
// (NamespaceConfig.ReservationFile, as SPDK's ptpl_file) keeps its
// registrations and reservation there while the host has PTPL on (CPTPL
// 11b, or Set Features Reservation Persistence), and gets them back when
// it is created again (a restart, a reload that replaces it). The file is
// written whole (temporary file, fsync, rename) after every change, off
// the transport's goroutine, before the command completes.

// resvFileVersion is the version of the file's format.
const resvFileVersion = 1

// resvFile is the reservation file's JSON.
type resvFile struct {
	Version     int             `json:"version"`
	PTPL        bool            `json:"ptpl"`
	Generation  uint32          `json:"generation"`
	Type        uint8           `json:"rtype,omitempty"`
	Holder      string          `json:"holder,omitempty"` // host identifier (UUID form)
	Registrants []resvFileEntry `json:"registrants,omitempty"`
}

type resvFileEntry struct {
	HostID string `json:"hostid"`
	Key    uint64 `json:"rkey"`
	// HostNQN is the NQN the Host ID is bound to (admission.go); files
	// written before it was kept have none, which binds nothing.
	HostNQN string `json:"hostnqn,omitempty"`
}

// resvSnapshot is the state to write, numbered so that a slower writer
// never overwrites a newer state.
type resvSnapshot struct {
	seq  uint64
	data []byte
}

// loadFile reads the reservation file; a missing file is an empty state,
// noted in the log (a first start, or a file lost: nothing tells them
// apart here). Registrations come back only when PTPL was on.
func (p *reservations) loadFile(log hclog.Logger) error {
	b, err := os.ReadFile(p.file)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("reservation file not found: no registrations persisted", "file", p.file)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reservation file: %w", err)
	}
	var f resvFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("reservation file %s: %w", p.file, err)
	}
	if f.Version != resvFileVersion {
		return fmt.Errorf("reservation file %s: version %d, want %d", p.file, f.Version, resvFileVersion)
	}
	if !f.PTPL {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ptpl, p.gen = true, f.Generation
	for _, e := range f.Registrants {
		id, err := fabrics.ParseUUID(e.HostID)
		if err != nil {
			return fmt.Errorf("reservation file %s: registrant %q: %w", p.file, e.HostID, err)
		}
		p.regs = append(p.regs, registrant{host: id, key: e.Key, nqn: e.HostNQN})
	}
	if f.Type != 0 {
		rt := nvme.ReservationType(f.Type)
		h, err := fabrics.ParseUUID(f.Holder)
		if err != nil || !rt.Valid() || p.find(h) < 0 {
			return fmt.Errorf("reservation file %s: reservation type %d held by %q: not a registrant or type", p.file, f.Type, f.Holder)
		}
		p.held, p.holder, p.rtype = true, h, rt
	}
	p.publishLocked()
	return nil
}

// snapshotLocked returns the state to write to the file (p.mu held), nil
// without a file.
func (p *reservations) snapshotLocked() *resvSnapshot {
	if p.file == "" {
		return nil
	}
	f := resvFile{Version: resvFileVersion, PTPL: p.ptpl, Generation: p.gen}
	if p.ptpl {
		for _, r := range p.regs {
			f.Registrants = append(f.Registrants, resvFileEntry{HostID: fabrics.FormatUUID(r.host), Key: r.key, HostNQN: r.nqn})
		}
		if p.held {
			f.Type, f.Holder = uint8(p.rtype), fabrics.FormatUUID(p.holder)
		}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	p.seq++
	return &resvSnapshot{seq: p.seq, data: append(b, '\n')}
}

// save writes a snapshot unless a newer one was written already.
func (p *reservations) save(s *resvSnapshot) error {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	if s.seq <= p.saved {
		return nil
	}
	dir := filepath.Dir(p.file)
	tmp, err := os.CreateTemp(dir, ".resv-*")
	if err != nil {
		return fmt.Errorf("reservation file: %w", err)
	}
	_, err = tmp.Write(s.data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p.file)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("reservation file %s: %w", p.file, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself
		d.Close()
	}
	p.saved = s.seq
	return nil
}

// checkReservationFile writes the reservation file again, with a warning,
// when it has gone while PTPL is on: the state in memory is intact, but
// the next restart would silently start without it. The namespace's
// monitor runs it periodically.
func (ns *namespace) checkReservationFile() {
	p := ns.pr
	p.saveMu.Lock() // no save in progress: its rename would recreate the file
	_, err := os.Stat(p.file)
	saved := p.saved
	p.saveMu.Unlock()
	if !errors.Is(err, fs.ErrNotExist) {
		return
	}
	p.mu.Lock()
	if !p.ptpl || p.seq != saved {
		// PTPL off: nothing to keep; or a newer state is on its way
		// to the file.
		p.mu.Unlock()
		return
	}
	snap := p.snapshotLocked()
	p.mu.Unlock()
	ns.log.Warn("reservation file missing while persist through power loss is on: writing it again", "file", p.file)
	if err := p.save(snap); err != nil {
		ns.log.Error("reservation state not persisted", "err", err)
	}
}

// finishSaved completes r with s once snap is on disk (at once without
// one); a failed write is Internal Error, the state in memory stays.
func (c *controller) finishSaved(q *queue, r *fabrics.Request, p *reservations, snap *resvSnapshot, s nvme.Error, loc uint16) {
	if snap == nil {
		q.complete(r, s, loc, 0)
		return
	}
	go func() {
		if err := p.save(snap); err != nil {
			c.log.Error("reservation state not persisted", "err", err)
			q.complete(r, st(nvme.StatusInternalError), noLoc, 0)
			return
		}
		q.complete(r, s, loc, 0)
	}()
}

// setPTPL turns Persist Through Power Loss on or off (p.mu held); false
// when the namespace has no file.
func (p *reservations) setPTPLLocked(on bool) bool {
	if p.file == "" {
		return !on
	}
	p.ptpl = on
	return true
}
