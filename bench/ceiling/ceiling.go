// Package ceiling measures what UDP over the loopback interface can do on
// this machine, the ceilings a RoCEv2 transport in software (rdma/soft) can at
// best reach: the round-trip time of a 64-byte ping-pong, the rate of 4 KiB
// datagrams sent and received in sendmmsg/recvmmsg batches, and the
// throughput of UDP GSO sends received with UDP_GRO.
//
// Every measurement runs between two sockets, one bound to 127.0.0.1 and one
// to 127.0.0.2, is bounded both in count and in time, and counts what the
// receiver got, not what the sender handed to the kernel.
package ceiling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// ErrUnsupported is returned (wrapped) when the kernel lacks a socket option a
// measurement needs, such as UDP_SEGMENT or UDP_GRO.
var ErrUnsupported = errors.New("ceiling: not supported by this kernel")

// Addresses of the two ends. Both are on the loopback interface.
var (
	AddrA = netip.MustParseAddr("127.0.0.1")
	AddrB = netip.MustParseAddr("127.0.0.2")
)

// Options bound the measurements. The zero value means the defaults below.
type Options struct {
	// PingPongCount is the number of timed 64-byte round trips (default
	// 50000); PingPongSize is the datagram size (default 64).
	PingPongCount int
	PingPongSize  int
	// DatagramSize is the payload of each datagram of the rate test
	// (default 4096); Batch is the number of datagrams per
	// sendmmsg/recvmmsg call (default 64); DatagramCount bounds the
	// datagrams sent (default: unbounded, only Duration bounds it).
	DatagramSize  int
	Batch         int
	DatagramCount int
	// GSOSegment is the UDP_SEGMENT size (default 4096); GSOSegments is the
	// number of segments per send (default: as many as fit in 65507 bytes);
	// GSOSendCount bounds the GSO sends (default: unbounded).
	GSOSegment   int
	GSOSegments  int
	GSOSendCount int
	// Duration bounds each of the three measurements (default 2 s).
	Duration time.Duration
	// RecvBuffer is the receive socket buffer asked for (default 16 MiB;
	// SO_RCVBUFFORCE is tried first, then SO_RCVBUF, which rmem_max caps).
	RecvBuffer int
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.PingPongCount, 50000)
	def(&o.PingPongSize, 64)
	def(&o.DatagramSize, 4096)
	def(&o.Batch, 64)
	def(&o.GSOSegment, 4096)
	def(&o.GSOSegments, maxUDPPayload/o.GSOSegment)
	def(&o.RecvBuffer, 16<<20)
	if o.GSOSegments*o.GSOSegment > maxUDPPayload {
		o.GSOSegments = maxUDPPayload / o.GSOSegment
	}
	if o.GSOSegments < 1 {
		o.GSOSegments = 1
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	return o
}

// maxUDPPayload is the largest UDP payload over IPv4 (65535 - 20 - 8).
const maxUDPPayload = 65507

// PingPong is the result of the round-trip test.
type PingPong struct {
	Size   int           `json:"size_bytes"`
	Count  int           `json:"round_trips"`
	Min    time.Duration `json:"min_ns"`
	Median time.Duration `json:"median_ns"`
	P99    time.Duration `json:"p99_ns"`
	Mean   time.Duration `json:"mean_ns"`
}

