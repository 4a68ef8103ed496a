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
// both directions, in one boot of a TCG guest (about 30-60 s).

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

// TestRpingKernel, in one boot of one guest (guest/seq.sh):
//
//   - server: our `rping -c -I 192.0.2.4 -a 192.0.2.2 -C 100 -V -v` (the
//     host test; 192.0.2.4 is added to the bridge because our server below
//     holds UDP 4791 on 192.0.2.1) against the guest's `rping -s -a
//     192.0.2.2 -C 100 -V` (guest/rping-server.sh);
//   - client: the guest's `rping -c -a 192.0.2.1 -C 100 -V -v`
//     (guest/rping-client.sh) against our `rping -s -a 192.0.2.1` (the host
//     command, started before the guest boots).
func TestRpingKernel(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/rping")
	s := newGuestShare(t)
	const clientAddr = "192.0.2.4"
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("seq.sh")},
		// The server serves one connection and exits; its status is
		// logged since run.sh does not count the host command's.
		HostCmd: fmt.Sprintf("%s -s -a %s -v -d; echo \"rping server exit status $?\"", bin, kpeer.HostAddr),
		HostTest: fmt.Sprintf("ip addr add %s/24 dev \"$KPEER_BRIDGE\" && exec %s -c -I %s -a %s -C %d -V -v",
			clientAddr, bin, clientAddr, kpeer.GuestAAddr, rpingCount),
		Env:     []string{"SEQ_A=rping-server.sh rping-client.sh", fmt.Sprintf("RPING_COUNT=%d", rpingCount)},
		Share:   s.Dir,
		Timeout: 8 * time.Minute,
	})
	t.Logf("session: %v", res.Err)

	t.Run("server", func(t *testing.T) {
		guest, status := partLog(res, "a", 1, "rping-server.sh")
		host := res.Log("host-test.log")
		if !strings.HasPrefix(status, "exit 0") {
			t.Fatalf("our rping client against the kernel server failed (%q)\nguest:\n%s\nhost:\n%s", status, tail(guest, 40), tail(host, 40))
		}
		t.Logf("guest:\n%s\nhost:\n%s", tail(guest, 12), tail(host, 12))
		if n := len(regexp.MustCompile(`(?m)^ping data: rdma-ping-\d+: `).FindAllString(host, -1)); n != rpingCount {
			t.Errorf("our client printed %d pings, want %d:\n%s", n, rpingCount, tail(host, 40))
		}
		if !strings.Contains(guest, "PASS: rping server served") {
			t.Errorf("guest rping server did not finish cleanly:\n%s", tail(guest, 40))
		}
	})

	t.Run("client", func(t *testing.T) {
		guest, status := partLog(res, "a", 2, "rping-client.sh")
		host := res.Log("host-cmd.log")
		if !strings.HasPrefix(status, "exit 0") {
			t.Fatalf("kernel rping client failed (%q)\nguest:\n%s\nhost:\n%s", status, tail(guest, 40), tail(host, 40))
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
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
