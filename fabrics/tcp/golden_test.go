package tcp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/internal/capture"
)

// TestGoldenPDUs parses every PDU of the kernel NVMe/TCP capture and
// compares the transport fields with the decode oracle. The SQE, CQE and
// Connect data in the PDUs are checked by package fabrics' TestGoldenTCP.
func TestGoldenPDUs(t *testing.T) {
	g, err := capture.LoadTCPGolden("kernel-nvme-tcp")
	if err != nil {
		t.Fatal(err)
	}
	pdus := g.PDUs
	for i, r := range g.Records {
		var o capture.TCPPDURecord
		if err := r.Decode(&o); err != nil {
			t.Fatal(err)
		}
		p, err := tcp.Parse(pdus[i].Data)
		if err != nil {
			t.Errorf("frames %d..%d: %v", o.FrameFirst, o.FrameLast, err)
			continue
		}
		h := p.Header()
		got := fmt.Sprintln(h.Type(), h.Flags(), h.HLen(), h.PDO(), h.PLen())
		want := fmt.Sprintln(o.TypeName, o.Hdr.Flags, o.Hdr.HLen, o.Hdr.PDO, o.Hdr.PLen)
		if got != want || uint8(h.Type()) != o.Hdr.Type {
			t.Errorf("frames %d..%d: header %s, oracle %s", o.FrameFirst, o.FrameLast, got, want)
		}
		switch {
		case o.ICReq != nil:
			q := p.ICReq()
			got, want = fmt.Sprintln(q.PFV(), q.HPDA(), q.DGST(), q.MaxR2T()), fmt.Sprintln(o.ICReq.PFV, o.ICReq.HPDA, o.ICReq.DGST, o.ICReq.MaxR2T)
		case o.ICResp != nil:
			q := p.ICResp()
			got, want = fmt.Sprintln(q.PFV(), q.CPDA(), q.DGST(), q.MaxH2CData()), fmt.Sprintln(o.ICResp.PFV, o.ICResp.CPDA, o.ICResp.DGST, o.ICResp.MaxH2CData)
		case o.IncapsuleLen != nil:
			got, want = fmt.Sprintln(len(p.Data()), len(p.CapsuleCmd().SQE())), fmt.Sprintln(*o.IncapsuleLen, 64)
		case o.Data != nil:
			d := p.DataPDU()
			sum := sha256.Sum256(p.Data())
			got = fmt.Sprintln(d.CCCID(), d.TTag(), d.DataO(), d.DataL(), len(p.Data()), hex.EncodeToString(sum[:]))
			want = fmt.Sprintln(o.Data.CCCID, o.Data.TTag, o.Data.DataO, o.Data.DataL, o.Data.Len, o.Data.SHA256)
		case o.R2T != nil:
			q := p.R2T()
			got, want = fmt.Sprintln(q.CCCID(), q.TTag(), q.R2TO(), q.R2TL()), fmt.Sprintln(o.R2T.CCCID, o.R2T.TTag, o.R2T.R2TO, o.R2T.R2TL)
		default:
			got, want = "", ""
		}
		if got != want {
			t.Errorf("frames %d..%d %s: %s, oracle %s", o.FrameFirst, o.FrameLast, o.TypeName, got, want)
		}
	}
}
