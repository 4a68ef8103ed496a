package interop

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestMultipathAgainstKernelTarget: our initiator's native multipath
// (tests/interop/cmd/kpeer-mpath, on the host side of the namespace,
// 192.0.2.1, soft RoCEv2) against the guest's kernel nvmet with ANA on two
// ports (guest/multipath-target.sh: 192.0.2.2:4420 optimized, :4421
// non-optimized). With verified I/O running throughout: I/O on the
// optimized path; an ANA change in configfs (the kernel's ANA Change AEN)
// moves it to the other path and back; removing the port's subsystem link
// during I/O fails over without an I/O error, and the path returns and
// takes the I/O back when the link is restored.
func TestMultipathAgainstKernelTarget(t *testing.T) {
	dir := kpeer.Require(t)
	host := buildBinary(t, "./tests/interop/cmd/kpeer-mpath")
	capture := filepath.Join(t.TempDir(), "multipath-kernel-target.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts:  []string{guestScript(t, "multipath-target.sh")},
		HostTest: fmt.Sprintf("exec %s", host),
		Capture:  capture,
		Timeout:  10 * time.Minute,
	})
	defer keepOnFailure(t, res, capture)
	hostLog, guest := res.Log("host-test.log"), res.Log("a/script.log")
	checkLines(t, "host", hostLog)
	checkLines(t, "guest", guest)
	if res.Err != nil {
		t.Errorf("session failed: %v\nhost:\n%s\nguest:\n%s", res.Err, tail(hostLog, 60), tail(guest, 60))
	}
	if !strings.Contains(hostLog, "RESULT: PASS") {
		t.Errorf("kpeer-mpath did not pass:\n%s", tail(hostLog, 80))
	}
	for _, want := range []string{"PASS: ANA states: 4420 optimized, 4421 non-optimized",
		"PASS: I/O moved to 4421 after the ANA change", "PASS: I/O failed back to 4420",
		"PASS: I/O continues on 4421 with 4420 down", "PASS: path 4420 reconnected",
		"PASS: verified I/O:"} {
		if !strings.Contains(hostLog, want) {
			t.Errorf("host log lacks %q", want)
		}
	}
	for _, want := range []string{"PASS: ana-flip done", "PASS: unlink-1 done", "PASS: no RC QP left on rxe0"} {
		if !strings.Contains(guest, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
}
