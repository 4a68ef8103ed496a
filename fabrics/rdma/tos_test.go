package rdma

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// TestSoftTOS: a host device opened with a traffic class (what nvmeof
// connect -T/--tos gives the soft provider) connects to a target device
// without one. The host's capture shows every packet of the I/O queue's
// QP (command capsules, RDMA READ responses carrying write data, ACKs)
// and its CM MADs (REQ, RTU, DREQ) with that TOS, and the target's
// capture shows its QP's packets (CQE capsules, RDMA WRITEs of read data,
// READ requests) and MADs (REP, DREP) with it too: the passive side takes
// the traffic class the CM REQ carried, as Linux's ib_cm builds its
// address vector from the REQ's primary path. Every sent packet passes
// the ICRC.
func TestSoftTOS(t *testing.T) {
	const tos = 0x68 // DSCP AF31
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var capT, capH bytes.Buffer
	tAddr, hAddr := netip.MustParseAddr("127.0.20.5"), netip.MustParseAddr("127.0.20.6")
	open := func(cfg soft.Config) *soft.Device {
		d, err := soft.Open(cfg)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW: %v", err)
		}
		if err != nil {
			t.Fatalf("soft.Open(%v): %v", cfg.Addr, err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	tdev := open(soft.Config{Addr: tAddr, Pcap: &capT})
	hdev := open(soft.Config{Addr: hAddr, Pcap: &capH, TrafficClass: tos})
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420, InlineDataSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &memHandler{closed: make(chan error, 1)}
	go func() {
		if q, err := l.Accept(ctx); err == nil {
			q.Serve(h)
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: tAddr, ServiceID: 4420},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	fabricsConnect(t, ctx, hq)
	hq.SetInCapsuleDataSize(4096)
	for _, n := range []int{512, 64 << 10} { // in-capsule, keyed SGL
		want := bytes.Repeat([]byte{byte(n), 0x5a, 0xc3}, n/3+1)[:n]
		submit(t, ctx, hq, 0x01, want, fabrics.DirHostToCtrl)
		got := make([]byte, n)
		r := submit(t, ctx, hq, 0x02, got, fabrics.DirCtrlToHost)
		if !bytes.Equal(got, want) || nvme.CQE(r.CQE[:]).Status() != 0 {
			t.Fatalf("read %d bytes back: differs or failed (%v)", n, nvme.CQE(r.CQE[:]).Status())
		}
	}
	hq.Close()
	l.Close()
	hdev.Close()
	tdev.Close()
	for _, side := range []struct {
		name string
		addr netip.Addr
		cap  []byte
	}{{"host", hAddr, capH.Bytes()}, {"target", tAddr, capT.Bytes()}} {
		r, err := pcapgo.NewReader(bytes.NewReader(side.cap))
		if err != nil {
			t.Fatal(err)
		}
		ops := map[wire.Opcode]int{}
		for i := 0; i < 1e6; i++ {
			d, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			ip, _, pkt, err := wire.SplitIPUDP(d)
			if err != nil {
				t.Fatalf("%s record %d: %v", side.name, i, err)
			}
			if netip.AddrFrom4([4]byte(ip[12:16])) != side.addr {
				continue // received
			}
			if err := wire.CheckICRC(d); err != nil {
				t.Fatalf("%s record %d: %v", side.name, i, err)
			}
			bth := wire.BTH(pkt)
			if ip[1] != tos {
				t.Errorf("%s record %d: %s with TOS %#x, want %#x", side.name, i, bth.Opcode(), ip[1], tos)
			}
			ops[bth.Opcode()]++
		}
		if ops[wire.RCSendOnly] == 0 && ops[wire.RCSendOnlyWithInvalidate] == 0 {
			t.Errorf("%s: no capsule sent (opcodes %v)", side.name, ops)
		}
		if ops[wire.UDSendOnly] == 0 {
			t.Errorf("%s: no CM MAD sent (opcodes %v)", side.name, ops)
		}
		t.Logf("%s: packets with TOS %#x by opcode: %v", side.name, tos, ops)
	}
}
