package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// The kernel-peer checklist of issue 4: the guest kernel's nvme-rdma host
// against nvmetd, scripted in guest/nvmetd-full.sh, in one session
// (discover, connect, admin commands, fio, ext4, host access control, and
// nvmetd killed and restarted under a connected host).
//
// NVMEOF_INTEROP_KEEP=DIR keeps each session's share directory (guest and
// nvmetd logs) in DIR/<test>/ and captures the bridge into
// DIR/<test>/capture.pcapng.

// Subsystems, hosts and identities of the full configuration.
const (
	fullOpenNQN       = "nqn.2026-11.io.nvmeof:kpeer-open"
	fullRestrictedNQN = "nqn.2026-11.io.nvmeof:kpeer-restricted"
	fullModel         = "nvmeof-interop"
	fullSerial        = "NVMEOFKPEER2"

	// The guest's default host (written to /etc/nvme/hostnqn), a second
	// allowed host and one that RESTRICTED_NQN does not allow.
	fullHostID        = "6b706565-7200-4000-8000-0000000000a1"
	fullAllowedHostID = "6b706565-7200-4000-8000-0000000000a2"
	fullDeniedHostID  = "6b706565-7200-4000-8000-0000000000d0"

	fullNS1Size = 64 << 20 // open subsystem, namespace 1 (fio, restarts)
	fullNS2Size = 16 << 20 // open subsystem, namespace 2 (ext4)
)

func hostNQN(id string) string { return "nqn.2014-08.org.nvmexpress:uuid:" + id }

// fullSetup is what one session needs: nvmetd, its configuration and the
// namespaces' backing files.
type fullSetup struct {
	bin, cfg, ns1, ns2 string
	keep               string // kept session directory, "" when not kept
}

// newFullSetup builds nvmetd and writes fullConfig for 192.0.2.1:4420.
func newFullSetup(t *testing.T) *fullSetup {
	t.Helper()
	s := &fullSetup{bin: buildBinary(t, "./cmd/nvmetd")}
	work := t.TempDir()
	if k := os.Getenv("NVMEOF_INTEROP_KEEP"); k != "" {
		s.keep = filepath.Join(k, t.Name())
		if err := os.RemoveAll(s.keep); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(s.keep, "share"), 0o755); err != nil {
			t.Fatal(err)
		}
		work = s.keep
	}
	s.ns1, s.ns2 = filepath.Join(work, "ns1.img"), filepath.Join(work, "ns2.img")
	cfg := fullConfig(kpeer.HostAddr, "", s.ns1, s.ns2, false)
	s.cfg = filepath.Join(work, "nvmetd.hcl")
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// fullConfig is the nvmetd configuration of the full checklist: two
// subsystems on addr:4420 (provider "" = the default), fullOpenNQN (any
// host; namespace 1 a 64 MiB file at ns1, namespace 2 a 16 MiB file at
// ns2) and fullRestrictedNQN (16 MiB memory namespace) that allows the
// guest's default host and fullAllowedHostID only. buffered sets
// buffered_io on the file namespaces, for files on a file system that
// refuses O_DIRECT (a guest's tmpfs).
func fullConfig(addr, provider, ns1, ns2 string, buffered bool) string {
	prov := ""
	if provider != "" {
		prov = fmt.Sprintf("  provider  = %q\n", provider)
	}
	buf := ""
	if buffered {
		buf = "    buffered_io = true\n"
	}
	return fmt.Sprintf(`
log_level = "debug"
port "kpeer" {
  transport = "rdma"
%s  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  serial         = %q
  model          = %q
  namespace "1" {
    backend = "file"
    path    = %q
    size    = %d
%s  }
  namespace "2" {
    backend = "file"
    path    = %q
    size    = %d
%s  }
}
subsystem %q {
  ports         = ["kpeer"]
  allowed_hosts = [%q, %q]
  serial        = "NVMEOFKPEER3"
  model         = "nvmeof-restricted"
  namespace "1" {
    backend = "memory"
    size    = "16MiB"
  }
}
`, prov, addr, fullOpenNQN, fullSerial, fullModel, ns1, fullNS1Size, buf, ns2, fullNS2Size, buf,
		fullRestrictedNQN, hostNQN(fullHostID), hostNQN(fullAllowedHostID))
}

// fullEnv is what guest/nvmetd-full.sh needs to know of fullConfig.
func fullEnv(steps string) []string {
	return []string{
		"STEPS=" + steps,
		"OPEN_NQN=" + fullOpenNQN, "RESTRICTED_NQN=" + fullRestrictedNQN,
		"HOSTNQN=" + hostNQN(fullHostID), "HOSTID=" + fullHostID,
		"ALLOWED_HOSTNQN=" + hostNQN(fullAllowedHostID), "ALLOWED_HOSTID=" + fullAllowedHostID,
		"DENIED_HOSTNQN=" + hostNQN(fullDeniedHostID), "DENIED_HOSTID=" + fullDeniedHostID,
		"MODEL=" + fullModel, "SERIAL=" + fullSerial,
		fmt.Sprintf("NS1_BLOCKS=%d", fullNS1Size/512), fmt.Sprintf("NS2_BLOCKS=%d", fullNS2Size/512),
		"DISCOVER_TRIES=10",
	}
}

