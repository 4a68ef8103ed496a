// Package blockdev maps a namespace as a local block device: the kernel's
// ublk driver or NBD where they exist, otherwise a FUSE file attached to a
// loop device.
//
// # Methods
//
// ublk (MethodUblk): this process is the ublk server of a /dev/ublkbN
// (ublk_drv). It sends only the ioctl-encoded UBLK_U_* opcodes, which
// later kernels require and the first ublk releases (6.0-6.2) do not
// know; checked on 6.12. A small
// io_uring with 128-byte SQEs (internal/uring, no cgo) sends the control
// commands to /dev/ublk-control: ADD_DEV (one hardware queue, 64 tags,
// 512 KiB requests), SET_PARAMS (logical block size of the namespace, up to
// the 4 KiB page size; capacity; volatile write cache so flushes arrive;
// discard and write-zeroes limits unless read-only), START_DEV, and on
// Unmap STOP_DEV then DEL_DEV. The queue is served from /dev/ublkcN: the
// request descriptors are mmap'd from it, and one goroutine locked to its
// OS thread owns the queue's ring (the driver takes a queue's commands only
// from the thread that fetched them and copies data in that thread's task
// work) and keeps a UBLK_U_IO_FETCH_REQ, later COMMIT_AND_FETCH_REQ, in
// the driver for every tag, each with its own buffer of this process (no
// user copy, no zero copy). Fetched requests go to a pool of workers, one
// per tag, so the queue depth reaches the namespace; a worker's result
// comes back to the ring owner through a list and an eventfd the ring
// reads. READ, WRITE, FLUSH, DISCARD and WRITE_ZEROES (NOUNMAP: no
// deallocation) map onto the Device as for NBD. Needs root and
// /dev/ublk-control (modprobe ublk_drv).
//
// NBD (MethodNBD): the kernel NBD client is configured through the generic
// netlink "nbd" family with one end of a socketpair; this package serves the
// NBD transmission phase (no handshake) on the other end. The device is
// /dev/nbdN. Needs the nbd module (modprobe nbd) and CAP_SYS_ADMIN.
//
// FUSE + loop (MethodFUSELoop): a one-file FUSE filesystem is mounted at
// <RunDir>/<Name>/fuse; its file "disk" has the namespace's size and its
// reads and writes go to the Device (direct_io, 1 MiB requests, async reads).
// A loop device is attached to that file with the namespace's logical block
// size, AUTOCLEAR, and direct I/O when the kernel allows it on FUSE. The
// device is /dev/loopN. Needs /dev/fuse, /dev/loop-control and root.
//
// MethodAuto picks ublk when /dev/ublk-control exists (and falls back when
// the ublk mapping fails, e.g. for blocks over 4 KiB), then NBD when the
// kernel has it, and FUSE + loop otherwise.
//
// # Semantics
//
// Flush (fsync, REQ_OP_FLUSH, NBD_CMD_FLUSH) answers only after
// Device.Flush returned. A discard (BLKDISCARD, NBD_CMD_TRIM) becomes
// Device.Trim. Through the loop driver a discard and a zeroing request both
// arrive as fallocate(PUNCH_HOLE), which must read back as zeroes: it is a
// Trim only when deallocated blocks read as zeroes (Options.TrimZeroes, or
// an Identify Namespace DLFEAT of 001b), otherwise the range is zeroed with
// Write Zeroes (Zeroer) or plain writes. Requests that are not whole blocks
// (possible through the FUSE file or an NBD client other than the kernel)
// are done by read-modify-write of whole blocks.
//
// Mapping.Resize follows a namespace whose size changed (the Linux host's
// set_capacity_and_notify on a Namespace Attribute Changed event): FUSE +
// loop invalidates the file's cached size and sends LOOP_SET_CAPACITY, NBD
// reconfigures the size over netlink (Linux 5.3+), ublk sends
// UBLK_U_CMD_UPDATE_SIZE (Linux 6.16+; an older driver keeps the old size,
// and Resize says so with ErrResizeUnsupported).
//
// # Lifetime
//
// Unmap detaches the device and removes everything Map created. It refuses
// with ErrBusy while the block device is mounted or held exclusively, and
// can be called again after the holder let go. Unmapping on process exit is
// the caller's job: catch SIGINT and SIGTERM and call Unmap, e.g.
//
//	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	m, err := blockdev.Map(ctx, ns, &blockdev.Options{Name: "disk0"})
//	if err != nil { ... }
//	defer m.Unmap(context.Background())
//	<-ctx.Done()
//
// If the process dies anyway: the loop device detaches itself once nobody
// holds it (AUTOCLEAR), the FUSE mount stays as a dead mount until the next
// Map with the same name (which removes it) or `umount -l
// <RunDir>/<Name>/fuse`; an NBD device fails its I/O and is freed by
// `nbd-client -d /dev/nbdN`. A ublk disk is removed by the driver when its
// server's io_uring goes away (pending I/O fails); the stopped device
// (/dev/ublkcN) stays until DEL_DEV, which the next ublk Map or
// RemoveStaleUblk does for devices whose server is gone (the server's pid
// is kept in the device's ublksrv_flags).
package blockdev
