package bdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// mkParents creates the missing directories above path, mode 0700 (a
// file backend's image holds a host's data), so that a configuration
// naming a state directory such as /var/lib/nvmetd/disk0.img starts on a
// fresh machine. It returns the directories it made, deepest last, for
// rmDirs when the file cannot be created after all.
func mkParents(path string) ([]string, error) {
	var missing []string
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		_, err := os.Stat(dir)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			return nil, fmt.Errorf("the directory of %q: %w", path, err)
		}
		missing = append(missing, dir)
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			rmDirs(made)
			return nil, fmt.Errorf("create the directory of %q: %w", path, err)
		}
		made = append(made, missing[i])
	}
	return made, nil
}

// rmDirs removes the directories mkParents made, deepest first; a
// directory something else has put a file in meanwhile stays.
func rmDirs(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		os.Remove(made[i])
	}
}
