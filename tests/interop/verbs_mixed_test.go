package interop

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Mixed providers (issue 10), one guest boot:
//
//   - the guest's initiator on ibverbs (kpeer-host and the nvmeof CLI, on
//     rxe0 at 192.0.2.2) against nvmetd on the soft provider on the host
//     side (192.0.2.1, --host-cmd);
//   - then nvmetd on ibverbs in the guest (192.0.2.2) and our soft
//     initiator on the host side (kpeer-host --host-test, from 192.0.2.4:
//     the host nvmetd holds UDP 4791 on 192.0.2.1) against it.
//
// Both targets export the same shape (mixedConfig), so kpeer-host checks
// the same things both ways: discovery, the restricted subsystem,
// Identify, namespace size and UUID, SMART, verified I/O of 4 KiB ..
// 4 MiB+512 split at nvmetd's MDTS, refusals, the CLI.
const (
	mixedModel    = "nvmeof-mixed"
	mixedSerial   = "NVMEOFMIX1"
	mixedNSUUID   = "6b706565-7200-4000-8000-00000000b001"
	mixedRestrNQN = "nqn.2014-08.org.nvmexpress:kpeer-restricted"
	mixedAllowed  = "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000a1"
	mixedHostAddr = "192.0.2.4" // the host side's soft initiator
)

func mixedConfig(addr, provider string) string {
	return fmt.Sprintf(`
log_level = "info"
port "kpeer" {
  transport = "rdma"
  provider  = %q
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  serial         = %q
  model          = %q
  namespace "1" {
    backend    = "memory"
    size       = "64MiB"
    block_size = 512
    uuid       = %q
  }
}
subsystem %q {
  ports         = ["kpeer"]
  allowed_hosts = [%q]
  namespace "1" {
    backend = "memory"
    size    = "4MiB"
  }
}
`, provider, addr, kpeerNQN, mixedSerial, mixedModel, mixedNSUUID, mixedRestrNQN, mixedAllowed)
}

// mixedArgs are kpeer-host's flags for a target of mixedConfig.
func mixedArgs() string {
	return strings.Join([]string{"-nqn", kpeerNQN, "-restricted-nqn", mixedRestrNQN, "-allowed-hostnqn", mixedAllowed,
		"-model", mixedModel, "-serial", mixedSerial, "-ns-uuid", mixedNSUUID, "-ns-size-mb", "64", "-pattern-mb", "0",
		"-fault-timeout", "15s"}, " ")
}

func TestVerbsMixedProviders(t *testing.T) {
	dir := kpeer.Require(t)
	s := newGuestShare(t)
	provider, rxe := "ibverbs", "1"
	if standIn() {
		provider, rxe = "soft", "0"
		s.addStaticBinary(t, "./cmd/nvmetd", "nvmetd")
		s.addStaticBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addStaticBinary(t, "./cmd/nvmeof", "nvmeof")
	} else {
		s.addVerbsBinary(t, "./cmd/nvmetd", "nvmetd")
		s.addVerbsBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addVerbsBinary(t, "./cmd/nvmeof", "nvmeof")
	}
	guestCfg := s.writeConfig(t, "nvmetd-guest.hcl", mixedConfig(kpeer.GuestAAddr, provider))
	// The host side: static soft builds, outside the share.
	work := t.TempDir()
	hostNvmetd := filepath.Join(work, "nvmetd")
	buildTagged(t, "./cmd/nvmetd", hostNvmetd, false)
	hostKpeer := filepath.Join(work, "kpeer-host")
	buildTagged(t, "./tests/interop/cmd/kpeer-host", hostKpeer, false)
	hostCLI := filepath.Join(work, "nvmeof")
	buildTagged(t, "./cmd/nvmeof", hostCLI, false)
	hostCfg := filepath.Join(work, "nvmetd-host.hcl")
	if err := writeFile(hostCfg, mixedConfig(kpeer.HostAddr, "soft")); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("nvmetd-guest.sh")},
		HostCmd: fmt.Sprintf("exec %s --config %s", hostNvmetd, hostCfg),
		HostTest: fmt.Sprintf("ip addr add %s/24 dev \"$KPEER_BRIDGE\" && exec %s -provider soft -host-addr %s -traddr %s -cli %s %s",
			mixedHostAddr, hostKpeer, mixedHostAddr, kpeer.GuestAAddr, hostCLI, mixedArgs()),
		Env: []string{
			"NVMETD_CONFIG=" + guestCfg, "NVMETD_RXE=" + rxe, "PROVIDER=" + provider,
			"PRE_SCRIPT=/share/interop/guest/mixed-initiator.sh", "MIXED_ARGS=" + mixedArgs(),
		},
		Share:   s.Dir,
		Timeout: 12 * time.Minute,
	})
	a, host := res.Log("a/script.log"), res.Log("host-test.log")
	t.Logf("session %s\nguest a (initiator on %s against nvmetd soft on the host, then nvmetd on %s):\n%s\nhost side (soft initiator against the guest's nvmetd):\n%s",
		time.Since(start).Round(time.Second), provider, provider, passLines(a), passLines(host))
	if res.Err != nil || lastResult(a) != "RESULT: PASS" || strings.Contains(a, "\nFAIL:") || lastResult(host) != "RESULT: PASS" {
		t.Logf("host nvmetd (soft) log:\n%s", tail(res.Log("host-cmd.log"), 60))
		t.Logf("guest nvmetd (%s) log:\n%s", provider, tail(res.Log("a/nvmetd.log"), 60))
		t.Logf("host side log:\n%s", tail(host, 80))
		t.Fatalf("mixed providers failed: %v\nguest a:\n%s", res.Err, tail(a, 120))
	}
	for _, want := range []struct{ who, log, line string }{
		{"guest", a, "PASS: guest initiator (" + provider + ") against nvmetd (soft) on 192.0.2.1: every check passed"},
		{"guest", a, "PASS: 4M+512 (above MDTS) at"},
		{"host", host, "PASS: 4M+512 (above MDTS) at"},
		{"host", host, "PASS: nvmeof disconnect"},
		{"guest", a, "PASS: nvmetd stopped by SIGTERM with status 0"},
	} {
		if !strings.Contains(want.log, want.line) {
			t.Errorf("%s log lacks %q", want.who, want.line)
		}
	}
}
