package blockdev

// The kernel NBD client configured through generic netlink (Linux 4.12+).
// Not exercised on the development machine (its kernel has no NBD); the
// kernel-peer guests have it.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The "nbd" generic netlink family (include/uapi/linux/nbd-netlink.h).
const (
	nbdGenlName    = "nbd"
	nbdGenlVersion = 1

	nbdCmdConnect    = 1 // NBD_CMD_CONNECT
	nbdCmdDisconnect = 2 // NBD_CMD_DISCONNECT
	// NBD_CMD_RECONFIGURE takes NBD_ATTR_SIZE_BYTES since Linux 5.3.
	nbdCmdReconfigure = 3

	nbdAttrIndex             = 1  // NBD_ATTR_INDEX, u32
	nbdAttrSizeBytes         = 2  // NBD_ATTR_SIZE_BYTES, u64
	nbdAttrBlockSizeBytes    = 3  // NBD_ATTR_BLOCK_SIZE_BYTES, u64
	nbdAttrTimeout           = 4  // NBD_ATTR_TIMEOUT, u64 seconds
	nbdAttrServerFlags       = 5  // NBD_ATTR_SERVER_FLAGS, u64
	nbdAttrSockets           = 7  // NBD_ATTR_SOCKETS, nested
	nbdAttrBackendIdentifier = 10 // NBD_ATTR_BACKEND_IDENTIFIER, string (5.19+; older kernels ignore it)

	nbdSockItem = 1 // NBD_SOCK_ITEM, nested
	nbdSockFD   = 1 // NBD_SOCK_FD, u32
)

// nbdConnectAttrs builds NBD_CMD_CONNECT's attributes. No NBD_ATTR_INDEX:
// the kernel takes any free device (index -1).
func nbdConnectAttrs(sockFD int, size, bs int64, serverFlags uint64, timeout time.Duration, backend string) nlAttrs {
	var a nlAttrs
	a.putU64(nbdAttrSizeBytes, uint64(size))
	a.putU64(nbdAttrBlockSizeBytes, uint64(bs))
	a.putU64(nbdAttrServerFlags, serverFlags)
	if timeout > 0 {
		a.putU64(nbdAttrTimeout, uint64((timeout+time.Second-1)/time.Second))
	}
	a.nest(nbdAttrSockets, func(s *nlAttrs) {
		s.nest(nbdSockItem, func(i *nlAttrs) { i.putU32(nbdSockFD, uint32(sockFD)) })
	})
	if backend != "" {
		a.putString(nbdAttrBackendIdentifier, backend)
	}
	return a
}

// nbdIndexFromReply finds NBD_ATTR_INDEX in NBD_CMD_CONNECT's reply.
func nbdIndexFromReply(replies [][]byte) (uint32, error) {
	for _, r := range replies {
		attrs, err := parseNLAttrs(r)
		if err != nil {
			return 0, err
		}
		for _, at := range attrs {
			if at.Type == nbdAttrIndex && len(at.Value) >= 4 {
				return binary.NativeEndian.Uint32(at.Value), nil
			}
		}
	}
	return 0, errors.New("nbd: NBD_CMD_CONNECT reply carries no NBD_ATTR_INDEX")
}

// nbdAvailable reports whether the kernel NBD client is there.
func nbdAvailable() bool {
	if _, err := os.Stat("/dev/nbd0"); err == nil {
		return true
	}
	g, err := dialGenl()
	if err != nil {
		return false
	}
	defer g.Close()
	_, err = g.family(nbdGenlName)
	return err == nil
}

// nbdMapping is a kernel NBD device served over a socketpair.
type nbdMapping struct {
	c       *config
	index   uint32
	dev     string
	conn    net.Conn
	done    chan error // the server's result
	srvErr  error
	stopped bool
	disc    bool // NBD_CMD_DISCONNECT sent
}

func (m *nbdMapping) path() string { return m.dev }

// nbdBackend is the NBD backend identifier of mapping name (shown in
// /sys/block/nbdN/backend; a reconfigure must repeat it).
func nbdBackend(name string) string { return "nvmeof:" + name }

