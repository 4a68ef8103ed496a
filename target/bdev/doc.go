// Package bdev holds the block backends behind a namespace (file, block
// device, memory, null) behind one small interface, Device.
//
// The NVMe target's I/O path calls a Device once per command with buffers it
// owns; no backend allocates on a successful ReadAt, WriteAt or Flush (the
// memory backend allocates a chunk the first time a range is written). Every
// operation checks its offset and length against Size and returns an error
// that matches ErrOutOfRange instead of touching anything outside the device.
//
// Backends:
//
//   - file: a regular file, opened O_DIRECT as well unless Spec.BufferedIO
//     (a file system that refuses O_DIRECT fails Open with an error that
//     says to set buffered_io). Its asynchronous methods (Async, FUAWriter)
//     run on an io_uring with at most Spec.QueueDepth operations in flight
//     (uring.go, docs/backends.md); the blocking ones use pread/pwrite. Created
//     (sparse) at Spec.Size when missing. An existing file of another size is
//     refused unless Spec.Grow is set and the file is smaller, in which case
//     it is extended; a file is never shrunk. Spec.Size 0 uses the file's
//     size rounded down to the block size. Flush is fdatasync. WriteZeroes
//     uses fallocate(FALLOC_FL_ZERO_RANGE), Discard
//     fallocate(FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE); both fall back to
//     writing zeroes where the file system lacks them.
//   - block: a block device node, opened O_EXCL (so a mounted device is
//     refused). Size by BLKGETSIZE64, logical block size by BLKSSZGET.
//     Requests aligned to the logical block size, with a buffer aligned to it,
//     go through a second O_DIRECT descriptor unless Spec.BufferedIO is set;
//     the rest use the buffered descriptor. Flush is fsync, WriteZeroes is
//     BLKZEROOUT, Discard is BLKDISCARD (falling back to BLKZEROOUT). The
//     asynchronous methods run on an io_uring as for files, with fallocate
//     (ZERO_RANGE, PUNCH_HOLE) for Write Zeroes and Discard.
//
// A failed Flush of a file or block device is kept and returned by every
// later Flush: the kernel may have dropped the pages it could not write.
//   - memory: a sparse RAM disk in 64 KiB chunks allocated on first write.
//   - null: reads return zeroes, writes are dropped.
//
// After Discard, the file, memory and null backends read back zeroes; a
// block device reads back what the device returns after a discard (Linux
// loop devices return zeroes).
//
// Optional interfaces: HealthReporter (SMART / health data of the disk
// behind a block device: NVMe, SATA and SAS, see ReadHealth; cached for
// HealthTTL) and Identifier (a stable identifier of the medium, e.g. a
// disk's WWID).
//
// Monitor (monitor.go) is what the target puts beside each namespace's
// Device: it logs the backend's I/O errors, rate limited, with the
// operation, offset and errno, and notices a backing file unlinked under
// a file backend (LinkChecker, fstat's st_nlink == 0).
package bdev
