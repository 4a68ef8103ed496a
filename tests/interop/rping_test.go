package interop

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// rping interop with Linux: the guest's rping (rdmacm-utils, kernel rxe
// and rdma_cm) against our cmd/rping over the soft RoCEv2 provider, in
// both directions. Each session boots a TCG guest (about 30-60 s).

const rpingCount = 100

// guestScript returns the path of a script in tests/interop/guest.
func guestScript(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("guest", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRpingKernelClient: the guest's `rping -c -a 192.0.2.1 -C 100 -V -v`
// against our `rping -s -a 192.0.2.1` on the host side.
func TestRpingKernelClient(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/rping")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{guestScript(t, "rping-client.sh")},
		// The server serves one connection and exits; its status is
		// logged since run.sh does not count the host command's.
		HostCmd: fmt.Sprintf("%s -s -a %s -v -d; echo \"rping server exit status $?\"", bin, kpeer.HostAddr),
		Env:     []string{fmt.Sprintf("RPING_COUNT=%d", rpingCount)},
		Timeout: 5 * time.Minute,
	})
	guest, host := res.Log("a/script.log"), res.Log("host-cmd.log")
	if res.Err != nil {
		t.Fatalf("kernel rping client failed: %v\nguest:\n%s\nhost:\n%s", res.Err, tail(guest, 40), tail(host, 40))
	}
	t.Logf("guest:\n%s\nhost:\n%s", tail(guest, 12), tail(host, 12))
	if !strings.Contains(guest, fmt.Sprintf("PASS: %d pings validated", rpingCount)) {
		t.Errorf("guest did not validate %d pings:\n%s", rpingCount, tail(guest, 40))
	}
	if n := strings.Count(host, "server ping data: rdma-ping-"); n != rpingCount {
		t.Errorf("our server printed %d pings, want %d:\n%s", n, rpingCount, tail(host, 40))
	}
	if !strings.Contains(host, "rping server exit status 0") {
		t.Errorf("our server did not finish cleanly:\n%s", tail(host, 40))
	}
}

// TestRpingKernelServer: our `rping -c -a 192.0.2.2 -C 100 -V -v` against
// the guest's `rping -s -a 192.0.2.2 -C 100 -V`.
func TestRpingKernelServer(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/rping")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts:  []string{guestScript(t, "rping-server.sh")},
		HostTest: fmt.Sprintf("%s -c -a %s -C %d -V -v", bin, kpeer.GuestAAddr, rpingCount),
		Env:      []string{fmt.Sprintf("RPING_COUNT=%d", rpingCount)},
		Timeout:  5 * time.Minute,
	})
	guest, host := res.Log("a/script.log"), res.Log("host-test.log")
	if res.Err != nil {
		t.Fatalf("our rping client against the kernel server failed: %v\nguest:\n%s\nhost:\n%s", res.Err, tail(guest, 40), tail(host, 40))
	}
	t.Logf("guest:\n%s\nhost:\n%s", tail(guest, 12), tail(host, 12))
	if n := len(regexp.MustCompile(`(?m)^ping data: rdma-ping-\d+: `).FindAllString(host, -1)); n != rpingCount {
		t.Errorf("our client printed %d pings, want %d:\n%s", n, rpingCount, tail(host, 40))
	}
	if !strings.Contains(guest, "PASS: rping server served") {
		t.Errorf("guest rping server did not finish cleanly:\n%s", tail(guest, 40))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
