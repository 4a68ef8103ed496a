package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nvmeof/nvmeof/bench/report"
)

// NvmeofConfig is the nvmeof side: fio with our external engine (fio/engine,
// built by scripts/build-fio-engine.sh; fio 3.33 loads it with
// ioengine=external:PATH) against nvmetd over the soft RoCEv2 provider on
// loopback.
//
// The runner:
//  1. picks a service ID (Port 0) and checks that UDP port 4791, the soft
//     RoCE devices' port, is free on Address and HostAddress (else, with
//     Fallback, moves both to a free pair of loopback addresses);
//  2. writes an nvmetd HCL config (NvmetdConfig: a soft-RoCE port on
//     Address:Port, one memory namespace of the benchmark's size, any host
//     allowed) and starts Nvmetd with NvmetdArgs ("{config}" replaced by
//     that file's path), unless Nvmetd is empty (a target is already
//     listening on Address:Port);
//  3. waits until nvmetd logs that it is listening on that port;
//  4. runs every job file exactly as for nbdkit, with
//     --ioengine=external:Engine followed by Options (each name=value,
//     "{address}", "{port}", "{nqn}" and "{host_address}" substituted),
//     prefill first, counting fio's and nvmetd's CPU time per job;
//  5. stops nvmetd by its PID: SIGTERM, then SIGKILL after Grace.
//
// The side runs as root only: nvmetd and fio go into a network namespace of
// their own (unshare --net), so that their soft RoCE devices on loopback
// meet no other device and their UDP counters count only them. The soft
// provider itself needs no privilege on loopback addresses (a raw socket,
// CAP_NET_RAW, only on others).
type NvmeofConfig struct {
	// Transport is the NVMe-oF transport of nvmetd's port and of the
	// engine: "rdma" (soft RoCE, the default) or "tcp" (NVMe/TCP; the
	// side then compares like with like against nbdkit over TCP).
	Transport string
	// Engine is the path of the fio external engine.
	Engine string
	// Options are the engine's options, name=value (or a bare fio flag
	// such as "thread"), after ioengine; see `fio --enghelp=PATH`.
	Options []string
	// Nvmetd is the target binary to start; empty: start none.
	Nvmetd string
	// NvmetdArgs are its arguments; "{config}" is replaced by the config path.
	NvmetdArgs []string
	// Address and Port are where the target listens (traddr, trsvcid);
	// Port 0 lets the runner pick a service ID for the nvmetd it starts
	// (4420 when it starts none). HostAddress is the initiator's soft RoCE
	// device (host_traddr). NQN is the subsystem served.
	Address     string
	HostAddress string
	Port        int
	NQN         string
	// Fallback lets the runner move a target it starts, and the
	// initiator, to another pair of loopback addresses (127.0.N.1 and
	// 127.0.N.2, N from 200) when UDP port 4791 stays taken on Address or
	// HostAddress: other soft RoCE devices (tests, another nvmetd) may
	// hold them. The report names the addresses used.
	Fallback bool
	// Ready bounds the wait for the target to listen (default 10 s), and
	// for UDP port 4791 to be free on both addresses.
	Ready time.Duration
	// Grace is how long nvmetd has to exit after SIGTERM (default 10 s).
	Grace time.Duration
	// Netns runs nvmetd in a network namespace of its own (unshare --net,
	// its loopback interface up) and fio on this side in the same one
	// (nsenter --net): no other soft RoCE device or test holds UDP 4791
	// there, and the namespace's UDP counters (/proc/PID/net/snmp) count
	// this side's datagrams alone. Needs a started nvmetd (Nvmetd set),
	// unshare, nsenter, sh and ip; the namespace ends with nvmetd.
	Netns bool
}

// Where the runner looks for the fio engine and nvmetd unless told
// otherwise (-nvmeof-engine or $NVMEOF_FIO_ENGINE; -nvmetd or
// $NVMEOF_NVMETD). scripts/bench.sh builds both there; out/ is not
// committed.
const (
	DefaultEngine = "out/fio-nvmeof.so"
	DefaultNvmetd = "out/nvmetd"
)

// RoCEPort is the UDP port of RoCEv2, which every soft RoCE device binds on
// its address.
const RoCEPort = 4791

