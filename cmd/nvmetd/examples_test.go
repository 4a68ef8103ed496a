package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestExamples: every configuration of examples/ passes nvmetd --check and
// starts as shipped; a host connects with our initiator and writes and
// reads back a block; SIGTERM stops nvmetd with status 0.
//
// What the test rewrites, and why (nothing else changes):
//   - every port's address becomes a distinct 127.83.N.M: the examples
//     listen on 127.0.0.1 and ::1, which other tests and a running nvmetd
//     may hold (the soft provider binds UDP 4791 on the address, and ::1
//     is the only IPv6 loopback address), so two runs would collide;
//   - absolute file backend paths (/var/lib/nvmetd/...) move under the
//     test's temporary directory, keeping their directories, which nvmetd
//     creates as it would under /var/lib;
//   - block.hcl's /dev/nullb0 (null_blk) stays when it exists, else
//     becomes a loop device over a temporary file (root only: skipped
//     otherwise, with the reason); other device paths stay (nvmetd.hcl's
//     disabled whole disk, which nvmetd does not open);
//   - verbs.hcl's address becomes that of an RDMA device: it runs only in
//     a binary built with -tags ibverbs on a machine with one, and is
//     skipped with the reason otherwise.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.hcl")
	json, _ := filepath.Glob("../../examples/*.json")
	files = append(files, json...)
	if err != nil || len(files) < 7 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for i, f := range files {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".hcl"), ".json")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			src = rewriteExample(t, name, src, i, dir)
			cfg := filepath.Join(dir, filepath.Base(f))
			writeFile(t, cfg, string(src))

			status, stdout, stderr := runNvmetd(t, dir, "--check", "--config", cfg)
			if status != 0 || !strings.Contains(stdout, "configuration OK") {
				t.Fatalf("--check: status %d\nstdout %s\nstderr %s", status, stdout, stderr)
			}
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				// nvmetcli.json keeps nvmetcli's own example names
				// (testnqn, hostnqn): accepted with a warning, as
				// Linux nvmet accepts them; nothing else may warn.
				if l != "" && !(name == "nvmetcli" && strings.Contains(l, `does not start with "nqn."`)) {
					t.Errorf("--check warns about a shipped example: %s", l)
				}
			}

			d := startDaemon(t, dir, "--config", cfg)
			d.waitFor("serving subsystem")
			if name != "verbs" {
				smokeIO(t, cfg, i)
			}
			if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			d.waitFor("shutting down")
			for range d.lines {
			}
			if err := d.cmd.Wait(); err != nil {
				t.Errorf("nvmetd exited with %v; log:\n%s", err, strings.Join(d.seen, "\n"))
			}
		})
	}
}

var (
	// HCL attributes and nvmetcli JSON keys.
	addressRE = regexp.MustCompile(`(?m)^(\s*(?:address\s*=|"traddr":)\s*)"([^"]*)"`)
	pathRE    = regexp.MustCompile(`(?m)^(\s*(?:path\s*=|"path":)\s*)"([^"]*)"`)
)

// rewriteExample rewrites an example's addresses and paths as
// TestExamples explains; example is its index, dir the test's directory.
func rewriteExample(t *testing.T, name string, src []byte, example int, dir string) []byte {
	t.Helper()
	verbsAddr := ""
	if name == "verbs" {
		verbsAddr = rdmaAddress(t)
	}
	port := 0
	src = addressRE.ReplaceAllFunc(src, func(m []byte) []byte {
		sub := addressRE.FindSubmatch(m)
		port++
		a := fmt.Sprintf("127.83.%d.%d", example+1, port)
		if verbsAddr != "" {
			a = verbsAddr
		}
		return []byte(string(sub[1]) + `"` + a + `"`)
	})
	return pathRE.ReplaceAllFunc(src, func(m []byte) []byte {
		sub := pathRE.FindSubmatch(m)
		p := string(sub[2])
		switch {
		case p == "/dev/nullb0":
			p = blockDevice(t, dir)
		case strings.HasPrefix(p, "/dev/"):
			// A disabled namespace's device, not opened; an enabled one
			// fails --check below.
		case filepath.IsAbs(p):
			p = filepath.Join(dir, p)
		}
		return []byte(string(sub[1]) + `"` + p + `"`)
	})
}

