package interop

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Several nvmetd gateways exporting one subsystem (issue 14): two nvmetd
// processes in the kernel-peer namespace, on 192.0.2.1 (the bridge) and
// 192.0.2.4 (added to the bridge by host/gateways.sh), serve the same
// subsystem NQN with the same serial, model and namespace identifiers over
// shared storage, with disjoint controller ID ranges. The guest's kernel
// host (native multipath) connects to both and runs guest/gateways.sh.

const (
	gwNQN      = "nqn.2026-12.io.nvmeof:gateways"
	gwSerial   = "NVMEOFGW0001"
	gwModel    = "nvmeof-gateways"
	gwAddr2    = "192.0.2.4"
	gwNSSize   = 64 << 20
	gwPatternM = 2 // MiB of pattern guest/gateways.sh writes at offset 0
)

// gwANA: the gateways configure ANA (group 1, optimized on gateway 1) and
// the guest checks the states and moves the I/O by reload (step "ana").
const gwANA = true

// gwAddrs are the gateways' addresses: gateway i+1 listens on gwAddrs[i].
var gwAddrs = []string{kpeer.HostAddr, gwAddr2}

// gwNamespace is one namespace of the shared subsystem: its NSID and the
// backend lines of its HCL block (backend, path or pool/image, size...).
type gwNamespace struct {
	nsid    int
	backend string
	// anaGroup2 puts the namespace in ANA group 2 (with ANA), optimized on
	// gateway 2 and non-optimized on the others; else it is in group 1.
	anaGroup2 bool
}

// gwConfig is gateway i's (1-based) configuration: its own port (of
// transport "rdma" or "tcp"), the
// shared subsystem with cntlids 100*(i-1)+1 .. 100*i-1 and the
// namespaces with fixed UUID and NGUID (the same on every gateway). With
// an ana state the port gives ANA group 1 that state and the namespaces
// are in group 1, but those with anaGroup2 in group 2, which gateway 2
// has optimized and the others non-optimized.
func gwConfig(i int, transport string, nss []gwNamespace, ana string) string {
	var b strings.Builder
	anaGroup := ""
	if ana != "" {
		anaGroup = fmt.Sprintf("  ana_group \"1\" { state = %q }\n", ana)
		if slices.ContainsFunc(nss, func(ns gwNamespace) bool { return ns.anaGroup2 }) {
			st := "non-optimized"
			if i == 2 {
				st = "optimized"
			}
			anaGroup += fmt.Sprintf("  ana_group \"2\" { state = %q }\n", st)
		}
	}
	fmt.Fprintf(&b, `log_level = "info"
port "gw%d" {
  transport = %q
  address   = %q
  service   = 4420
%s}
subsystem %q {
  ports          = ["gw%d"]
  allow_any_host = true
  serial         = %q
  model          = %q
  cntlid_min     = %d
  cntlid_max     = %d
`, i, transport, gwAddrs[i-1], anaGroup, gwNQN, i, gwSerial, gwModel, 100*(i-1)+1, 100*i-1)
	for _, ns := range nss {
		anaGrpid := ""
		switch {
		case ana != "" && ns.anaGroup2:
			anaGrpid = "\n    ana_grpid = 2"
		case ana != "":
			anaGrpid = "\n    ana_grpid = 1"
		}
		fmt.Fprintf(&b, `  namespace "%d" {
%s
    uuid  = "6b706565-7200-4000-8000-0000000001%02d"
    nguid = "6b706565-7200-4000-8000-0000000002%02d"%s
  }
`, ns.nsid, ns.backend, ns.nsid, ns.nsid, anaGrpid)
	}
	b.WriteString("}\n")
	return b.String()
}

