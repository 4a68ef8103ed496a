package wire_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// refICRC is a plain restatement of the ICRC definition, independent of
// icrc.go: build the masked pseudo packet in one buffer and run
// crc32.ChecksumIEEE over it.
func refICRC(ip, udp, pkt []byte) uint32 {
	b := make([]byte, 0, 8+len(ip)+len(udp)+len(pkt))
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	h := append([]byte(nil), ip...)
	if h[0]>>4 == 6 {
		h[0] |= 0x0f
		h[1], h[2], h[3] = 0xff, 0xff, 0xff
		h[7] = 0xff
	} else {
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
	}
	b = append(b, h...)
	u := append([]byte(nil), udp...)
	u[6], u[7] = 0xff, 0xff
	b = append(b, u...)
	t := append([]byte(nil), pkt...)
	t[4] = 0xff
	b = append(b, t...)
	return crc32.ChecksumIEEE(b)
}

func TestICRCSeed(t *testing.T) {
	// rxe_icrc.c seeds crc32_le with 0xdebb20e3: the register after 8
	// bytes of 0xff from ~0. crc32.ChecksumIEEE returns the inverted register.
	ff := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if got := ^crc32.ChecksumIEEE(ff); got != 0xdebb20e3 {
		t.Fatalf("register after 8 x 0xff = %#08x, rxe seed 0xdebb20e3", got)
	}
}

type oracleICRC struct {
	Frame    int    `json:"frame"`
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	UDPSport uint16 `json:"udp_sport"`
	IPID     uint16 `json:"ip_id"`
	IPDF     bool   `json:"ip_df"`
	ICRC     uint32 `json:"icrc"`
	ICRCOK   bool   `json:"icrc_ok"`
}

// TestGoldenICRC checks our ICRC against the oracle's icrc_ok for every
// RoCEv2 frame of the kernel captures: all 5324 frames of the NVMe/RDMA
// capture are good, the probe's first REQ carries a wrong ICRC on purpose.
func TestGoldenICRC(t *testing.T) {
	tests := []struct {
		name       string
		frames, ok int
		bad        []int
	}{
		{"kernel-nvme-rdma-rxe", 5324, 5324, nil},
		{"rxe-icrc-probe", 4, 3, []int{3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, err := capture.Load(tt.name + ".pcapng.gz")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := capture.LoadOracle(tt.name + ".decoded.jsonl.gz")
			if err != nil {
				t.Fatal(err)
			}
			n, ok := 0, 0
			var bad []int
			for _, r := range recs {
				if r.Kind != "roce" {
					continue
				}
				var o oracleICRC
				if err := r.Decode(&o); err != nil {
					t.Fatal(err)
				}
				f := frames[o.Frame-1]
				n++
				err := wire.CheckICRC(f.IPOnward())
				if (err == nil) != o.ICRCOK {
					t.Errorf("frame %d: CheckICRC = %v, oracle icrc_ok %t", o.Frame, err, o.ICRCOK)
				}
				if err != nil {
					bad = append(bad, o.Frame)
					if !errors.Is(err, wire.ErrBadICRC) {
						t.Errorf("frame %d: %v does not wrap ErrBadICRC", o.Frame, err)
					}
					continue
				}
				ok++
				pkt := f.Payload[:len(f.Payload)-wire.ICRCLen]
				if got := wire.ICRC(f.IP, f.L4, pkt); got != o.ICRC {
					t.Errorf("frame %d: ICRC %#08x, oracle %#08x", o.Frame, got, o.ICRC)
				}
				// The sender's view: only the fields a UDP socket user knows.
				src, dst := netip.MustParseAddr(o.Src), netip.MustParseAddr(o.Dst)
				if got := wire.ICRCForIPv4(src.As4(), dst.As4(), o.IPID, o.IPDF, o.UDPSport, wire.UDPPort, pkt); got != o.ICRC {
					t.Errorf("frame %d: ICRCForIPv4 %#08x, oracle %#08x", o.Frame, got, o.ICRC)
				}
				if n <= 64 { // the reference is slow; a sample is enough
					if got := refICRC(f.IP, f.L4, pkt); got != o.ICRC {
						t.Errorf("frame %d: reference ICRC %#08x, oracle %#08x", o.Frame, got, o.ICRC)
					}
				}
			}
			if n != tt.frames || ok != tt.ok || len(bad) != len(tt.bad) {
				t.Fatalf("%d frames, %d good, bad %v; want %d, %d, %v", n, ok, bad, tt.frames, tt.ok, tt.bad)
			}
			for i := range bad {
				if bad[i] != tt.bad[i] {
					t.Fatalf("bad frames %v, want %v", bad, tt.bad)
				}
			}
		})
	}
}

