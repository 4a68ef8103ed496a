// Command nvmeof-bench measures, in one run, the UDP ceilings on loopback,
// fio through nbdkit's memory plugin, and fio through our NVMe-oF engine
// against nvmetd (when that engine is built), over one or more topologies
// (loopback; veth4 and veth6: two network namespaces joined by a veth
// pair), in interleaved rounds, and prints one table with the medians and
// ratios (against nbdkit over the same topology), CPU, system calls and
// datagrams per I/O, and the goals judged against nbdkit; writes it as JSON
// and draws it as a PNG chart. Exit status: 0, or 1 when a job failed, 3
// when fio or nbdkit is missing, 4 with -strict when a goal was missed.
//
//	go run ./bench/cmd/nvmeof-bench            # 10 s per job, all topologies
//	go run ./bench/cmd/nvmeof-bench -quick     # 3 s per job, loopback
//	go run ./bench/cmd/nvmeof-bench -smoke     # 1 s per job, loopback: does it all run?
//	go run ./bench/cmd/nvmeof-bench -smoke -topology veth4,veth6
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nvmeof/nvmeof/bench/report"
	"github.com/nvmeof/nvmeof/bench/runner"
)

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// repeatFlag collects a repeatable flag, one value per use (values may hold
// commas).
type repeatFlag []string

func (l *repeatFlag) String() string { return strings.Join(*l, " ") }

