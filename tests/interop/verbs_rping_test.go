package interop

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Issue 10 in kernel-peer guests: our binaries built with cgo and the
// ibverbs tag, on the guests' rxe0 through libibverbs and librdmacm.
//
// NVMEOF_INTEROP_STANDIN=1 checks the harness itself: the kernel's own
// tools (rping, and nvmetd/nvmeof on the soft provider) stand in where
// the ibverbs builds of ours would run.

// standIn reports whether the harness runs with stand-ins for our
// ibverbs binaries.
func standIn() bool { return os.Getenv("NVMEOF_INTEROP_STANDIN") == "1" }

// TestVerbsRping: our rping on ibverbs in guest a against rdmacm-utils'
// rping in guest b, both directions, sizes 64, 1024 and 65000 with -V, in
// one boot of two guests (guest/rping-pair.sh).
func TestVerbsRping(t *testing.T) {
	dir := kpeer.Require(t)
	s := newGuestShare(t)
	ours := "rping"
	if !standIn() {
		s.addVerbsBinary(t, "./cmd/rping", "rping-verbs")
		ours = "rping-verbs --provider ibverbs"
	}
	const count = 20
	sizes := []int{64, 1024, 65000}
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("rping-pair.sh"), s.script("rping-pair.sh")},
		Env: []string{
			"RPING_A=" + ours, "RPING_B=rping",
			fmt.Sprintf("RPING_COUNT=%d", count), "RPING_SIZES=" + strings.Trim(fmt.Sprint(sizes), "[]"),
		},
		Share:   s.Dir,
		Timeout: 8 * time.Minute,
	})
	a, b := res.Log("a/script.log"), res.Log("b/script.log")
	t.Logf("session %s\nguest a (%s):\n%s\nguest b (rping):\n%s", time.Since(start).Round(time.Second), ours, passLines(a), passLines(b))
	if res.Err != nil || !strings.Contains(a, "RESULT: PASS") || !strings.Contains(b, "RESULT: PASS") {
		t.Fatalf("rping pair failed: %v\nguest a:\n%s\nguest b:\n%s", res.Err, tail(a, 60), tail(b, 60))
	}
	// Every size, each guest once server and once client.
	for i, size := range sizes {
		ka, kb := 2*i+1, 2*i+2
		for _, want := range []struct {
			log, line string
		}{
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
}
