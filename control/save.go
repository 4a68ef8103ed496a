package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nvmeof/nvmeof/configfs"
)

// --- config ---

// SaveParams are config.save's params.
type SaveParams struct {
	// Format is "hcl" (the default) or "json" (nvmetcli's).
	Format string `json:"format,omitempty"`
	// Path, if set, is where the daemon writes the configuration
	// (replaced atomically, mode 0600).
	Path string `json:"path,omitempty"`
}

// SaveResult is config.save's result.
type SaveResult struct {
	Format string `json:"format"`
	Config string `json:"config"`
	Path   string `json:"path,omitempty"`
	// Warnings name what the format cannot hold (nvmetcli JSON has no
	// log_level and no place for some nvmetd attributes).
	Warnings []string `json:"warnings,omitempty"`
}

// jsonLosses loads the nvmetcli JSON saved of tree back and names what
// differs: what the format does not hold.
func jsonLosses(tree *configfs.Tree, js []byte) []string {
	back, err := configfs.ParseNvmetcliJSON(js, "saved.json")
	if err != nil {
		return []string{"the saved JSON does not load back: " + err.Error()}
	}
	ch := configfs.Diff(tree, back)
	var out []string
	if ch.LogLevel {
		out = append(out, "log_level is not saved (nvmetcli JSON has none)")
	}
	for _, p := range ch.Ports {
		out = append(out, "ports/"+p.ID+": attributes nvmetcli JSON does not hold are not saved (data_pool_size, srq_size)")
	}
	for _, s := range ch.Subsystems {
		out = append(out, "subsystems/"+s.NQN+": attributes nvmetcli JSON does not hold are not saved (max_controllers, max_controllers_per_host)")
	}
	for _, l := range [][]string{ch.PortsAdded, ch.PortsRemoved, ch.SubsystemsAdded, ch.SubsystemsRemoved, ch.HostsAdded, ch.HostsRemoved, ch.HostsChanged} {
		for _, n := range l {
			out = append(out, n+": differs once saved as nvmetcli JSON")
		}
	}
	return out
}

func (s *Service) configSave(p *SaveParams) (any, *Error) {
	if p.Path != "" {
		// The tree written and the count of unsaved changes agree.
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.applied {
			return nil, errNotStarted()
		}
	}
	tree := s.Tree()
	var out []byte
	var res SaveResult
	switch p.Format {
	case "", "hcl":
		p.Format = "hcl"
		out = tree.HCL()
	case "json":
		b, err := tree.NvmetcliJSON()
		if err != nil {
			return nil, errorf(CodeInternal, "nvmetcli JSON: %v", err)
		}
		out = b
		res.Warnings = jsonLosses(tree, b)
	default:
		return nil, invalidParams("format %q: want hcl or json", p.Format)
	}
	res.Format, res.Config = p.Format, string(out)
	if p.Path != "" {
		if !filepath.IsAbs(p.Path) {
			return nil, invalidParams("path %q: give an absolute path (the daemon's working directory is not the client's)", p.Path)
		}
		if err := writeAtomic(p.Path, out); err != nil {
			if errors.Is(err, errNotRegular) {
				return nil, refused("config.save writes only regular files: %v", err)
			}
			return nil, errorf(CodeIO, "writing %s: %v", p.Path, err)
		}
		s.unsaved = 0
		res.Path = p.Path
	}
	return res, nil
}

// writeAtomic replaces the regular file at path (or creates it) with
// data, mode 0600: through a temporary file in the same directory, synced,
// renamed over path, and the directory synced, so that a crash leaves the
// old file or the new one, whole. Anything else at path (a device, a FIFO,
// a socket such as the control socket itself, a directory) is refused, not
// replaced: the rename would remove it. A symlink is followed: its target
// is replaced, the link stays.
func writeAtomic(path string, data []byte) error {
	path, err := regularTarget(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp's mode already; said for the reader
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("the file is written; syncing its directory %s: %w", dir, err)
	}
	return nil
}

// errNotRegular refuses a save over something that is not a regular
// file.
var errNotRegular = errors.New("not a regular file")

// regularTarget returns the path writeAtomic replaces: path, or the file
// its symlinks lead to; an error when that exists and is not a regular
// file. (A file swapped for something else between this check and the
// rename is replaced all the same: only who may write the directory can
// do that.)
func regularTarget(path string) (string, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is a %s, %w: not replaced", path, fileKind(st.Mode()), errNotRegular)
	}
	return path, nil
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "directory"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSymlink != 0:
		return "symlink to nothing"
	}
	return "special file"
}

// syncDir makes a rename in dir durable (a variable for tests).
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
