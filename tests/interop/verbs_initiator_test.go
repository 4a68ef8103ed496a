package interop

import (
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestVerbsInitiatorKernelTarget: our initiator built with the ibverbs
// provider in guest a (192.0.2.2, rxe0) against the kernel's nvmet-rdma in
// guest b (192.0.2.3, guest/initiator-target.sh), in one boot
// (guest/verbs-initiator.sh): kpeer-host's discovery, Identify, SMART,
// pattern, verified 4 KiB .. 4 MiB+512 I/O split at the kernel's MDTS and
// again at our own smaller transfer limit, refusals and the nvmeof CLI;
// then nvmeof mapping the namespace through the guest's NBD with mkfs,
// mount and checksums; no QP left on either side.
func TestVerbsInitiatorKernelTarget(t *testing.T) {
	dir := kpeer.Require(t)
	s := newGuestShare(t)
	provider := "ibverbs"
	if standIn() {
		provider = "soft"
		s.addStaticBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addStaticBinary(t, "./cmd/nvmeof", "nvmeof")
	} else {
		s.addVerbsBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addVerbsBinary(t, "./cmd/nvmeof", "nvmeof")
	}
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("verbs-initiator.sh"), s.script("initiator-target.sh")},
		Env:     []string{"PROVIDER=" + provider, "NQN=" + kpeerNQN, "PATTERN_MB=2", "FILE_MB=8"},
		Share:   s.Dir,
		Timeout: 15 * time.Minute,
	})
	a, b := res.Log("a/script.log"), res.Log("b/script.log")
	t.Logf("session %s\nguest a (our initiator, %s):\n%s\nguest b (kernel target):\n%s",
		time.Since(start).Round(time.Second), provider, passLines(a), passLines(b))
	if res.Err != nil || lastResult(a) != "RESULT: PASS" || strings.Contains(a, "\nFAIL:") {
		t.Logf("guest b (kernel target) log:\n%s", tail(b, 60))
		t.Fatalf("our initiator (%s) against the kernel target failed: %v\nguest a:\n%s", provider, res.Err, tail(a, 150))
	}
	for _, want := range []struct{ log, line string }{
		{a, "PASS: 4M+512 (above MDTS) at"},
		{a, "PASS: max transfer 131072 = min(MDTS 1048576, transport 131072)"},
		{a, "PASS: nvmeof disconnect"},
		{a, "PASS: sha256 after remount matches"},
		{b, "PASS: no RC QP left on rxe0"},
		{b, "PASS: no keep-alive expiry"},
	} {
		if !strings.Contains(want.log, want.line) {
			t.Errorf("missing %q", want.line)
		}
	}
}

// lastResult returns the last "RESULT: ..." line of a log.
func lastResult(log string) string {
	res := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "RESULT:") {
			res = strings.TrimSpace(l)
		}
	}
	return res
}
