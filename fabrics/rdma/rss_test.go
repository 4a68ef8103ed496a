package rdma_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target/server"
)

// The target's resident memory with connected queues (issue #12): the
// target runs in a child process (this test binary again, in
// TestRSSTargetChild) so that its VmRSS is its own, not the host's.

const (
	rssNQN     = "nqn.2026-11.io.nvmeof:rss"
	rssHostNQN = "nqn.2014-08.org.nvmexpress:uuid:5b0d1c9e-7a3f-4e2d-9c8b-1a2b3c4d5e6f"
	rssSvc     = 4460
	rssEnv     = "NVMEOF_RSS_TARGET" // the child's target address
	rssQueues  = 8                   // I/O queues
	rssDepth   = 128
	// The busy run writes 4 KiB blocks from 0 (one per slot: 4 MiB at
	// most) and 128 KiB of zeros in the zero region; the namespace's
	// RAM for them (rssNSBytes) is in the child's RSS too.
	rssZeroBase  = 16 << 20
	rssZeroBytes = 8 << 20
	rssNSBytes   = 4<<20 + rssZeroBytes
	// rssPoolBytes is the port's data_pool_size (the default): above the
	// about 35 MiB the I/O has in flight at its peak.
	rssPoolBytes = 64 << 20
)

// rssHCL is the child's configuration: a memory namespace on a soft port.
const rssHCL = `
port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = %d
  data_pool_size = %d
}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "64MiB"
  }
}
`

// rssAddr is 127.R.P.P with P.P from the process ID, R a role.
func rssAddr(role byte, pid int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, role, byte(pid >> 8), byte(pid)})
}

