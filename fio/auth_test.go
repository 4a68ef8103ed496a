package fio

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// dhchapTestKey returns a fixed host secret.
func dhchapTestKey(t *testing.T, b byte) string {
	t.Helper()
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = b + byte(i)
	}
	k, err := auth.NewKey(auth.HashSHA256, raw)
	if err != nil {
		t.Fatal(err)
	}
	return k.Encode()
}

// corrupt changes one base64 digit of a DHHC-1 secret's key (its CRC no
// longer matches).
func corrupt(s string) string {
	c := s[12]
	if c == 'A' {
		c = 'B'
	} else {
		c = 'A'
	}
	return s[:12] + string(c) + s[13:]
}

func TestConfigDHChap(t *testing.T) {
	good := dhchapTestKey(t, 1)
	crcBad := corrupt(good)
	for _, tc := range []struct {
		name       string
		host, ctrl string
		want       string // error substring; "" for success
	}{
		{"host only", good, "", ""},
		{"both", good, dhchapTestKey(t, 9), ""},
		{"bad host", crcBad, "", "fio engine: dhchap_secret: DHHC-1 secret CRC mismatch"},
		{"not DHHC-1", "password", "", "fio engine: dhchap_secret: not a DHHC-1 secret"},
		{"bad ctrl", good, "DHHC-1:07:abc:", "fio engine: dhchap_ctrl_secret: not a DHHC-1 secret"},
		{"ctrl alone", "", good, "dhchap_ctrl_secret needs dhchap_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Config{Transport: "loop", DHChapSecret: tc.host, DHChapCtrlSecret: tc.ctrl}.withDefaults()
			if tc.want == "" {
				if err != nil || c.DHChapSecret != tc.host || c.DHChapCtrlSecret != tc.ctrl {
					t.Fatalf("error %v, secrets kept %v", err, c.DHChapSecret == tc.host)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			for _, s := range []string{tc.host, tc.ctrl} {
				if len(s) > 16 && strings.Contains(err.Error(), s[10:26]) {
					t.Errorf("error shows a secret: %v", err)
				}
			}
		})
	}
}

// TestFioDHChapOptions: fio lists the engine's secret options and a bad
// secret fails the job with a clear message that does not show it.
func TestFioDHChapOptions(t *testing.T) {
	so := engine(t)
	b, err := exec.Command("fio", "--enghelp="+so).CombinedOutput()
	if err != nil {
		t.Fatalf("fio --enghelp: %v\n%s", err, b)
	}
	for _, name := range []string{"dhchap_secret", "dhchap_ctrl_secret"} {
		if !strings.Contains(string(b), "\n"+name+" ") {
			t.Errorf("fio --enghelp does not list %s:\n%s", name, b)
		}
	}
	good := dhchapTestKey(t, 1)
	bad := corrupt(good)
	_, out, err := runFio(t, "--ioengine=external:"+so, "--transport=loop", "--loop_size=1m",
		"--dhchap_secret="+bad, "--name=x", "--rw=read", "--size=64k")
	if err == nil || !strings.Contains(out, "dhchap_secret: DHHC-1 secret CRC mismatch") {
		t.Errorf("bad secret: err %v, output:\n%s", err, out)
	}
	// The right secrets through fio: the loop target requires them, and
	// the written data verifies.
	jobs, out2, err := runFio(t, "--ioengine=external:"+so, "--transport=loop", "--loop_size=64m",
		"--subnqn=nqn.2026-11.io.nvmeof:fio-dhchap", "--dhchap_secret="+good, "--dhchap_ctrl_secret="+dhchapTestKey(t, 50),
		writeJob(t, verifyJob))
	if err != nil {
		t.Fatalf("fio with secrets: %v\n%s", err, out2)
	}
	checkVerifyJobs(t, jobs, out2)
	// fio itself echoes the job's options in its JSON report; the
	// engine's messages must not add the secret.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "nvmeof") && strings.Contains(line, bad[10:30]) {
			t.Errorf("the engine's message shows the secret: %s", line)
		}
	}
}

// TestLoopDHChap: with a secret, the loop target requires it; the
// engine's secrets reach the initiator (right ones connect and move
// data, none or others are refused).
func TestLoopDHChap(t *testing.T) {
	host, ctrl := dhchapTestKey(t, 1), dhchapTestKey(t, 100)
	base := Config{Transport: "loop", Trsvcid: 14431, SubNQN: "nqn.2026-11.io.nvmeof:fio-auth", LoopSize: 1 << 20, Depth: 4}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := base
	cfg.DHChapSecret, cfg.DHChapCtrlSecret = host, ctrl
	e, err := Open(ctx, cfg) // starts the loop target, which then requires these keys
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := e.Submit(0, Request{Op: OpWrite, Buf: buf, Off: 0}); err != nil {
		t.Fatal(err)
	}
	out := make([]Completion, 1)
	if n := e.Reap(1, 1, 10*time.Second, out); n != 1 || out[0].Errno != 0 {
		t.Fatalf("write: %d completions %+v", n, out[:n])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		host, ctrl string
		is         error
	}{
		{"no secret", "", "", initiator.ErrAuthKeyRequired},
		{"other secret", ctrl, "", initiator.ErrAuthFailed},
		{"other controller secret", host, host, initiator.ErrAuthFailed},
	} {
		cfg := base
		cfg.DHChapSecret, cfg.DHChapCtrlSecret = tc.host, tc.ctrl
		e, err := Open(ctx, cfg)
		if err == nil {
			e.Close()
			t.Errorf("%s: connected", tc.name)
			continue
		}
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.is)
		}
	}
}