func mapNBD(ctx context.Context, e *engine, c *config) (*nbdMapping, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("blockdev: NBD needs root (NBD_CMD_CONNECT needs CAP_SYS_ADMIN)")
	}
	g, err := dialGenl()
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	defer g.Close()
	fam, err := g.family(nbdGenlName)
	if errors.Is(err, errNoFamily) {
		return nil, fmt.Errorf("blockdev: no nbd netlink family: load the nbd module (modprobe nbd) or map with FUSE + loop (nvmeof connect --map fuse): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("blockdev: socketpair: %w", err)
	}
	kernelFD := fds[0]
	f := os.NewFile(uintptr(fds[1]), "nbd-server")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		unix.Close(kernelFD)
		return nil, fmt.Errorf("blockdev: socketpair: %w", err)
	}
	m := &nbdMapping{c: c, conn: conn, done: make(chan error, 1)}
	go func() { m.done <- serveNBD(conn, e, c.Logger.Named("nbd")) }()

	flags := uint64(nbdServerFlagsReadWrite)
	if c.ReadOnly {
		flags = NBDFlagHasFlags | NBDFlagReadOnly | NBDFlagSendFlush
	}
	replies, err := g.request(fam, nbdCmdConnect, nbdGenlVersion,
		nbdConnectAttrs(kernelFD, c.size, int64(c.bs), flags, c.NBDTimeout, nbdBackend(c.Name)))
	unix.Close(kernelFD) // the kernel holds its own reference now
	if err == nil {
		m.index, err = nbdIndexFromReply(replies)
		if err != nil {
			// Connected, but we do not know where: the kernel gives up the
			// device once our end closes.
			conn.Close()
			<-m.done
			return nil, fmt.Errorf("blockdev: %w", err)
		}
	}
	if err != nil {
		conn.Close()
		<-m.done
		return nil, fmt.Errorf("blockdev: NBD_CMD_CONNECT: %w", err)
	}
	m.dev = "/dev/nbd" + strconv.FormatUint(uint64(m.index), 10)
	if err := ensureDevNode(m.dev, "nbd"+strconv.FormatUint(uint64(m.index), 10)); err != nil {
		c.Logger.Warn("nbd device node missing", "path", m.dev, "error", err)
	}
	return m, nil
}

// unmap disconnects the device (the kernel sends NBD_CMD_DISC and shuts
// its end down) and waits for the server to end.
func (m *nbdMapping) unmap(ctx context.Context) error {
	if m.stopped {
		return m.srvErr
	}
	if !m.disc {
		if busy(m.dev) {
			return fmt.Errorf("blockdev: %s is mounted or held exclusively (unmount it first): %w", m.dev, ErrBusy)
		}
		g, err := dialGenl()
		if err != nil {
			return fmt.Errorf("blockdev: %w", err)
		}
		fam, err := g.family(nbdGenlName)
		if err == nil {
			var a nlAttrs
			a.putU32(nbdAttrIndex, m.index)
			_, err = g.request(fam, nbdCmdDisconnect, nbdGenlVersion, a)
		}
		g.Close()
		if err != nil {
			return fmt.Errorf("blockdev: NBD_CMD_DISCONNECT %s: %w", m.dev, err)
		}
		m.disc = true
	}
	t := m.c.UnmapTimeout
	if d, ok := ctx.Deadline(); ok {
		t = max(min(t, time.Until(d)), 0)
	}
	select {
	case m.srvErr = <-m.done:
	case <-time.After(t):
		m.conn.Close() // the kernel did not hang up: we do
		m.srvErr = <-m.done
	}
	m.stopped = true
	return m.srvErr
}

// busy reports whether a block device is held exclusively (mounted).
func busy(dev string) bool {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Is(err, unix.EBUSY)
	}
	unix.Close(fd)
	return false
}

// ensureDevNode is ensureNode for the block device /dev/<name>.
func ensureDevNode(path, name string) error {
	return ensureNode(path, "/sys/block/"+name+"/dev", unix.S_IFBLK|0o660)
}

// ensureNode waits briefly for devtmpfs/udev to create path, then makes
// the node itself (mode: type and permissions) from sysDev, a sysfs "dev"
// file ("major:minor").
func ensureNode(path, sysDev string, mode uint32) error {
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(sysDev)
	if err != nil {
		return err
	}
	var maj, mnr uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &mnr); err != nil {
		return fmt.Errorf("bad %s %q", sysDev, b)
	}
	err = unix.Mknod(path, mode, int(unix.Mkdev(maj, mnr)))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}
