package bdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Check reports whether Open(spec) would succeed, without creating,
// growing or writing anything: a file backend's file is opened read-write
// (or, when missing, its directory must exist and be writable), a block
// device is opened as Open opens it and closed at once, a memory backend's
// size is checked against the machine's memory. nvmetd --check runs it on
// every namespace. An rbd image is opened read-only and closed: the
// cluster, the credentials, the pool and the image must answer.
func Check(spec Spec) error {
	if err := checkSpec(spec); err != nil {
		return err
	}
	switch spec.Kind {
	case KindFile:
		return checkFile(spec)
	case KindBlock:
		d, err := OpenBlock(spec)
		if err != nil {
			return err
		}
		return d.Close()
	case KindMemory:
		_, err := checkMemory(spec.Size, spec.BlockSize)
		return err
	case KindNull:
		_, err := sizeAndBlock(KindNull, spec.Size, spec.BlockSize)
		return err
	case KindRBD:
		return CheckRBD(spec)
	}
	_, err := Open(spec) // the kind errors
	return err
}

// checkFile checks a file backend as OpenFile would open it.
func checkFile(spec Spec) error {
	bs, err := fileBlockSize(spec)
	if err != nil {
		return err
	}
	// Stat first: opening a FIFO or a device node could block or have
	// side effects.
	st, err := os.Stat(spec.Path)
	if errors.Is(err, fs.ErrNotExist) {
		if spec.Size == 0 {
			return fmt.Errorf("bdev: file %q does not exist and no size was given to create it", spec.Path)
		}
		// Missing directories are created (mkParents): the nearest
		// existing one must take them.
		dir := filepath.Dir(spec.Path)
		dst, err := os.Stat(dir)
		for errors.Is(err, fs.ErrNotExist) && filepath.Dir(dir) != dir {
			dir = filepath.Dir(dir)
			dst, err = os.Stat(dir)
		}
		switch {
		case err != nil:
			return fmt.Errorf("bdev: file %q cannot be created: %w", spec.Path, err)
		case !dst.IsDir():
			return fmt.Errorf("bdev: file %q cannot be created: %q is not a directory", spec.Path, dir)
		}
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("bdev: file %q cannot be created in %q: %w", spec.Path, dir, err)
		}
		if !spec.BufferedIO {
			return checkDirectIn(dir, spec.Path)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("bdev: file: %w", err)
	}
	if st.IsDir() {
		return fmt.Errorf("bdev: file %q is a directory", spec.Path)
	}
	if !st.Mode().IsRegular() {
		return notRegularError(spec.Path, st.Mode())
	}
	f, err := os.OpenFile(spec.Path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bdev: file: %w", err)
	}
	defer f.Close()
	if _, _, err = fileSize(spec, bs, st.Size(), false); err != nil {
		return err
	}
	if !spec.BufferedIO {
		df, err := os.OpenFile(spec.Path, os.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			return errDirect(fmt.Sprintf("file %q", spec.Path), err)
		}
		df.Close()
	}
	return nil
}

// checkDirectIn checks that the file system of directory dir, where path
// will be created, takes O_DIRECT: an unnamed file (O_TMPFILE) opened
// with it leaves nothing behind. A file system without O_TMPFILE is not
// judged (Open will be).
func checkDirectIn(dir, path string) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if err == unix.EINVAL {
		// EINVAL is also a file system without O_TMPFILE: tell the two
		// apart without O_DIRECT.
		fd2, err2 := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err2 != nil {
			return nil
		}
		unix.Close(fd2)
		return errDirect(fmt.Sprintf("file %q", path), err)
	}
	return nil
}
