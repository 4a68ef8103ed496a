package soft

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
)

// Benchmarks between two soft devices on loopback (with UDP GSO unless
// -nogso), next to the raw UDP ceilings of the same machine. Run with
//
//	go test ./rdma/soft -run '^$' -bench . -benchmem

// noGSO runs the RDMA benchmarks with Config.DisableGSO (go test -args -nogso).
var noGSO = flag.Bool("nogso", false, "benchmarks: soft devices without UDP GSO")

// Benchmark knobs: Config.RecvQueues (-queues) and Config.FixedSourcePort
// (-fixedsport), for before/after runs of one binary.
var (
	benchQueues     = flag.Int("queues", 0, "benchmarks: receive queues per device (0: the default)")
	benchFixedSport = flag.Bool("fixedsport", false, "benchmarks: send every packet from port 4791")
)

// cpuTime returns the CPU time (user and system) the process used so far:
// on loopback the kernel's delivery to the receiver runs in the sender's
// syscalls, so it counts too. Reported per operation ("cpu-ns/op") it is
// less sensitive than ns/op to other work on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchConfig is the device configuration of the RDMA benchmarks.
func benchConfig() Config {
	return Config{DisableGSO: *noGSO, RecvQueues: *benchQueues, FixedSourcePort: *benchFixedSport}
}

// BenchmarkRDMAWrite measures RDMA WRITE bandwidth at MTU 4096 with 16
// signaled writes in flight.
func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			da, db := openPair(b, benchConfig(), benchConfig())
			ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: 64, cqe: 256})
			src := regMR(b, ea.pd, size, 0)
			dst := regMR(b, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
			wr := rdma.SendWR{Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
			pipelined(b, da, ea, &wr, size)
		})
	}
}

// BenchmarkRDMARead measures RDMA READ bandwidth at MTU 4096 with 16
// signaled reads in flight (max_rd_atomic 16; a READ of more than
// Config.ReadChunk packets is issued as several READ requests).
func BenchmarkRDMARead(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			da, db := openPair(b, benchConfig(), benchConfig())
			ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: 64, cqe: 256})
			dst := regMR(b, ea.pd, size, rdma.AccessLocalWrite)
			src := regMR(b, eb.pd, size, rdma.AccessRemoteRead)
			wr := rdma.SendWR{Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(dst, 0, size)}, RemoteAddr: src.Addr(), RKey: src.RKey()}
			pipelined(b, da, ea, &wr, size)
		})
	}
}

// BenchmarkRDMAWrite2QP is BenchmarkRDMAWrite over two connections
// between the same two devices, each driven by its own goroutine with 16
// writes in flight: what spreading a device's work over cores gives.
func BenchmarkRDMAWrite2QP(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			da, db := openPair(b, benchConfig(), benchConfig())
			var ends [2]*end
			var wrs [2]rdma.SendWR
			for i := range ends {
				ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: 64, cqe: 256})
				src := regMR(b, ea.pd, size, 0)
				dst := regMR(b, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
				ends[i] = ea
				wrs[i] = rdma.SendWR{Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
			}
			pipelined2(b, da, ends, wrs, size)
		})
	}
}

// BenchmarkRDMARead2QP is BenchmarkRDMARead over two connections, as
// BenchmarkRDMAWrite2QP.
func BenchmarkRDMARead2QP(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			da, db := openPair(b, benchConfig(), benchConfig())
			var ends [2]*end
			var wrs [2]rdma.SendWR
			for i := range ends {
				ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: 64, cqe: 256})
				dst := regMR(b, ea.pd, size, rdma.AccessLocalWrite)
				src := regMR(b, eb.pd, size, rdma.AccessRemoteRead)
				ends[i] = ea
				wrs[i] = rdma.SendWR{Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(dst, 0, size)}, RemoteAddr: src.Addr(), RKey: src.RKey()}
			}
			pipelined2(b, da, ends, wrs, size)
		})
	}
}

