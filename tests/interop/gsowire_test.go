package interop

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestKernelHostAgainstNvmetdGSO is TestKernelHostAgainstNvmetd with the
// host side's transmit offloads on, so that nvmetd's soft device (udp4
// mode on 192.0.2.1) sends its runs as UDP GSO sends, which the host's
// stack segments in front of the guest's tap: the guest's rdma_rxe must
// accept every segment, and a capture on the tap (what the guest gets,
// as on a wire) must pass kernel-peer's independent checker
// (tools/roce-pcap.py) with every ICRC right and IP IDs counting up
// within a segmented run. rxe's own packets reach nvmetd through udp4
// mode's raw socket (IP ID not 0) or its UDP socket (ID 0).
func TestKernelHostAgainstNvmetdGSO(t *testing.T) {
	dir := kpeer.Require(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not installed (apt-get install tshark)")
	}
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	cfg := nvmetdConfig(t, work, img)
	capture := filepath.Join(work, "tap.pcapng")
	hostCmd := fmt.Sprintf("ethtool -K \"$KPEER_BRIDGE\" tx on >/dev/null 2>&1; "+
		"tshark -q -i kptap-a -F pcapng -w %s >%s 2>&1 & "+
		"exec %s --config %s", capture, filepath.Join(work, "tshark.log"), bin, cfg)
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{"kernel-host.sh"},
		HostCmd: hostCmd,
		Env:     []string{"NQN=" + kpeerNQN, "IO_MB=2", "FIO_MB=2", "DISCOVER_TRIES=10"},
		Timeout: 6 * time.Minute,
	})
	script := res.Log("a/script.log")
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", script)
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 80))
		t.Fatalf("kernel host against nvmetd (GSO on) failed: %v", res.Err)
	}
	report, _ := checkRoCEPcap(t, dir, capture)
	t.Logf("roce-pcap.py:\n%s", lastLines(report, 40))
	// nvmetd's direction: IDs must take several values (segments of GSO
	// runs count up from 0), or no run was segmented on the way.
	dirRe := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(kpeer.HostAddr) + ` -> \S+: \d+ frames\n    IPv4 ID: first 0x[0-9a-f]+, (\d+) distinct values`)
	d := dirRe.FindStringSubmatch(report)
	if d == nil {
		t.Fatal("roce-pcap.py shows no frames from nvmetd")
	}
	if n, _ := strconv.Atoi(d[1]); n < 2 {
		t.Errorf("nvmetd's frames carry %s distinct IP IDs: no GSO run was segmented on the way to the guest", d[1])
	}
}

// checkRoCEPcap runs kernel-peer's independent checker (tools/roce-pcap.py)
// on capture and fails the test unless it ran and found every ICRC right
// (and at least one); it returns the report and the number of ICRCs
// checked.
func checkRoCEPcap(t *testing.T, kpeerDir, capture string) (report string, icrcs int) {
	t.Helper()
	out, err := exec.Command("python3", filepath.Join(kpeerDir, "tools", "roce-pcap.py"), capture).CombinedOutput()
	report = string(out)
	if err != nil {
		t.Fatalf("roce-pcap.py %s: %v\n%s", filepath.Base(capture), err, lastLines(report, 30))
	}
	m := regexp.MustCompile(`ICRC: (\d+) correct, (\d+) wrong`).FindStringSubmatch(report)
	if m == nil || m[2] != "0" || m[1] == "0" {
		t.Fatalf("roce-pcap.py %s: ICRC line %q", filepath.Base(capture), m)
	}
	icrcs, _ = strconv.Atoi(m[1])
	return report, icrcs
}
