package hostcli

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"hash/crc32"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/nvme/auth"
)

// decodeDHHC1 checks a DHHC-1 line by hand (not through package auth):
// the transform field, base64, the length and the CRC-32 after the key.
func decodeDHHC1(t *testing.T, line string) (hh string, key []byte) {
	t.Helper()
	parts := strings.Split(line, ":")
	if len(parts) != 4 || parts[0] != "DHHC-1" || parts[3] != "" || len(parts[1]) != 2 {
		t.Fatalf("%q is not DHHC-1:hh:base64:", line)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatalf("%q: base64: %v", line, err)
	}
	n := len(raw) - 4
	if n != 32 && n != 48 && n != 64 {
		t.Fatalf("%q: %d key bytes", line, n)
	}
	if crc32.ChecksumIEEE(raw[:n]) != binary.LittleEndian.Uint32(raw[n:]) {
		t.Fatalf("%q: CRC mismatch", line)
	}
	return parts[1], raw[:n]
}

func TestGenDHChapKey(t *testing.T) {
	const nqn = "nqn.2014-08.org.nvmexpress:uuid:5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab"
	secret32 := strings.Repeat("0123456789abcdef", 4)
	secret48 := strings.Repeat("a5", 48)
	secret64 := strings.Repeat("3c", 64)
	mac := func(h func() hash.Hash, hexKey string) []byte {
		k, _ := hex.DecodeString(hexKey)
		m := hmac.New(h, k)
		m.Write([]byte(nqn + "NVMe-over-Fabrics"))
		return m.Sum(nil)
	}
	raw := func(hexKey string) []byte { b, _ := hex.DecodeString(hexKey); return b }
	tests := []struct {
		name    string
		args    []string
		hh      string
		n       int
		want    []byte // the key bytes, when deterministic
		wantErr string
	}{
		{name: "random default", args: nil, hh: "00", n: 32},
		{name: "random 48", args: []string{"-l", "48"}, hh: "00", n: 48},
		{name: "random 64", args: []string{"--key-length", "64"}, hh: "00", n: 64},
		{name: "random sha384", args: []string{"-m", "2", "-n", nqn}, hh: "02", n: 48},
		{name: "secret as is", args: []string{"-s", secret32}, hh: "00", n: 32, want: raw(secret32)},
		{name: "secret 48 as is", args: []string{"--secret", secret48, "-l", "48"}, hh: "00", n: 48, want: raw(secret48)},
		// libnvme's nvme_gen_dhchap_key: HMAC(secret, NQN || "NVMe-over-Fabrics").
		{name: "sha256 transform", args: []string{"-s", secret32, "-m", "1", "-n", nqn}, hh: "01", n: 32, want: mac(sha256.New, secret32)},
		{name: "sha384 transform", args: []string{"-s", secret48, "--hmac", "2", "--nqn", nqn}, hh: "02", n: 48, want: mac(sha512.New384, secret48)},
		{name: "sha512 transform", args: []string{"-s", secret64, "-m", "3", "-l", "64", "-n", nqn}, hh: "03", n: 64, want: mac(sha512.New, secret64)},
		{name: "bad hmac", args: []string{"-m", "4"}, wantErr: "invalid HMAC identifier 4"},
		{name: "bad length", args: []string{"-l", "40"}, wantErr: "invalid key length 40: want 32, 48 or 64"},
		{name: "length not the hash's", args: []string{"-m", "1", "-l", "64", "-n", nqn}, wantErr: "invalid key length 64 for hmac(sha256): it needs 32"},
		{name: "secret not hex", args: []string{"-s", strings.Repeat("zz", 32)}, wantErr: "invalid --secret: want hexadecimal digits"},
		{name: "secret too short", args: []string{"-s", "0011"}, wantErr: "invalid --secret: 2 bytes, the key length is 32"},
		{name: "argument", args: []string{"extra"}, wantErr: "gen-dhchap-key takes no arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(append([]string{"gen-dhchap-key"}, tc.args...)...)
			if tc.wantErr != "" {
				if code != 1 || out != "" || !strings.Contains(errs, tc.wantErr) || strings.Count(errs, "\n") != 1 {
					t.Fatalf("exit %d, stdout %q, stderr %q: want one error line with %q", code, out, errs, tc.wantErr)
				}
				return
			}
			if code != 0 || errs != "" || strings.Count(out, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
			}
			line := strings.TrimSuffix(out, "\n")
			hh, key := decodeDHHC1(t, line)
			if hh != tc.hh || len(key) != tc.n {
				t.Errorf("%q: transform %s, %d bytes; want %s, %d", line, hh, len(key), tc.hh, tc.n)
			}
			if tc.want != nil && !bytes.Equal(key, tc.want) {
				t.Errorf("%q: key %x, want %x", line, key, tc.want)
			}
			// What the host and target parse.
			k, err := auth.ParseKey(line)
			if err != nil || k.Len() != tc.n || k.Encode() != line {
				t.Errorf("ParseKey(%q): %v", line, err)
			}
			// Deterministic with --secret: the same line again.
			if tc.want != nil {
				if _, again, _ := runCLI(append([]string{"gen-dhchap-key"}, tc.args...)...); again != out {
					t.Errorf("second run printed %q, first %q", again, out)
				}
			}
		})
	}
	// Random keys differ.
	_, a, _ := runCLI("gen-dhchap-key")
	_, b, _ := runCLI("gen-dhchap-key")
	if a == b {
		t.Errorf("two random keys are equal: %q", a)
	}
}