// pipelined2 runs b.N operations split over the two QPs of ends, each
// posting its work request with 16 in flight from its own goroutine.
func pipelined2(b *testing.B, da *Device, ends [2]*end, wrs [2]rdma.SendWR, size int) {
	const depth = 16
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	errs := make(chan error, 2)
	for k := range ends {
		n := b.N / 2
		if k == 0 {
			n += b.N % 2
		}
		go func(e *end, wr *rdma.SendWR, n int) {
			wc := make([]rdma.WorkCompletion, depth)
			out := 0
			reap := func() error {
				k := e.scq.Poll(wc)
				if k == 0 {
					if err := e.scq.Wait(ctx); err != nil {
						return err
					}
					k = e.scq.Poll(wc)
				}
				for _, c := range wc[:k] {
					if c.Status != rdma.Success {
						return fmt.Errorf("completion %+v", c)
					}
				}
				out -= k
				return nil
			}
			for i := 0; i < n; i++ {
				for out == depth {
					if err := reap(); err != nil {
						errs <- err
						return
					}
				}
				if err := e.qp.PostSend(wr); err != nil {
					errs <- err
					return
				}
				out++
			}
			for out > 0 {
				if err := reap(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(ends[k], &wrs[k], n)
	}
	for range ends {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
	s := da.Stats()
	b.ReportMetric(float64(s.Retransmissions)/float64(b.N), "retx/op")
}

// pipelined posts wr b.N times on ea's QP with 16 in flight, counting
// size bytes each, and reports the retransmissions of da per operation.
func pipelined(b *testing.B, da *Device, ea *end, wr *rdma.SendWR, size int) {
	const depth = 16
	wc := make([]rdma.WorkCompletion, depth)
	ctx := context.Background()
	out := 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		for out == depth {
			out -= reap(b, ctx, ea.scq, wc)
		}
		if err := ea.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		out++
	}
	for out > 0 {
		out -= reap(b, ctx, ea.scq, wc)
	}
	b.StopTimer()
	reportCPU(b, cpu)
	s := da.Stats()
	b.ReportMetric(float64(s.Retransmissions)/float64(b.N), "retx/op")
}

// reap waits for and polls completions, failing on an error.
func reap(b *testing.B, ctx context.Context, cq rdma.CQ, wc []rdma.WorkCompletion) int {
	n := cq.Poll(wc)
	if n == 0 {
		if err := cq.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		n = cq.Poll(wc)
	}
	for _, c := range wc[:n] {
		if c.Status != rdma.Success {
			b.Fatalf("completion %+v", c)
		}
	}
	return n
}

// BenchmarkSendRate measures the rate of 64-byte SENDs with 64 in flight
// (one receive posted per message).
func BenchmarkSendRate(b *testing.B) {
	da, db := openPair(b, benchConfig(), benchConfig())
	const depth, rdepth = 64, 256
	ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: depth, recvWR: rdepth, cqe: 1024})
	src := regMR(b, ea.pd, 64, 0)
	dst := regMR(b, eb.pd, 64*rdepth, rdma.AccessLocalWrite)
	rsg := make([]rdma.SGE, rdepth)
	rwr := make([]rdma.RecvWR, rdepth)
	for i := range rwr {
		rsg[i] = sge(dst, 64*i, 64)
		rwr[i] = rdma.RecvWR{WRID: uint64(i), SGL: rsg[i : i+1]}
		if err := eb.qp.PostRecv(&rwr[i]); err != nil {
			b.Fatal(err)
		}
	}
	swr := rdma.SendWR{Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 64)}}
	wc := make([]rdma.WorkCompletion, 64)
	ctx := context.Background()
	out, received := 0, 0
	drainRecv := func() {
		for _, c := range wc[:eb.rcq.Poll(wc)] {
			if c.Status != rdma.Success {
				b.Fatalf("receive %+v", c)
			}
			if err := eb.qp.PostRecv(&rwr[c.WRID]); err != nil {
				b.Fatal(err)
			}
			received++
		}
	}
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		for out == depth {
			out -= reap(b, ctx, ea.scq, wc)
			drainRecv()
		}
		if err := ea.qp.PostSend(&swr); err != nil {
			b.Fatal(err)
		}
		out++
	}
	for out > 0 {
		out -= reap(b, ctx, ea.scq, wc)
		drainRecv()
	}
	for received < b.N {
		if err := eb.rcq.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		drainRecv()
	}
	b.StopTimer()
	reportCPU(b, cpu)
}

