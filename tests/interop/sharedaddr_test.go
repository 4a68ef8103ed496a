package interop

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Subsystems of TestSharedAddressInGuest.
const (
	sharedNQN1 = "nqn.2026-12.io.nvmeof:shared-guest-1"
	sharedNQN2 = "nqn.2026-12.io.nvmeof:shared-guest-2"
)

// TestSharedAddressInGuest: our nvmeof in a 6.12 guest connects two
// subsystems of nvmetd from the guest's one address (two connection
// daemons sharing the soft RoCE address), maps one with ublk and one with
// NBD, writes and reads a pattern on each, survives a SIGKILL of the ublk
// daemon (the NBD disk goes on, the ublk disk is cleaned up, the subsystem
// connects again) and disconnects (guest/shared-host.sh). Each backing
// file must then start with the guest's pattern.
func TestSharedAddressInGuest(t *testing.T) {
	dir := kpeer.RequireKernel(t, ublkKernel)
	s := newGuestShare(t)
	s.addStaticBinary(t, "./cmd/nvmeof", "nvmeof")
	work := t.TempDir()
	nvmetd := filepath.Join(work, "nvmetd")
	buildTagged(t, "./cmd/nvmetd", nvmetd, false)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "log_level = \"info\"\nport \"kpeer\" {\n  transport = \"rdma\"\n  address = %q\n  service = 4420\n}\n", kpeer.HostAddr)
	for i, nqn := range []string{sharedNQN1, sharedNQN2} {
		fmt.Fprintf(&cfg, "subsystem %q {\n  ports = [\"kpeer\"]\n  allow_any_host = true\n  namespace \"1\" {\n    backend = \"file\"\n    path = %q\n    size = \"16MiB\"\n  }\n}\n",
			nqn, filepath.Join(work, fmt.Sprintf("ns%d.img", i+1)))
	}
	cfgPath := filepath.Join(work, "nvmetd.hcl")
	if err := writeFile(cfgPath, cfg.String()); err != nil {
		t.Fatal(err)
	}
	res := kpeer.Do(t, dir, kpeer.Run{
		Kernel:  ublkKernel,
		Scripts: []string{s.script("shared-host.sh")},
		HostCmd: fmt.Sprintf("exec %s --config %s", nvmetd, cfgPath),
		Env:     []string{"NQN1=" + sharedNQN1, "NQN2=" + sharedNQN2, "TARGET_ADDR=" + kpeer.HostAddr},
		Share:   s.Dir,
		Timeout: 10 * time.Minute,
	})
	defer keepOnFailure(t, res, "")
	script := res.Log("a/script.log")
	t.Logf("guest checks:\n%s", passLines(script))
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", tail(script, 120))
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 60))
		t.Fatalf("shared address guest failed: %v", res.Err)
	}
	for i := 1; i <= 2; i++ {
		b, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("ns%d.img", i)))
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte(fmt.Sprintf("shared-address-ns%d-\n", i)), 4<<20)[:4<<20]
		if len(b) < len(want) || !bytes.Equal(b[:len(want)], want) {
			t.Errorf("ns%d.img does not start with the guest's 4 MiB pattern", i)
		}
	}
}
