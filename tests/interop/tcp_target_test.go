package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

const (
	tcpTargetNQN   = "nqn.2026-12.io.nvmeof:kpeer-tcp"
	tcpTargetModel = "nvmeof-tcp"
)

// tcpTargetConfig is nvmetd with one NVMe/TCP port on addr:4420 and a
// subsystem of two namespaces: 64 MiB of memory for fio (its reads go out
// zero-copy, Request.Gather) and a 16 MiB file for ext4 and the restart.
func tcpTargetConfig(addr, ns2 string) string {
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
    backend = "memory"
    size    = "64MiB"
  }
  namespace "2" {
    backend = "file"
    path    = %q
    size    = "16MiB"
  }
}
`, addr, tcpTargetNQN, tcpTargetModel, ns2)
}

// TestKernelTCPHostNvmetd: the guest kernel's nvme-tcp host against
// nvmetd's NVMe/TCP port (guest/tcp-target-host.sh): discover (trtype
// tcp, sectype none), then twice, with header and data digests and SQ
// flow control off (the C2HData SUCCESS flag) and with defaults, connect
// -i 2 -Q 64, id-ctrl, id-ns, smart-log, fio crc32c verify (4k random,
// 128k sequential, 1M), ext4 with checksums and fsck, disconnect; then
// nvmetd is SIGKILLed and restarted under a connected host, whose I/O
// resumes once the kernel has reconnected. nvmetd's
// log must show both digest settings negotiated, and the capture of the
// session must hold what each setting means on the wire (checkTCPCapture).
func TestKernelTCPHostNvmetd(t *testing.T) {
	for _, kernel := range []string{"", "6.12"} {
		name := "6.1"
		if kernel != "" {
			name = kernel
		}
		t.Run(name, func(t *testing.T) {
			dir := kpeer.RequireKernel(t, kernel)
			bin := buildBinary(t, "./cmd/nvmetd")
			work, share := t.TempDir(), ""
			if k := os.Getenv("NVMEOF_INTEROP_KEEP"); k != "" {
				// The session's logs stay in share/out.
				work = filepath.Join(k, t.Name())
				share = filepath.Join(work, "share")
				if err := os.RemoveAll(work); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(share, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			wrapper, err := filepath.Abs(filepath.Join("host", "nvmetd-restart.sh"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(work, "nvmetd.hcl")
			ns2 := filepath.Join(work, "ns2.img")
			if err := os.WriteFile(cfg, []byte(tcpTargetConfig(kpeer.HostAddr, ns2)), 0o644); err != nil {
				t.Fatal(err)
			}
			pcap := filepath.Join(work, "capture.pcapng")
			res := kpeer.Do(t, dir, kpeer.Run{
				Capture: pcap,
				Share:   share,
				Kernel:  kernel,
				Scripts: []string{guestScript(t, "tcp-target-host.sh")},
				HostCmd: fmt.Sprintf("exec bash %s %s %s", wrapper, bin, cfg),
				Env: []string{"NQN=" + tcpTargetNQN, "MODEL=" + tcpTargetModel, "FIO_MB=4", "DISCOVER_TRIES=10",
					"MODES=--hdr-digest --data-digest --disable-sqflow;defaults", "RESTART=1"},
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
				if strings.HasPrefix(line, "PASS:") {
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
			checkTCPCapture(t, pcap)
		})
	}
}

// checkTCPCapture cuts the session's NVMe/TCP streams into PDUs and
// checks them: every PDU parses, every header and data digest on the wire
// (the kernel's and nvmetd's) is right, and each feature the test means to
// exercise was: C2HData with the SUCCESS flag and no CapsuleResp (the
// connection with --disable-sqflow), C2HData followed by a CapsuleResp (the
// other), R2T answered by H2CData (writes beyond the in-capsule size),
// in-capsule write data, and PDUs with digests.
func checkTCPCapture(t *testing.T, path string) {
	t.Helper()
	frames, err := capture.Load(path)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	streams, err := capture.TCPStreams(frames)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	count := map[string]int{}
	for _, st := range streams {
		if st.Src.Port() != 4420 && st.Dst.Port() != 4420 {
			continue
		}
		if st.Missing != 0 {
			t.Logf("capture: %s: %d bytes after a hole, stream left out", st, st.Missing)
			count["incomplete streams"]++
			continue
		}
		pdus, _, err := capture.SplitPDUs(st)
		if err != nil {
			t.Errorf("capture: %v", err)
			continue
		}
		var lastC2H tcp.PDU // the last C2HData without SUCCESS, waiting for its CapsuleResp
		for _, cp := range pdus {
			p, err := tcp.Parse(cp.Data)
			if err != nil {
				t.Errorf("capture: %s offset %d (frames %d-%d): %v", st, cp.Offset, cp.FirstFrame, cp.LastFrame, err)
				continue
			}
			if err := p.VerifyHeaderDigest(); err != nil {
				t.Errorf("capture: %s frames %d-%d: %v", st, cp.FirstFrame, cp.LastFrame, err)
			}
			if err := p.VerifyDataDigest(); err != nil {
				t.Errorf("capture: %s frames %d-%d: %v", st, cp.FirstFrame, cp.LastFrame, err)
			}
			f := p.Header().Flags()
			if f&tcp.FlagHDGST != 0 {
				count["header digests"]++
			}
			if f&tcp.FlagDDGST != 0 {
				count["data digests"]++
			}
			switch p.Type() {
			case tcp.TypeC2HData:
				if f&tcp.FlagDataSuccess != 0 {
					count["C2HData with SUCCESS"]++
				} else {
					lastC2H = p
				}
			case tcp.TypeCapsuleResp:
				if lastC2H != nil && lastC2H.DataPDU().CCCID() == uint16(p.CapsuleResp().CQE()[12])|uint16(p.CapsuleResp().CQE()[13])<<8 {
					count["C2HData then CapsuleResp"]++
				}
				lastC2H = nil
			case tcp.TypeR2T:
				count["R2T"]++
			case tcp.TypeH2CData:
				count["H2CData"]++
			case tcp.TypeCapsuleCmd:
				if len(p.Data()) > 0 {
					count["in-capsule data"]++
				}
			}
		}
	}
	t.Logf("capture: %v", count)
	for _, k := range []string{"C2HData with SUCCESS", "C2HData then CapsuleResp", "R2T", "H2CData", "in-capsule data", "header digests", "data digests"} {
		if count[k] == 0 {
			t.Errorf("capture: no %s", k)
		}
	}
}