// buildDatagram builds an IPv4 or IPv6 + UDP datagram around pkt (BTH
// through pad) and stores its ICRC computed by ICRCForIPv4/6.
func buildDatagram(t testing.TB, v6 bool, rng *rand.Rand, pkt []byte) []byte {
	udpLen := wire.UDPHeaderLen + len(pkt) + wire.ICRCLen
	var ip []byte
	var icrc uint32
	if v6 {
		var src, dst [16]byte
		for i := range src {
			src[i], dst[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		ip = make([]byte, wire.IPv6HeaderLen)
		binary.BigEndian.PutUint32(ip, 6<<28|rng.Uint32()&0x0fffffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, byte(rng.Uint32())
		copy(ip[8:], src[:])
		copy(ip[24:], dst[:])
		icrc = wire.ICRCForIPv6(src, dst, 49152, wire.UDPPort, pkt)
	} else {
		var src, dst [4]byte
		for i := range src {
			src[i], dst[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		id := uint16(rng.Uint32())
		ip = make([]byte, wire.IPv4HeaderLen)
		ip[0], ip[1] = 0x45, byte(rng.Uint32())
		binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], id)
		ip[6] = 0x40
		ip[8], ip[9] = byte(rng.Uint32()), 17
		binary.BigEndian.PutUint16(ip[10:], uint16(rng.Uint32()))
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
		icrc = wire.ICRCForIPv4(src, dst, id, true, 49152, wire.UDPPort, pkt)
	}
	udp := make([]byte, wire.UDPHeaderLen)
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(udp[6:], uint16(rng.Uint32()))
	if want := refICRC(ip, udp, pkt); icrc != want {
		t.Fatalf("v6=%t: ICRCFor %#08x, reference %#08x", v6, icrc, want)
	}
	if got := wire.ICRC(ip, udp, pkt); got != icrc {
		t.Fatalf("v6=%t: ICRC %#08x, ICRCFor %#08x", v6, got, icrc)
	}
	d := append(append(append([]byte(nil), ip...), udp...), pkt...)
	d = append(d, 0, 0, 0, 0)
	if err := wire.PutICRC(d[len(ip)+len(udp):], icrc); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestICRCMasking checks IPv4 and IPv6 datagrams against the reference,
// that changing a masked field keeps the ICRC valid and that changing any
// other bit breaks it.
func TestICRCMasking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 1, 4, 60, 256, 4096} {
			pkt := make([]byte, wire.BTHLen+n)
			for i := range pkt {
				pkt[i] = byte(rng.Uint32())
			}
			d := buildDatagram(t, v6, rng, pkt)
			if err := wire.CheckICRC(d); err != nil {
				t.Fatalf("v6=%t n=%d: %v", v6, n, err)
			}
			ipLen := wire.IPv4HeaderLen
			masked := map[int]bool{1: true, 8: true, 10: true, 11: true}
			if v6 {
				ipLen = wire.IPv6HeaderLen
				masked = map[int]bool{1: true, 2: true, 3: true, 7: true}
			}
			masked[ipLen+6], masked[ipLen+7] = true, true // UDP checksum
			masked[ipLen+wire.UDPHeaderLen+4] = true      // BTH byte 4
			limit := ipLen + wire.UDPHeaderLen + wire.BTHLen + 8
			for i := 0; i < limit && i < len(d)-wire.ICRCLen; i++ {
				for bit := 0; bit < 8; bit++ {
					m := byte(1) << bit
					if v6 && i == 0 && m&0xf0 != 0 {
						continue // IP version: not a valid datagram any more
					}
					if parsedField(v6, ipLen, i, m) {
						continue // lengths, protocol, fragments: the parser's business
					}
					d[i] ^= m
					err := wire.CheckICRC(d)
					d[i] ^= m
					isMasked := masked[i] || v6 && i == 0 && m&0x0f != 0
					if isMasked && err != nil {
						t.Errorf("v6=%t byte %d bit %d is masked, CheckICRC: %v", v6, i, bit, err)
					}
					if !isMasked && !errors.Is(err, wire.ErrBadICRC) {
						t.Errorf("v6=%t byte %d bit %d is covered, CheckICRC: %v", v6, i, bit, err)
					}
				}
			}
			// The last payload byte and the ICRC itself.
			for _, i := range []int{len(d) - wire.ICRCLen - 1, len(d) - 1} {
				d[i] ^= 0x10
				if err := wire.CheckICRC(d); !errors.Is(err, wire.ErrBadICRC) {
					t.Errorf("v6=%t n=%d: byte %d flipped: %v", v6, n, i, err)
				}
				d[i] ^= 0x10
			}
			// Link-layer padding after the datagram is ignored.
			if err := wire.CheckICRC(append(d, 0, 0, 0)); err != nil {
				t.Errorf("v6=%t n=%d: padded datagram: %v", v6, n, err)
			}
		}
	}
}

// parsedField reports header bits SplitIPUDP interprets, so that flipping
// them gives a parse error rather than an ICRC mismatch.
func parsedField(v6 bool, ipLen, i int, m byte) bool {
	switch {
	case i == ipLen+4 || i == ipLen+5: // UDP length
		return true
	case v6:
		return i == 4 || i == 5 || i == 6 // payload length, next header
	}
	return i == 0 || i == 2 || i == 3 || i == 9 || // IHL, total length, protocol
		i == 6 && m&0x3f != 0 || i == 7 // MF, fragment offset
}

func TestCheckICRCMalformed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	good := buildDatagram(t, false, rng, make([]byte, 16))
	good6 := buildDatagram(t, true, rng, make([]byte, 16))
	mod := func(b []byte, f func([]byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	tests := []struct {
		name  string
		b     []byte
		short bool
	}{
		{"empty", nil, true},
		{"one byte", []byte{0x45}, true},
		{"truncated IPv4 header", good[:19], true},
		{"truncated IPv6 header", good6[:39], true},
		{"IPv4 total length beyond data", good[:len(good)-1], true},
		{"IPv6 payload length beyond data", good6[:len(good6)-1], true},
		{"IHL 4", mod(good, func(b []byte) { b[0] = 0x44 }), true},
		{"IHL beyond total", mod(good, func(b []byte) { b[0] = 0x4f; b[3] = 40 }), true},
		{"IP version 5", mod(good, func(b []byte) { b[0] = 0x55 }), false},
		{"TCP", mod(good, func(b []byte) { b[9] = 6 }), false},
		{"IPv6 TCP", mod(good6, func(b []byte) { b[6] = 6 }), false},
		{"fragment", mod(good, func(b []byte) { b[6] = 0x20 }), false},
		{"no UDP header", mod(good, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 24) }), true},
		{"UDP length 7", mod(good, func(b []byte) { binary.BigEndian.PutUint16(b[24:], 7) }), true},
		{"UDP length beyond IP", mod(good, func(b []byte) { binary.BigEndian.PutUint16(b[24:], 1000) }), true},
		{"UDP payload shorter than BTH+ICRC", mod(good, func(b []byte) { binary.BigEndian.PutUint16(b[24:], 8+15) }), true},
	}
	for _, tt := range tests {
		err := wire.CheckICRC(tt.b)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if errors.Is(err, wire.ErrShort) != tt.short || errors.Is(err, wire.ErrBadICRC) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if err := wire.PutICRC(make([]byte, 15), 0); !errors.Is(err, wire.ErrShort) {
		t.Errorf("PutICRC on 15 bytes: %v", err)
	}
}

func TestICRCNoAlloc(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pkt := make([]byte, wire.BTHLen+4096)
	d := buildDatagram(t, false, rng, pkt)
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	var s16, d16 [16]byte
	allocs := testing.AllocsPerRun(100, func() {
		_ = wire.CheckICRC(d)
		_ = wire.ICRCForIPv4(src, dst, 0, true, 49152, wire.UDPPort, pkt)
		_ = wire.ICRCForIPv6(s16, d16, 49152, wire.UDPPort, pkt)
		_ = wire.ICRC(d[:20], d[20:28], pkt)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per ICRC", allocs)
	}
}

func BenchmarkICRC4K(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	pkt := make([]byte, wire.BTHLen+wire.RETHLen+4096)
	d := buildDatagram(b, false, rng, pkt)
	ip, udp := d[:20], d[20:28]
	b.Run("ICRC", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			_ = wire.ICRC(ip, udp, pkt)
		}
	})
	b.Run("CheckICRC", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if err := wire.CheckICRC(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ICRCForIPv4", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			_ = wire.ICRCForIPv4([4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}, 0, true, 49152, wire.UDPPort, pkt)
		}
	})
}

