package auth

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
)

// keyPrefix starts every secret in the DHHC-1 representation.
const keyPrefix = "DHHC-1:"

// transformSeed is appended to the NQN in the key transform
// (nvme_auth_transform_key) and in key generation (nvme_gen_dhchap_key).
const transformSeed = "NVMe-over-Fabrics"

// Key is a DH-HMAC-CHAP secret: the raw key and the hash used to transform it
// before use (HashNone: used as is). Its formatting verbs print
// "[redacted]"; Encode returns the DHHC-1 text.
type Key struct {
	hash   HashID
	secret []byte
}

// Errors of ParseKey, matched with errors.Is.
var (
	ErrKeyFormat = errors.New("not a DHHC-1 secret")
	ErrKeyCRC    = errors.New("DHHC-1 secret CRC mismatch")
	ErrKeyLength = errors.New("DHHC-1 secret length must be 32, 48 or 64 bytes")
)

// ParseKey parses a secret "DHHC-1:<hh>:<base64 of key || CRC-32 LE>:" as
// the kernel's nvme_auth_extract_key does (the trailing colon is optional;
// surrounding white space is ignored). The error never contains the secret.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, keyPrefix) {
		return nil, fmt.Errorf("%w: missing %q prefix", ErrKeyFormat, keyPrefix)
	}
	rest := s[len(keyPrefix):]
	if len(rest) < 3 || rest[2] != ':' {
		return nil, fmt.Errorf("%w: want DHHC-1:<hh>:<base64>: form", ErrKeyFormat)
	}
	hh, ok := parseSmallInt(rest[:2])
	if !ok || rest[0] < '0' || rest[0] > '9' || rest[1] < '0' || rest[1] > '9' || hh > int(HashSHA512) {
		return nil, fmt.Errorf("%w: transform %q is not 00, 01, 02 or 03", ErrKeyFormat, rest[:2])
	}
	b64 := strings.TrimSuffix(rest[3:], ":")
	if strings.ContainsAny(b64, ": \t\n") {
		return nil, fmt.Errorf("%w: stray characters after the key", ErrKeyFormat)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// The base64 error names an offset, never the content.
		return nil, fmt.Errorf("%w: bad base64 (%v)", ErrKeyFormat, err)
	}
	n := len(raw) - 4
	if !validKeyLen(n) {
		return nil, fmt.Errorf("%w (decoded %d bytes including the CRC)", ErrKeyLength, len(raw))
	}
	if crc32.ChecksumIEEE(raw[:n]) != binary.LittleEndian.Uint32(raw[n:]) {
		return nil, ErrKeyCRC
	}
	return &Key{hash: HashID(hh), secret: raw[:n:n]}, nil
}

// validKeyLen reports whether n is a secret length DHHC-1 allows.
func validKeyLen(n int) bool { return n == 32 || n == 48 || n == 64 }

// NewKey returns a key from raw bytes (32, 48 or 64) and its transform hash.
func NewKey(transform HashID, secret []byte) (*Key, error) {
	if transform != HashNone && !transform.Valid() {
		return nil, fmt.Errorf("auth: key transform %v invalid", transform)
	}
	if !validKeyLen(len(secret)) {
		return nil, fmt.Errorf("auth: %w, got %d", ErrKeyLength, len(secret))
	}
	return &Key{hash: transform, secret: append([]byte(nil), secret...)}, nil
}

// GenerateKey makes a new random secret like `nvme gen-dhchap-key`: length
// is 32, 48 or 64 (0 means the hash's size, or 32); with a transform hash
// other than HashNone, the length must be the hash's size and the stored key
// is HMAC(random, nqn || "NVMe-over-Fabrics") as libnvme's
// nvme_gen_dhchap_key computes it. r nil means crypto/rand.
func GenerateKey(transform HashID, length int, nqn string, r io.Reader) (*Key, error) {
	r = randOrDefault(r)
	if transform != HashNone && !transform.Valid() {
		return nil, fmt.Errorf("auth: key transform %v invalid", transform)
	}
	if length == 0 {
		length = 32
		if transform != HashNone {
			length = transform.Size()
		}
	}
	if !validKeyLen(length) {
		return nil, fmt.Errorf("auth: %w, got %d", ErrKeyLength, length)
	}
	if transform != HashNone && length != transform.Size() {
		return nil, fmt.Errorf("auth: key length %d does not match %v (%d bytes)", length, transform, transform.Size())
	}
	if transform != HashNone && nqn == "" {
		return nil, errors.New("auth: a transformed key needs the host NQN")
	}
	secret := make([]byte, length)
	if _, err := io.ReadFull(r, secret); err != nil {
		return nil, fmt.Errorf("auth: random key: %w", err)
	}
	if transform != HashNone {
		secret = transformBytes(transform, secret, nqn)
	}
	return &Key{hash: transform, secret: secret}, nil
}

// Hash returns the key's transform hash (the hh field).
func (k *Key) Hash() HashID { return k.hash }

// Len returns the secret's length in bytes.
func (k *Key) Len() int { return len(k.secret) }

// Equal reports whether two keys hold the same secret and transform (in
// constant time over the secret).
func (k *Key) Equal(o *Key) bool {
	if k == nil || o == nil {
		return k == o
	}
	return k.hash == o.hash && hmac.Equal(k.secret, o.secret)
}

// Encode returns the DHHC-1 representation ("DHHC-1:01:...:"), as
// `nvme gen-dhchap-key` prints it. It is the only way to get the secret out.
func (k *Key) Encode() string {
	buf := make([]byte, len(k.secret)+4)
	copy(buf, k.secret)
	binary.LittleEndian.PutUint32(buf[len(k.secret):], crc32.ChecksumIEEE(k.secret))
	return fmt.Sprintf("%s%02x:%s:", keyPrefix, uint8(k.hash), base64.StdEncoding.EncodeToString(buf))
}

// String redacts the secret.
func (k *Key) String() string { return "[redacted]" }

// GoString redacts the secret.
func (k *Key) GoString() string { return "auth.Key{[redacted]}" }

// Format redacts the secret for every verb.
func (k *Key) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, "[redacted]") }

// Transform returns the key the HMAC of a response uses: the secret itself
// with HashNone, else HMAC_hash(secret, nqn || "NVMe-over-Fabrics")
// (nvme_auth_transform_key). Like the kernel, which keys the response HMAC
// with the secret's length, a transformed key longer than the secret is cut
// to the secret's length.
func (k *Key) Transform(nqn string) []byte {
	if k.hash == HashNone {
		return append([]byte(nil), k.secret...)
	}
	t := transformBytes(k.hash, k.secret, nqn)
	if len(t) > len(k.secret) {
		t = t[:len(k.secret)]
	}
	return t
}

func transformBytes(h HashID, secret []byte, nqn string) []byte {
	m := hmac.New(h.New, secret)
	m.Write([]byte(nqn))
	m.Write([]byte(transformSeed))
	return m.Sum(nil)
}