// Rate is the result of a throughput test, counted at the receiver.
type Rate struct {
	// Size is the bytes of one datagram (for GSO: one segment); Batch is the
	// messages per sendmmsg call.
	Size  int `json:"size_bytes"`
	Batch int `json:"batch"`
	// SentDatagrams and SentBytes are what the sender's calls accepted;
	// Datagrams and Bytes what the receiver read (for GSO+GRO, Datagrams
	// counts receive buffers, each holding several coalesced segments).
	SentDatagrams int64 `json:"sent_datagrams"`
	SentBytes     int64 `json:"sent_bytes"`
	Datagrams     int64 `json:"received_datagrams"`
	Bytes         int64 `json:"received_bytes"`
	// Elapsed runs from the sender's start to the last datagram received.
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSecond is received datagrams per second (for GSO: received
	// segments, Bytes/Size, per second); GBps received bytes per second / 1e9.
	PerSecond float64 `json:"datagrams_per_s"`
	GBps      float64 `json:"gb_per_s"`
	// CPUSecondsPerGB is the whole process's user+system CPU time (sender
	// and receiver together) per 1e9 bytes received.
	CPUSecondsPerGB float64 `json:"cpu_s_per_gb"`
	// RecvBuffer is the receive buffer the kernel granted.
	RecvBuffer int `json:"recv_buffer_bytes"`
}

// Loss is the fraction of sent bytes the receiver never got.
func (r Rate) Loss() float64 {
	if r.SentBytes == 0 {
		return 0
	}
	return 1 - float64(r.Bytes)/float64(r.SentBytes)
}

// Result holds the three ceilings. An Error field is set, and the matching
// result left zero, when that measurement could not run.
type Result struct {
	PingPong      PingPong `json:"ping_pong"`
	PingPongError string   `json:"ping_pong_error,omitempty"`
	Datagram      Rate     `json:"datagram"`
	DatagramError string   `json:"datagram_error,omitempty"`
	GSO           Rate     `json:"gso"`
	GSOError      string   `json:"gso_error,omitempty"`
}

// Measure runs the three measurements one after the other. It fails only
// when ctx is done; a measurement that cannot run records its error in the
// Result and the others still run.
func Measure(ctx context.Context, o Options) (Result, error) {
	var r Result
	var err error
	if r.PingPong, err = MeasurePingPong(ctx, o); err != nil {
		r.PingPongError = err.Error()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("ceiling: %w", ctx.Err())
	}
	if r.Datagram, err = MeasureDatagramRate(ctx, o); err != nil {
		r.DatagramError = err.Error()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("ceiling: %w", ctx.Err())
	}
	if r.GSO, err = MeasureGSO(ctx, o); err != nil {
		r.GSOError = err.Error()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("ceiling: %w", ctx.Err())
	}
	return r, nil
}

// udpSocket returns a blocking UDP socket bound to addr:0 with a receive
// timeout, for the ping-pong test (blocking reads on locked threads keep the
// Go scheduler out of the measured path).
func udpSocket(addr netip.Addr, timeout time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %s: %w", addr, err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	return fd, nil
}

// connectPair connects a to b's address and b to a's.
func connectPair(a, b int) error {
	sa, err := unix.Getsockname(a)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	sb, err := unix.Getsockname(b)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	if err := unix.Connect(a, sb); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := unix.Connect(b, sa); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return nil
}

// MeasurePingPong times o.PingPongCount round trips of a 64-byte datagram
// (after 1000 untimed ones), stopping early at o.Duration.
func MeasurePingPong(ctx context.Context, o Options) (PingPong, error) {
	o = o.withDefaults()
	res := PingPong{Size: o.PingPongSize}
	cli, err := udpSocket(AddrA, time.Second)
	if err != nil {
		return res, fmt.Errorf("ping-pong: %w", err)
	}
	defer unix.Close(cli)
	srv, err := udpSocket(AddrB, time.Second)
	if err != nil {
		return res, fmt.Errorf("ping-pong: %w", err)
	}
	defer unix.Close(srv)
	if err := connectPair(cli, srv); err != nil {
		return res, fmt.Errorf("ping-pong: %w", err)
	}

	// The echo server stops on an empty datagram or a receive timeout.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 65536)
		for {
			n, err := readRetry(srv, buf)
			if err != nil || n == 0 {
				return
			}
			if _, err := writeRetry(srv, buf[:n]); err != nil {
				return
			}
		}
	}()
	defer func() {
		_, _ = unix.Write(cli, nil)
		wg.Wait()
	}()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	msg := make([]byte, o.PingPongSize)
	buf := make([]byte, 65536)
	roundTrip := func() error {
		if _, err := writeRetry(cli, msg); err != nil {
			return fmt.Errorf("ping-pong: send: %w", err)
		}
		n, err := readRetry(cli, buf)
		if err != nil {
			return fmt.Errorf("ping-pong: receive: %w", err)
		}
		if n != len(msg) {
			return fmt.Errorf("ping-pong: echo of %d bytes, want %d", n, len(msg))
		}
		return nil
	}
	for i := 0; i < 1000; i++ {
		if err := roundTrip(); err != nil {
			return res, err
		}
	}
	rtts := make([]time.Duration, 0, o.PingPongCount)
	deadline := time.Now().Add(o.Duration)
	for i := 0; i < o.PingPongCount; i++ {
		if i&1023 == 0 && (ctx.Err() != nil || time.Now().After(deadline)) {
			break
		}
		t0 := time.Now()
		if err := roundTrip(); err != nil {
			return res, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	if len(rtts) == 0 {
		return res, fmt.Errorf("ping-pong: no round trip in %v", o.Duration)
	}
	return summarize(res, rtts), nil
}

// readRetry and writeRetry are unix.Read and unix.Write on a blocking
// socket, retried when a signal interrupts them: the Go runtime preempts
// threads with signals (SIGURG), which end a blocking read with EINTR.
func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func writeRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// summarize fills the statistics of p from rtts (which it sorts).
func summarize(p PingPong, rtts []time.Duration) PingPong {
	slices.Sort(rtts)
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	p.Count = len(rtts)
	p.Min = rtts[0]
	p.Median = percentile(rtts, 50)
	p.P99 = percentile(rtts, 99)
	p.Mean = sum / time.Duration(len(rtts))
	return p
}

// percentile returns the nearest-rank percentile q (0 < q <= 100) of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// pair is a connected sender/receiver pair of net.UDPConn.
type pair struct {
	tx, rx     *net.UDPConn
	recvBuffer int
}

func newPair(recvBuffer int) (*pair, error) {
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(AddrB, 0)))
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", AddrB, err)
	}
	tx, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(AddrA, 0)), rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		rx.Close()
		return nil, fmt.Errorf("dial %s: %w", rx.LocalAddr(), err)
	}
	p := &pair{tx: tx, rx: rx}
	granted, err := setRecvBuffer(rx, recvBuffer)
	if err != nil {
		p.close()
		return nil, err
	}
	p.recvBuffer = granted
	return p, nil
}

