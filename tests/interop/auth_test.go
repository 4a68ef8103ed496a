package interop

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// authKernel is the guest kernel series with NVMe in-band authentication.
const authKernel = "6.12"

// dhchapSecret formats a DH-HMAC-CHAP secret as nvme-cli and the kernel
// write it: DHHC-1:<hh>:<base64(key || CRC-32 LE of key)>:, where hh names
// the hash the key is transformed with (00: used as is). It is written
// here, not by nvme/auth, so that the kernel judges our parser.
func dhchapSecret(t *testing.T, hh int, n int) string {
	t.Helper()
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	b := binary.LittleEndian.AppendUint32(append([]byte(nil), key...), crc32.ChecksumIEEE(key))
	return fmt.Sprintf("DHHC-1:%02x:%s:", hh, base64.StdEncoding.EncodeToString(b))
}

// authNQN is the subsystem of the authentication tests.
const authNQN = "nqn.2014-08.org.nvmexpress:kpeer-auth"

// TestAuthKernelHostNvmetd: the 6.12 guest kernel's nvme-rdma host, and
// its nvme-tcp host to a tcp port, authenticate to nvmetd with
// DH-HMAC-CHAP (guest/auth-host.sh):
//
//   - host 1: a transformed key (DHHC-1:01), hmac(sha256), the null DH
//     group, unidirectional: verified I/O;
//   - host 2: an untransformed 48-byte key and a controller key,
//     hmac(sha384), ffdhe2048, two I/O queues: verified I/O (every queue
//     authenticates, and the host authenticates the controller);
//   - host 3 requires a key and connects without one; host 2 with a wrong
//     controller key; host 1 with a wrong key: each refused, and nvmetd's
//     log says why.
//
// The backing file must hold both patterns afterwards, and no key may
// appear in nvmetd's log.
func TestAuthKernelHostNvmetd(t *testing.T) {
	for _, tr := range []string{"rdma", "tcp"} {
		t.Run(tr, func(t *testing.T) { authKernelHostNvmetd(t, tr) })
	}
}

