package blockdev

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// NBD transmission phase (the NBD protocol document, "Transmission"; the
// kernel's include/uapi/linux/nbd.h). All fields are big-endian.
const (
	NBDRequestLen       = 28         // request header bytes
	NBDReplyLen         = 16         // simple reply bytes
	NBDRequestMagic     = 0x25609513 // NBD_REQUEST_MAGIC
	NBDSimpleReplyMagic = 0x67446698 // NBD_SIMPLE_REPLY_MAGIC
)

// NBD commands (NBD_CMD_*).
const (
	NBDCmdRead        = 0
	NBDCmdWrite       = 1
	NBDCmdDisc        = 2
	NBDCmdFlush       = 3
	NBDCmdTrim        = 4
	NBDCmdCache       = 5
	NBDCmdWriteZeroes = 6
)

// NBD command flags (NBD_CMD_FLAG_*).
const (
	NBDCmdFlagFUA    = 1 << 0
	NBDCmdFlagNoHole = 1 << 1
)

// NBD transmission flags (NBD_FLAG_*), given to the kernel as
// NBD_ATTR_SERVER_FLAGS.
const (
	NBDFlagHasFlags         = 1 << 0
	NBDFlagReadOnly         = 1 << 1
	NBDFlagSendFlush        = 1 << 2
	NBDFlagSendFUA          = 1 << 3
	NBDFlagSendTrim         = 1 << 5
	NBDFlagSendWriteZeroes  = 1 << 6
	NBDFlagCanMultiConn     = 1 << 8
	nbdServerFlagsReadWrite = NBDFlagHasFlags | NBDFlagSendFlush | NBDFlagSendFUA | NBDFlagSendTrim | NBDFlagSendWriteZeroes
)

// NBDRequest is a request header:
// magic(4) flags(2) type(2) cookie(8) offset(8) length(4).
type NBDRequest []byte

const (
	nbdReqMagic  = 0
	nbdReqFlags  = 4
	nbdReqType   = 6
	nbdReqCookie = 8
	nbdReqOffset = 16
	nbdReqLength = 24
)

// Valid checks the size and the magic.
func (r NBDRequest) Valid() error {
	if len(r) < NBDRequestLen {
		return fmt.Errorf("nbd: request header of %d bytes, want %d", len(r), NBDRequestLen)
	}
	if m := r.Magic(); m != NBDRequestMagic {
		return fmt.Errorf("nbd: request magic %#08x, want %#08x", m, NBDRequestMagic)
	}
	return nil
}

// Magic returns the request magic.
func (r NBDRequest) Magic() uint32 { return binary.BigEndian.Uint32(r[nbdReqMagic:]) }

// Flags returns the command flags (NBD_CMD_FLAG_*).
func (r NBDRequest) Flags() uint16 { return binary.BigEndian.Uint16(r[nbdReqFlags:]) }

// Type returns the command (NBD_CMD_*).
func (r NBDRequest) Type() uint16 { return binary.BigEndian.Uint16(r[nbdReqType:]) }

// Cookie returns the client's opaque request identifier (the handle).
func (r NBDRequest) Cookie() uint64 { return binary.BigEndian.Uint64(r[nbdReqCookie:]) }

// Offset returns the byte offset.
func (r NBDRequest) Offset() uint64 { return binary.BigEndian.Uint64(r[nbdReqOffset:]) }

// Length returns the byte length.
func (r NBDRequest) Length() uint32 { return binary.BigEndian.Uint32(r[nbdReqLength:]) }

// Set fills the header, magic included.
func (r NBDRequest) Set(flags, typ uint16, cookie, offset uint64, length uint32) {
	binary.BigEndian.PutUint32(r[nbdReqMagic:], NBDRequestMagic)
	binary.BigEndian.PutUint16(r[nbdReqFlags:], flags)
	binary.BigEndian.PutUint16(r[nbdReqType:], typ)
	binary.BigEndian.PutUint64(r[nbdReqCookie:], cookie)
	binary.BigEndian.PutUint64(r[nbdReqOffset:], offset)
	binary.BigEndian.PutUint32(r[nbdReqLength:], length)
}

// NBDReply is a simple reply: magic(4) error(4) cookie(8), followed by the
// data of a successful read.
type NBDReply []byte

// Valid checks the size and the magic.
func (r NBDReply) Valid() error {
	if len(r) < NBDReplyLen {
		return fmt.Errorf("nbd: reply of %d bytes, want %d", len(r), NBDReplyLen)
	}
	if m := r.Magic(); m != NBDSimpleReplyMagic {
		return fmt.Errorf("nbd: reply magic %#08x, want %#08x", m, NBDSimpleReplyMagic)
	}
	return nil
}

// Magic returns the reply magic.
func (r NBDReply) Magic() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// Error returns the error (an errno value; 0 for success).
func (r NBDReply) Error() uint32 { return binary.BigEndian.Uint32(r[4:]) }

// Cookie returns the cookie of the request answered.
func (r NBDReply) Cookie() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// Set fills the reply, magic included.
func (r NBDReply) Set(errno uint32, cookie uint64) {
	binary.BigEndian.PutUint32(r[0:], NBDSimpleReplyMagic)
	binary.BigEndian.PutUint32(r[4:], errno)
	binary.BigEndian.PutUint64(r[8:], cookie)
}

// nbdErrno maps an errno to one the NBD protocol defines (EPERM, EIO,
// ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN).
func nbdErrno(e syscall.Errno) uint32 {
	switch e {
	case 0:
		return 0
	case syscall.EPERM, syscall.EROFS, syscall.EACCES:
		return uint32(syscall.EPERM)
	case syscall.ENOMEM, syscall.EINVAL, syscall.ENOSPC, syscall.EOVERFLOW, syscall.ESHUTDOWN:
		return uint32(e)
	case syscall.EOPNOTSUPP:
		return uint32(syscall.EOPNOTSUPP)
	}
	return uint32(syscall.EIO)
}

