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

// TestCongestionAgainstRxe: RoCEv2 congestion control on against the
// kernel's rxe, in one guest whose incoming traffic passes a bottleneck
// that marks ECN-capable packets CE (guest/ecn.sh: tbf + red ecn on an
// ifb behind eth0's ingress), guest/ecn-guest.sh:
//
//   - the kernel's nvme-rdma host against nvmetd whose soft port runs
//     congestion control (its packets leave ECT(0), some reach rxe marked
//     CE): kernel-peer's kernel-host.sh passes (discover, connect,
//     Identify, pattern written and read back, fio crc32c verify);
//   - our host (kpeer-host -congestion, the session checks) against the
//     kernel target on the same guest, its packets marked the same way;
//     its own device's fault injector also marks 2 % of what it receives
//     from rxe CE (rxe's packets are Not-ECT, so no switch would), so our
//     notification point sends CNPs to the kernel target's QPs: the
//     session still passes, the bridge's capture holds the CNPs (their
//     ICRCs right), and rxe sends none back;
//   - the bottleneck marked packets CE, and the capture taken behind it
//     (what rxe received) passes kernel-peer's independent checker with
//     every ICRC right: the ICRC leaves the ECN field out, as it must for
//     a switch to mark it in flight.
func TestCongestionAgainstRxe(t *testing.T) {
	dir := kpeer.Require(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not installed (apt-get install tshark)")
	}
	nvmetd := buildBinary(t, "./cmd/nvmetd")
	host := buildBinary(t, "./tests/interop/cmd/kpeer-host")
	s := newGuestShare(t)
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	cfg := nvmetdConfig(t, work, img)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	withCC := strings.Replace(string(b), "  service   = 4420\n", "  service   = 4420\n  provider  = \"soft\"\n  congestion {\n    enabled = true\n  }\n", 1)
	if withCC == string(b) {
		t.Fatal("nvmetdConfig changed: no port service line to add the congestion block after")
	}
	if err := os.WriteFile(cfg, []byte(withCC), 0o644); err != nil {
		t.Fatal(err)
	}
	// Our host gets an address of its own: nvmetd's soft device holds UDP
	// 4791 on the bridge's address.
	const hostAddr = "192.0.2.4"
	bridge := filepath.Join(work, "bridge.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Capture: bridge,
		Share:   s.Dir,
		Scripts: []string{s.script("ecn-guest.sh")},
		HostCmd: fmt.Sprintf("exec %s --config %s --metrics-address %s:9100", nvmetd, cfg, kpeer.HostAddr),
		// A 1 MiB write's READ responses take about 3 s through the
		// marking queue: a Keep Alive behind them in a loaded guest can
		// take longer than the default 5 s (one full run lost the
		// controller so), and keep-alive is not what this test checks.
		HostTest: fmt.Sprintf("ip addr add %s/24 dev \"$KPEER_BRIDGE\" && exec %s -steps session -congestion -ce-mark 0.02 -keep-alive 30s -host-addr %s",
			hostAddr, host, hostAddr),
		Env:     []string{"NQN=" + kpeerNQN, "IO_MB=2", "FIO_MB=4", "DISCOVER_TRIES=10", "PATTERN_MB=2"},
		Timeout: 8 * time.Minute,
	})
	defer keepOnFailure(t, res, bridge)
	guest, hostLog := res.Log("a/script.log"), res.Log("host-test.log")
	checkLines(t, "guest", guest)
	checkLines(t, "host", hostLog)
	if res.Err != nil || !strings.Contains(guest, "ECN RESULT: PASS") || !strings.Contains(guest, "RESULT: PASS") {
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 60))
		t.Fatalf("session failed: %v\nguest:\n%s", res.Err, tail(guest, 60))
	}
	if !strings.Contains(hostLog, "RESULT: PASS") {
		t.Fatalf("our host against the kernel target did not pass:\n%s", tail(hostLog, 60))
	}
	m := regexp.MustCompile(`PASS: the bottleneck marked (\d+) packets CE`).FindStringSubmatch(guest)
	if m == nil {
		t.Fatal("no CE marks reported")
	}
	capture := filepath.Join(res.Share, "out", "a", "ecn-ifb0.pcap")
	report, icrcs := checkRoCEPcap(t, dir, capture)
	t.Logf("roce-pcap.py (what rxe received, behind the marking):\n%s", lastLines(report, 30))
	// count returns the frames of a capture tshark's filter selects.
	count := func(file, filter string) int {
		out, err := exec.Command("tshark", "-r", file, "-Y", filter, "-T", "fields", "-e", "frame.number").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", filter, err)
		}
		return len(strings.Fields(string(out)))
	}
	// The marked packets are in the capture, and their ICRCs were among
	// the correct ones.
	n := count(capture, "udp.dstport == 4791 && ip.dsfield.ecn == 3")
	t.Logf("%s packets marked CE by the bottleneck, %d of them in the capture; %d ICRCs checked", m[1], n, icrcs)
	if n == 0 {
		t.Fatal("no CE-marked RoCEv2 packet in the capture behind the marking")
	}
	if icrcs < n {
		t.Fatalf("%d ICRCs right but %d CE-marked packets", icrcs, n)
	}

	// CNPs from our host to the kernel target, none from rxe.
	cnp := regexp.MustCompile(`INFO: CE marks made (\d+), CNPs sent (\d+)`).FindStringSubmatch(hostLog)
	if cnp == nil || cnp[2] == "0" {
		t.Fatalf("our host sent no CNP: %q", cnp)
	}
	toRxe := count(bridge, "ip.src == "+hostAddr+" && infiniband.bth.opcode == 129")
	fromRxe := count(bridge, "ip.src == 192.0.2.2 && infiniband.bth.opcode == 129")
	t.Logf("our host: %s CE marks injected, %s CNPs sent; on the bridge %d CNPs to rxe, %d from it", cnp[1], cnp[2], toRxe, fromRxe)
	if toRxe == 0 || fromRxe != 0 {
		t.Fatalf("%d CNPs to rxe on the bridge, %d from it: want some and none", toRxe, fromRxe)
	}
	checkRoCEPcap(t, dir, bridge)
}
