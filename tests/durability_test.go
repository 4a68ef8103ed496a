package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Durability of acknowledged writes (issue 23): nvmetd serves a file, or a
// loop device, on the io_uring backend; a host keeps writes in flight,
// either each with FUA or in batches each closed by a Flush, and logs what
// the target acknowledged as durable (a FUA write's success, or the
// success of the Flush after a batch). nvmetd is killed with SIGKILL in
// the middle of the traffic, restarted on the same configuration, and
// every logged write must read back, through the restarted target and on
// the backing store itself.

const (
	durTgtAddr  = "127.0.52.1"
	durHostAddr = "127.0.52.2"
	durSvc      = 4456
	durSize     = 16 << 20
	durBlock    = 4096 // bytes per write: in-capsule (the port's inline_data_size)
	durAcked    = 300  // durable writes logged before the kill
	durBatch    = 16   // writes per Flush in the Flush mode
	durQD       = 7    // commands the raw I/O queue (8 entries) holds
)

const durHCL = `log_level = "info"
port "p0" {
  transport        = "rdma"
  provider         = "soft"
  address          = %q
  service          = %d
  inline_data_size = 4096
}
subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  namespace "1" {
%s
    queue_depth = 32
  }
}
`

func TestDurabilityAfterSIGKILL(t *testing.T) {
	_, bin := binaries(t)
	for _, backend := range []string{"file", "block"} {
		for _, fua := range []bool{true, false} {
			name := backend + map[bool]string{true: "/FUA", false: "/Flush"}[fua]
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				img := filepath.Join(dir, "ns.img")
				store := img // what is read back after the kill
				ns := fmt.Sprintf("    backend = \"file\"\n    path    = %q\n    size    = %d", img, durSize)
				if backend == "block" {
					requireRoot(t) // the loop device
					store = loopDevice(t, img)
					ns = fmt.Sprintf("    backend = \"block\"\n    path    = %q", store)
				}
				cfg := filepath.Join(dir, "nvmetd.hcl")
				src := fmt.Sprintf(durHCL, durTgtAddr, durSvc, softNQN, ns)
				if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				durabilityRun(t, bin, cfg, store, fua)
			})
		}
	}
}

// loopDevice attaches a loop device over a new file of durSize bytes, or
// skips the test where loop devices cannot be set up.
func loopDevice(t *testing.T, img string) string {
	t.Helper()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, durSize); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device here: losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// durBlockData is what write k puts in its block: k in the first 8 bytes,
// then bytes that depend on k.
func durBlockData(k int, b []byte) {
	for i := range b {
		b[i] = byte(k*131 + i*7 + i>>8)
	}
	binary.LittleEndian.PutUint64(b, uint64(k)+1)
}

