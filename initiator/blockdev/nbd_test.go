package blockdev

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nbdClient speaks the transmission phase as the kernel does: requests go
// out pipelined, replies come back in any order.
type nbdClient struct {
	t    *testing.T
	conn net.Conn
	mu   sync.Mutex
	next uint64
}

// socketpair returns both ends of an AF_UNIX stream pair as net.Conns.
func socketpair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "sp")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return conns[0], conns[1]
}

func startNBD(t *testing.T, dev Device, ro bool) (*nbdClient, chan error) {
	t.Helper()
	c, err := newConfig(dev, &Options{TrimZeroes: true, ReadOnly: ro})
	if err != nil {
		t.Fatal(err)
	}
	kernel, server := socketpair(t)
	done := make(chan error, 1)
	go func() { done <- serveNBD(server, newEngine(dev, c), nil) }()
	t.Cleanup(func() { kernel.Close() })
	kernel.SetDeadline(time.Now().Add(10 * time.Second))
	return &nbdClient{t: t, conn: kernel}, done
}

func (c *nbdClient) send(flags, typ uint16, off uint64, n uint32, payload []byte) uint64 {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	req := make(NBDRequest, NBDRequestLen)
	req.Set(flags, typ, c.next, off, n)
	if _, err := c.conn.Write(append(req, payload...)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
	return c.next
}

// recv reads one reply, and dataLen bytes of data after a successful one.
func (c *nbdClient) recv(dataLen int) (NBDReply, []byte) {
	c.t.Helper()
	rep := make(NBDReply, NBDReplyLen)
	if _, err := io.ReadFull(c.conn, rep); err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	if err := rep.Valid(); err != nil {
		c.t.Fatal(err)
	}
	var data []byte
	if rep.Error() == 0 && dataLen > 0 {
		data = make([]byte, dataLen)
		if _, err := io.ReadFull(c.conn, data); err != nil {
			c.t.Fatalf("recv data: %v", err)
		}
	}
	return rep, data
}

// do sends one request and waits for its reply.
func (c *nbdClient) do(flags, typ uint16, off uint64, n uint32, payload []byte) (uint32, []byte) {
	c.t.Helper()
	cookie := c.send(flags, typ, off, n, payload)
	dataLen := 0
	if typ == NBDCmdRead {
		dataLen = int(n)
	}
	rep, data := c.recv(dataLen)
	if rep.Cookie() != cookie {
		c.t.Fatalf("reply cookie %d, want %d", rep.Cookie(), cookie)
	}
	return rep.Error(), data
}

func TestNBDServer(t *testing.T) {
	const size = 1 << 20
	dev := newMemDevice(size, 512)
	c, done := startNBD(t, dev, false)

	w := make([]byte, 8192)
	fill(w, 1)
	for _, tc := range []struct {
		name    string
		flags   uint16
		typ     uint16
		off     uint64
		n       uint32
		payload []byte
		want    syscall.Errno
	}{
		{"write", 0, NBDCmdWrite, 4096, 8192, w, 0},
		{"write FUA", NBDCmdFlagFUA, NBDCmdWrite, 65536, 8192, w, 0},
		{"write unaligned", 0, NBDCmdWrite, 100, 8192, w, 0},
		{"write past end", 0, NBDCmdWrite, size - 512, 8192, w, syscall.ENOSPC},
		{"read", 0, NBDCmdRead, 0, 16384, nil, 0},
		{"read past end", 0, NBDCmdRead, size, 512, nil, syscall.EINVAL},
		{"read huge offset", 0, NBDCmdRead, 1 << 63, 512, nil, syscall.EINVAL},
		{"read too long", 0, NBDCmdRead, 0, nbdMaxIO + 512, nil, syscall.EINVAL},
		{"flush", 0, NBDCmdFlush, 0, 0, nil, 0},
		{"trim", 0, NBDCmdTrim, 512 * 1024, 65536, nil, 0},
		{"trim past end", 0, NBDCmdTrim, size - 512, 1024, nil, syscall.EINVAL},
		{"write zeroes", 0, NBDCmdWriteZeroes, 128 * 1024, 4096, nil, 0},
		{"write zeroes no hole", NBDCmdFlagNoHole, NBDCmdWriteZeroes, 130 * 1024, 4096, nil, 0},
		{"write zeroes past end", 0, NBDCmdWriteZeroes, size, 512, nil, syscall.ENOSPC},
		{"cache", 0, NBDCmdCache, 0, 4096, nil, 0},
		{"unknown command", 0, 42, 0, 0, nil, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			flushes, trims := dev.flushes.Load(), dev.trims.Load()
			e, data := c.do(tc.flags, tc.typ, tc.off, tc.n, tc.payload)
			if syscall.Errno(e) != tc.want {
				t.Fatalf("error %d, want %d (%v)", e, tc.want, tc.want)
			}
			if e != 0 {
				return
			}
			switch tc.typ {
			case NBDCmdWrite:
				if !bytes.Equal(dev.snapshot(int64(tc.off), int64(tc.n)), tc.payload) {
					t.Fatal("device does not hold the write")
				}
				if tc.flags&NBDCmdFlagFUA != 0 && dev.flushes.Load() == flushes {
					t.Error("FUA write without a flush")
				}
			case NBDCmdRead:
				if !bytes.Equal(data, dev.snapshot(int64(tc.off), int64(tc.n))) {
					t.Fatal("read differs from the device")
				}
			case NBDCmdFlush:
				if dev.flushes.Load() != flushes+1 {
					t.Error("flush did not reach the device")
				}
			case NBDCmdTrim:
				if dev.trims.Load() != trims+1 {
					t.Error("trim did not reach the device")
				}
			case NBDCmdWriteZeroes:
				if !bytes.Equal(dev.snapshot(int64(tc.off), int64(tc.n)), make([]byte, tc.n)) {
					t.Error("range not zeroed")
				}
			}
		})
	}
	c.t = t

	// Pipelined requests, replies in any order.
	const k = 64
	want := map[uint64][]byte{}
	for i := range k {
		b := make([]byte, 4096)
		fill(b, uint64(100+i))
		c.send(0, NBDCmdWrite, uint64(i*4096), 4096, b)
		want[uint64(i*4096)] = b
	}
	for range k {
		if rep, _ := c.recv(0); rep.Error() != 0 {
			t.Fatalf("pipelined write failed: %d", rep.Error())
		}
	}
	cookies := map[uint64]uint64{}
	for i := range k {
		cookies[c.send(0, NBDCmdRead, uint64(i*4096), 4096, nil)] = uint64(i * 4096)
	}
	for range k {
		rep, data := c.recv(4096)
		off, ok := cookies[rep.Cookie()]
		if !ok || !bytes.Equal(data, want[off]) {
			t.Fatalf("pipelined read cookie %d: wrong data", rep.Cookie())
		}
		delete(cookies, rep.Cookie())
	}

	// NBD_CMD_DISC ends the server cleanly and closes its end.
	c.send(0, NBDCmdDisc, 0, 0, nil)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("server after DISC: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop after DISC")
	}
	if _, err := c.conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after DISC the server end is not closed: %v", err)
	}
}