func (l *repeatFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

func main() {
	os.Exit(run())
}

func run() int {
	def := runner.DefaultNvmeofConfig()
	var (
		quick     = flag.Bool("quick", false, "3 s per job instead of 10 s")
		smoke     = flag.Bool("smoke", false, "1 s per job and tiny ceilings: check that everything runs")
		rt        = flag.Duration("runtime", 0, "time per fio job (overrides -quick/-smoke)")
		jobsDir   = flag.String("jobs", "examples/fio", "directory of fio job files")
		mem       = flag.String("mem", "1G", "memory backend size on both sides")
		prefill   = flag.Bool("prefill", true, "write the whole device once before the jobs")
		jsonPath  = flag.String("json", "bench-results.json", "where to write the JSON results (a PNG chart and its figures as CSV go beside it)")
		outDir    = flag.String("out", "bench-out", "directory for dated copies of the JSON and PNG (empty: none)")
		fioBin    = flag.String("fio", "fio", "fio binary")
		nbdkitBin = flag.String("nbdkit", "nbdkit", "nbdkit binary")
		noCeil    = flag.Bool("skip-ceilings", false, "do not measure the UDP ceilings")
		noNbdkit  = flag.Bool("skip-nbdkit", false, "do not run the nbdkit side")
		nbdUnix   = flag.Bool("nbdkit-unix", false, "serve nbdkit on a Unix socket instead of TCP on loopback (the goals are defined over TCP)")
		engine    = flag.String("nvmeof-engine", def.Engine, "nvmeof side: fio external engine .so, built by scripts/build-fio-engine.sh (or $NVMEOF_FIO_ENGINE); the side is skipped while it does not exist")
		nvmetd    = flag.String("nvmetd", def.Nvmetd, "nvmeof side: nvmetd binary to start with a generated memory-namespace config (or $NVMEOF_NVMETD; empty: a target is already listening on -nvmeof-addr and -nvmeof-port)")
		addr      = flag.String("nvmeof-addr", def.Address, "nvmeof side: target address (traddr); unless given, the runner moves to 127.0.N.1 and .2 when UDP 4791 is taken on the defaults")
		hostAddr  = flag.String("nvmeof-host-addr", def.HostAddress, "nvmeof side: the initiator's soft RoCE device address (host_traddr)")
		port      = flag.Int("nvmeof-port", def.Port, "nvmeof side: target service id (trsvcid); 0: a free one from 49152-65535 for the nvmetd started, 4420 otherwise")
		nqn       = flag.String("nvmeof-nqn", def.NQN, "nvmeof side: subsystem NQN")
		transport = flag.String("nvmeof-transport", def.Transport, "nvmeof side: transport of nvmetd's port and the engine, rdma (soft RoCE) or tcp (NVMe/TCP, against nbdkit's TCP like for like)")
		netns     = flag.Bool("nvmeof-netns", def.Netns, "nvmeof side: run nvmetd and its fio in a network namespace of their own (needs a started nvmetd; its UDP counters then count this side alone)")
		rounds    = flag.Int("rounds", 0, "rounds per job, interleaved between the sides; figures are medians (default 3, -smoke 1)")
		syscalls  = flag.Bool("syscalls", true, "count system calls per I/O with perf stat (fio and the servers run under perf; left out if perf does not work)")
		perfBin   = flag.String("perf", "perf", "perf binary")
		allocs    = flag.Bool("allocs", true, "run the Go benchmarks of the I/O path with -benchmem after the jobs, for allocations per I/O (not with -smoke)")
		topology  = flag.String("topology", "", "topologies to run over, comma-separated: loopback, veth4, veth6, or all (default: all for a full run, about an hour; loopback with -quick or -smoke); veth4 and veth6 need root")
		strict    = flag.Bool("strict", false, "exit with status 4 when a goal is missed (without it, missed goals are reported and the exit status is 0)")
		only      listFlag
		engOpts   repeatFlag
		nvmetdArg repeatFlag
	)
	flag.Var(&only, "only", "run only these jobs (names without .fio; repeat or comma-separate)")
	flag.Var(&engOpts, "nvmeof-opt", "nvmeof side: engine option name=value, once per option; {address} {port} {nqn} {host_address} are substituted (default "+strings.Join(def.Options, " ")+")")
	flag.Var(&nvmetdArg, "nvmetd-arg", "nvmeof side: nvmetd argument, once per argument; {config} is the generated config (default "+strings.Join(def.NvmetdArgs, " ")+")")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: nvmeof-bench [flags]

Measures in one run: UDP ceilings on loopback (64 B ping-pong RTT, 4 KiB
datagrams with sendmmsg, UDP GSO+GRO), every fio job in -jobs against
'nbdkit memory' with fio's nbd engine (over TCP), and the same jobs against
nvmetd through our fio engine (out/fio-nvmeof.so) with nvmetd (out/nvmetd),
which the runner starts with a generated config and stops. It does so over
each -topology, each with its own servers:
  loopback  the host's lo (the nvmeof side in a network namespace of its own)
  veth4     two network namespaces the runner creates, joined by a veth pair
            (MTU 9000): nbdkit and nvmetd on 192.0.2.1 in one, fio from
            192.0.2.2 in the other (soft RoCE in raw mode)
  veth6     the same over IPv6, 2001:db8::1 and 2001:db8::2 (udp6 mode)
The runner removes the namespaces and the veth pair at the end, on failure
and on interrupt too. Jobs run in -rounds interleaved rounds; the table holds
medians, each row labelled with its topology: IOPS, MB/s, latency, CPU µs
per I/O (fio + server), system calls per I/O (perf stat), UDP datagrams per
I/O (nvmeof: both ends), the ratios nvmeof/nbdkit over the same topology and
the goals, judged against nbdkit over the same topology in the same run (not
on -smoke runs). Writes -json and a PNG chart beside it. Exit status 0
unless a job failed (1), fio or nbdkit is missing (3), or -strict and a goal
was missed (4). Needs fio and nbdkit (apt-get install fio nbdkit); the
nvmeof side and the veth topologies need root (network namespaces; raw
sockets for IPv4 off loopback). scripts/bench.sh builds the engine and
nvmetd, then runs this.

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nvmeof-bench: unexpected arguments %q\n", flag.Args())
		return 2
	}

	cfg := runner.Config{
		Mode:         runner.ModeFull,
		Runtime:      *rt,
		JobsDir:      *jobsDir,
		Only:         only,
		MemSize:      *mem,
		Prefill:      *prefill,
		Fio:          *fioBin,
		Nbdkit:       *nbdkitBin,
		SkipCeilings: *noCeil,
		SkipNbdkit:   *noNbdkit,
		NbdkitUnix:   *nbdUnix,
		Rounds:       *rounds,
		Syscalls:     *syscalls,
		Perf:         *perfBin,
		Allocs:       *allocs && !*smoke,
		Log:          os.Stderr,
	}
	switch {
	case *smoke:
		cfg.Mode = runner.ModeSmoke
	case *quick:
		cfg.Mode = runner.ModeQuick
	}
	if *topology != "" {
		t, err := runner.ParseTopologies(*topology)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nvmeof-bench: -topology: %v\n", err)
			return 2
		}
		cfg.Topologies = t
	}
	cfg.Nvmeof = def
	cfg.Nvmeof.Engine, cfg.Nvmeof.Nvmetd = *engine, *nvmetd
	cfg.Nvmeof.Address, cfg.Nvmeof.HostAddress, cfg.Nvmeof.Port, cfg.Nvmeof.NQN = *addr, *hostAddr, *port, *nqn
	switch *transport {
	case "rdma", "tcp":
		cfg.Nvmeof.Transport = *transport
	default:
		fmt.Fprintf(os.Stderr, "nvmeof-bench: -nvmeof-transport %q: want rdma or tcp\n", *transport)
		os.Exit(2)
	}
	cfg.Nvmeof.Netns = *netns
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "nvmeof-addr" || f.Name == "nvmeof-host-addr" {
			cfg.Nvmeof.Fallback = false
		}
	})
	if len(engOpts) > 0 {
		cfg.Nvmeof.Options = engOpts
	}
	if len(nvmetdArg) > 0 {
		cfg.Nvmeof.NvmetdArgs = nvmetdArg
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := runner.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvmeof-bench: %v\n", err)
		if errors.Is(err, runner.ErrMissingTools) {
			return 3
		}
		return 1
	}
	fmt.Println()
	if err := r.WriteTable(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nvmeof-bench: %v\n", err)
		return 1
	}
	paths, err := runner.WriteResults(r, *jsonPath, *outDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvmeof-bench: %v\n", err)
		return 1
	}
	fmt.Printf("\nwrote %s\n", strings.Join(paths, ", "))
	fmt.Printf("\n%s\n", r.GoalsLine(*strict))
	failed := 0
	for _, j := range r.Jobs {
		if (j.Nbdkit != nil && j.Nbdkit.Error != "") || (j.Nvmeof != nil && j.Nvmeof.Error != "") {
			fmt.Fprintf(os.Stderr, "nvmeof-bench: job %s failed on a side (see the table and %s)\n", j.Name, filepath.Base(*jsonPath))
			failed++
		}
	}
	switch {
	case failed > 0:
		return 1
	case *strict && r.GoalsMissed > 0:
		return report.ExitGoalsMissed
	}
	return 0
}
