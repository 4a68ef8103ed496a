package capture

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// tcpFrame builds a synthetic IPv4/TCP frame (only the fields TCPStreams reads).
func tcpFrame(n int, src, dst byte, sport, dport uint16, seq uint32, flags byte, payload []byte) Frame {
	ip := make([]byte, 20)
	ip[0] = 0x45
	copy(ip[12:], []byte{192, 0, 2, src})
	copy(ip[16:], []byte{192, 0, 2, dst})
	th := make([]byte, 20)
	binary.BigEndian.PutUint16(th[0:], sport)
	binary.BigEndian.PutUint16(th[2:], dport)
	binary.BigEndian.PutUint32(th[4:], seq)
	th[12] = 5 << 4
	th[13] = flags
	return Frame{Number: n, Proto: 6, IP: ip, L4: th, Payload: payload}
}

// pdu returns an NVMe/TCP-shaped PDU of n bytes (PLEN in bytes 7:4) filled with tag.
func pdu(n int, tag byte) []byte {
	b := bytes.Repeat([]byte{tag}, n)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	return b
}

func TestTCPStreamsReassembly(t *testing.T) {
	stream := append(append(pdu(30, 1), pdu(8, 2)...), pdu(50, 3)...) // 88 bytes
	const isn = 0xfffffff0                                            // wraps inside the stream
	seg := func(n int, off, end int) Frame {
		return tcpFrame(n, 3, 2, 40000, 4420, uint32(isn+1+off), tcpACK, stream[off:end])
	}
	syn := tcpFrame(1, 3, 2, 40000, 4420, isn, tcpSYN, nil)
	synack := tcpFrame(2, 2, 3, 4420, 40000, 7, tcpSYN|tcpACK, nil)
	tests := []struct {
		name      string
		frames    []Frame
		dup       int
		reordered int
		first     []int // FirstFrame of the three PDUs
		last      []int
	}{
		{"in order", []Frame{syn, synack, seg(3, 0, 20), seg(4, 20, 60), seg(5, 60, 88)}, 0, 0,
			[]int{3, 4, 4}, []int{4, 4, 5}},
		{"reordered", []Frame{syn, synack, seg(3, 60, 88), seg(4, 20, 60), seg(5, 0, 20)}, 0, 2,
			[]int{5, 4, 4}, []int{4, 4, 3}},
		{"retransmitted and overlapping", []Frame{syn, synack, seg(3, 0, 20), seg(4, 0, 20), seg(5, 10, 40),
			seg(6, 30, 88), seg(7, 60, 88)}, 20 + 10 + 10 + 28, 0, []int{3, 5, 5}, []int{5, 5, 6}},
		{"overlapping out of order", []Frame{syn, synack, seg(3, 50, 88), seg(4, 40, 70), seg(5, 0, 45)}, 5 + 20, 2,
			[]int{5, 5, 5}, []int{5, 5, 3}},
		{"no SYN", []Frame{seg(3, 0, 20), seg(4, 20, 88)}, 0, 0, []int{3, 4, 4}, []int{4, 4, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			streams, err := TCPStreams(tt.frames)
			if err != nil {
				t.Fatal(err)
			}
			var s *TCPStream
			for _, x := range streams {
				if x.Src.Port() == 40000 {
					s = x
				}
			}
			if s == nil {
				t.Fatal("no host stream")
			}
			if !bytes.Equal(s.Data, stream) {
				t.Fatalf("data %x, want %x", s.Data, stream)
			}
			if s.Duplicate != tt.dup || s.Missing != 0 || s.Reordered != tt.reordered {
				t.Errorf("duplicate %d missing %d reordered %d, want %d 0 %d", s.Duplicate, s.Missing, s.Reordered, tt.dup, tt.reordered)
			}
			if tt.name != "no SYN" && (!s.SYN || !s.Active) {
				t.Errorf("SYN %v Active %v", s.SYN, s.Active)
			}
			pdus, rest, err := SplitPDUs(s)
			if err != nil || rest != 0 || len(pdus) != 3 {
				t.Fatalf("SplitPDUs: %d PDUs, rest %d, %v", len(pdus), rest, err)
			}
			for i, p := range pdus {
				if p.FirstFrame != tt.first[i] || p.LastFrame != tt.last[i] {
					t.Errorf("PDU %d frames %d..%d, want %d..%d", i, p.FirstFrame, p.LastFrame, tt.first[i], tt.last[i])
				}
				if p.Data[0] != byte(i+1) {
					t.Errorf("PDU %d starts with %d", i, p.Data[0])
				}
			}
		})
	}
}

func TestSplitPDUsErrors(t *testing.T) {
	s := &TCPStream{Data: append(pdu(16, 1), 0, 0, 0, 0, 3, 0, 0, 0), chunks: []streamChunk{{0, 1}}}
	if _, _, err := SplitPDUs(s); err == nil {
		t.Error("PLEN 3 accepted")
	}
	s = &TCPStream{Data: append(pdu(16, 1), pdu(40, 2)[:20]...), chunks: []streamChunk{{0, 1}}}
	pdus, rest, err := SplitPDUs(s)
	if err != nil || len(pdus) != 1 || rest != 20 {
		t.Errorf("truncated stream: %d PDUs, rest %d, %v", len(pdus), rest, err)
	}
	// A hole that is never filled.
	frames := []Frame{
		tcpFrame(1, 3, 2, 1, 4420, 100, tcpSYN, nil),
		tcpFrame(2, 3, 2, 1, 4420, 101, tcpACK, pdu(8, 1)),
		tcpFrame(3, 3, 2, 1, 4420, 120, tcpACK, pdu(8, 1)),
	}
	if _, err := NVMeTCPPDUs(frames, 4420); err == nil {
		t.Error("stream with a hole accepted")
	}
}

