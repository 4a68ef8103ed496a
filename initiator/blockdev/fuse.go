package blockdev

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// maxFUSEIO is the largest FUSE read or write the kernel sends (its
// FUSE_MAX_MAX_PAGES is 256 pages).
const maxFUSEIO = 1 << 20

// diskName is the one file in the FUSE filesystem.
const diskName = "disk"

// fuseRoot is the filesystem's only directory; it holds the disk file.
type fuseRoot struct {
	fs.Inode
	file *fuseFile
}

var (
	_ fs.NodeOnAdder   = (*fuseRoot)(nil)
	_ fs.NodeGetattrer = (*fuseRoot)(nil)
	_ fs.NodeStatfser  = (*fuseRoot)(nil)
)

// OnAdd adds the disk file when the filesystem is mounted.
func (r *fuseRoot) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild(diskName, ch, false)
}

// Getattr describes the directory: root-only.
func (r *fuseRoot) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o700
	out.Nlink = 2
	out.Ino = 1
	return 0
}

// Statfs reports the block size; the loop driver takes its discard
// granularity from it.
func (r *fuseRoot) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return r.file.Statfs(ctx, out)
}

// fuseFile is the disk: a regular file of the device's size whose I/O goes
// to the engine.
type fuseFile struct {
	fs.Inode
	e     *engine
	mtime time.Time
}

var (
	_ fs.NodeGetattrer = (*fuseFile)(nil)
	_ fs.NodeSetattrer = (*fuseFile)(nil)
	_ fs.NodeOpener    = (*fuseFile)(nil)
	_ fs.NodeReader    = (*fuseFile)(nil)
	_ fs.NodeWriter    = (*fuseFile)(nil)
	_ fs.NodeFsyncer   = (*fuseFile)(nil)
	_ fs.NodeFlusher   = (*fuseFile)(nil)
	_ fs.NodeAllocater = (*fuseFile)(nil)
	_ fs.NodeStatfser  = (*fuseFile)(nil)
)

func (f *fuseFile) fill(out *fuse.Attr) {
	out.Ino = 2
	out.Mode = syscall.S_IFREG | 0o600
	if f.e.readOnly {
		out.Mode = syscall.S_IFREG | 0o400
	}
	out.Nlink = 1
	size := f.e.size()
	out.Size = uint64(size)
	out.Blocks = uint64(size) / 512
	out.Blksize = uint32(f.e.bs)
	out.SetTimes(nil, &f.mtime, &f.mtime)
}

// Getattr returns the file's size (the device's, changed only by
// Mapping.Resize, which invalidates the kernel's copy) and block size.
func (f *fuseFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fill(&out.Attr)
	out.SetTimeout(time.Hour)
	return 0
}

// Setattr refuses to change the size (O_TRUNC included) and ignores
// owner, mode and time changes.
func (f *fuseFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && sz != uint64(f.e.size()) {
		return syscall.EPERM
	}
	f.fill(&out.Attr)
	return 0
}

// Open answers with direct I/O so that the kernel page cache stays out of
// the way and every loop request reaches the device.
func (f *fuseFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.e.readOnly && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

// Read serves any byte range; reads at or past the end return nothing.
func (f *fuseFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off < 0 {
		return nil, syscall.EINVAL
	}
	size := f.e.size()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), size-off)
	if err := f.e.readAt(dest[:n], off); err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write serves any byte range; a write past the end is cut short there.
func (f *fuseFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	size := f.e.size()
	if off >= size {
		if len(data) == 0 {
			return 0, 0
		}
		return 0, syscall.ENOSPC
	}
	n := min(int64(len(data)), size-off)
	if err := f.e.writeAt(data[:n], off); err != nil {
		return 0, errno(err)
	}
	return uint32(n), 0
}

// Fsync flushes the device (the loop driver's REQ_OP_FLUSH arrives here).
func (f *fuseFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return errno(f.e.flush())
}

// Flush runs on every close(2) of the file; it flushes the device so that
// detaching the loop device leaves nothing in a volatile cache.
func (f *fuseFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if f.e.readOnly {
		return 0
	}
	return errno(f.e.flush())
}

// Allocate serves fallocate: PUNCH_HOLE (the loop driver's discard and
// write-zeroes) and ZERO_RANGE make the range read as zeroes, plain
// allocation within the file is a no-op.
func (f *fuseFile) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if end := uint64(f.e.size()); off > end || size > end-off {
		if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
			return syscall.EFBIG
		}
		if off >= end {
			return 0
		}
		size = end - off
	}
	switch mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
		return 0
	case unix.FALLOC_FL_PUNCH_HOLE:
		if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
			return syscall.EINVAL // as the kernel demands
		}
		return errno(f.e.zero(int64(off), int64(size), true))
	case unix.FALLOC_FL_ZERO_RANGE:
		return errno(f.e.zero(int64(off), int64(size), false))
	}
	return syscall.EOPNOTSUPP
}

// Statfs reports one block of the device's size per filesystem block.
func (f *fuseFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = uint32(f.e.bs)
	out.Frsize = uint32(f.e.bs)
	out.Blocks = uint64(f.e.size() / f.e.bs)
	out.Files = 1
	out.NameLen = 255
	return 0
}