// blockDevice returns /dev/nullb0 when it exists, else a loop device over
// a 64 MiB file in dir (detached when the test ends); it skips the test
// when neither can be had.
func blockDevice(t *testing.T, dir string) string {
	t.Helper()
	if st, err := os.Stat("/dev/nullb0"); err == nil && st.Mode()&os.ModeDevice != 0 {
		return "/dev/nullb0"
	}
	if os.Geteuid() != 0 {
		t.Skip("block.hcl: no /dev/nullb0 (modprobe null_blk) and not root to make a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("block.hcl: no /dev/nullb0 (modprobe null_blk) and no losetup (util-linux) for a loop device")
	}
	img := filepath.Join(dir, "block.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("block.hcl: no /dev/nullb0 and losetup failed (no loop devices here?): %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v %s", dev, err, out)
		}
	})
	return dev
}

// rdmaAddress returns the IPv4 address of an rdma-core device's port, or
// skips the test saying why there is none.
func rdmaAddress(t *testing.T) string {
	t.Helper()
	if !ibverbs.Built {
		t.Skip("verbs.hcl: this test binary has no ibverbs provider: run go test -tags ibverbs (CGO_ENABLED=1, libibverbs-dev and librdmacm-dev) on a machine with an RDMA device or rxe")
	}
	devs, err := ibverbs.Devices()
	if err != nil {
		t.Skipf("verbs.hcl: no RDMA devices: %v", err)
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				if a := g.Addr(); a.Is4() && !a.IsLinkLocalUnicast() {
					return a.String()
				}
			}
		}
	}
	t.Skip("verbs.hcl: no RDMA device port with an IPv4 address (rdma link add rxe0 type rxe netdev IF makes one)")
	return ""
}

// smokeIO connects to the first subsystem of the configuration at cfg
// that has a namespace keeping data, as its first allowed host (with the
// host's DH-HMAC-CHAP keys, if any) from a soft device on 127.83.N.200,
// and writes and reads back a block of it.
func smokeIO(t *testing.T, cfg string, example int) {
	t.Helper()
	tree, err := configfs.LoadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sub *configfs.Subsystem
	var ns *configfs.Namespace
	for _, s := range tree.Subsystems {
		for _, n := range s.Namespaces {
			if n.Enable && n.Backend != configfs.BackendNull && len(tree.PortsOf(s.NQN)) > 0 {
				sub, ns = s, n
				break
			}
		}
		if sub != nil {
			break
		}
	}
	if sub == nil {
		t.Fatal("no subsystem with a namespace that keeps data")
	}
	p := tree.PortsOf(sub.NQN)[0]
	svc := p.Trsvcid
	if svc == "" {
		svc = configfs.DefaultTrsvcid
	}
	var sid uint16
	fmt.Sscan(svc, &sid)
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(p.Traddr), ServiceID: sid}
	opts := initiator.Options{SubsystemNQN: sub.NQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:83838383-0000-4000-8000-000000000001",
		CommandTimeout: 20 * time.Second, NrIOQueues: 1}
	if len(sub.AllowedHosts) > 0 {
		opts.HostNQN = sub.AllowedHosts[0]
	}
	for _, h := range tree.Hosts {
		if h.NQN == opts.HostNQN {
			opts.DHChapSecret, opts.DHChapCtrlSecret = string(h.DHCHAPKey), string(h.DHCHAPCtrlKey)
		}
	}
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(fmt.Sprintf("127.83.%d.200", example+1))})
	if err != nil {
		t.Fatalf("host soft device: %v", err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := initiator.Connect(ctx, nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev}), addr, opts)
	if err != nil {
		t.Fatalf("connect to %s at %v as %s: %v", sub.NQN, addr, opts.HostNQN, err)
	}
	defer c.Close()
	n, err := c.Namespace(ns.NSID)
	if err != nil {
		t.Fatalf("namespace %d: %v", ns.NSID, err)
	}
	bs := n.BlockSize()
	want := bytes.Repeat([]byte(fmt.Sprintf("example %d block ", example)), bs)[:bs]
	off := int64(n.Blocks()-1) * int64(bs) // the last block: not where a file system would start
	if _, err := n.WriteAt(want, off); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, bs)
	if _, err := n.ReadAt(got, off); err != nil {
		t.Fatalf("read: %v", err)
	}
	if ns.DevicePath != "/dev/nullb0" && !bytes.Equal(got, want) { // null_blk drops writes
		t.Fatalf("read back differs from what was written")
	}
}
