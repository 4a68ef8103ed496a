package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// TestTargetWithOurHost runs this package's host against its target:
// Connect, then 32 commands at a time of reads and writes from 512 bytes
// to 256 KiB (in-capsule, through R2T), digests off and on; what was
// written reads back.
func TestTargetWithOurHost(t *testing.T) {
	for i, dg := range []struct{ h, d bool }{{false, false}, {true, true}, {false, true}} {
		t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v", dg.h, dg.d), func(t *testing.T) {
			l, hs := tgtStart(t, netip.AddrFrom4([4]byte{127, 0, 43, byte(1 + i)}).String(),
				func(c *TargetConfig) { c.InlineDataSize = 8192; c.MaxTransfer = 256 << 10 }, nil)
			d := NewDialer(HostConfig{HeaderDigest: dg.h, DataDigest: dg.d})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			hq, err := d.Dial(ctx, l.Address(), fabrics.QueueParams{QID: 1, SQSize: 33})
			if err != nil {
				t.Fatal(err)
			}
			defer hq.Close()
			done := make(chan *fabrics.HostCommand, 64)
			submit := func(c *fabrics.HostCommand) {
				t.Helper()
				c.Done = func(c *fabrics.HostCommand) { done <- c }
				if err := hq.Submit(c); err != nil {
					t.Fatal(err)
				}
			}
			wait := func() *fabrics.HostCommand {
				t.Helper()
				select {
				case c := <-done:
					if c.Err != nil {
						t.Fatal(c.Err)
					}
					if st := nvme.CQE(c.CQE[:]).StatusRaw() >> 1; st != 0 {
						t.Fatalf("status %#x", st)
					}
					return c
				case <-ctx.Done():
					t.Fatal("no completion")
				}
				return nil
			}
			conn := &fabrics.HostCommand{Direction: fabrics.DirHostToCtrl, Data: make([]byte, fabrics.ConnectDataLen)}
			copy(conn.SQE[:], tgtConnectSQE(1, 32, 4, true))
			submit(conn)
			wait()
			mh := <-hs
			hq.SetInCapsuleDataSize(8192)

			sizes := []int{512, 4096, 8192, 12288, 128 << 10, 256 << 10}
			cmds := make([]*fabrics.HostCommand, 32)
			want := map[uint64][]byte{}
			for k := range cmds {
				n := sizes[k%len(sizes)]
				slba := uint64(k) * 512
				data := tgtPattern(n, byte(k))
				want[slba] = data
				c := &fabrics.HostCommand{Direction: fabrics.DirHostToCtrl, Data: data, Tag: uint16(k)}
				c.SQE[0] = byte(nvme.IOWrite)
				binary.LittleEndian.PutUint32(c.SQE[4:], 1)
				binary.LittleEndian.PutUint64(c.SQE[40:], slba)
				binary.LittleEndian.PutUint32(c.SQE[48:], uint32(n/512-1))
				cmds[k] = c
				submit(c)
			}
			for range cmds {
				wait()
			}
			for k, c := range cmds {
				n := len(c.Data)
				c.Direction = fabrics.DirCtrlToHost
				c.Data = make([]byte, n)
				c.SQE[0] = byte(nvme.IORead)
				submit(cmds[k])
			}
			for range cmds {
				c := wait()
				if !bytes.Equal(c.Data, want[binary.LittleEndian.Uint64(c.SQE[40:])]) {
					t.Fatalf("tag %d: read back differs", c.Tag)
				}
			}
			hq.Close()
			select {
			case <-mh.closed:
			case <-ctx.Done():
				t.Fatal("the target queue did not close")
			}
		})
	}
}
