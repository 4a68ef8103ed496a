// Package unpriv checks that DH-HMAC-CHAP closes the hole an audit found:
// the soft RoCE provider needs no privilege on loopback, so any local user
// could connect as an allowed host NQN and read or overwrite a namespace
// that a root nvmetd exports from a root-only file.
package unpriv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

const (
	childEnv  = "NVMEOF_UNPRIV_CHILD"
	subNQN    = "nqn.2026-11.io.nvmeof:unpriv"
	allowedNQ = "nqn.2014-08.org.nvmexpress:uuid:c0000000-0000-4000-8000-000000000001"
	tgtAddr   = "127.0.77.1"
	hostAddr  = "127.0.77.2"
	svc       = 4477
	// The key the target requires (DHHC-1, untransformed, 32 bytes).
	hostKey  = "DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYOtVl3:"
	wrongKey = "DHHC-1:00:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTCf/nwX:"
)

var secret = bytes.Repeat([]byte("root-only secret block of the exported file.\n"), 2048)[:64<<10]

// TestMain runs the unprivileged child when asked to.
func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child connects as allowedNQ with the key mode names ("none", "wrong",
// "right"), reads block 0 and, if that worked, overwrites it. It prints
// what happened; exit 0 means it read the secret.
func child(mode string) int {
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(hostAddr)})
	if err != nil {
		fmt.Println("OPEN-FAILED:", err)
		return 3
	}
	defer dev.Close()
	o := initiator.Options{SubsystemNQN: subNQN, HostNQN: allowedNQ}
	switch mode {
	case "wrong":
		o.DHChapSecret = wrongKey
	case "right":
		o.DHChapSecret = hostKey
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := fabrics.Address{Transport: "rdma", Addr: netip.MustParseAddr(tgtAddr), ServiceID: svc}
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
	if !bytes.Equal(b, secret[:4096]) {
		fmt.Println("READ-DIFFERS")
		return 6
	}
	fmt.Println("READ-SECRET")
	return 0
}

var (
	buildOnce sync.Once
	nvmetdBin string
	buildErr  error
)

// TestUnprivilegedUserNeedsTheKey: root's nvmetd exports a 0600 root file
// to one allowed host NQN that must authenticate. The user nobody, with
// that NQN, is refused without a key and with a wrong one, and the file is
// unchanged; with the key (which only root holds here) the same program
// reads the file, which shows the refusals are authentication's doing.
func TestUnprivilegedUserNeedsTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nvmetd")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the host side as the user nobody")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody runs the child from here
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "secret.img")
	if err := os.WriteFile(img, append(bytes.Clone(secret), make([]byte, 1<<20-len(secret))...), 0o600); err != nil {
		t.Fatal(err)
	}
	buildOnce.Do(func() {
		d, err := os.MkdirTemp("", "nvmeof-unpriv-bin-")
		if err != nil {
			buildErr = err
			return
		}
		nvmetdBin = filepath.Join(d, "nvmetd")
		cmd := exec.Command("go", "build", "-o", nvmetdBin, "./cmd/nvmetd")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/nvmetd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
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
`, tgtAddr, svc, allowedNQ, hostKey, subNQN, allowedNQ, img)), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := startNvmetd(t, nvmetdBin, cfg)
	defer stop()

	// The test binary, where nobody may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "child.test")
	if err := copyFile(self, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(mode string, nobody bool) (string, int) {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+mode)
		if nobody {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run child: %v", err)
		}
		return string(out), code
	}
	for _, c := range []struct {
		mode, want string
	}{{"none", "REFUSED KEY-REQUIRED"}, {"wrong", "REFUSED AUTH-FAILED"}} {
		out, code := run(c.mode, true)
		t.Logf("nobody, key %s: exit %d: %s", c.mode, code, strings.TrimSpace(out))
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("nobody with key %q: want %q, got exit %d:\n%s", c.mode, c.want, code, out)
		}
	}
	// The user nobody cannot read the file itself either.
	if out, code := runAsNobody(t, "cat", img); code == 0 {
		t.Errorf("nobody read the 0600 file directly: %q", out[:min(len(out), 40)])
	}
	out, code := run("right", true)
	t.Logf("nobody, right key: exit %d: %s", code, strings.TrimSpace(out))
	if code != 0 || !strings.Contains(out, "READ-SECRET") {
		t.Errorf("with the key the program should read the namespace (else the refusals prove nothing): exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:len(secret)], secret) {
		t.Error("the exported file changed")
	}
}

func runAsNobody(t *testing.T, argv ...string) (string, int) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// startNvmetd starts nvmetd and waits for its "listening" log line; the
// returned function stops it by its PID.
func startNvmetd(t *testing.T, bin, cfg string) func() {
	t.Helper()
	cmd := exec.Command(bin, "--config", cfg)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var (
		mu  sync.Mutex
		log bytes.Buffer
	)
	listening, done := make(chan struct{}), make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		var once sync.Once
		for {
			n, err := pr.Read(buf)
			mu.Lock()
			log.Write(buf[:n])
			ok := strings.Contains(log.String(), "listening")
			mu.Unlock()
			if ok {
				once.Do(func() { close(listening) })
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	logs := func() string { mu.Lock(); defer mu.Unlock(); return log.String() }
	select {
	case <-listening:
	case <-done:
		t.Fatalf("nvmetd exited:\n%s", logs())
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("nvmetd not listening after 20 s:\n%s", logs())
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Logf("nvmetd log:\n%s", logs())
	}
}