// BenchmarkUDPLoopback is the ceiling: 4 KiB datagrams between two plain
// UDP sockets on 127.0.0.1 and 127.0.0.2, sent with sendmmsg in batches
// of 64 and received with recvmmsg. The sender is not paced (as the
// kernel's socket buffers allow); the metric "delivered" is the share of
// datagrams the receiver got.
func BenchmarkUDPLoopback(b *testing.B) {
	const size, batch = 4096, 64
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP{127, 0, 0, 2}, Port: 14791})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP{127, 0, 0, 1}, Port: 14791})
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	rraw, _ := rc.SyscallConn()
	rraw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) })
	sraw, _ := sc.SyscallConn()
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		m := newMmsg(batch, false)
		buf := make([]byte, batch*size)
		for i := 0; i < batch; i++ {
			m.setBuf(i, buf[i*size:(i+1)*size])
		}
		for {
			n, err := m.recvBatch(rraw, batch)
			if err != nil {
				return
			}
			received.Add(int64(n))
		}
	}()
	m := newMmsg(batch, true)
	data := make([]byte, size)
	for i := 0; i < batch; i++ {
		m.setBuf(i, data)
		m.setDest(i, netip.AddrFrom4([4]byte{127, 0, 0, 2}).As16(), 14791)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		n, _, err := m.sendBatch(sraw, min(batch, b.N-sent))
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	b.StopTimer()
	waitFor(100*time.Millisecond, func() bool { return received.Load() >= int64(sent) }) // what is lost stays lost
	b.ReportMetric(float64(received.Load())/float64(sent), "delivered")
	rc.Close()
	<-done
}

// BenchmarkUDPGSOLoopback is the GSO ceiling: what a soft device's
// sockets can move on loopback at best. A plain UDP socket on 127.0.0.1
// (checksum on, as GSO needs) sends 4112-byte segments (a 4 KiB RoCE
// packet) 15 to a UDP_SEGMENT send, 4 sends per sendmmsg, to a UDP_GRO
// socket on 127.0.0.2 read with recvmmsg as a device in GSO mode reads
// (source address, UDP_GRO control message). One op is one segment; the
// metric "delivered" is the share of segments received.
func BenchmarkUDPGSOLoopback(b *testing.B) {
	const seg, segs, batch, port = 4112, 15, 4, 14792
	dst := [4]byte{127, 0, 0, 2}
	rcv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(dst[:]), Port: port})
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	rraw, _ := rcv.SyscallConn()
	rraw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	})
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP{127, 0, 0, 1}, Port: port})
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	sraw, _ := sc.SyscallConn()
	sraw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	})
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		const rbatch = 64
		m := newRecvMmsg(rbatch)
		buf := make([]byte, rbatch*rxGSOBufSize)
		for i := 0; i < rbatch; i++ {
			m.setBuf(i, buf[i*rxGSOBufSize+rxHeadroom:(i+1)*rxGSOBufSize])
		}
		for {
			n, err := m.recvBatch(rraw, rbatch)
			if err != nil {
				return
			}
			for i := 0; i < n; i++ {
				if _, _, ok := m.source(i); !ok || m.groSize(i) != seg {
					continue
				}
				received.Add(int64(int(m.hdrs[i].Len)+seg-1) / seg)
			}
		}
	}()
	m := newMmsg(batch, true)
	data := make([]byte, seg*segs)
	for i := 0; i < batch; i++ {
		m.setIov(i, data)
		m.setMsg(i, i, 1, netip.AddrFrom4(dst).As16(), port, seg, 0)
	}
	b.SetBytes(seg - 16) // the RoCE payload of a 4 KiB packet
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		n, _, err := m.sendBatch(sraw, batch)
		if err != nil {
			b.Fatal(err)
		}
		sent += n * segs
	}
	b.StopTimer()
	waitFor(100*time.Millisecond, func() bool { return received.Load() >= int64(sent) }) // what is lost stays lost
	b.ReportMetric(float64(received.Load())/float64(sent), "delivered")
	rcv.Close()
	<-done
}
