package auth

import (
	"bytes"
	"flag"
	"math/big"
	"testing"
)

var slowPrimes = flag.Bool("auth.slowprimes", false, "also test ffdhe6144/8192 for primality")

// eFloor returns floor(e * 2^bits) from the series e = sum 1/k!.
func eFloor(bits int) *big.Int {
	guard := bits + 64
	one := new(big.Int).Lsh(big.NewInt(1), uint(guard))
	sum := new(big.Int).Set(one)
	term := new(big.Int).Set(one)
	for k := int64(1); term.Sign() > 0; k++ {
		term.Quo(term, big.NewInt(k))
		sum.Add(sum, term)
	}
	return sum.Rsh(sum, 64)
}

// TestFFDHEPrimes rebuilds each RFC 7919 prime from its definition
// p = 2^b - 2^{b-64} + {[2^{b-130} e] + X} * 2^64 - 1 and checks X is small
// and p and (p-1)/2 are prime.
func TestFFDHEPrimes(t *testing.T) {
	for id, g := range ffdheGroups {
		b := g.bits
		base := new(big.Int).Lsh(big.NewInt(1), uint(b))
		base.Sub(base, new(big.Int).Lsh(big.NewInt(1), uint(b-64)))
		base.Sub(base, big.NewInt(1))
		mid := new(big.Int).Sub(g.p, base)
		if new(big.Int).Mod(mid, new(big.Int).Lsh(big.NewInt(1), 64)).Sign() != 0 {
			t.Errorf("%v: low 64 bits are not all ones", id)
			continue
		}
		mid.Rsh(mid, 64)
		x := new(big.Int).Sub(mid, eFloor(b-130))
		if x.Sign() < 0 || x.BitLen() > 32 {
			t.Errorf("%v: X = %v, not a small offset from e", id, x)
		}
		if b > 4096 && testing.Short() || b > 4096 && !*slowPrimes {
			continue // ~20 s for the big two; the structure check above still runs
		}
		q := new(big.Int).Rsh(g.p, 1)
		if !g.p.ProbablyPrime(2) || !q.ProbablyPrime(2) {
			t.Errorf("%v: not a safe prime", id)
		}
	}
}

func TestDHAgreement(t *testing.T) {
	for _, id := range DHGroups[1:] {
		a, err := newDHKey(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := newDHKey(id, nil)
		if len(a.public) != id.ValueSize() {
			t.Fatalf("%v: public %d bytes", id, len(a.public))
		}
		za, err := a.shared(b.public)
		if err != nil {
			t.Fatal(err)
		}
		zb, _ := b.shared(a.public)
		if !bytes.Equal(za, zb) || len(za) != id.ValueSize() {
			t.Errorf("%v: shared secrets differ", id)
		}
		g := ffdheGroups[id]
		for _, bad := range []*big.Int{big.NewInt(0), big.NewInt(1), g.pMinus1, g.p} {
			if _, err := a.shared(bad.FillBytes(make([]byte, id.ValueSize()))); err == nil {
				t.Errorf("%v: accepted peer value %v", id, bad)
			}
		}
		if _, err := a.shared(b.public[1:]); err == nil {
			t.Errorf("%v: accepted a short value", id)
		}
	}
}
