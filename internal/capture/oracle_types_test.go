package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// TestOracleTypes decodes every record of the three oracles strictly into
// the type of its kind and checks that the type keeps every value: each
// key of the record comes back with the same value when the decoded struct
// is encoded again.
func TestOracleTypes(t *testing.T) {
	types := map[string]func() any{
		KindRoCE:      func() any { return new(RoCERecord) },
		KindCM:        func() any { return new(CMRecord) },
		KindCapsule:   func() any { return new(CapsuleRecord) },
		KindCQE:       func() any { return new(CQERecord) },
		KindRDMAData:  func() any { return new(RDMADataRecord) },
		KindSendOther: func() any { return new(SendOtherRecord) },
		KindTCPPDU:    func() any { return new(TCPPDURecord) },
	}
	tests := []struct {
		oracle string
		counts map[string]int // testdata/pcap/ORACLE.md
	}{
		{"kernel-nvme-rdma-rxe.decoded.jsonl.gz", map[string]int{KindRoCE: 5324, KindCM: 15, KindCapsule: 206, KindCQE: 204, KindRDMAData: 158}},
		{"kernel-nvme-tcp.decoded.jsonl.gz", map[string]int{KindTCPPDU: 595}},
		{"rxe-icrc-probe.decoded.jsonl.gz", map[string]int{KindRoCE: 4, KindCM: 4}},
	}
	for _, tt := range tests {
		recs, err := LoadOracle(tt.oracle)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for i, r := range recs {
			newT, ok := types[r.Kind]
			if !ok {
				t.Errorf("%s record %d: kind %q has no type", tt.oracle, i+1, r.Kind)
				continue
			}
			counts[r.Kind]++
			v := newT()
			if err := r.DecodeStrict(v); err != nil {
				t.Errorf("%s record %d: %v", tt.oracle, i+1, err)
				continue
			}
			if err := sameValues(r.Raw, v); err != nil {
				t.Errorf("%s record %d (%s): %v", tt.oracle, i+1, r.Kind, err)
			}
		}
		if !reflect.DeepEqual(counts, tt.counts) {
			t.Errorf("%s: records %v, ORACLE.md says %v", tt.oracle, counts, tt.counts)
		}
	}
}

// sameValues reports the first key of the JSON object raw whose value the
// struct v, encoded again, does not repeat.
func sameValues(raw []byte, v any) error {
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var want, got map[string]any
	for _, d := range []struct {
		b []byte
		m *map[string]any
	}{{raw, &want}, {enc, &got}} {
		dec := json.NewDecoder(bytes.NewReader(d.b))
		dec.UseNumber()
		if err := dec.Decode(d.m); err != nil {
			return err
		}
	}
	return sameObject("", want, got)
}

func sameObject(prefix string, want, got map[string]any) error {
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return fmt.Errorf("key %s%s lost", prefix, k)
		}
		if wm, ok := w.(map[string]any); ok {
			gm, ok := g.(map[string]any)
			if !ok {
				return fmt.Errorf("key %s%s: %v, the oracle has an object", prefix, k, g)
			}
			if err := sameObject(prefix+k+".", wm, gm); err != nil {
				return err
			}
			continue
		}
		if !reflect.DeepEqual(w, g) {
			return fmt.Errorf("key %s%s: %v, the oracle has %v", prefix, k, g, w)
		}
	}
	return nil
}

func TestRecords(t *testing.T) {
	recs, err := LoadOracle("kernel-nvme-tcp.decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	pdus, err := Records[TCPPDURecord](recs, KindTCPPDU)
	if err != nil || len(pdus) != 595 {
		t.Fatalf("%d tcp_pdu records, %v", len(pdus), err)
	}
	// The first PDU is the first ICReq, in one frame.
	if p := pdus[0]; p.TypeName != "ICReq" || p.ICReq == nil || p.SQE != nil || len(p.PDUFrames()) != 1 {
		t.Errorf("first PDU %+v", p)
	}
	if caps, err := Records[CapsuleRecord](recs, KindCapsule); err != nil || len(caps) != 0 {
		t.Errorf("%d capsule records in the TCP oracle, %v", len(caps), err)
	}
	// A value wider than the field is an error, as is an unknown key.
	bad := []Record{{Kind: KindTCPPDU, Raw: []byte(`{"kind":"tcp_pdu","sport":65536}`)}}
	if _, err := Records[TCPPDURecord](bad, KindTCPPDU); err == nil {
		t.Error("a 17-bit port decoded")
	}
	// sameValues notices a lost key and a value the type cannot keep.
	if sameValues([]byte(`{"a":1}`), &struct{}{}) == nil {
		t.Error("sameValues: lost key not noticed")
	}
	raw := []byte(`{"a":{"b":9007199254740993}}`)
	var f struct {
		A struct {
			B float64 `json:"b"`
		} `json:"a"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || sameValues(raw, &f) == nil {
		t.Errorf("sameValues: 2^53+1 through float64 not noticed (%v)", err)
	}
	var p TCPPDURecord
	if err := (Record{Kind: KindTCPPDU, Raw: []byte(`{"kind":"tcp_pdu","nokey":1}`)}).DecodeStrict(&p); err == nil {
		t.Error("DecodeStrict accepted an unknown key")
	}
}