func (p *pair) close() {
	p.tx.Close()
	p.rx.Close()
}

// setRecvBuffer asks for size bytes of receive buffer, with SO_RCVBUFFORCE
// (root) first, and returns what the kernel granted.
func setRecvBuffer(c *net.UDPConn, size int) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("syscall conn: %w", err)
	}
	var granted int
	var serr error
	err = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size); serr != nil {
				return
			}
		}
		granted, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("receive buffer: %w", err)
	}
	return granted, nil
}

// setIntOpt sets an integer socket option on c.
func setIntOpt(c *net.UDPConn, level, opt, value int, name string) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("syscall conn: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, value) }); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if errors.Is(serr, unix.ENOPROTOOPT) || errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: %w (%v)", name, ErrUnsupported, serr)
	}
	if serr != nil {
		return fmt.Errorf("%s: %w", name, serr)
	}
	return nil
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// flow runs one sender and one receiver over p for at most o.Duration or
// maxSends batches (0: no bound) and returns what the receiver counted.
// bufs is the batch the sender writes each call; each receive buffer is
// recvSize bytes.
func flow(ctx context.Context, p *pair, bufs [][]byte, maxSends int, recvSize int, d time.Duration) (Rate, error) {
	var r Rate
	r.RecvBuffer = p.recvBuffer
	rx := ipv4.NewPacketConn(p.rx)
	tx := ipv4.NewPacketConn(p.tx)

	type rxResult struct {
		datagrams, bytes int64
		last             time.Time
		err              error
	}
	done := make(chan rxResult, 1)
	go func() {
		var res rxResult
		msgs := make([]ipv4.Message, len(bufs))
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, recvSize)}
		}
		for {
			n, err := rx.ReadBatch(msgs, 0)
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					res.err = fmt.Errorf("receive: %w", err)
				}
				done <- res
				return
			}
			res.last = time.Now()
			res.datagrams += int64(n)
			for i := 0; i < n; i++ {
				res.bytes += int64(msgs[i].N)
			}
		}
	}()

	msgs := make([]ipv4.Message, len(bufs))
	for i := range msgs {
		msgs[i].Buffers = [][]byte{bufs[i]}
	}
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	var sendErr error
	for sends := 0; maxSends <= 0 || sends < maxSends; sends++ {
		if sends&63 == 0 && (ctx.Err() != nil || time.Now().After(deadline)) {
			break
		}
		n, err := tx.WriteBatch(msgs, 0)
		if err != nil {
			// ECONNREFUSED after an ICMP error or ENOBUFS under
			// pressure: count nothing for this call and go on.
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ECONNREFUSED) {
				continue
			}
			sendErr = fmt.Errorf("send: %w", err)
			break
		}
		r.SentDatagrams += int64(n)
		for i := 0; i < n; i++ {
			r.SentBytes += int64(len(bufs[i]))
		}
	}
	// Let the receiver drain what is queued, then stop it.
	_ = p.rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	res := <-done
	cpu := cpuTime() - cpu0
	if sendErr != nil {
		return r, sendErr
	}
	if res.err != nil {
		return r, res.err
	}
	r.Datagrams, r.Bytes = res.datagrams, res.bytes
	if r.Bytes == 0 {
		return r, fmt.Errorf("receiver got nothing of %d bytes sent", r.SentBytes)
	}
	r.Elapsed = res.last.Sub(start)
	secs := r.Elapsed.Seconds()
	r.GBps = float64(r.Bytes) / secs / 1e9
	r.CPUSecondsPerGB = cpu.Seconds() / (float64(r.Bytes) / 1e9)
	return r, nil
}

