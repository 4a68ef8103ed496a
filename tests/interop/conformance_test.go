package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// The provider-conformance suite (rdma/rdmatest) against the ibverbs
// provider on a real uverbs device: the test binary of rdma/ibverbs is
// built here with cgo and the ibverbs tag and runs in a kernel-peer guest
// on rxe0 (guest/conformance.sh), both ends of every test on that device.

// Sizes for the guest: rxe under TCG moves a few MiB/s, so the multi-MiB
// transfers are 2 MiB (still 2048 packets of rxe's 1024-byte MTU), and a
// wait may take long. The session holds two passes (IPv4, IPv6).
const (
	conformanceLarge   = 2<<20 + 4093
	conformanceWait    = 60 * time.Second
	conformanceSession = 15 * time.Minute
)

// conformanceAddr6 is the guest's IPv6 address for the RoCEv2/IPv6 pass
// (2001:db8::/32 is the documentation prefix; nothing leaves the
// kernel-peer namespace).
const conformanceAddr6 = "2001:db8::2"

// TestIbverbsConformance builds `go test -c -tags ibverbs ./rdma/ibverbs`
// and runs its TestConformance in a guest, twice in one boot: with
// NVMEOF_IBVERBS_ADDR set to the guest's IPv4 address, then to its IPv6
// address (RoCEv2 over IPv6). It fails unless both passes pass. On a
// failure the guest's whole output of the pass is kept in
// $TMPDIR/ibverbs-conformance[-ipv6].log; NVMEOF_CONFORMANCE_SKIP (a
// -test.skip pattern) gets past a case that crashes the test binary, to
// see the rest.
func TestIbverbsConformance(t *testing.T) {
	dir := kpeer.Require(t)
	share := t.TempDir()
	bin := filepath.Join(share, "ibverbs.test")
	cmd := exec.Command("go", "test", "-c", "-tags", "ibverbs", "-o", bin, "./rdma/ibverbs")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=1 go test -c -tags ibverbs ./rdma/ibverbs (needs libibverbs-dev and librdmacm-dev): %v\n%s", err, b)
	}
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{guestScript(t, "conformance.sh")},
		Share:   share,
		Env: []string{
			"KPEER_IPV6=1",
			"CONFORMANCE_ADDR6=" + conformanceAddr6,
			fmt.Sprintf("NVMEOF_CONFORMANCE_LARGE=%d", conformanceLarge),
			"NVMEOF_CONFORMANCE_TIMEOUT=" + conformanceWait.String(),
			"CONFORMANCE_TIMEOUT=" + (conformanceSession/2 - time.Minute).String(),
			// -test.skip in the guest, to get past a case that crashes the binary.
			"CONFORMANCE_SKIP=" + os.Getenv("NVMEOF_CONFORMANCE_SKIP"),
		},
		Timeout: conformanceSession,
	})
	failed := false
	for _, pass := range []struct{ name, log string }{{"IPv4", "conformance.log"}, {"IPv6", "conformance-ipv6.log"}} {
		out := res.Log("a/" + pass.log)
		fails := regexp.MustCompile(`(?m)^\s*--- FAIL: .*$`).FindAllString(out, -1)
		skips := skipped(out)
		passes := regexp.MustCompile(`(?m)^\s*--- PASS: TestConformance/`).FindAllString(out, -1)
		t.Logf("guest conformance run over %s: %d passed, %d failed, %d skipped", pass.name, len(passes), len(fails), len(skips))
		if len(skips) > 0 {
			t.Logf("skipped over %s (what the provider cannot do):\n%s", pass.name, strings.Join(skips, "\n"))
		}
		ok := strings.Contains(out, "--- PASS: TestConformance ") && len(passes) > 0 && len(fails) == 0
		if !ok {
			failed = true
			keep := filepath.Join(os.TempDir(), "ibverbs-"+pass.log)
			if err := os.WriteFile(keep, []byte(out), 0o644); err != nil {
				keep = fmt.Sprintf("(not kept: %v)", err)
			}
			t.Errorf("conformance suite over %s in the guest did not pass:\nfailed:\n%s\n%sconformance output (tail; all of it in %s):\n%s",
				pass.name, strings.Join(fails, "\n"), crash(out), keep, tail(out, 60))
		}
	}
	if res.Err != nil || failed {
		t.Fatalf("guest script: %v\n%s", res.Err, tail(res.Log("a/script.log"), 40))
	}
}

// crash returns the start of a crash report in a test binary's output
// (the fault and the faulting goroutine), or "".
func crash(out string) string {
	i := regexp.MustCompile(`(?m)^(panic: |fatal error: |SIGSEGV|SIGBUS|SIGABRT)`).FindStringIndex(out)
	if i == nil {
		return ""
	}
	lines := strings.SplitN(out[i[0]:], "\n", 31)
	if len(lines) > 30 {
		lines = lines[:30]
	}
	return "crash:\n" + strings.Join(lines, "\n") + "\n"
}

// skipped returns "name: reason" for each skipped test in go test -v
// output: the reason is what the test logged between its "=== RUN" line
// and the next test's.
func skipped(out string) []string {
	var res []string
	logs := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "=== RUN   "):
			cur = strings.TrimPrefix(l, "=== RUN   ")
		case strings.HasPrefix(strings.TrimSpace(l), "--- SKIP: "):
			name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), "--- SKIP: "), " ")
			res = append(res, name+": "+strings.Join(logs[name], "; "))
		case cur != "" && strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "---"):
			logs[cur] = append(logs[cur], strings.TrimSpace(l))
		}
	}
	return res
}