func FuzzCheckICRC(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	f.Add(buildDatagram(f, false, rng, make([]byte, 12)))
	f.Add(buildDatagram(f, true, rng, make([]byte, 40)))
	f.Add([]byte{0x45})
	f.Add([]byte{0x60, 0, 0, 0, 0, 0, 17})
	f.Fuzz(func(t *testing.T, b []byte) {
		err := wire.CheckICRC(b)
		ip, udp, pkt, serr := wire.SplitIPUDP(b)
		if serr != nil {
			if err == nil {
				t.Fatal("CheckICRC accepted what SplitIPUDP rejects")
			}
			// Arbitrary slices must not panic the low-level function either.
			n := len(b) / 3
			_ = wire.ICRC(b[:n], b[n:2*n], b[2*n:])
			return
		}
		if err == nil {
			end := len(pkt) - wire.ICRCLen
			if got := wire.ICRC(ip, udp, pkt[:end]); got != binary.LittleEndian.Uint32(pkt[end:]) {
				t.Fatal("CheckICRC accepted a packet whose ICRC differs")
			}
		}
		// A cache, cold and then warm, gives the same verdict.
		var c wire.ICRCCache
		for range 2 {
			if cerr := c.CheckParts(ip, udp, pkt); (cerr == nil) != (wire.CheckICRCParts(ip, udp, pkt) == nil) {
				t.Fatalf("ICRCCache.CheckParts = %v, CheckICRCParts disagrees", cerr)
			}
		}
	})
}

