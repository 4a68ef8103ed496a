package tcp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/internal/capture"
)

// The transport fields of the oracle's tcp_pdu records (testdata/pcap/ORACLE.md).
// The SQE, CQE and Connect data in them are checked by package fabrics'
// TestGoldenTCP.
type oraclePDU struct {
	FrameFirst int `json:"frame_first"`
	FrameLast  int `json:"frame_last"`
	Hdr        struct {
		Type  uint8  `json:"type"`
		Flags uint8  `json:"flags"`
		HLen  uint8  `json:"hlen"`
		PDO   uint8  `json:"pdo"`
		PLen  uint32 `json:"plen"`
	} `json:"hdr"`
	TypeName string `json:"type_name"`
	ICReq    *struct {
		PFV    uint16 `json:"pfv"`
		HPDA   uint8  `json:"hpda"`
		DGST   uint8  `json:"dgst"`
		MaxR2T uint32 `json:"maxr2t"`
	} `json:"icreq"`
	ICResp *struct {
		PFV        uint16 `json:"pfv"`
		CPDA       uint8  `json:"cpda"`
		DGST       uint8  `json:"dgst"`
		MaxH2CData uint32 `json:"maxh2cdata"`
	} `json:"icresp"`
	IncapsuleLen *int `json:"incapsule_len"`
	Data         *struct {
		CCCID  uint16 `json:"cccid"`
		TTag   uint16 `json:"ttag"`
		DataO  uint32 `json:"datao"`
		DataL  uint32 `json:"datal"`
		Len    int    `json:"len"`
		SHA256 string `json:"sha256"`
	} `json:"data"`
	R2T *struct {
		CCCID uint16 `json:"cccid"`
		TTag  uint16 `json:"ttag"`
		R2TO  uint32 `json:"r2to"`
		R2TL  uint32 `json:"r2tl"`
	} `json:"r2t"`
}

// TestGoldenPDUs parses every PDU of the kernel NVMe/TCP capture and
// compares the transport fields with the decode oracle.
func TestGoldenPDUs(t *testing.T) {
	frames, err := capture.Load("kernel-nvme-tcp.pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	pdus, err := capture.NVMeTCPPDUs(frames, 4420)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := capture.LoadOracle("kernel-nvme-tcp.decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	if len(pdus) != len(recs) {
		t.Fatalf("%d PDUs, oracle %d", len(pdus), len(recs))
	}
	for i, r := range recs {
		var o oraclePDU
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
