package wire

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestICRCCacheAgrees: a cache gives the ICRC the plain functions give, for
// datagrams of repeated and changing shapes (hits, misses, and keys that
// share a slot), IPv4 with and without options and IPv6.
func TestICRCCacheAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c ICRCCache
	src4, dst4 := [4]byte{192, 0, 2, 1}, [4]byte{192, 0, 2, 2}
	var src6, dst6 [16]byte
	src6[0], src6[1], src6[15] = 0x20, 0x01, 1
	dst6[0], dst6[1], dst6[15] = 0x20, 0x01, 2
	buf := make([]byte, 4096+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for i := range 2000 {
		// A few shapes, each repeated, and now and then a new one.
		sport := uint16(49152 + rng.IntN(4))
		if i%97 == 0 {
			sport = uint16(rng.Uint32())
		}
		n := []int{BTHLen, BTHLen + 16, BTHLen + 64, BTHLen + 16 + 4096}[rng.IntN(4)]
		pkt := buf[:n]
		id := uint16(rng.IntN(3))
		df := rng.IntN(4) != 0
		if got, want := c.ForIPv4(src4, dst4, id, df, sport, 4791, pkt), ICRCForIPv4(src4, dst4, id, df, sport, 4791, pkt); got != want {
			t.Fatalf("round %d: ForIPv4 = %#08x, want %#08x", i, got, want)
		}
		hdr, data, pad := pkt[:BTHLen], pkt[BTHLen:], buf[4096:4096+rng.IntN(4)]
		if got, want := c.ForIPv4Gather(src4, dst4, id, df, sport, 4791, hdr, data, pad), ICRCForIPv4Gather(src4, dst4, id, df, sport, 4791, hdr, data, pad); got != want {
			t.Fatalf("round %d: ForIPv4Gather = %#08x, want %#08x", i, got, want)
		}
		if got, want := c.ForIPv6(src6, dst6, sport, 4791, pkt), ICRCForIPv6(src6, dst6, sport, 4791, pkt); got != want {
			t.Fatalf("round %d: ForIPv6 = %#08x, want %#08x", i, got, want)
		}
		if got, want := c.ForIPv6Gather(src6, dst6, sport, 4791, hdr, data, pad), ICRCForIPv6Gather(src6, dst6, sport, 4791, hdr, data, pad); got != want {
			t.Fatalf("round %d: ForIPv6Gather = %#08x, want %#08x", i, got, want)
		}

		// Received headers as a kernel wrote them: TOS, TTL and the
		// checksums vary and are masked; an IPv4 header may carry
		// options, which the cache leaves alone.
		ihl := IPv4HeaderLen
		if i%5 == 0 {
			ihl += 4 * (1 + rng.IntN(10))
		}
		ip := make([]byte, ihl)
		ip[0] = 0x40 | byte(ihl/4)
		ip[1] = byte(rng.Uint32())
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+UDPHeaderLen+n))
		binary.BigEndian.PutUint16(ip[4:], id)
		ip[8], ip[9] = byte(rng.Uint32()), ipProtoUDP
		binary.BigEndian.PutUint16(ip[10:], uint16(rng.Uint32()))
		copy(ip[12:], src4[:])
		copy(ip[16:], dst4[:])
		udp := make([]byte, UDPHeaderLen)
		binary.BigEndian.PutUint16(udp[0:], sport)
		binary.BigEndian.PutUint16(udp[2:], 4791)
		binary.BigEndian.PutUint16(udp[4:], uint16(UDPHeaderLen+n))
		binary.BigEndian.PutUint16(udp[6:], uint16(rng.Uint32()))
		if got, want := c.ICRC(ip, udp, pkt), ICRC(ip, udp, pkt); got != want {
			t.Fatalf("round %d: ICRC (IPv4, %d-byte header) = %#08x, want %#08x", i, ihl, got, want)
		}
		ip6 := make([]byte, IPv6HeaderLen)
		ip6[0], ip6[1], ip6[2], ip6[3] = 0x60|byte(rng.IntN(16)), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())
		binary.BigEndian.PutUint16(ip6[4:], uint16(UDPHeaderLen+n))
		ip6[6], ip6[7] = ipProtoUDP, byte(rng.Uint32())
		copy(ip6[8:], src6[:])
		copy(ip6[24:], dst6[:])
		if got, want := c.ICRC(ip6, udp, pkt), ICRC(ip6, udp, pkt); got != want {
			t.Fatalf("round %d: ICRC (IPv6) = %#08x, want %#08x", i, got, want)
		}
	}
}

// TestICRCCacheCheckParts: CheckParts accepts a packet whose ICRC is right
// and rejects one with a flipped payload bit, with a cache warm for its
// header.
func TestICRCCacheCheckParts(t *testing.T) {
	var c ICRCCache
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	pkt := make([]byte, BTHLen+64+ICRCLen)
	for i := range pkt {
		pkt[i] = byte(i * 7)
	}
	body := pkt[:len(pkt)-ICRCLen]
	if err := PutICRC(pkt, ICRCForIPv4(src, dst, 0, true, 50000, 4791, body)); err != nil {
		t.Fatal(err)
	}
	var h [IPv4HeaderLen + UDPHeaderLen]byte
	ipv4UDP(&h, src, dst, 0, true, 50000, 4791, UDPHeaderLen+len(pkt))
	ip, udp := h[:IPv4HeaderLen], h[IPv4HeaderLen:]
	for range 2 {
		if err := c.CheckParts(ip, udp, pkt); err != nil {
			t.Fatalf("CheckParts of a good packet: %v", err)
		}
	}
	pkt[BTHLen+3] ^= 0x10
	if err := c.CheckParts(ip, udp, pkt); !errors.Is(err, ErrBadICRC) {
		t.Fatalf("CheckParts of a corrupted packet = %v, want ErrBadICRC", err)
	}
	if err := c.CheckParts(ip, udp, pkt[:BTHLen]); !errors.Is(err, ErrShort) {
		t.Fatalf("CheckParts of a short packet = %v, want ErrShort", err)
	}
}

func BenchmarkICRCHeader(b *testing.B) {
	src, dst := [4]byte{192, 0, 2, 1}, [4]byte{192, 0, 2, 2}
	pkt := make([]byte, BTHLen+64)
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			_ = ICRCForIPv4(src, dst, 0, true, 50000, 4791, pkt)
		}
	})
	b.Run("cached", func(b *testing.B) {
		var c ICRCCache
		for b.Loop() {
			_ = c.ForIPv4(src, dst, 0, true, 50000, 4791, pkt)
		}
	})
}