func durabilityRun(t *testing.T, bin, cfg, store string, fua bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := startNvmetd(t, bin, cfg)
	e := &softTarget{addr: fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(durTgtAddr), ServiceID: durSvc},
		hdev: openSoftDevice(t, durHostAddr)}
	h := e.rawConnect(t, ctx)

	type slot struct {
		cmd fabrics.HostCommand
		k   int
	}
	done := make(chan *fabrics.HostCommand, durQD)
	slots := make([]slot, durQD)
	byCmd := map[*fabrics.HostCommand]*slot{}
	for i := range slots {
		slots[i].cmd.Data = make([]byte, durBlock)
		slots[i].cmd.Tag = uint16(i)
		slots[i].cmd.Done = func(c *fabrics.HostCommand) { done <- c }
		byCmd[&slots[i].cmd] = &slots[i]
	}
	var acked, batch []int // durable writes; writes waiting for a Flush
	next, inflight := 0, 0
	maxWrites := durSize / durBlock
	submit := func(s *slot, op nvme.IOOpcode) {
		t.Helper()
		if op == nvme.IOFlush {
			s.cmd.SQE = sqeOf(uint8(nvme.IOFlush), 1)
			s.cmd.Data, s.cmd.Direction, s.k = s.cmd.Data[:0], fabrics.DirNone, -1
		} else {
			s.k = next
			next++
			s.cmd.Data = s.cmd.Data[:durBlock]
			durBlockData(s.k, s.cmd.Data)
			sqe := sqeOf(uint8(nvme.IOWrite), 1)
			rw := nvme.RWCommand{SQE: nvme.SQE(sqe[:])}
			rw.SetSLBA(uint64(s.k * durBlock / 512))
			rw.SetNLB(durBlock/512 - 1)
			rw.SetFUA(fua)
			s.cmd.SQE, s.cmd.Direction = sqe, fabrics.DirHostToCtrl
		}
		if err := h.io.Submit(&s.cmd); err != nil {
			t.Fatalf("submit: %v", err)
		}
		inflight++
	}
	// Keep the queue full of writes; in the Flush mode, a batch of
	// writes is drained and closed by a Flush before the next one.
	free := make([]*slot, 0, durQD)
	for i := range slots {
		free = append(free, &slots[i])
	}
	flushing := false
	for len(acked) < durAcked {
		for len(free) > 0 && !flushing && next < maxWrites && (fua || len(batch)+inflight < durBatch) {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			submit(s, nvme.IOWrite)
		}
		if !fua && !flushing && inflight == 0 && len(batch) == durBatch {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			submit(s, nvme.IOFlush)
			flushing = true
		}
		var c *fabrics.HostCommand
		select {
		case c = <-done:
		case <-ctx.Done():
			t.Fatalf("no completion after %d durable writes\n%s", len(acked), d.log)
		}
		inflight--
		s := byCmd[c]
		if st := nvme.CQE(c.CQE[:]).Status(); c.Err != nil || st != 0 {
			t.Fatalf("command %d: %v, status %#x\n%s", s.k, c.Err, st, d.log)
		}
		switch {
		case s.k < 0:
			acked = append(acked, batch...)
			batch, flushing = batch[:0], false
		case fua:
			acked = append(acked, s.k)
		default:
			batch = append(batch, s.k)
		}
		free = append(free, s)
	}
	// Kill with writes in flight (the Flush mode's go unflushed); a
	// completion that still arrives was sent before the kill and counts.
	for len(free) > 0 && next < maxWrites {
		s := free[len(free)-1]
		free = free[:len(free)-1]
		submit(s, nvme.IOWrite)
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
	for drained := false; !drained; {
		select {
		case c := <-done:
			s := byCmd[c]
			if c.Err == nil && nvme.CQE(c.CQE[:]).Status() == 0 {
				switch {
				case s.k < 0:
					acked = append(acked, batch...)
				case fua:
					acked = append(acked, s.k)
				}
			}
		default:
			drained = true
		}
	}
	// Closing queues whose peer died waits for the disconnect timeout
	// (10 s): let it run beside the checks below.
	closed := make(chan struct{})
	go func(io, admin fabrics.HostQueue) { io.Close(); admin.Close(); close(closed) }(h.io, h.admin)
	t.Cleanup(func() { <-closed })
	t.Logf("%d writes acknowledged as durable, %d written, killed with %d in flight", len(acked), next, inflight)

	// The backing store itself.
	f, err := os.Open(store)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, got := make([]byte, durBlock), make([]byte, durBlock)
	lost := 0
	for _, k := range acked {
		durBlockData(k, want)
		if _, err := f.ReadAt(got, int64(k*durBlock)); err != nil || !bytes.Equal(got, want) {
			if lost++; lost <= 5 {
				t.Errorf("acknowledged write %d is not on %s (%v; first bytes % x)", k, store, err, got[:8])
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(acked))
	}

	// Through the restarted target.
	d = startNvmetd(t, bin, cfg)
	h = e.rawConnect(t, ctx)
	for i, k := range acked {
		if i%10 != 0 && i != len(acked)-1 {
			continue // a sample: the store was checked in full above
		}
		sqe := sqeOf(uint8(nvme.IORead), 1)
		rw := nvme.RWCommand{SQE: nvme.SQE(sqe[:])}
		rw.SetSLBA(uint64(k * durBlock / 512))
		rw.SetNLB(durBlock/512 - 1)
		cqe, err := runSQE(ctx, h.io, sqe, got, fabrics.DirCtrlToHost)
		durBlockData(k, want)
		if err != nil || cqe.Status() != 0 || !bytes.Equal(got, want) {
			t.Fatalf("after the restart, write %d: %v %v, equal %t\n%s", k, err, cqe, bytes.Equal(got, want), d.log)
		}
	}
}
