package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	testSubNQN  = "nqn.2024-01.io.example:sub1"
	// bytes 0..31, transform sha256, CRC-32 LE appended (computed with
	// Python's zlib and base64).
	testKey01 = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
)

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestParseKey(t *testing.T) {
	k, err := ParseKey(testKey01)
	if err != nil {
		t.Fatal(err)
	}
	if k.Hash() != HashSHA256 || k.Len() != 32 || !bytes.Equal(k.secret, seq(32)) {
		t.Fatalf("parsed hash %v len %d", k.Hash(), k.Len())
	}
	if got := k.Encode(); got != testKey01 {
		t.Errorf("Encode = %s", got)
	}
	noColon := strings.TrimSuffix(testKey01, ":")
	if k2, err := ParseKey("  " + noColon + "\n"); err != nil || !k2.Equal(k) {
		t.Errorf("without trailing colon: %v", err)
	}
	bad := []struct {
		name, in string
		want     error
	}{
		{"empty", "", ErrKeyFormat},
		{"prefix", "DHHC-2:01:AAAA:", ErrKeyFormat},
		{"transform 04", strings.Replace(testKey01, ":01:", ":04:", 1), ErrKeyFormat},
		{"transform hex", strings.Replace(testKey01, ":01:", ":0a:", 1), ErrKeyFormat},
		{"no hash sep", "DHHC-1:01", ErrKeyFormat},
		{"base64", "DHHC-1:00:!!!!:", ErrKeyFormat},
		{"short", "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMU:", ErrKeyLength},
		{"crc", strings.Replace(testKey01, "KfiaR", "KfiaS", 1), ErrKeyFormat}, // S changes padding bits: base64 strict decode rejects or CRC fails
		{"crc flip", "DHHC-1:01:AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:", ErrKeyCRC},
		{"extra", testKey01 + "x:", ErrKeyFormat},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKey(tc.in)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.name != "crc" && !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "AAECAwQF") {
				t.Errorf("error leaks the key: %v", err)
			}
		})
	}
}

func TestKeyRedacted(t *testing.T) {
	k, _ := ParseKey(testKey01)
	type holder struct{ K *Key }
	for _, f := range []string{"%v", "%s", "%q", "%x", "%X", "%#v", "%+v", "%d"} {
		for _, v := range []any{k, holder{k}, []*Key{k}} {
			out := fmt.Sprintf(f, v)
			if strings.Contains(out, "AAECAwQF") || strings.Contains(out, "000102") || strings.Contains(out, "[0 1 2") {
				t.Errorf("%s of %T leaks: %s", f, v, out)
			}
		}
	}
}

func TestTransform(t *testing.T) {
	// Expected values computed with Python's hmac module.
	for _, tc := range []struct {
		h    HashID
		n    int
		want string
	}{
		{HashSHA256, 32, "2fb0ace5d783b03625e59bae940a3ef8fa86f1edf63925949ca2d89d8d6559a9"},
		{HashSHA384, 48, "a6c9986d10efd8734c8b87f1d3611900e1c8346d041a834fcf52c9f2cc3fad235b50dfc5ec320c548b9c431681ae55be"},
		{HashSHA512, 64, "2b75313e039a8470e562809354cd6c097d56a07251e415cda669e2f0ec93ee91040b3ab5d6eea6af4f24f10343ce1e9352cfc4598850132aee97404b67d03cd5"},
	} {
		k, err := NewKey(tc.h, seq(tc.n))
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(k.Transform(testHostNQN)); got != tc.want {
			t.Errorf("%v: %s", tc.h, got)
		}
	}
	k, _ := NewKey(HashNone, seq(48))
	if !bytes.Equal(k.Transform(testHostNQN), seq(48)) {
		t.Error("HashNone transformed the key")
	}
}

func TestGenerateKey(t *testing.T) {
	for _, tc := range []struct {
		h      HashID
		length int
		nqn    string
		ok     bool
		want   int
	}{
		{HashNone, 0, "", true, 32},
		{HashNone, 48, "", true, 48},
		{HashNone, 64, "", true, 64},
		{HashSHA256, 0, testHostNQN, true, 32},
		{HashSHA384, 48, testHostNQN, true, 48},
		{HashSHA512, 64, testHostNQN, true, 64},
		{HashSHA256, 64, testHostNQN, false, 0},
		{HashSHA256, 32, "", false, 0},
		{HashNone, 33, "", false, 0},
		{HashID(9), 32, testHostNQN, false, 0},
	} {
		k, err := GenerateKey(tc.h, tc.length, tc.nqn, nil)
		if (err == nil) != tc.ok {
			t.Errorf("%v/%d: err %v", tc.h, tc.length, err)
			continue
		}
		if !tc.ok {
			continue
		}
		if k.Len() != tc.want || k.Hash() != tc.h {
			t.Errorf("%v/%d: len %d", tc.h, tc.length, k.Len())
		}
		back, err := ParseKey(k.Encode())
		if err != nil || !back.Equal(k) {
			t.Errorf("%v/%d: round trip %v", tc.h, tc.length, err)
		}
	}
	// libnvme: the stored key is HMAC(random, nqn || "NVMe-over-Fabrics").
	k, err := GenerateKey(HashSHA256, 32, testHostNQN, bytes.NewReader(seq(32)))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(k.secret); got != "2fb0ace5d783b03625e59bae940a3ef8fa86f1edf63925949ca2d89d8d6559a9" {
		t.Errorf("generated %s", got)
	}
}

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want HashID
	}{{"hmac(sha256)", HashSHA256}, {"sha384", HashSHA384}, {"HMAC(SHA512)", HashSHA512}, {"1", HashSHA256}, {"0x03", HashSHA512}} {
		if got, err := ParseHash(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseHash(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, in := range []string{"", "md5", "0", "4", "hmac(sha1)"} {
		if _, err := ParseHash(in); err == nil {
			t.Errorf("ParseHash(%q) accepted", in)
		}
	}
	for _, g := range DHGroups {
		if got, err := ParseDHGroup(g.String()); err != nil || got != g {
			t.Errorf("ParseDHGroup(%q) = %v, %v", g.String(), got, err)
		}
	}
	if g, err := ParseDHGroup("5"); err != nil || g != FFDHE8192 {
		t.Errorf("ParseDHGroup(5) = %v %v", g, err)
	}
	for _, in := range []string{"", "ffdhe1024", "6", "ecdh"} {
		if _, err := ParseDHGroup(in); err == nil {
			t.Errorf("ParseDHGroup(%q) accepted", in)
		}
	}
	if FFDHE3072.ValueSize() != 384 || DHGroupNull.ValueSize() != 0 || HashSHA384.Size() != 48 {
		t.Error("sizes")
	}
}