// TestNVMeTCPPDUsGolden checks the PDUs LoadTCPGolden cuts (with
// NVMeTCPPDUs) against the oracle's frames, source and length.
func TestNVMeTCPPDUsGolden(t *testing.T) {
	g, err := LoadTCPGolden("kernel-nvme-tcp")
	if err != nil {
		t.Fatal(err)
	}
	pdus, recs := g.PDUs, g.Records
	if len(pdus) != len(recs) || len(pdus) != 595 || len(g.Frames) != 3722 {
		t.Fatalf("%d PDUs, oracle %d, %d frames; want 595 and 3722 frames", len(pdus), len(recs), len(g.Frames))
	}
	if _, err := LoadTCPGolden("no-such-capture"); err == nil {
		t.Error("a missing capture loaded")
	}
	for i, r := range recs {
		var o TCPPDURecord
		if err := r.Decode(&o); err != nil {
			t.Fatal(err)
		}
		p := pdus[i]
		if p.FirstFrame != o.FrameFirst || p.LastFrame != o.FrameLast || p.Stream.Src.Addr().String() != o.Src ||
			p.Stream.Src.Port() != o.Sport || uint32(len(p.Data)) != o.Hdr.PLen {
			t.Errorf("PDU %d: frames %d..%d from %s len %d; oracle %d..%d from %s:%d len %d", i,
				p.FirstFrame, p.LastFrame, p.Stream.Src, len(p.Data), o.FrameFirst, o.FrameLast, o.Src, o.Sport, o.Hdr.PLen)
		}
	}
}

// TestNVMeTCPPDUsMutated cuts every data segment of the TCP capture into
// pieces, duplicates, overlaps and swaps them (as the oracle's self-test
// does) and checks that the same PDU bytes come out.
func TestNVMeTCPPDUsMutated(t *testing.T) {
	frames, err := Load("kernel-nvme-tcp.pcapng.gz")
	if err != nil {
		t.Fatal(err)
	}
	want, err := NVMeTCPPDUs(frames, 4420)
	if err != nil {
		t.Fatal(err)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		var mutated []Frame
		n := 0
		add := func(f Frame, payload []byte, seq uint32) {
			n++
			th := append([]byte(nil), f.L4...)
			binary.BigEndian.PutUint32(th[4:], seq)
			mutated = append(mutated, Frame{Number: n, Proto: f.Proto, IP: f.IP, IPv6: f.IPv6, L4: th, Payload: payload})
		}
		for _, f := range frames {
			if f.Proto != 6 || len(f.Payload) == 0 {
				if f.Proto == 6 {
					add(f, nil, binary.BigEndian.Uint32(f.L4[4:]))
				}
				continue
			}
			seq := binary.BigEndian.Uint32(f.L4[4:])
			p := f.Payload
			var pieces []Frame
			for len(p) > 0 {
				k := 1 + rng.IntN(len(p))
				if rng.IntN(3) == 0 {
					k = len(p)
				}
				off := len(f.Payload) - len(p)
				// Overlap: start a few bytes early.
				back := 0
				if off > 0 && rng.IntN(4) == 0 {
					back = min(off, 1+rng.IntN(8))
				}
				piece := f.Payload[off-back : off+k]
				th := append([]byte(nil), f.L4...)
				binary.BigEndian.PutUint32(th[4:], seq+uint32(off-back))
				pieces = append(pieces, Frame{Proto: 6, IP: f.IP, L4: th, Payload: piece})
				if rng.IntN(5) == 0 {
					pieces = append(pieces, pieces[len(pieces)-1]) // duplicate
				}
				p = p[k:]
			}
			if len(pieces) > 1 && rng.IntN(2) == 0 {
				i := rng.IntN(len(pieces) - 1)
				pieces[i], pieces[i+1] = pieces[i+1], pieces[i]
			}
			for _, pc := range pieces {
				add(pc, pc.Payload, binary.BigEndian.Uint32(pc.L4[4:]))
			}
		}
		got, err := NVMeTCPPDUs(mutated, 4420)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d PDUs, want %d", seed, len(got), len(want))
		}
		dup := 0
		for _, p := range got {
			if p.Offset == 0 {
				dup += p.Stream.Duplicate
			}
		}
		if dup == 0 || len(mutated) < 2*len(frames) {
			t.Fatalf("seed %d: %d frames, %d duplicate bytes: the mutation did too little", seed, len(mutated), dup)
		}
		// Frame numbers change, and with swapped pieces so does the order
		// of last frames; the PDUs of each stream, in stream order, must not.
		byOffset := func(pdus []TCPPDU) map[string][][]byte {
			pdus = slices.Clone(pdus)
			slices.SortStableFunc(pdus, func(a, b TCPPDU) int { return a.Offset - b.Offset })
			m := map[string][][]byte{}
			for _, p := range pdus {
				m[p.Stream.String()] = append(m[p.Stream.String()], p.Data)
			}
			return m
		}
		byStream, gotBy := byOffset(want), byOffset(got)
		for k, w := range byStream {
			g := gotBy[k]
			if len(g) != len(w) {
				t.Fatalf("seed %d %s: %d PDUs, want %d", seed, k, len(g), len(w))
			}
			for i := range w {
				if !bytes.Equal(g[i], w[i]) {
					t.Fatalf("seed %d %s: PDU %d differs", seed, k, i)
				}
			}
		}
	}
}