// run runs guest/nvmetd-full.sh with the given steps and extra settings
// and asserts RESULT: PASS; it logs the PASS lines, and on failure the
// guest log and the tail of nvmetd's log.
func (s *fullSetup) run(t *testing.T, dir string, r kpeer.Run, steps string) *kpeer.Result {
	t.Helper()
	r.Scripts = []string{guestScript(t, "nvmetd-full.sh")}
	r.Env = append(fullEnv(steps), r.Env...)
	if s.keep != "" {
		r.Share = filepath.Join(s.keep, "share")
		r.Capture = filepath.Join(s.keep, "capture.pcapng")
	}
	if r.HostCmd == "" {
		r.HostCmd = fmt.Sprintf("exec %s --config %s", s.bin, s.cfg)
	}
	start := time.Now()
	res := kpeer.Do(t, dir, r)
	script := res.Log("a/script.log")
	var passes []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "PASS:") || strings.HasPrefix(line, "FAIL:") {
			passes = append(passes, line)
		}
	}
	t.Logf("session %s (%s):\n%s", steps, time.Since(start).Round(time.Second), strings.Join(passes, "\n"))
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", script)
		t.Logf("nvmetd log (host-cmd.log, last 200 lines):\n%s", lastLines(res.Log("host-cmd.log"), 200))
		if s.keep != "" {
			t.Logf("share and capture kept in %s", s.keep)
		}
		t.Fatalf("steps %q against nvmetd failed: %v", steps, res.Err)
	}
	return res
}

// TestKernelHostNvmetdFull: in one boot, discovery of two subsystems,
// connect with defaults and with -i 2 -Q 64 -k 5 on a 2-CPU guest, nvme
// list, id-ctrl, id-ns, smart-log, get-log, fio with crc32c verify (4k
// random, 128k sequential, 1M > MDTS), ext4 (mkfs, copy, sync, umount,
// fsck; the namespace's sha256 must equal its backing file's),
// disconnect, host access control (a host not allowed is refused at
// Connect, allowed hosts connect and do I/O), and restarts: nvmetd is
// killed (SIGKILL, then SIGTERM) and started again while the guest kernel
// is connected with -c 2 -l 60; the kernel must reconnect and I/O resume,
// with what was written before each restart still there. nvmetd runs under
// host/nvmetd-restart.sh, which restarts it when the guest asks.
func TestKernelHostNvmetdFull(t *testing.T) {
	dir := kpeer.Require(t)
	s := newFullSetup(t)
	wrapper, err := filepath.Abs(filepath.Join("host", "nvmetd-restart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	res := s.run(t, dir, kpeer.Run{
		HostCmd: fmt.Sprintf("exec bash %s %s %s", wrapper, s.bin, s.cfg),
		SMP:     2,
		Timeout: 15 * time.Minute,
		Env:     []string{"FIO_MB=8", "RESTARTS=KILL TERM"},
	}, "discover admin fio ext4 hosts restart")
	host := res.Log("host-cmd.log")

	// Every controller the guest created before the restarts (discovery
	// and NVM, including the host allowed on the restricted subsystem)
	// went away when it disconnected: the target tore down each admin
	// queue. The restart step's own connection is the one left.
	before, _, ok := strings.Cut(host, "restart 1: SIG")
	if !ok {
		t.Errorf("nvmetd log: no restart:\n%s", lastLines(host, 60))
	}
	if c, r := strings.Count(before, "controller created"), strings.Count(before, "controller removed"); c == 0 || c != r+1 {
		t.Errorf("nvmetd log before the restarts: %d controllers created, %d removed; want all but the restart step's removed:\n%s", c, r, lastLines(before, 60))
	}

	// The guest hashed the whole of namespace 2 after umount and fsck.
	b, err := os.ReadFile(filepath.Join(res.Share, "out", "a", "ns2.sha256"))
	if err != nil {
		t.Fatalf("guest's sha256 of namespace 2: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("guest's ns2.sha256: %q", b)
	}
	got, size, err := sha256File(s.ns2)
	if err != nil {
		t.Fatal(err)
	}
	if f[1] != fmt.Sprint(size) || f[0] != got {
		t.Errorf("backing file of namespace 2: sha256 %s, %d bytes; the guest read %s, %s bytes", got, size, f[0], f[1])
	} else {
		t.Logf("namespace 2 backing file matches the guest's block device: sha256 %s (%d bytes)", got, size)
	}

	// SIGKILL: status 137 from the shell; SIGTERM: a clean shutdown within
	// 10 s, with the guest connected.
	for _, want := range []string{"restart 1: nvmetd exit status 137 (after SIGKILL)", "restart 2: nvmetd exit status 0 (after SIGTERM)"} {
		if !strings.Contains(host, want) {
			t.Errorf("nvmetd log lacks %q:\n%s", want, lastLines(host, 60))
		}
	}
	// What the guest wrote before and after each restart is in the
	// backing file of namespace 1 (2 MiB each, see io_check in the script).
	img, err := os.ReadFile(s.ns1)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		for _, p := range []struct {
			tag string
			off int
		}{{fmt.Sprintf("before%d", n), 8 * n}, {fmt.Sprintf("after%d", n), 8*n + 4}} {
			want := guestPattern(p.tag, 2)
			got := img[p.off<<20 : p.off<<20+len(want)]
			if !bytes.Equal(got, want) {
				t.Errorf("namespace 1 at %d MiB: not the guest's %q pattern (first block %q)", p.off, p.tag, got[:64])
			}
		}
	}
}

// guestPattern returns what nvmetd-full.sh's pattern() writes: mib MiB of
// 512-byte blocks "TAG(12 columns) blk NNNNNNNN 000…N\n".
func guestPattern(tag string, mib int) []byte {
	var b bytes.Buffer
	for i := range mib * 2048 {
		fmt.Fprintf(&b, "%-12s blk %08d %0485d\n", tag, i, i)
	}
	return b.Bytes()
}

// sha256File returns the hex SHA-256 and the size of a file.
func sha256File(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