// nbdMaxIO bounds one READ or WRITE; the kernel sends at most its
// max_hw_sectors (32 MiB).
const nbdMaxIO = 32 << 20

// nbdQueueDepth bounds requests served at once (the kernel's default
// queue depth is 128).
const nbdQueueDepth = 128

// errNBDProtocol is a request stream the server cannot follow.
var errNBDProtocol = errors.New("nbd: protocol error")

// nbdServer serves the transmission phase for one connection.
type nbdServer struct {
	e    *engine
	conn io.ReadWriteCloser
	log  hclog.Logger

	wmu      sync.Mutex
	werr     error
	inflight sync.WaitGroup
	sem      chan struct{}
}

// serveNBD serves conn until NBD_CMD_DISC, end of stream, or a protocol or
// connection error; it waits for the requests in flight, then closes conn.
// A clean end (DISC or EOF) returns nil.
func serveNBD(conn io.ReadWriteCloser, e *engine, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &nbdServer{e: e, conn: conn, log: log, sem: make(chan struct{}, nbdQueueDepth)}
	err := s.loop()
	s.inflight.Wait()
	cerr := conn.Close()
	if err == nil {
		s.wmu.Lock()
		err = s.werr
		s.wmu.Unlock()
	}
	if err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

func (s *nbdServer) loop() error {
	r := bufio.NewReaderSize(s.conn, 64<<10)
	hdr := make(NBDRequest, NBDRequestLen)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			if err == io.EOF || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("nbd: read request: %w", err)
		}
		if err := hdr.Valid(); err != nil {
			return fmt.Errorf("%w: %v", errNBDProtocol, err)
		}
		flags, typ, cookie, off, n := hdr.Flags(), hdr.Type(), hdr.Cookie(), hdr.Offset(), hdr.Length()
		size := uint64(s.e.size())
		inRange := off <= size && uint64(n) <= size-off
		switch typ {
		case NBDCmdDisc:
			return nil
		case NBDCmdWrite:
			if n > nbdMaxIO || !inRange || s.e.readOnly {
				if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
					return fmt.Errorf("nbd: read write payload: %w", err)
				}
				e := syscall.ENOSPC
				if n > nbdMaxIO {
					e = syscall.EINVAL
				} else if s.e.readOnly {
					e = syscall.EPERM
				}
				s.reply(cookie, e, nil)
				continue
			}
			buf := s.e.bufs.get(int(n))
			if _, err := io.ReadFull(r, buf); err != nil {
				s.e.bufs.put(buf)
				return fmt.Errorf("nbd: read write payload: %w", err)
			}
			s.do(func() {
				err := s.e.writeAt(buf, int64(off))
				if err == nil && flags&NBDCmdFlagFUA != 0 {
					err = s.e.flush()
				}
				s.e.bufs.put(buf)
				s.reply(cookie, errno(err), nil)
			})
		case NBDCmdRead:
			if n > nbdMaxIO || !inRange {
				s.reply(cookie, syscall.EINVAL, nil)
				continue
			}
			s.do(func() {
				buf := s.e.bufs.get(int(n))
				err := s.e.readAt(buf, int64(off))
				if err != nil {
					s.reply(cookie, errno(err), nil)
				} else {
					s.reply(cookie, 0, buf)
				}
				s.e.bufs.put(buf)
			})
		case NBDCmdFlush:
			s.do(func() { s.reply(cookie, errno(s.e.flush()), nil) })
		case NBDCmdTrim:
			if !inRange {
				s.reply(cookie, syscall.EINVAL, nil)
				continue
			}
			s.do(func() { s.reply(cookie, errno(s.e.discard(int64(off), int64(n))), nil) })
		case NBDCmdWriteZeroes:
			if !inRange {
				s.reply(cookie, syscall.ENOSPC, nil)
				continue
			}
			s.do(func() {
				err := s.e.zero(int64(off), int64(n), flags&NBDCmdFlagNoHole == 0)
				if err == nil && flags&NBDCmdFlagFUA != 0 {
					err = s.e.flush()
				}
				s.reply(cookie, errno(err), nil)
			})
		case NBDCmdCache:
			s.reply(cookie, 0, nil) // a hint; nothing to prefetch into
		default:
			s.reply(cookie, syscall.EINVAL, nil)
		}
	}
}

// do runs f on its own goroutine, at most nbdQueueDepth at once.
func (s *nbdServer) do(f func()) {
	s.sem <- struct{}{}
	s.inflight.Add(1)
	go func() {
		defer func() { <-s.sem; s.inflight.Done() }()
		f()
	}()
}

// reply sends a simple reply, with data for a successful read. After a
// failed send it closes the connection, which ends the request loop.
func (s *nbdServer) reply(cookie uint64, e syscall.Errno, data []byte) {
	var hdr [NBDReplyLen]byte
	NBDReply(hdr[:]).Set(nbdErrno(e), cookie)
	if e != 0 {
		s.log.Debug("nbd request failed", "cookie", cookie, "errno", e.Error())
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return
	}
	var err error
	if len(data) == 0 {
		_, err = s.conn.Write(hdr[:])
	} else {
		bufs := net.Buffers{hdr[:], data}
		_, err = bufs.WriteTo(s.conn)
	}
	if err != nil {
		s.werr = fmt.Errorf("nbd: send reply: %w", err)
		s.conn.Close()
	}
}