// TestICRCForIPv4Gather: the ICRC of a packet in three pieces equals the
// ICRC of the same bytes in one, for every split.
func TestICRCForIPv4Gather(t *testing.T) {
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	pkt := make([]byte, wire.BTHLen+wire.RETHLen+1000+3)
	for i := range pkt {
		pkt[i] = byte(i*7 + 1)
	}
	want := wire.ICRCForIPv4(src, dst, 5, true, 4791, 4791, pkt)
	for _, h := range []int{wire.BTHLen, wire.BTHLen + wire.RETHLen, 100} {
		for _, padLen := range []int{0, 1, 3} {
			hdr, data, pad := pkt[:h], pkt[h:len(pkt)-padLen], pkt[len(pkt)-padLen:]
			if got := wire.ICRCForIPv4Gather(src, dst, 5, true, 4791, 4791, hdr, data, pad); got != want {
				t.Fatalf("split %d/%d/%d: %#x, want %#x", len(hdr), len(data), len(pad), got, want)
			}
		}
	}
	if got := wire.ICRCForIPv4Gather(src, dst, 6, true, 4791, 4791, pkt[:wire.BTHLen], pkt[wire.BTHLen:], nil); got == want {
		t.Fatal("another IP ID gave the same ICRC")
	}
}

// TestICRCForIPv6Gather: the IPv6 ICRC of a packet in three pieces equals
// the ICRC of the same bytes in one, for every split, and equals the ICRC
// of the whole datagram whatever the sender wrote in the masked fields.
func TestICRCForIPv6Gather(t *testing.T) {
	src := netip.MustParseAddr("2001:db8::1").As16()
	dst := netip.MustParseAddr("2001:db8::2").As16()
	pkt := make([]byte, wire.BTHLen+wire.RETHLen+1000+3)
	for i := range pkt {
		pkt[i] = byte(i*7 + 1)
	}
	want := wire.ICRCForIPv6(src, dst, 50000, 4791, pkt)
	for _, h := range []int{wire.BTHLen, wire.BTHLen + wire.RETHLen, 100} {
		for _, padLen := range []int{0, 1, 3} {
			hdr, data, pad := pkt[:h], pkt[h:len(pkt)-padLen], pkt[len(pkt)-padLen:]
			if got := wire.ICRCForIPv6Gather(src, dst, 50000, 4791, hdr, data, pad); got != want {
				t.Fatalf("split %d/%d/%d: %#x, want %#x", len(hdr), len(data), len(pad), got, want)
			}
		}
	}
	if got := wire.ICRCForIPv6Gather(src, dst, 50001, 4791, pkt[:wire.BTHLen], pkt[wire.BTHLen:], nil); got == want {
		t.Fatal("another source port gave the same ICRC")
	}
	// The datagram as a kernel may send it: traffic class, flow label,
	// hop limit and UDP checksum set to anything.
	ulen := wire.UDPHeaderLen + len(pkt) + wire.ICRCLen
	ip := make([]byte, wire.IPv6HeaderLen)
	ip[0], ip[1], ip[2], ip[3] = 0x6a, 0xb1, 0x23, 0x45
	binary.BigEndian.PutUint16(ip[4:], uint16(ulen))
	ip[6], ip[7] = 17, 3
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	udp := []byte{0xc3, 0x50, 0x12, 0xb7, byte(ulen >> 8), byte(ulen), 0x12, 0x34}
	if got := wire.ICRC(ip, udp, pkt); got != want {
		t.Fatalf("ICRC over the datagram's headers %#x, ICRCForIPv6 %#x", got, want)
	}
	if got := refICRC(ip, udp, pkt); got != want {
		t.Fatalf("reference ICRC %#x, ICRCForIPv6 %#x", got, want)
	}
}

