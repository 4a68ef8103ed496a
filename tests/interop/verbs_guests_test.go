package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestVerbsGuests: our binaries built with the ibverbs provider in guest a
// (192.0.2.2, rxe0) against the Linux kernel in guest b (192.0.2.3), two
// scenarios of issue 10 in one boot of two guests (guest/seq.sh):
//
//  1. rping: our cmd/rping against rdmacm-utils' rping, both directions,
//     sizes 64, 1024 and 65000 with -V (guest/rping-pair.sh on both);
//  2. initiator: our initiator against the kernel's nvmet-rdma
//     (guest/verbs-initiator.sh against guest/initiator-target.sh):
//     kpeer-host's discovery, Identify, SMART, the target's pattern,
//     verified 4 KiB .. 4 MiB+512 I/O split at the kernel's MDTS and again
//     at our own smaller transfer limit, refusals and the nvmeof CLI; then
//     nvmeof mapping the namespace through the guest's NBD with mkfs, mount
//     and checksums; no QP left on either side.
func TestVerbsGuests(t *testing.T) {
	dir := kpeer.Require(t)
	s := newGuestShare(t)
	ours, provider := "rping-verbs --provider ibverbs", "ibverbs"
	if standIn() {
		ours, provider = "rping", "soft"
		s.addStaticBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addStaticBinary(t, "./cmd/nvmeof", "nvmeof")
	} else {
		s.addVerbsBinary(t, "./cmd/rping", "rping-verbs")
		s.addVerbsBinary(t, "./tests/interop/cmd/kpeer-host", "kpeer-host")
		s.addVerbsBinary(t, "./cmd/nvmeof", "nvmeof")
	}
	const count = 20
	sizes := []int{64, 1024, 65000}
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("seq.sh"), s.script("seq.sh")},
		Env: []string{
			"SEQ_A=rping-pair.sh verbs-initiator.sh", "SEQ_B=rping-pair.sh initiator-target.sh",
			"RPING_A=" + ours, "RPING_B=rping",
			fmt.Sprintf("RPING_COUNT=%d", count), "RPING_SIZES=" + strings.Trim(fmt.Sprint(sizes), "[]"),
			"PROVIDER=" + provider, "NQN=" + kpeerNQN, "PATTERN_MB=2", "FILE_MB=8",
		},
		Share:   s.Dir,
		Timeout: 20 * time.Minute,
	})
	t.Logf("session %s: %v", time.Since(start).Round(time.Second), res.Err)

	t.Run("rping", func(t *testing.T) {
		a, sa := partLog(res, "a", 1, "rping-pair.sh")
		b, sb := partLog(res, "b", 1, "rping-pair.sh")
		t.Logf("guest a (%s):\n%s\nguest b (rping):\n%s", ours, passLines(a), passLines(b))
		if !strings.HasPrefix(sa, "exit 0") || !strings.HasPrefix(sb, "exit 0") || lastResult(a) != "RESULT: PASS" || lastResult(b) != "RESULT: PASS" {
			t.Fatalf("rping pair failed (guest a %q, guest b %q)\nguest a:\n%s\nguest b:\n%s", sa, sb, tail(a, 60), tail(b, 60))
		}
		// Every size, each guest once server and once client.
		for i, size := range sizes {
			ka, kb := 2*i+1, 2*i+2
			for _, want := range []struct{ log, line string }{
				{a, fmt.Sprintf("PASS: run %d: server guest a (%s) served %d pings of %d bytes", ka, ours, count, size)},
				{b, fmt.Sprintf("PASS: run %d: client guest b (rping) validated %d pings of %d bytes", ka, count, size)},
				{b, fmt.Sprintf("PASS: run %d: server guest b (rping) served %d pings of %d bytes", kb, count, size)},
				{a, fmt.Sprintf("PASS: run %d: client guest a (%s) validated %d pings of %d bytes", kb, ours, count, size)},
			} {
				if !strings.Contains(want.log, want.line) {
					t.Errorf("missing %q", want.line)
				}
			}
		}
	})

	t.Run("initiator", func(t *testing.T) {
		a, sa := partLog(res, "a", 2, "verbs-initiator.sh")
		b, sb := partLog(res, "b", 2, "initiator-target.sh")
		t.Logf("guest a (our initiator, %s):\n%s\nguest b (kernel target):\n%s", provider, passLines(a), passLines(b))
		if !strings.HasPrefix(sa, "exit 0") || lastResult(a) != "RESULT: PASS" || strings.Contains(a, "\nFAIL:") {
			t.Logf("guest b (kernel target) log:\n%s", tail(b, 60))
			t.Fatalf("our initiator (%s) against the kernel target failed (%q)\nguest a:\n%s", provider, sa, tail(a, 150))
		}
		if !strings.HasPrefix(sb, "exit 0") {
			t.Errorf("kernel target guest: %s\n%s", sb, tail(b, 60))
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
	})
}