// TestRSSTargetChild is the target process of TestTargetRSS; it runs only
// when that test starts it (rssEnv set), serves until its standard input
// closes, and says "ready" on its standard output.
func TestRSSTargetChild(t *testing.T) {
	addr := os.Getenv(rssEnv)
	if addr == "" {
		t.Skip("the target process of TestTargetRSS")
	}
	tree, err := configfs.ParseHCL([]byte(fmt.Sprintf(rssHCL, addr, rssSvc, rssPoolBytes, rssNQN)), "rss.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "target", Level: hclog.Warn, Output: os.Stderr})})
	defer srv.Close()
	if err := srv.Apply(tree); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

// rssTarget is the child process.
type rssTarget struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// vmRSS returns the child's resident set size in bytes.
func (c *rssTarget) vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

func startRSSTarget(t *testing.T, ctx context.Context, addr netip.Addr) *rssTarget {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRSSTargetChild$", "-test.v")
	cmd.Env = append(os.Environ(), rssEnv+"="+addr.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &rssTarget{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("target process: %v\n%s", err, stderr.String())
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if sc.Text() == "ready" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			if strings.Contains(stderr.String(), "operation not permitted") {
				t.Skip("soft RoCE device needs CAP_NET_RAW")
			}
			t.Fatalf("target process did not start:\n%s", stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("target process: not ready in time")
	}
	return c
}

// TestTargetRSS: with 8 I/O queues of 128 entries (and their admin
// queues) connected and idle, the target's RSS grows by less than 32 MiB;
// after QD128 I/O on every queue it is logged, and must stay below the
// data pool's cap (data_pool_size) plus the idle bound plus the
// namespace RAM written.
func TestTargetRSS(t *testing.T) {
	if os.Getenv(rssEnv) != "" {
		t.Skip("in the target process")
	}
	if raceEnabled {
		t.Skip("RSS under the race detector says nothing of the target's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pid := os.Getpid()
	tAddr, hAddr := rssAddr(28, pid), rssAddr(29, pid)
	tgt := startRSSTarget(t, ctx, tAddr)
	hdev, err := soft.Open(soft.Config{Addr: hAddr})
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("soft device: %v", err)
		}
		t.Fatal(err)
	}
	defer hdev.Close()
	// A first controller without I/O queues warms the target up (the
	// soft device's receive buffers, the controller code's first heap),
	// so that what follows is the queues' share.
	d := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: hdev})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: tAddr, ServiceID: rssSvc}
	opts := initiator.Options{SubsystemNQN: rssNQN, HostNQN: rssHostNQN, QueueSize: rssDepth, KeepAliveTimeout: -1}
	warm := opts
	warm.NrIOQueues = 1
	wc, err := initiator.Connect(ctx, d, addr, warm)
	if err != nil {
		t.Fatal(err)
	}
	wc.Close()
	before := tgt.vmRSS(t)
	// The initiator asks for at most one I/O queue per CPU: as many
	// controllers as it takes for rssQueues I/O queues.
	var ctrls []*initiator.Controller
	var ctrlQueues []int
	defer func() {
		for _, c := range ctrls {
			c.Close()
		}
	}()
	nq := 0
	for nq < rssQueues {
		o := opts
		o.NrIOQueues = min(rssQueues-nq, runtime.NumCPU())
		c, err := initiator.Connect(ctx, d, addr, o)
		if err != nil {
			t.Fatal(err)
		}
		ctrls = append(ctrls, c)
		ctrlQueues = append(ctrlQueues, o.NrIOQueues)
		nq += o.NrIOQueues
	}
	idle := tgt.vmRSS(t)
	grow := idle - before
	t.Logf("target RSS: %.1f MiB before, %.1f MiB with %d I/O queues of %d entries idle (%d controllers): +%.1f MiB, %.2f MiB per queue",
		mib(before), mib(idle), nq, rssDepth, len(ctrls), mib(grow), mib(grow)/rssQueues)
	if grow >= 32<<20 {
		t.Errorf("target RSS grew by %.1f MiB with %d idle queues, want less than 32 MiB", mib(grow), nq)
	}

	// Busy: QD128 on every queue, 4 KiB and 128 KiB reads and writes
	// (the controllers round-robin their I/O over their queues), a
	// bounded count, verified.
	const perCtrl = 4 << 10
	var wg sync.WaitGroup
	errs := make(chan error, len(ctrls))
	base := 0
	for ci, c := range ctrls {
		ns, err := c.Namespace(1)
		if err != nil {
			t.Fatal(err)
		}
		qd := ctrlQueues[ci] * rssDepth
		wg.Add(1)
		go func(base int) {
			defer wg.Done()
			if err := rssLoad(ctx, ns, base, qd, perCtrl); err != nil {
				errs <- err
			}
		}(base)
		base += qd
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	busy := tgt.vmRSS(t)
	t.Logf("target RSS after %d I/Os at QD%d on each of %d queues: %.1f MiB, +%.1f MiB over before (%.2f MiB per queue; includes up to %d MiB of namespace RAM written)",
		perCtrl*len(ctrls), rssDepth, nq, mib(busy), mib(busy-before), mib(busy-before)/rssQueues, rssNSBytes>>20)
	if limit := int64(32<<20) + rssPoolBytes + rssNSBytes; busy-before >= limit {
		t.Errorf("target RSS grew by %.1f MiB under load, want less than %.1f MiB (idle bound + pool cap + namespace)", mib(busy-before), mib(limit))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// rssLoad runs n I/Os on ns with qd in flight: 4 KiB writes of a
// random pattern to slot k's own block (base+k), each read back and
// compared, and every fourth I/O a 128 KiB read or write of zeros in the
// zero region (reads of it must return zeros): RDMA READs and WRITEs of
// both sizes.
func rssLoad(ctx context.Context, ns *initiator.Namespace, base, qd, n int) error {
	type slot struct {
		io      initiator.IO
		wbuf    []byte
		rbuf    []byte
		off     int64
		reading bool
	}
	const big = 128 << 10
	done := make(chan *slot, qd)
	rnd := rand.New(rand.NewPCG(uint64(base), 12))
	zeros := make([]byte, big)
	slots := make([]slot, qd)
	started := 0
	start := func(s *slot) {
		started++
		finish := func(*initiator.IO) { done <- s }
		if started%4 == 0 {
			off := rssZeroBase + int64(rnd.IntN(rssZeroBytes/big))*big
			s.io = initiator.IO{Op: initiator.OpWrite, Buf: zeros, Off: off, Done: finish}
			if started%8 == 0 {
				s.io = initiator.IO{Op: initiator.OpRead, Buf: s.rbuf, Off: off, Done: finish}
			}
			s.reading = true // checked as a read of zeros
			s.wbuf = s.wbuf[:0]
			ns.Start(&s.io)
			return
		}
		s.wbuf = s.wbuf[:4096]
		for i := range s.wbuf {
			s.wbuf[i] = byte(rnd.Uint32())
		}
		s.reading = false
		s.io = initiator.IO{Op: initiator.OpWrite, Buf: s.wbuf, Off: s.off, Done: finish}
		ns.Start(&s.io)
	}
	for k := range slots {
		s := &slots[k]
		s.wbuf = make([]byte, 4096)
		s.rbuf = make([]byte, big)
		s.off = int64(base+k) * 4096
		start(s)
	}
	inflight := qd
	for inflight > 0 {
		var s *slot
		select {
		case s = <-done:
		case <-ctx.Done():
			return fmt.Errorf("load: %d I/Os in flight at the deadline", inflight)
		}
		if s.io.Err != nil {
			return fmt.Errorf("load: %v at %d: %w", s.io.Op, s.io.Off, s.io.Err)
		}
		switch {
		case !s.reading:
			s.reading = true
			s.io = initiator.IO{Op: initiator.OpRead, Buf: s.rbuf[:len(s.wbuf)], Off: s.off, Done: s.io.Done}
			ns.Start(&s.io)
			continue
		case len(s.wbuf) > 0 && !bytes.Equal(s.rbuf[:len(s.wbuf)], s.wbuf):
			return fmt.Errorf("load: data read back at %d differs from what was written", s.off)
		case len(s.wbuf) == 0 && s.io.Op == initiator.OpRead && !bytes.Equal(s.rbuf, zeros):
			return fmt.Errorf("load: the zero region at %d reads back non-zero", s.io.Off)
		}
		if started < n {
			start(s)
			continue
		}
		inflight--
	}
	return nil
}