// TestICRCIPv6Vector: one RC SEND Only from [2001:db8::2]:49152 to
// [2001:db8::1]:4791 (destination QP 0x11, AckReq, PSN 0xabcdef, 16
// payload bytes 00..0f), its ICRC computed independently of this package
// with Python over the masked bytes written out by hand:
//
//	import zlib
//	zlib.crc32(bytes.fromhex(
//	  "ffffffffffffffff"                          # masked LRH
//	  "6fffffff002811ff"                          # version 6, TC+FL ones, payload 40, UDP, hop ones
//	  "20010db8000000000000000000000002"          # source
//	  "20010db8000000000000000000000001"          # destination
//	  "c00012b70028ffff"                          # UDP 49152 -> 4791, length 40, checksum ones
//	  "0400ffffff00001180abcdef"                  # BTH, byte 4 ones
//	  "000102030405060708090a0b0c0d0e0f"))        # payload
//	# 0xa5f49ff1
//
// rxe_icrc.c masks the same fields (flow_lbl, priority, hop_limit, UDP
// check, BTH resv8a).
func TestICRCIPv6Vector(t *testing.T) {
	const want = 0xa5f49ff1
	src := netip.MustParseAddr("2001:db8::2").As16()
	dst := netip.MustParseAddr("2001:db8::1").As16()
	pkt := []byte{0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xab, 0xcd, 0xef,
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	if got := wire.ICRCForIPv6(src, dst, 49152, wire.UDPPort, pkt); got != want {
		t.Errorf("ICRCForIPv6 = %#08x, want %#08x", got, want)
	}
	if got := wire.ICRCForIPv6Gather(src, dst, 49152, wire.UDPPort, pkt[:wire.BTHLen], pkt[wire.BTHLen:], nil); got != want {
		t.Errorf("ICRCForIPv6Gather = %#08x, want %#08x", got, want)
	}
	// The same datagram as sent, with a hop limit of 64 and checksum 0, and
	// its ICRC stored after the payload: CheckICRC accepts it, and
	// rejects it with a bit flipped in an unmasked header field.
	d := []byte{0x60, 0, 0, 0, 0, 40, 17, 64}
	d = append(append(d, src[:]...), dst[:]...)
	d = append(d, 0xc0, 0x00, 0x12, 0xb7, 0x00, 40, 0, 0)
	d = append(d, pkt...)
	d = binary.LittleEndian.AppendUint32(d, want)
	if err := wire.CheckICRC(d); err != nil {
		t.Errorf("CheckICRC: %v", err)
	}
	for _, off := range []int{8, 24, 40, 42} { // source, destination, UDP ports
		b := append([]byte(nil), d...)
		b[off+1] ^= 1
		if err := wire.CheckICRC(b); !errors.Is(err, wire.ErrBadICRC) {
			t.Errorf("byte %d flipped: %v", off+1, err)
		}
	}
	for _, off := range []int{1, 2, 3, 7, 46, 47} { // TC, flow label, hop limit, UDP checksum
		b := append([]byte(nil), d...)
		b[off] ^= 0x5a
		if err := wire.CheckICRC(b); err != nil {
			t.Errorf("masked byte %d changed: %v", off, err)
		}
	}
}

// TestGoldenICRCIPv6Capture checks our ICRC against rdma_rxe over IPv6:
// testdata/rxe-ipv6.pcapng holds 27 RoCEv2 frames captured on the
// kernel-peer bridge (tests/interop TestIPv6KernelHostAgainstNvmetd):
// the 6.1 kernel's nvme-rdma host on rxe at 2001:db8::2 connecting to
// nvmetd on a soft device at 2001:db8::1 (CM REQ/REP/RTU, the Connect
// command, its RDMA READ, property gets and sets, ACKs). Every frame's
// ICRC checks over the header as captured, and equals the ICRC computed
// from only what a UDP socket tells a receiver (addresses, ports,
// payload): the kernel's traffic class, flow label and hop limit do not
// enter it. rxe sends UDP checksum 0 over IPv6.
func TestGoldenICRCIPv6Capture(t *testing.T) {
	frames, err := capture.Load("testdata" + string(filepath.Separator) + "rxe-ipv6.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	guest, host := netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8::1")
	var fromRxe, fromSoft int
	for _, f := range frames {
		if !f.IsRoCEv2() || !f.IPv6 {
			t.Fatalf("frame %d: not RoCEv2 over IPv6", f.Number)
		}
		d := f.IPOnward()
		if err := wire.CheckICRC(d); err != nil {
			t.Fatalf("frame %d: %v", f.Number, err)
		}
		src, dst := [16]byte(f.IP[8:24]), [16]byte(f.IP[24:40])
		sport, dport := binary.BigEndian.Uint16(f.L4[0:]), binary.BigEndian.Uint16(f.L4[2:])
		body := f.Payload[:len(f.Payload)-wire.ICRCLen]
		if got, want := wire.ICRCForIPv6(src, dst, sport, dport, body), binary.LittleEndian.Uint32(f.Payload[len(body):]); got != want {
			t.Fatalf("frame %d: ICRCForIPv6 %#08x, frame carries %#08x", f.Number, got, want)
		}
		switch netip.AddrFrom16(src) {
		case guest:
			fromRxe++
			if f.L4[6] != 0 || f.L4[7] != 0 {
				t.Errorf("frame %d: rxe sent UDP checksum %#x", f.Number, f.L4[6:8])
			}
		case host:
			fromSoft++
		}
		b := append([]byte(nil), d...)
		b[len(b)-wire.ICRCLen-1] ^= 0x10
		if err := wire.CheckICRC(b); !errors.Is(err, wire.ErrBadICRC) {
			t.Fatalf("frame %d with a payload bit flipped: %v", f.Number, err)
		}
	}
	if fromRxe < 10 || fromSoft < 10 {
		t.Fatalf("%d frames from rxe, %d from the soft device", fromRxe, fromSoft)
	}
	// The first frame is the kernel's REQ: an rdma_cm header of IP
	// version 6 with both addresses.
	var p wire.Packet
	if err := p.Parse(frames[0].Payload); err != nil || p.Opcode() != wire.UDSendOnly {
		t.Fatalf("frame 1: %v %v", p.Opcode(), err)
	}
	req := wire.REQ(wire.MAD(p.Payload).Data())
	hdr, err := wire.ParseCMAHdr(req.PrivateData())
	if err != nil || hdr.IPVersion() != 6 || hdr.SrcAddr() != guest || hdr.DstAddr() != host {
		t.Fatalf("REQ rdma_cm header %v: %v", hdr, err)
	}
	if req.Primary().LocalGID() != wire.GIDFromAddr(guest) || req.Primary().RemoteGID() != wire.GIDFromAddr(host) {
		t.Fatalf("REQ GIDs %v -> %v", req.Primary().LocalGID(), req.Primary().RemoteGID())
	}
	// rdma_cm's RoCEv2 flow label over IPv6 too: sport*31 + dport, 20 bits.
	if fl := req.Primary().FlowLabel(); fl != (uint32(hdr.Port())*31+4420)&0xfffff {
		t.Fatalf("REQ flow label %#x, port %d", fl, hdr.Port())
	}
}
