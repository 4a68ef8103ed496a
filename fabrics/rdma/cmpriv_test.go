package rdma

import (
	"encoding/hex"
	"testing"

	"github.com/nvmeof/nvmeof/internal/capture"
)

// cmaHeaderLen is the length of the rdma_cm header in front of the REQ's
// consumer private data (struct cma_hdr).
const cmaHeaderLen = 36

type oracleCM struct {
	Frame   int    `json:"frame"`
	Msg     string `json:"msg"`
	PrivHex string `json:"private_data_hex"`
	Req     *struct {
		Recfmt  uint16 `json:"recfmt"`
		QID     uint16 `json:"qid"`
		HRQSize uint16 `json:"hrqsize"`
		HSQSize uint16 `json:"hsqsize"`
		CntlID  uint16 `json:"cntlid"`
	} `json:"nvme_rdma_cm_req"`
	Rep *struct {
		Recfmt  uint16 `json:"recfmt"`
		CRQSize uint16 `json:"crqsize"`
	} `json:"nvme_rdma_cm_rep"`
	Rej *struct {
		Recfmt uint16 `json:"recfmt"`
		Sts    uint16 `json:"sts"`
	} `json:"nvme_rdma_cm_rej"`
}

// TestGoldenCMPrivateData decodes the NVMe/RDMA private data of every CM
// REQ, REP and REJ in the kernel captures and compares with the oracle.
func TestGoldenCMPrivateData(t *testing.T) {
	var reqs, reps, rejs int
	for _, name := range []string{"kernel-nvme-rdma-rxe", "rxe-icrc-probe"} {
		recs, err := capture.LoadOracle(name + ".decoded.jsonl.gz")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind != "cm" {
				continue
			}
			var o oracleCM
			if err := r.Decode(&o); err != nil {
				t.Fatal(err)
			}
			priv, err := hex.DecodeString(o.PrivHex)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case o.Req != nil:
				q, err := ParseCMRequest(priv[cmaHeaderLen:])
				if err != nil {
					t.Fatalf("frame %d: %v", o.Frame, err)
				}
				got := [5]uint16{q.Recfmt(), q.QID(), q.HRQSize(), q.HSQSize(), q.CntlID()}
				want := [5]uint16{o.Req.Recfmt, o.Req.QID, o.Req.HRQSize, o.Req.HSQSize, o.Req.CntlID}
				if got != want {
					t.Errorf("frame %d: REQ private data %v, oracle %v", o.Frame, got, want)
				}
				reqs++
			case o.Rep != nil:
				a, err := ParseCMAccept(priv)
				if err != nil {
					t.Fatal(err)
				}
				if a.Recfmt() != o.Rep.Recfmt || a.CRQSize() != o.Rep.CRQSize {
					t.Errorf("frame %d: REP recfmt %d crqsize %d, oracle %+v", o.Frame, a.Recfmt(), a.CRQSize(), *o.Rep)
				}
				reps++
			case o.Rej != nil:
				j, err := ParseCMReject(priv)
				if err != nil {
					t.Fatal(err)
				}
				if j.Recfmt() != o.Rej.Recfmt || uint16(j.Status()) != o.Rej.Sts {
					t.Errorf("frame %d: REJ recfmt %d sts %d, oracle %+v", o.Frame, j.Recfmt(), j.Status(), *o.Rej)
				}
				rejs++
			}
		}
	}
	// 3 REQs and 3 REPs in the kernel capture, 2 REQs, 1 REP, 1 REJ in the probe capture.
	if reqs != 5 || reps != 4 || rejs != 1 {
		t.Errorf("decoded %d REQ, %d REP, %d REJ private data; want 5, 4, 1", reqs, reps, rejs)
	}
}

func TestCMPrivateDataRoundTrip(t *testing.T) {
	tests := []struct{ qid, hrq, hsq, cntlid uint16 }{
		{0, 32, 31, 0}, {1, 128, 127, 1}, {0xffff, 0xffff, 0xffff, 0xffff},
	}
	for _, tt := range tests {
		b := make([]byte, CMRequestLen)
		for i := range b {
			b[i] = 0xaa
		}
		q := CMRequest(b)
		q.Set(tt.qid, tt.hrq, tt.hsq, tt.cntlid)
		if q.Recfmt() != 0 || q.QID() != tt.qid || q.HRQSize() != tt.hrq || q.HSQSize() != tt.hsq || q.CntlID() != tt.cntlid {
			t.Errorf("round trip %+v: got %d %d %d %d %d", tt, q.Recfmt(), q.QID(), q.HRQSize(), q.HSQSize(), q.CntlID())
		}
		for _, c := range b[10:] {
			if c != 0 {
				t.Fatalf("reserved bytes not cleared: %x", b)
			}
		}
	}
	a := CMAccept(make([]byte, CMAcceptLen))
	a.Set(128)
	if a.CRQSize() != 128 || a.Recfmt() != 0 {
		t.Errorf("accept round trip: %x", []byte(a))
	}
	j := CMReject(make([]byte, CMRejectLen))
	j.Set(CMInvalidHSQSize)
	if j.Status() != CMInvalidHSQSize || j.Status().String() != "invalid host SQ size" {
		t.Errorf("reject round trip: %x %v", []byte(j), j.Status())
	}
}

func FuzzCMPrivateData(f *testing.F) {
	f.Add(make([]byte, 32))
	f.Add([]byte{0, 0, 0x20, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseCMRequest(b); err == nil {
			_ = q.QID() + q.HRQSize() + q.HSQSize() + q.CntlID() + q.Recfmt()
		}
		if a, err := ParseCMAccept(b); err == nil {
			_ = a.CRQSize() + a.Recfmt()
		}
		if j, err := ParseCMReject(b); err == nil {
			_ = j.Status().String()
		}
	})
}