// DefaultNvmeofConfig returns the defaults (see NvmeofConfig).
func DefaultNvmeofConfig() NvmeofConfig {
	engine, nvmetd := DefaultEngine, DefaultNvmetd
	if e := os.Getenv("NVMEOF_FIO_ENGINE"); e != "" {
		engine = e
	}
	if e := os.Getenv("NVMEOF_NVMETD"); e != "" {
		nvmetd = e
	}
	return NvmeofConfig{
		Engine: engine,
		// --thread: the engine is a Go shared library, and a Go runtime
		// does not survive fork (the engine implies it; say it anyway).
		Options: []string{"thread", "transport={transport}", "traddr={address}", "trsvcid={port}", "subnqn={nqn}",
			"host_traddr={host_address}", "nsid=1"},
		Transport:   "rdma",
		Nvmetd:      nvmetd,
		NvmetdArgs:  []string{"--config", "{config}"},
		Address:     "127.0.0.1",
		HostAddress: "127.0.0.2",
		Port:        0,
		NQN:         "nqn.2026-11.io.nvmeof:bench",
		Fallback:    true,
		Netns:       true,
	}
}

// Available reports whether the nvmeof side can run, and why not.
func (n NvmeofConfig) Available() (bool, string) {
	if n.Engine == "" {
		return false, "no fio engine configured (-nvmeof-engine)"
	}
	fi, err := os.Stat(n.Engine)
	if err != nil || fi.IsDir() {
		return false, fmt.Sprintf("fio engine %s is not built (scripts/build-fio-engine.sh %s; or -nvmeof-engine PATH, $NVMEOF_FIO_ENGINE)", n.Engine, n.Engine)
	}
	if n.Nvmetd != "" {
		if _, err := exec.LookPath(n.Nvmetd); err != nil {
			return false, fmt.Sprintf("nvmetd %s not found (go build -o %s ./cmd/nvmetd; or -nvmetd PATH, $NVMEOF_NVMETD)", n.Nvmetd, n.Nvmetd)
		}
	}
	if os.Geteuid() != 0 {
		return false, "not root: the runner puts nvmetd and fio in a network namespace of their own (unshare --net), which needs root; run as root"
	}
	return true, ""
}

// EngineArgs returns fio's engine options: ioengine=external:Engine (an
// absolute path), then Options with {address}, {port}, {nqn} and
// {host_address} substituted.
func (n NvmeofConfig) EngineArgs() []string {
	args := []string{"ioengine=external:" + absPath(n.Engine)}
	r := strings.NewReplacer("{address}", n.Address, "{port}", strconv.Itoa(n.Port), "{nqn}", n.NQN,
		"{host_address}", n.HostAddress, "{transport}", n.transport())
	for _, o := range n.Options {
		args = append(args, r.Replace(o))
	}
	return args
}

// transport is Transport, "rdma" when empty.
func (n NvmeofConfig) transport() string {
	if n.Transport == "" {
		return "rdma"
	}
	return n.Transport
}

// NvmetdConfig returns an nvmetd HCL configuration (the shape of
// docs/design.md §5) with one port on Address:Port (soft RoCE, or TCP)
// and one memory namespace of memSize, open to any host. Its log level is
// info: the runner waits for nvmetd's "listening" line.
func (n NvmeofConfig) NvmetdConfig(memSize string) string {
	provider := "\n  provider  = \"soft\""
	if n.transport() != "rdma" {
		provider = ""
	}
	return fmt.Sprintf(`# Generated by bench/runner for one benchmark run.
log_level = "info"

port "bench" {
  transport = %q%s
  address   = %q
  service   = %d
}

subsystem %q {
  ports          = ["bench"]
  allow_any_host = true
  serial         = "NVMEOFBENCH"
  model          = "nvmeof-bench"

  namespace "1" {
    backend    = "memory"
    size       = %q
    block_size = 512
  }
}
`, n.transport(), provider, n.Address, n.Port, n.NQN, hclSize(memSize))
}

// hclSize turns a size as nbdkit takes it ("1G") into the config's ("1GiB").
func hclSize(s string) string {
	if n := len(s); n > 0 && strings.ContainsRune("KMGT", rune(s[n-1])) {
		return s + "iB"
	}
	return s
}

