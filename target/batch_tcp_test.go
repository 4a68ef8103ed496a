package target

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// TestIOFileRingTCPDepth runs 32 writes, then 32 reads, at a time against
// a file namespace on io_uring over NVMe/TCP on loopback, where the
// responses of a reaping pass leave in one send (CompleteRequests): every
// command completes and every read returns what was written.
func TestIOFileRingTCPDepth(t *testing.T) {
	dev, err := bdev.OpenFile(bdev.Spec{Kind: bdev.KindFile, Path: filepath.Join(t.TempDir(), "ns.img"), Size: 4 << 20, QueueDepth: 32})
	if err != nil {
		t.Fatal(err)
	}
	if !dev.AsyncReady() {
		dev.Close()
		t.Skip("no io_uring here")
	}
	l, err := tcp.Listen(tcp.TargetConfig{Addr: netip.MustParseAddr("127.0.45.23"), Ephemeral: true, TOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, tgt: New(Options{Logger: testLogger(t)}), addr: l.Address()}
	must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowedHosts: []string{testHostNQN}}))
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 1, Device: dev}))
	must(t, f.tgt.AddPort(PortConfig{ID: testPortID, Address: f.addr, Subsystems: []string{testSubNQN}}))
	f.serve(l)
	dial := func(qid uint16, depth int) *hq {
		q, err := tcp.NewDialer(tcp.HostConfig{}).Dial(context.Background(), f.addr, fabrics.QueueParams{QID: qid, SQSize: depth + 1})
		must(t, err)
		t.Cleanup(func() { q.Close() })
		return &hq{t: t, q: q, qid: qid}
	}
	admin := dial(0, 31)
	r := admin.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect")
	admin.cntlid = uint16(r.cqe.DW0())
	admin.enable()
	io := dial(1, 32)
	expect(t, io.connectRaw(32, 0, 0, testSubNQN, testHostNQN, admin.cntlid), 0, "I/O Connect")

	const n, blocks = 32, 8
	for round := range 4 {
		data := make([][]byte, n)
		chs := make([]<-chan result, n)
		for i := range n {
			data[i] = pattern(blocks*512, uint64(round*n+i))
			chs[i] = io.submit(rwSQE(nvme.IOWrite, 1, uint64(i*blocks), blocks), data[i], fabrics.DirHostToCtrl)
		}
		for _, ch := range chs {
			expect(t, io.wait(ch), 0, "write")
		}
		bufs := make([][]byte, n)
		for i := range n {
			bufs[i] = make([]byte, blocks*512)
			chs[i] = io.submit(rwSQE(nvme.IORead, 1, uint64(i*blocks), blocks), bufs[i], fabrics.DirCtrlToHost)
		}
		for i, ch := range chs {
			expect(t, io.wait(ch), 0, "read")
			if !bytes.Equal(bufs[i], data[i]) {
				t.Fatalf("round %d: read %d differs from what was written", round, i)
			}
		}
	}
}