// secretArgs are connect flags with both secrets.
func secretArgs(t *testing.T) (host, ctrl string, args []string) {
	t.Helper()
	hk, err := auth.GenerateKey(auth.HashSHA256, 32, tHost, nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := auth.GenerateKey(auth.HashNone, 48, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	host, ctrl = hk.Encode(), ck.Encode()
	return host, ctrl, []string{"-t", "rdma", "-a", "192.0.2.1", "-n", tNQN, "-q", tHost, "-S", host, "-C", ctrl}
}

func TestDHChapFlags(t *testing.T) {
	host, ctrl, args := secretArgs(t)
	a, err := parseConnect(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if a.DHChapSecret != host || a.DHChapCtrlSecret != ctrl {
		t.Fatalf("-S/-C not parsed")
	}
	o, err := a.options()
	if err != nil {
		t.Fatal(err)
	}
	hk, _ := auth.ParseKey(host)
	ck, _ := auth.ParseKey(ctrl)
	if !o.HostKey.Equal(hk) || !o.CtrlKey.Equal(ck) || o.DHChapSecret != "" || o.DHChapCtrlSecret != "" {
		t.Errorf("options: keys not carried as parsed keys")
	}
	// Long names as nvme-cli's.
	b, err := parseConnect(t, "-t", "rdma", "-a", "192.0.2.1", "-n", tNQN, "--dhchap-secret="+host, "--dhchap-ctrl-secret", ctrl)
	if err != nil || b.DHChapSecret != host || b.DHChapCtrlSecret != ctrl {
		t.Errorf("long flags: %v", err)
	}
	// The daemon's spec (its command line) says that secrets follow, not
	// what they are.
	a.DHChap = true
	spec, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	noSecretIn(t, "the daemon spec", string(spec), host, ctrl)
	if !strings.Contains(string(spec), `"dhchap":true`) {
		t.Errorf("spec %s does not say that secrets follow", spec)
	}

	bad := []struct {
		args []string
		want string
	}{
		{[]string{"-S", "DHHC-1:00:" + strings.Repeat("A", 48) + ":"}, "--dhchap-secret: DHHC-1 secret CRC mismatch"},
		{[]string{"-S", host[:len(host)-5] + "x:"}, "--dhchap-secret: not a DHHC-1 secret"},
		{[]string{"-S", host, "-C", "secret"}, "--dhchap-ctrl-secret: not a DHHC-1 secret"},
		{[]string{"-C", ctrl}, "--dhchap-ctrl-secret needs --dhchap-secret"},
	}
	for _, tc := range bad {
		a, err := parseConnect(t, append([]string{"-t", "rdma", "-a", "192.0.2.1", "-n", tNQN}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		err = a.validateConnect()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
			continue
		}
		noSecretIn(t, "the error", err.Error(), host, ctrl)
	}
}

func TestSecretsPipe(t *testing.T) {
	host, ctrl, _ := secretArgs(t)
	pr, err := secretsPipe(connectArgs{DHChapSecret: host, DHChapCtrlSecret: ctrl})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// The daemon reads its inherited descriptor: a copy of the read end.
	fd, err := syscall.Dup(int(pr.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	var a connectArgs
	if err := readSecrets(uintptr(fd), &a); err != nil {
		t.Fatal(err)
	}
	if a.DHChapSecret != host || a.DHChapCtrlSecret != ctrl {
		t.Errorf("secrets did not make it through the pipe")
	}
	// readSecrets closed its descriptor.
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); errno != syscall.EBADF {
		t.Errorf("descriptor %d still open", fd)
	}
	// A descriptor that is not a pipe is refused.
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err = syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := readSecrets(uintptr(fd), &a); err == nil || !strings.Contains(err.Error(), "not a pipe") {
		t.Errorf("regular file: %v", err)
	}
}

// noSecretIn fails if s holds any of the secrets or their base64 part.
func noSecretIn(t *testing.T, what, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		b64 := strings.Split(sec, ":")[2]
		if strings.Contains(s, sec) || strings.Contains(s, b64[:16]) {
			t.Errorf("a secret appears in %s: %s", what, s)
		}
	}
}
