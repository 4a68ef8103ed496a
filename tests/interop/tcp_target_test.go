package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

const (
	tcpTargetNQN   = "nqn.2026-12.io.nvmeof:kpeer-tcp"
	tcpTargetModel = "nvmeof-tcp"
)

// tcpTargetConfig is nvmetd with one NVMe/TCP port on addr:4420 and a
// subsystem of two file namespaces (64 MiB for fio, 16 MiB for ext4).
func tcpTargetConfig(addr, ns1, ns2 string) string {
	return fmt.Sprintf(`
log_level = "debug"
port "tcp" {
  transport = "tcp"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["tcp"]
  allow_any_host = true
  model          = %q
  namespace "1" {
    backend = "file"
    path    = %q
    size    = "64MiB"
  }
  namespace "2" {
    backend = "file"
    path    = %q
    size    = "16MiB"
  }
}
`, addr, tcpTargetNQN, tcpTargetModel, ns1, ns2)
}

// TestKernelTCPHostNvmetd: the guest kernel's nvme-tcp host against
// nvmetd's NVMe/TCP port (guest/tcp-target-host.sh): discover (trtype
// tcp, sectype none), then twice, with header and data digests and SQ
// flow control off (the C2HData SUCCESS flag) and with defaults, connect
// -i 2 -Q 64, id-ctrl, id-ns, smart-log, fio crc32c verify (4k random,
// 128k sequential, 1M), ext4 with checksums and fsck, disconnect. nvmetd's
// log must show both digest settings negotiated.
func TestKernelTCPHostNvmetd(t *testing.T) {
	for _, kernel := range []string{"", "6.12"} {
		name := "6.1"
		if kernel != "" {
			name = kernel
		}
		t.Run(name, func(t *testing.T) {
			dir := kpeer.RequireKernel(t, kernel)
			bin := buildBinary(t, "./cmd/nvmetd")
			work := t.TempDir()
			if k := os.Getenv("NVMEOF_INTEROP_KEEP"); k != "" {
				work = filepath.Join(k, t.Name())
				if err := os.MkdirAll(work, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cfg := filepath.Join(work, "nvmetd.hcl")
			ns1, ns2 := filepath.Join(work, "ns1.img"), filepath.Join(work, "ns2.img")
			if err := os.WriteFile(cfg, []byte(tcpTargetConfig(kpeer.HostAddr, ns1, ns2)), 0o644); err != nil {
				t.Fatal(err)
			}
			res := kpeer.Do(t, dir, kpeer.Run{
				Kernel:  kernel,
				Scripts: []string{guestScript(t, "tcp-target-host.sh")},
				HostCmd: fmt.Sprintf("exec %s --config %s", bin, cfg),
				Env: []string{"NQN=" + tcpTargetNQN, "MODEL=" + tcpTargetModel, "FIO_MB=4", "DISCOVER_TRIES=10",
					"MODES=--hdr-digest --data-digest --disable-sqflow;defaults"},
				SMP:     2, // -i 2 gets 2 I/O queues only with 2 CPUs
				Timeout: 15 * time.Minute,
			})
			script := res.Log("a/script.log")
			nvmetd := res.Log("host-cmd.log")
			if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
				t.Logf("guest script log:\n%s", script)
				t.Logf("nvmetd log:\n%s", lastLines(nvmetd, 80))
				t.Fatalf("kernel nvme-tcp host against nvmetd failed: %v", res.Err)
			}
			for _, line := range strings.Split(script, "\n") {
				if strings.HasPrefix(line, "PASS:") || strings.HasPrefix(line, "KNOWN:") {
					t.Log(line)
				}
			}
			// Every queue of the first connection had both digests, every
			// queue of the second none (admin + 2 I/O queues each, and
			// the discovery controller's).
			for _, want := range []string{`hdgst=true ddgst=true`, `hdgst=false ddgst=false`} {
				re := regexp.MustCompile(`queue handshake done: .*qid=(\d+).*` + want)
				qids := map[string]bool{}
				for _, m := range re.FindAllStringSubmatch(nvmetd, -1) {
					qids[m[1]] = true
				}
				if !qids["0"] || !qids["1"] || !qids["2"] {
					t.Errorf("nvmetd log: queues 0, 1 and 2 with %s: got %v", want, qids)
				}
			}
			if strings.Contains(nvmetd, "[ERROR]") {
				t.Errorf("nvmetd logged errors:\n%s", grepLines(nvmetd, "[ERROR]"))
			}
		})
	}
}