func TestNBDServerReadOnly(t *testing.T) {
	dev := newMemDevice(1<<16, 512)
	c, _ := startNBD(t, dev, true)
	if e, _ := c.do(0, NBDCmdWrite, 0, 512, make([]byte, 512)); syscall.Errno(e) != syscall.EPERM {
		t.Errorf("write on read-only: %d", e)
	}
	if e, _ := c.do(0, NBDCmdTrim, 0, 512, nil); syscall.Errno(e) != syscall.EPERM {
		t.Errorf("trim on read-only: %d", e)
	}
	if e, _ := c.do(0, NBDCmdRead, 0, 512, nil); e != 0 {
		t.Errorf("read on read-only: %d", e)
	}
}

func TestNBDServerEnds(t *testing.T) {
	t.Run("EOF", func(t *testing.T) {
		c, done := startNBD(t, newMemDevice(1<<16, 512), false)
		c.conn.Close()
		if err := <-done; err != nil {
			t.Fatalf("EOF: %v", err)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		c, done := startNBD(t, newMemDevice(1<<16, 512), false)
		c.conn.Write(make([]byte, NBDRequestLen))
		if err := <-done; !errors.Is(err, errNBDProtocol) {
			t.Fatalf("bad magic: %v", err)
		}
	})
	t.Run("truncated write payload", func(t *testing.T) {
		c, done := startNBD(t, newMemDevice(1<<16, 512), false)
		req := make(NBDRequest, NBDRequestLen)
		req.Set(0, NBDCmdWrite, 1, 0, 4096)
		c.conn.Write(append(req, 1, 2, 3))
		c.conn.(*net.UnixConn).CloseWrite()
		if err := <-done; err == nil {
			t.Fatal("truncated payload: no error")
		}
	})
}

func TestNBDWire(t *testing.T) {
	req := make(NBDRequest, NBDRequestLen)
	req.Set(NBDCmdFlagFUA, NBDCmdWrite, 0x0102030405060708, 0x1000, 0x200)
	want := []byte{
		0x25, 0x60, 0x95, 0x13, 0x00, 0x01, 0x00, 0x01,
		1, 2, 3, 4, 5, 6, 7, 8,
		0, 0, 0, 0, 0, 0, 0x10, 0,
		0, 0, 2, 0,
	}
	if !bytes.Equal(req, want) {
		t.Fatalf("request % x\nwant    % x", []byte(req), want)
	}
	if req.Flags() != NBDCmdFlagFUA || req.Type() != NBDCmdWrite || req.Cookie() != 0x0102030405060708 || req.Offset() != 0x1000 || req.Length() != 0x200 {
		t.Fatal("accessors disagree with Set")
	}
	rep := make(NBDReply, NBDReplyLen)
	rep.Set(5, 9)
	if !bytes.Equal(rep, []byte{0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 9}) {
		t.Fatalf("reply % x", []byte(rep))
	}
	if NBDRequest(want[:27]).Valid() == nil || NBDReply(rep[:15]).Valid() == nil {
		t.Fatal("short views accepted")
	}
}

// rwc feeds a byte stream to the server and swallows its replies.
type rwc struct{ r io.Reader }

func (c rwc) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c rwc) Write(p []byte) (int, error) { return len(p), nil }
func (c rwc) Close() error                { return nil }

// FuzzNBDServe feeds arbitrary request streams to the server: it must not
// panic and must end.
func FuzzNBDServe(f *testing.F) {
	req := make(NBDRequest, NBDRequestLen)
	req.Set(0, NBDCmdWrite, 1, 512, 512)
	f.Add(append(append([]byte(nil), req...), make([]byte, 512)...))
	req.Set(0, NBDCmdRead, 2, 100, 1000)
	f.Add(append([]byte(nil), req...))
	req.Set(NBDCmdFlagNoHole, NBDCmdWriteZeroes, 3, 0, 1<<30)
	f.Add(append([]byte(nil), req...))
	req.Set(0, NBDCmdTrim, 4, 1<<62, 1<<31)
	f.Add(append([]byte(nil), req...))
	f.Add([]byte{0x25, 0x60, 0x95, 0x13})
	f.Fuzz(func(t *testing.T, stream []byte) {
		dev := newMemDevice(64<<10, 512)
		c, err := newConfig(dev, &Options{TrimZeroes: true})
		if err != nil {
			t.Fatal(err)
		}
		_ = serveNBD(rwc{bytes.NewReader(stream)}, newEngine(dev, c), nil)
	})
}
