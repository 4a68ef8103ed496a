package capture

import "testing"

func TestLoadCaptures(t *testing.T) {
	tests := []struct {
		pcap, oracle string
		frames       int
		roce         int
		records      int
	}{
		{"kernel-nvme-rdma-rxe.pcapng.gz", "kernel-nvme-rdma-rxe.decoded.jsonl.gz", 0, 5324, 5907},
		{"kernel-nvme-tcp.pcapng.gz", "kernel-nvme-tcp.decoded.jsonl.gz", 3722, 0, 595},
		{"rxe-icrc-probe.pcapng.gz", "rxe-icrc-probe.decoded.jsonl.gz", 0, 4, 8},
	}
	for _, tt := range tests {
		frames, err := Load(tt.pcap)
		if err != nil {
			t.Fatal(err)
		}
		if tt.frames != 0 && len(frames) != tt.frames {
			t.Errorf("%s: %d frames, want %d", tt.pcap, len(frames), tt.frames)
		}
		roce := 0
		for i := range frames {
			if frames[i].IsRoCEv2() {
				roce++
				f := &frames[i]
				if got := len(f.IPOnward()); got != len(f.IP)+8+len(f.Payload) {
					t.Fatalf("frame %d: IPOnward length %d", f.Number, got)
				}
			}
		}
		if roce != tt.roce {
			t.Errorf("%s: %d RoCEv2 frames, want %d", tt.pcap, roce, tt.roce)
		}
		recs, err := LoadOracle(tt.oracle)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != tt.records {
			t.Errorf("%s: %d records, want %d", tt.oracle, len(recs), tt.records)
		}
	}
	// A path (with a separator) is opened as is.
	path, err := Path("rxe-icrc-probe.decoded.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := LoadOracle(path); err != nil || len(recs) != 8 {
		t.Errorf("LoadOracle(%s): %d records, %v", path, len(recs), err)
	}
	if _, err := Load("no-such-capture.pcapng.gz"); err == nil {
		t.Error("a missing capture loaded")
	}
}

func TestMessages(t *testing.T) {
	frames, err := Load("kernel-nvme-rdma-rxe.pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := Messages(frames)
	if err != nil {
		t.Fatal(err)
	}
	var sends, cqes, writes, reads, multi int
	for _, m := range msgs {
		switch m.Kind {
		case MsgSend:
			if len(m.Payload) == 16 {
				cqes++
			} else {
				sends++
			}
			if len(m.Frames) > 1 {
				multi++
			}
		case MsgWrite:
			writes++
		case MsgReadResponse:
			reads++
		}
	}
	// testdata/pcap/ORACLE.md: 206 capsules (21 reassembled), 204 CQEs, 101 RDMA WRITE messages, 57 READ responses.
	if sends != 206 || cqes != 204 || writes != 101 || reads != 57 || multi != 21 {
		t.Errorf("capsules %d CQEs %d writes %d read responses %d multi-packet SENDs %d; want 206 204 101 57 21", sends, cqes, writes, reads, multi)
	}
}
