package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// The unprivileged-host check (an audit found that the soft RoCE provider
// needs no privilege on loopback, so any local user could connect as an
// allowed host NQN and read or overwrite a namespace a root nvmetd
// exports from a root-only file): the test binary re-runs itself as the
// user nobody, with unprivChildEnv naming the key it uses.
const (
	unprivChildEnv = "NVMEOF_UNPRIV_CHILD"
	unprivNQN      = "nqn.2026-11.io.nvmeof:unpriv"
	unprivHost     = "nqn.2014-08.org.nvmexpress:uuid:c0000000-0000-4000-8000-000000000001"
	unprivTgtAddr  = "127.0.77.1"
	unprivHostAddr = "127.0.77.2"
	unprivSvc      = 4477
	// The key the target requires (DHHC-1, untransformed, 32 bytes), and
	// another one.
	unprivKey      = "DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYOtVl3:"
	unprivWrongKey = "DHHC-1:00:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTCf/nwX:"
)

var unprivSecret = bytes.Repeat([]byte("root-only secret block of the exported file.\n"), 2048)[:64<<10]

// unprivChild connects as unprivHost with the key mode names ("none",
// "wrong", "right") and reads block 0. It prints what happened; exit 0
// means it read the secret, 2 that the connect was refused.
func unprivChild(mode string) int {
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(unprivHostAddr)})
	if err != nil {
		fmt.Println("OPEN-FAILED:", err)
		return 3
	}
	defer dev.Close()
	o := initiator.Options{SubsystemNQN: unprivNQN, HostNQN: unprivHost}
	switch mode {
	case "wrong":
		o.DHChapSecret = unprivWrongKey
	case "right":
		o.DHChapSecret = unprivKey
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := fabrics.Address{Transport: "rdma", Addr: netip.MustParseAddr(unprivTgtAddr), ServiceID: unprivSvc}
	ctrl, err := initiator.Connect(ctx, nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev}), addr, o)
	if err != nil {
		kind := "OTHER"
		switch {
		case errors.Is(err, initiator.ErrAuthKeyRequired):
			kind = "KEY-REQUIRED"
		case errors.Is(err, initiator.ErrAuthFailed):
			kind = "AUTH-FAILED"
		}
		fmt.Println("REFUSED", kind+":", err)
		return 2
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(1)
	if err != nil {
		fmt.Println("NO-NAMESPACE:", err)
		return 4
	}
	b := make([]byte, 4096)
	if _, err := ns.ReadAt(b, 0); err != nil {
		fmt.Println("READ-FAILED:", err)
		return 5
	}
	if !bytes.Equal(b, unprivSecret[:4096]) {
		fmt.Println("READ-DIFFERS")
		return 6
	}
	fmt.Println("READ-SECRET")
	return 0
}

// asNobody is argv run as the user nobody (setpriv, util-linux), with env
// set.
func asNobody(env string, argv ...string) []string {
	return append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", env}, argv...)
}

// TestUnprivilegedUserNeedsTheKey: root's nvmetd exports a 0600 root file
// to one allowed host NQN that must authenticate. The user nobody, with
// that NQN, is refused without a key and with a wrong one, and the file is
// unchanged; with the key (which only root holds here) the same program
// reads the file, which shows the refusals are authentication's doing.
func TestUnprivilegedUserNeedsTheKey(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the host side as the user nobody")
	}
	_, tgt := binaries(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody runs the child from here
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "secret.img")
	if err := os.WriteFile(img, append(bytes.Clone(unprivSecret), make([]byte, 1<<20-len(unprivSecret))...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
port "p" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = %d
}
host %q {
  dhchap_key = %q
}
subsystem %q {
  ports         = ["p"]
  allowed_hosts = [%q]
  namespace "1" {
    backend = "file"
    path    = %q
  }
}
`, unprivTgtAddr, unprivSvc, unprivHost, unprivKey, unprivNQN, unprivHost, img)), 0o600); err != nil {
		t.Fatal(err)
	}
	target := startNvmetd(t, tgt, cfg)
	defer func() { t.Logf("nvmetd log:\n%s", target.log) }()

	// The test binary, where nobody may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "child.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	child := func(mode string) result {
		return runCmd(t, time.Minute, asNobody(unprivChildEnv+"="+mode, exe, "-test.run=^$")...)
	}
	for _, c := range []struct{ mode, want string }{{"none", "REFUSED KEY-REQUIRED"}, {"wrong", "REFUSED AUTH-FAILED"}} {
		r := child(c.mode)
		t.Logf("nobody, key %s: exit %d: %s", c.mode, r.code, strings.TrimSpace(r.stdout))
		if r.code != 2 || !strings.Contains(r.stdout, c.want) {
			t.Errorf("nobody with key %q: want %q, got %s", c.mode, c.want, r)
		}
	}
	// The user nobody cannot read the file itself either.
	if r := runCmd(t, time.Minute, asNobody("X=1", "cat", img)...); r.code == 0 {
		t.Errorf("nobody read the 0600 file directly: %q", r.stdout[:min(len(r.stdout), 40)])
	}
	r := child("right")
	t.Logf("nobody, right key: exit %d: %s", r.code, strings.TrimSpace(r.stdout))
	if r.code != 0 || !strings.Contains(r.stdout, "READ-SECRET") {
		t.Errorf("with the key the program should read the namespace (else the refusals prove nothing): %s", r)
	}
	got, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(unprivSecret)], unprivSecret) {
		t.Error("the exported file changed")
	}
}
