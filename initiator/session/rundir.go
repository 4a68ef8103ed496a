package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/initiator/blockdev"
)

// DefaultRunDir is where the daemons keep their state.
const DefaultRunDir = "/run/nvmeof"

// NamePrefix starts every controller name (nvmeof0, nvmeof1, ...).
const NamePrefix = "nvmeof"

// MaxControllers bounds the controller names Allocate tries.
const MaxControllers = 1024

// File names inside a controller's directory.
const (
	StateFile  = "state.json"
	SocketFile = "ctl.sock"
	// LogSuffix ends a daemon's log file, RunDir/nvmeofN.log: beside the
	// controller's directory, not in it, so that the log outlives the
	// daemon (the directory goes when it exits) and tells why it ended.
	LogSuffix = ".log"
)

// MaxLogSize is the size past which a log file is rotated (to .log.1)
// when the next daemon of the same name starts.
const MaxLogSize = 4 << 20

// ErrNoFreeName is returned by Allocate when every name up to
// MaxControllers is taken.
var ErrNoFreeName = errors.New("session: no free controller name")

// Slot is an allocated controller name: its directory and its lock file,
// whose exclusive flock marks the name as in use.
type Slot struct {
	Name   string   // e.g. "nvmeof0"
	RunDir string   // the run directory
	Dir    string   // RunDir/Name
	Lock   *os.File // RunDir/Name.lock, flock'ed exclusively
}

// StatePath returns the path of the slot's state file.
func (s *Slot) StatePath() string { return filepath.Join(s.Dir, StateFile) }

// SocketPath returns the path of the slot's control socket.
func (s *Slot) SocketPath() string { return filepath.Join(s.Dir, SocketFile) }

// LogPath returns the path of the slot's log file; daemons of the same
// name append to it.
func (s *Slot) LogPath() string { return LogPath(s.RunDir, s.Name) }

// LogPath returns the log file of controller name under runDir.
func LogPath(runDir, name string) string { return filepath.Join(runDir, name+LogSuffix) }

func lockPath(runDir, name string) string { return filepath.Join(runDir, name+".lock") }

// Allocate picks the lowest free controller name under runDir, creating
// runDir if needed: a name is free when its lock file does not exist
// (created with O_EXCL) or when nobody holds its flock (a dead daemon's,
// cleaned up and taken over). The returned slot's directory exists and is
// empty, and its lock is held.
func Allocate(runDir string) (*Slot, error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("session: run directory: %w", err)
	}
	for i := range MaxControllers {
		name := NamePrefix + strconv.Itoa(i)
		lp := lockPath(runDir, name)
		f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			if !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("session: %w", err)
			}
			f = lockStale(runDir, name)
			if f == nil {
				continue // in use, or changing under us
			}
		} else if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		s := &Slot{Name: name, RunDir: runDir, Dir: filepath.Join(runDir, name), Lock: f}
		// A directory without a live lock is a leftover (a crash between
		// the directory's creation and its lock's removal).
		cleanupDir(s.Dir)
		if err := os.Mkdir(s.Dir, 0o755); err != nil {
			s.Release()
			return nil, fmt.Errorf("session: %w", err)
		}
		return s, nil
	}
	return nil, ErrNoFreeName
}

// lockStale opens the existing lock file of name and returns it locked if
// it belonged to a daemon that died (nobody holds its flock), after
// cleaning that daemon's leftovers. It returns nil when the name is in use
// or the lock file changed meanwhile.
func lockStale(runDir, name string) *os.File {
	lp := lockPath(runDir, name)
	f, err := os.OpenFile(lp, os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	if !sameFile(f, lp) {
		f.Close()
		return nil
	}
	cleanupDir(filepath.Join(runDir, name))
	// The dead daemon's ublk disks went with it (the driver stops a device
	// whose server exited); its stopped devices stay until deleted.
	blockdev.RemoveStaleUblk(nil)
	return f
}

// sameFile reports whether the open file f is still the file at path.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

// Release removes the slot's directory and lock file and releases the
// lock. The caller must have removed its mappings first.
func (s *Slot) Release() {
	if s.Lock == nil {
		return
	}
	cleanupDir(s.Dir)
	if sameFile(s.Lock, lockPath(s.RunDir, s.Name)) {
		os.Remove(lockPath(s.RunDir, s.Name))
	}
	s.Lock.Close()
	s.Lock = nil
}

// Entry is a controller name found under a run directory.
type Entry struct {
	Name string
	Dir  string
	// State is the daemon's last written state, nil while the daemon is
	// still connecting (or when its state file is unreadable).
	State *State
}

// SocketPath returns the path of the entry's control socket.
func (e Entry) SocketPath() string { return filepath.Join(e.Dir, SocketFile) }

// Scan lists the live daemons under runDir in name order. Entries of dead
// daemons (nobody holds their lock) are cleaned up and left out; their
// names are returned in stale.
func Scan(runDir string) (live []Entry, stale []string, err error) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("session: %w", err)
	}
	for _, de := range ents {
		name, ok := strings.CutSuffix(de.Name(), ".lock")
		if !ok || !validName(name) {
			continue
		}
		if f := lockStale(runDir, name); f != nil {
			os.Remove(lockPath(runDir, name))
			f.Close()
			stale = append(stale, name)
			continue
		}
		e := Entry{Name: name, Dir: filepath.Join(runDir, name)}
		if st, err := ReadState(filepath.Join(e.Dir, StateFile)); err == nil {
			e.State = st
		}
		live = append(live, e)
	}
	sort.Slice(live, func(i, j int) bool { return nameIndex(live[i].Name) < nameIndex(live[j].Name) })
	return live, stale, nil
}

// validName reports whether s is a controller name (nvmeofN).
func validName(s string) bool { return nameIndex(s) >= 0 }

// nameIndex returns N of "nvmeofN", or -1.
func nameIndex(s string) int {
	rest, ok := strings.CutPrefix(s, NamePrefix)
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ParseDeviceName splits a device name as the commands take it:
// "nvmeof0" (a controller) or "nvmeof0n1" (namespace 1 of nvmeof0). It
// returns ok false for anything else.
func ParseDeviceName(s string) (ctrl string, nsid uint32, ok bool) {
	s = strings.TrimPrefix(s, "/dev/")
	if validName(s) {
		return s, 0, true
	}
	i := strings.LastIndexByte(s, 'n')
	if i <= len(NamePrefix) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil || n == 0 || s[i+1] == '0' || !validName(s[:i]) {
		return "", 0, false
	}
	return s[:i], uint32(n), true
}
