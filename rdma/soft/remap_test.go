package soft

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// TestRemap: a remapped region takes RDMA WRITEs and READs into its new
// buffer under the new rkey only; the old rkey, an invalidated one and
// accesses past the new (shorter) length fail; a buffer longer than the
// registration is refused.
func TestRemap(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	// setup connects a fresh QP pair (a failed access moves the QP to the
	// error state) with a remote region of 8 KiB remapped to own.
	setup := func(own []byte) (*end, rdma.MR, rdma.RemappableMR, uint32, uint32) {
		ea, eb := connect(t, a, b, qpOpts{})
		src := regMR(t, ea.pd, 8192, rdma.AccessLocalWrite)
		fill(src.Bytes(), 9)
		mem := regMR(t, eb.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead).(rdma.RemappableMR)
		old := mem.RKey()
		k, err := mem.Remap(own)
		if err != nil || k == old || mem.Len() != len(own) || !mem.RKeyValid() {
			t.Fatalf("Remap: key %#x (old %#x), %v, len %d", k, old, err, mem.Len())
		}
		return ea, src, mem, old, k
	}
	op := func(ea *end, src rdma.MR, mem rdma.MR, opcode rdma.WROpcode, key uint32, off, n int) rdma.WCStatus {
		postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: opcode, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: mem.Addr() + uint64(off), RKey: key})
		return poll(t, ea.scq, 1, 2*time.Second)[0].Status
	}

	own := make([]byte, 4096)
	ea, src, mem, old, k := setup(own)
	if _, err := mem.Remap(make([]byte, 8193)); !errors.Is(err, rdma.ErrInvalidArgument) {
		t.Fatalf("Remap past the registered length: %v", err)
	}
	if st := op(ea, src, mem, rdma.WRRDMAWrite, k, 0, 4096); st != rdma.Success || !bytes.Equal(own, src.Bytes()[:4096]) {
		t.Fatalf("WRITE with the new key: %v, data equal %v", st, bytes.Equal(own, src.Bytes()[:4096]))
	}
	clear(src.Bytes())
	if st := op(ea, src, mem, rdma.WRRDMARead, k, 0, 4096); st != rdma.Success || !bytes.Equal(own, src.Bytes()[:4096]) {
		t.Fatalf("READ with the new key: %v", st)
	}
	if st := op(ea, src, mem, rdma.WRRDMAWrite, old, 0, 16); st != rdma.RemoteAccessError {
		t.Fatalf("WRITE with the old key: %v", st)
	}

	ea, src, mem, _, k = setup(make([]byte, 4096))
	if st := op(ea, src, mem, rdma.WRRDMAWrite, k, 4000, 200); st != rdma.RemoteAccessError {
		t.Fatalf("WRITE past the remapped length: %v", st)
	}

	ea, src, mem, _, k = setup(make([]byte, 4096))
	if err := mem.Invalidate(); err != nil || mem.RKeyValid() {
		t.Fatalf("Invalidate: %v, valid %v", err, mem.RKeyValid())
	}
	if st := op(ea, src, mem, rdma.WRRDMAWrite, k, 0, 16); st != rdma.RemoteAccessError {
		t.Fatalf("WRITE after Invalidate: %v", st)
	}
}