// pickPort returns a service ID for a target the runner starts: one from
// the dynamic range 49152–65535, so that fio never reaches a target
// someone else left listening on the well-known 4420.
func pickPort() int { return 49152 + rand.IntN(65536-49152) }

// udpFree reports whether UDP port on addr can be bound now.
func udpFree(addr string, port int) error {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(port))))
	if err != nil {
		return err
	}
	return c.Close()
}

// waitUDPFree waits until RoCEPort is free on every address, or timeout.
func waitUDPFree(ctx context.Context, timeout time.Duration, addrs ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		var errs []error
		for _, a := range addrs {
			if err := udpFree(a, RoCEPort); err != nil {
				errs = append(errs, fmt.Errorf("UDP %s:%d is taken (another soft RoCE device on that address? ss -uanp | grep %d): %w",
					a, RoCEPort, RoCEPort, err))
			}
		}
		if len(errs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fallbackAddrs returns the first pair of loopback addresses 127.0.N.1 and
// 127.0.N.2 (N from 200 to 254) with UDP port 4791 free on both.
func fallbackAddrs() (target, host string, err error) {
	for n := 200; n <= 254; n++ {
		t, h := fmt.Sprintf("127.0.%d.1", n), fmt.Sprintf("127.0.%d.2", n)
		if udpFree(t, RoCEPort) == nil && udpFree(h, RoCEPort) == nil {
			return t, h, nil
		}
	}
	return "", "", fmt.Errorf("UDP port %d taken on every 127.0.N.1 and 127.0.N.2, N 200..254", RoCEPort)
}

// netnsTools returns why the nvmeof side cannot run in a network namespace
// of its own, or "".
func netnsTools() string {
	for _, t := range []string{"unshare", "nsenter", "sh", "ip"} {
		if _, err := exec.LookPath(t); err != nil {
			return t + " not found"
		}
	}
	return ""
}

// netnsPrefix runs a command in a new network namespace with its loopback
// interface up.
var netnsPrefix = []string{"unshare", "--net", "--", "sh", "-c", `ip link set lo up && exec "$@"`, "sh"}

// nsenterPrefix runs a command in the network namespace of process pid.
func nsenterPrefix(pid int) []string {
	return []string{"nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "--"}
}

// startNvmetd writes the config, starts nvmetd under ns (a command that
// puts it in a network namespace: netnsPrefix, nsenterPrefix; nil: the
// runner's), under perf stat when c counts system calls, and waits until
// it logs that it listens on n.Port. Its config, log and perf output are
// named nvmetd{tag}.*, so that several can run at once. The caller stops
// it.
func (c Config) startNvmetd(ctx context.Context, n NvmeofConfig, tag string, ns []string) (*Server, error) {
	cfgPath := filepath.Join(c.WorkDir, "nvmetd"+tag+".hcl")
	if err := os.WriteFile(cfgPath, []byte(n.NvmetdConfig(c.MemSize)), 0o644); err != nil {
		return nil, fmt.Errorf("nvmetd config: %w", err)
	}
	argv := []string{n.Nvmetd}
	for _, a := range n.NvmetdArgs {
		argv = append(argv, strings.ReplaceAll(a, "{config}", cfgPath))
	}
	w := serverWrap{Prefix: slices.Clone(ns)}
	if c.countSyscalls {
		w.PerfOut = filepath.Join(c.WorkDir, "perf-nvmetd"+tag+".csv")
		w.Prefix = append(append(w.Prefix, c.perfBin()), perfStatArgs(w.PerfOut, perfInterval)...)
		// perf does not pass its own death on: nvmetd gets SIGTERM when
		// perf, its parent, dies.
		w.Prefix = append(w.Prefix, "setpriv", "--pdeathsig", "TERM", "--")
	}
	srv, err := startServer("nvmetd", argv, filepath.Join(c.WorkDir, "nvmetd"+tag+".log"), w)
	if err != nil {
		return nil, err
	}
	srv.Grace = n.Grace
	if srv.Grace <= 0 {
		srv.Grace = 10 * time.Second
	}
	ready := n.Ready
	if ready <= 0 {
		ready = 10 * time.Second
	}
	// nvmetd logs `listening: port=bench ... address="trtype=rdma,
	// traddr=A,trsvcid=P"` (or the JSON equivalent) once its soft RoCE
	// device is bound and the CM listens on the service ID.
	t0 := time.Now()
	listening := func() bool { return srv.logHas("listening", "traddr="+n.Address+",", "trsvcid="+strconv.Itoa(n.Port)) }
	if err := srv.waitFor(ctx, ready, listening); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	c.logf("   nvmetd pid %d listening on %s %s:%d after %v (config %s)", srv.PID, n.transport(), n.Address, n.Port,
		time.Since(t0).Round(time.Millisecond), cfgPath)
	return srv, nil
}

// setupNvmeof prepares the nvmeof side: checks that it can run, picks its
// addresses and service ID, and starts nvmetd. It returns the side and a
// function that stops nvmetd, or the reason the side is skipped; an error
// only when the context is done.
func (c Config) setupNvmeof(ctx context.Context, r *report.Report) (s *side, stop func(), skip string, err error) {
	n := c.Nvmeof
	stop = func() {}
	if ok, why := n.Available(); !ok {
		return nil, stop, why, nil
	}
	if n.Netns && n.Nvmetd == "" {
		n.Netns = false
	}
	if n.Netns {
		if why := netnsTools(); why != "" {
			c.logf("   no network namespace of its own (%s): on the host's loopback", why)
			n.Netns = false
		}
	}
	if n.Port == 0 {
		n.Port = 4420
		if n.Nvmetd != "" {
			n.Port = pickPort()
		}
	}
	ready := n.Ready
	if ready <= 0 {
		ready = 10 * time.Second
	}
	addrs := []string{n.HostAddress}
	if n.Nvmetd != "" {
		addrs = append(addrs, n.Address)
	}
	wait := 3 * ready
	if n.Fallback && n.Nvmetd != "" {
		wait = time.Second
	}
	// A namespace of its own has nothing bound yet.
	if !n.Netns {
		if err := waitUDPFree(ctx, wait, addrs...); err != nil {
			if ctx.Err() != nil {
				return nil, stop, "", err
			}
			if !n.Fallback || n.Nvmetd == "" {
				return nil, stop, err.Error(), nil
			}
			t, h, ferr := fallbackAddrs()
			if ferr != nil {
				return nil, stop, errors.Join(err, ferr).Error(), nil
			}
			c.logf("   %v\n   so the target moves to %s and the initiator to %s", err, t, h)
			n.Address, n.HostAddress = t, h
		}
	}
	s = &side{name: report.SideNvmeof, engine: n.EngineArgs(), datagrams: true, dgramSrc: srcHostSNMP}
	target := fmt.Sprintf("%s %s:%d, subsystem %s, host %s", n.transport(), n.Address, n.Port, n.NQN, n.HostAddress)
	if n.Nvmetd != "" {
		var ns []string
		if n.Netns {
			ns = netnsPrefix
		}
		srv, err := c.startNvmetd(ctx, n, "", ns)
		if err != nil {
			if ctx.Err() != nil {
				return nil, stop, "", err
			}
			return nil, stop, "nvmetd did not start: " + err.Error(), nil
		}
		stop = c.stopper(srv)
		s.server = srv
		target = fmt.Sprintf("nvmetd %s, memory namespace %s, %s", n.Nvmetd, c.MemSize, target)
		if n.Netns {
			s.wrap = nsenterPrefix(srv.PID)
			s.netnsPIDs = []int{srv.PID}
			s.dgramSrc = srcNetnsSNMP
			target += ", in a network namespace of its own (fio joins it)"
		}
	} else {
		target = "an already-running target, " + target
	}
	r.NvmeofTarget = target
	c.logf("   target: %s", target)
	c.logf("   engine: %s", strings.Join(s.engine, " "))
	return s, stop, "", nil
}

// stopper returns a function that stops srv by its PID (SIGTERM, then
// SIGKILL after its Grace) and logs how it went.
func (c Config) stopper(srv *Server) func() {
	return func() {
		t0 := time.Now()
		serr := srv.Stop()
		how := "exited"
		if srv.Killed {
			how = fmt.Sprintf("did not exit within %v of SIGTERM: killed", srv.Grace)
		}
		c.logf("   %s pid %d %s (%v)", srv.Name, srv.PID, how, time.Since(t0).Round(time.Millisecond))
		if serr != nil {
			c.logf("   %v", serr)
		}
	}
}