// authKernelHostNvmetd is TestAuthKernelHostNvmetd over one transport.
func authKernelHostNvmetd(t *testing.T, transport string) {
	dir := kpeer.RequireKernel(t, authKernel)
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	h1, h2, h3 := hostNQN("a0000000-0000-4000-8000-000000000001"), hostNQN("a0000000-0000-4000-8000-000000000002"), hostNQN("a0000000-0000-4000-8000-000000000003")
	k1, k2, c2, k3 := dhchapSecret(t, 1, 32), dhchapSecret(t, 0, 48), dhchapSecret(t, 0, 32), dhchapSecret(t, 2, 48)
	wrong, wrongCtrl := dhchapSecret(t, 1, 32), dhchapSecret(t, 0, 32)
	cfg := fmt.Sprintf(`
log_level = "debug"
port "kpeer" {
  transport = %q
  address   = %q
  service   = 4420
}
subsystem %q {
  ports         = ["kpeer"]
  allowed_hosts = [%q, %q, %q]
  serial        = "NVMEOFAUTH1"
  namespace "1" {
    backend = "file"
    path    = %q
    size    = "16MiB"
  }
}
host %q {
  dhchap_key     = %q
  dhchap_hash    = "hmac(sha256)"
  dhchap_dhgroup = "null"
}
host %q {
  dhchap_key      = %q
  dhchap_ctrl_key = %q
  dhchap_hash     = "hmac(sha384)"
  dhchap_dhgroup  = "ffdhe2048"
}
host %q {
  dhchap_key = %q
}
`, transport, kpeer.HostAddr, authNQN, h1, h2, h3, img, h1, k1, h2, k2, c2, h3, k3)
	cfgPath := filepath.Join(work, "nvmetd.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(work, "auth.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Kernel:  authKernel,
		Scripts: []string{guestScript(t, "auth-host.sh")},
		HostCmd: fmt.Sprintf("exec %s --config %s", bin, cfgPath),
		Env: []string{"NQN=" + authNQN, "TRTYPE=" + transport,
			"HOST1_NQN=" + h1, "HOST1_KEY=" + k1,
			"HOST2_NQN=" + h2, "HOST2_KEY=" + k2, "HOST2_CTRL_KEY=" + c2,
			"HOST3_NQN=" + h3, "WRONG_KEY=" + wrong, "WRONG_CTRL_KEY=" + wrongCtrl},
		Capture: capture,
		Timeout: 20 * time.Minute,
	})
	defer keepOnFailure(t, res, capture)
	script, tlog := res.Log("a/script.log"), res.Log("host-cmd.log")
	t.Log(passLines(script))
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", tail(script, 120))
		t.Logf("nvmetd log:\n%s", tail(tlog, 120))
		t.Fatalf("kernel host with DH-HMAC-CHAP against nvmetd failed: %v", res.Err)
	}
	for _, want := range []string{"PASS: uni: verified I/O", "PASS: bidi: verified I/O", "PASS: missing: refused", "PASS: ctrlkey: refused", "PASS: wrong: refused"} {
		if !strings.Contains(script, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
	// nvmetd says why for each refusal: host 3 (no key), host 2 (its
	// Failure2 for the controller's wrong response) and host 1 (wrong key).
	for _, h := range []string{h3, h2, h1} {
		if !regexp.MustCompile(`(?i)auth\S*.*fail|fail\S*.*auth`).MatchString(grepLines(tlog, h)) {
			t.Errorf("nvmetd's log has no authentication failure for %s:\n%s", h, tail(grepLines(tlog, h), 20))
		}
	}
	for _, k := range []string{k1, k2, c2, k3, wrong, wrongCtrl} {
		body := strings.Split(k, ":")[2]
		if strings.Contains(tlog, body[:16]) || strings.Contains(script, "dhchap_secret set: "+body[:16]) {
			t.Errorf("a key appears in a log")
		}
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range []string{"uni", "bidi"} {
		var want bytes.Buffer
		for blk := 0; blk < 2048; blk++ {
			fmt.Fprintf(&want, "auth-%-5s blk %08d %0487d\n", tag, blk, blk)
		}
		off := i << 20
		if len(b) < off+want.Len() || !bytes.Equal(b[off:off+want.Len()], want.Bytes()) {
			t.Errorf("backing file lacks the %s pattern at %d MiB", tag, i)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAuthInitiatorKernelTarget: our initiator authenticates to the 6.12
// guest kernel's nvmet-rdma target, whose host entries carry keys that
// nvme-cli generated in the guest (guest/auth-target.sh): a key with the
// null DH group, and a key with a controller key over ffdhe2048 and two
// I/O queues, each with verified I/O; no key, a wrong key and a wrong
// controller key are refused (cmd/kpeer-auth).
func TestAuthInitiatorKernelTarget(t *testing.T) {
	dir := kpeer.RequireKernel(t, authKernel)
	bin := buildBinary(t, "./tests/interop/cmd/kpeer-auth")
	h1, h2 := hostNQN("b0000000-0000-4000-8000-000000000001"), hostNQN("b0000000-0000-4000-8000-000000000002")
	capture := filepath.Join(t.TempDir(), "auth-initiator.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Kernel:   authKernel,
		Scripts:  []string{guestScript(t, "auth-target.sh")},
		HostTest: fmt.Sprintf(`exec %s -traddr %s -host-addr %s -nqn %s -host1 %s -host2 %s -keys "$KPEER_SIGNAL/keys.env"`, bin, kpeer.GuestAAddr, kpeer.HostAddr, authNQN, h1, h2),
		Env:      []string{"NQN=" + authNQN, "HOST1_NQN=" + h1, "HOST2_NQN=" + h2},
		Capture:  capture,
		Timeout:  8 * time.Minute,
	})
	defer keepOnFailure(t, res, capture)
	hostLog, guest := res.Log("host-test.log"), res.Log("a/script.log")
	t.Log(passLines(hostLog))
	if res.Err != nil || !strings.Contains(hostLog, "RESULT: PASS") {
		t.Logf("guest:\n%s", tail(guest, 80))
		t.Fatalf("our initiator with DH-HMAC-CHAP against the kernel target failed: %v\n%s", res.Err, tail(hostLog, 80))
	}
	for _, want := range []string{"PASS: uni: verified I/O", "PASS: bidi: verified I/O", "PASS: missing: refused", "PASS: wrong: refused", "PASS: ctrlkey: refused"} {
		if !strings.Contains(hostLog, want) {
			t.Errorf("host log lacks %q", want)
		}
	}
	if !strings.Contains(guest, "with DH-HMAC-CHAP") {
		t.Errorf("the kernel target did not log a controller created with DH-HMAC-CHAP")
	}
}