// MeasureDatagramRate sends o.DatagramSize-byte datagrams in batches of
// o.Batch with sendmmsg and receives them with recvmmsg, for o.Duration.
func MeasureDatagramRate(ctx context.Context, o Options) (Rate, error) {
	o = o.withDefaults()
	p, err := newPair(o.RecvBuffer)
	if err != nil {
		return Rate{}, fmt.Errorf("datagram rate: %w", err)
	}
	defer p.close()
	bufs := make([][]byte, o.Batch)
	for i := range bufs {
		bufs[i] = make([]byte, o.DatagramSize)
	}
	maxSends := 0
	if o.DatagramCount > 0 {
		maxSends = (o.DatagramCount + o.Batch - 1) / o.Batch
	}
	r, err := flow(ctx, p, bufs, maxSends, o.DatagramSize, o.Duration)
	r.Size, r.Batch = o.DatagramSize, o.Batch
	if err != nil {
		return r, fmt.Errorf("datagram rate: %w", err)
	}
	r.PerSecond = float64(r.Datagrams) / r.Elapsed.Seconds()
	return r, nil
}

// MeasureGSO sends buffers of o.GSOSegments segments of o.GSOSegment bytes
// with UDP_SEGMENT set, in sendmmsg batches of 8, to a receiver with UDP_GRO
// set, for o.Duration. Without UDP_GRO the receiver would get every segment
// separately and drop a good part of each burst.
func MeasureGSO(ctx context.Context, o Options) (Rate, error) {
	o = o.withDefaults()
	p, err := newPair(o.RecvBuffer)
	if err != nil {
		return Rate{}, fmt.Errorf("gso: %w", err)
	}
	defer p.close()
	if err := setIntOpt(p.tx, unix.IPPROTO_UDP, unix.UDP_SEGMENT, o.GSOSegment, "UDP_SEGMENT"); err != nil {
		return Rate{}, fmt.Errorf("gso: %w", err)
	}
	if err := setIntOpt(p.rx, unix.IPPROTO_UDP, unix.UDP_GRO, 1, "UDP_GRO"); err != nil {
		return Rate{}, fmt.Errorf("gso: %w", err)
	}
	const batch = 8
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, o.GSOSegment*o.GSOSegments)
	}
	maxSends := 0
	if o.GSOSendCount > 0 {
		maxSends = (o.GSOSendCount + batch - 1) / batch
	}
	r, err := flow(ctx, p, bufs, maxSends, 65536, o.Duration)
	r.Size, r.Batch = o.GSOSegment, batch
	if err != nil {
		return r, fmt.Errorf("gso: %w", err)
	}
	r.PerSecond = float64(r.Bytes) / float64(o.GSOSegment) / r.Elapsed.Seconds()
	return r, nil
}