// writeGatewayConfigs writes gw<i>.hcl (what gateway i starts with), and
// with ana the variants guest/gateways.sh asks to reload, into cfgdir:
// gw<i>-a.hcl the start (gateway 1 optimized, the others non-optimized),
// gw<i>-b.hcl the states swapped between gateways 1 and 2.
func writeGatewayConfigs(t *testing.T, cfgdir, transport string, nss []gwNamespace, ana bool) {
	t.Helper()
	write := func(name, c string) {
		if err := os.WriteFile(filepath.Join(cfgdir, name+".hcl"), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range gwAddrs {
		if !ana {
			write(fmt.Sprintf("gw%d", i+1), gwConfig(i+1, transport, nss, ""))
			continue
		}
		a, b := "non-optimized", "non-optimized"
		switch i {
		case 0:
			a = "optimized"
		case 1:
			b = "optimized"
		}
		write(fmt.Sprintf("gw%d", i+1), gwConfig(i+1, transport, nss, a))
		write(fmt.Sprintf("gw%d-a", i+1), gwConfig(i+1, transport, nss, a))
		write(fmt.Sprintf("gw%d-b", i+1), gwConfig(i+1, transport, nss, b))
	}
}

// runGateways runs guest/gateways.sh against the gateways of cfgdir
// (host/gateways.sh, after the shell commands of prelude, if any) and
// fails the test unless the guest passes. It logs the guest's result lines.
// NVMEOF_INTEROP_KEEP=DIR keeps the share (guest and gateway logs) in
// DIR/<test>/.
func runGateways(t *testing.T, dir, bin, cfgdir, prelude string, timeout time.Duration, env ...string) *kpeer.Result {
	t.Helper()
	wrapper, err := filepath.Abs(filepath.Join("host", "gateways.sh"))
	if err != nil {
		t.Fatal(err)
	}
	hostCmd := fmt.Sprintf("exec bash %s %s %s %s", wrapper, bin, cfgdir, strings.Join(gwAddrs, " "))
	if prelude != "" {
		hostCmd = prelude + "; " + hostCmd
	}
	share := ""
	if k := os.Getenv("NVMEOF_INTEROP_KEEP"); k != "" {
		share = filepath.Join(k, t.Name())
		if err := os.RemoveAll(share); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(share, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("share kept in %s", share)
	}
	// NVMEOF_GW_STEP_WAIT_S sets the guest watchdog's bound (a small one
	// forces its hang report).
	if v := os.Getenv("NVMEOF_GW_STEP_WAIT_S"); v != "" {
		env = append(env, "STEP_WAIT_S="+v)
	}
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Share:   share,
		Scripts: []string{guestScript(t, "gateways.sh")},
		HostCmd: hostCmd,
		Env: append([]string{"NQN=" + gwNQN, "GW_ADDRS=" + strings.Join(gwAddrs, " "),
			fmt.Sprintf("IO_MB=%d", gwPatternM), "FIO_MB=4", "DISCOVER_TRIES=60", fmt.Sprintf("ANA=%d", b2i(gwANA))}, env...),
		Timeout: timeout,
	})
	script := res.Log("a/script.log")
	var lines []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "PASS:") || strings.HasPrefix(line, "FAIL:") || strings.HasPrefix(line, "INFO:") {
			lines = append(lines, line)
		}
	}
	t.Logf("gateways session (%s):\n%s", time.Since(start).Round(time.Second), strings.Join(lines, "\n"))
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		if share == "" {
			// The share (guest, host-command and whole gateway logs,
			// goroutine dumps of a hang) outlives the test's temporary
			// directory.
			keep := filepath.Join(os.TempDir(), "nvmeof-"+strings.ReplaceAll(t.Name(), "/", "-"))
			if err := os.RemoveAll(keep); err == nil {
				if err := os.CopyFS(keep, os.DirFS(filepath.Join(res.Share, "out"))); err == nil {
					t.Logf("logs kept in %s", keep)
				}
			}
		}
		t.Logf("guest script log:\n%s", script)
		t.Logf("host command log:\n%s", lastLines(res.Log("host-cmd.log"), 60))
		for i := range gwAddrs {
			t.Logf("gateway %d log (last 60 lines):\n%s", i+1, lastLines(res.Log(fmt.Sprintf("gw%d.log", i+1)), 60))
		}
		t.Fatalf("kernel host against %d gateways failed: %v", len(gwAddrs), res.Err)
	}
	host := res.Log("host-cmd.log")
	if !strings.Contains(host, "exit status 137 (after SIGKILL)") {
		t.Errorf("host command log: no gateway killed with SIGKILL:\n%s", lastLines(host, 30))
	}
	return res
}

// gwPattern is what guest/gateways.sh writes at offset 0 of namespace 1.
func gwPattern() []byte {
	var want bytes.Buffer
	for i := 0; i < gwPatternM*2048; i++ {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	return want.Bytes()
}

// checkPattern fails unless b starts with gwPattern.
func checkPattern(t *testing.T, what string, b []byte) {
	t.Helper()
	want := gwPattern()
	if len(b) < len(want) || !bytes.Equal(b[:len(want)], want) {
		t.Errorf("%s differs from the guest's pattern (sha256 %x, want %x)", what,
			sha256.Sum256(b[:min(len(b), len(want))]), sha256.Sum256(want))
	} else {
		t.Logf("%s holds the guest's %d MiB pattern", what, gwPatternM)
	}
}

// TestKernelHostGateways: two nvmetd gateways on one 64 MiB file, over
// RDMA (nvme-rdma on rdma_rxe) and over TCP (nvme-tcp), one guest each. In
// one boot the guest checks that native multipath joins the two
// controllers into one subsystem with one namespace and two paths, writes
// a pattern, runs fio crc32c write+verify in a loop while the gateway
// carrying the I/O is SIGKILLed (the path must go, the I/O move to the
// other path, the path come back after the restart, every fio run pass)
// and reads the pattern back; the shared file must then hold it.
func TestKernelHostGateways(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	for _, transport := range []string{"rdma", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			img := filepath.Join(work, "shared.img")
			// Created here: two gateways starting at once must not race to create it.
			if err := os.WriteFile(img, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, gwNSSize); err != nil {
				t.Fatal(err)
			}
			writeGatewayConfigs(t, work, transport, []gwNamespace{{nsid: 1, backend: fmt.Sprintf("    backend = \"file\"\n    path    = %q\n    size    = %d", img, gwNSSize)}}, gwANA)
			runGateways(t, dir, bin, work, "", 12*time.Minute, "TRTYPE="+transport)
			b, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			checkPattern(t, "the shared file", b)
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
