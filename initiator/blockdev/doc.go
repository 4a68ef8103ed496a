// Package blockdev maps a namespace as a local block device: kernel NBD where
// it exists, otherwise a FUSE file attached to a loop device.
//
// # Methods
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
// MethodAuto picks NBD when the kernel has it and FUSE + loop otherwise.
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
// `nbd-client -d /dev/nbdN`.
package blockdev
