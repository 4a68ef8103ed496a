// Package runner runs the side-by-side benchmark: the UDP loopback ceilings,
// every fio job of examples/fio against `nbdkit memory` with fio's nbd
// engine, and the same jobs against nvmetd with our fio engine (the nvmeof
// side, see NvmeofConfig), over each topology of the run (loopback, or two
// network namespaces joined by a veth pair: see topology.go), then builds
// the report.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/bench/ceiling"
	"github.com/nvmeof/nvmeof/bench/fio"
	"github.com/nvmeof/nvmeof/bench/report"
)

// Modes set the default run time per job and the ceiling bounds.
const (
	ModeFull  = "full"  // 10 s per job
	ModeQuick = "quick" // 3 s per job
	ModeSmoke = "smoke" // 1 s per job, tiny ceilings: checks that everything runs
)

// Config is one benchmark run.
type Config struct {
	// Mode is ModeFull, ModeQuick or ModeSmoke; Runtime, when set,
	// overrides the mode's time per job.
	Mode    string
	Runtime time.Duration
	// JobsDir holds the *.fio job files; Only, when set, keeps the jobs
	// with these names (file names without .fio).
	JobsDir string
	Only    []string
	// MemSize is the memory backend's size on both sides ("1G").
	MemSize string
	// Prefill writes the whole device once before the jobs, so reads do
	// not hit never-written (sparse) memory.
	Prefill bool
	// Fio and Nbdkit are the binaries (default "fio", "nbdkit").
	Fio    string
	Nbdkit string
	// SkipCeilings and SkipNbdkit leave those parts out.
	SkipCeilings bool
	SkipNbdkit   bool
	// NbdkitUnix serves nbdkit on a Unix socket instead of TCP on
	// loopback (issue #12 defines the comparison over TCP, as RoCEv2 on
	// loopback also crosses the IP stack).
	NbdkitUnix bool
	// Nvmeof configures the nvmeof side (the hook).
	Nvmeof NvmeofConfig
	// Topologies are the network paths both sides run over, each with
	// its own servers (TopologyLoopback, TopologyVeth4, TopologyVeth6;
	// see topology.go); empty: DefaultTopologies(Mode).
	Topologies []string
	// Rounds is how many times every job runs on each side (default:
	// 3, smoke 1). Rounds interleave: round by round, job by job, one side
	// then the other, the side going first alternating by round, both
	// servers up all along; the report holds each figure's median.
	Rounds int
	// Syscalls counts system calls per I/O with perf (Perf: the binary,
	// default "perf"), fio and the servers run under `perf stat`; left out
	// with a note when perf does not work here.
	Syscalls bool
	Perf     string
	// Allocs runs the Go benchmarks of AllocBenchmarks with -benchmem
	// after the jobs (the "0 allocations per I/O" goal); GoDir is the
	// module's root to run them in (default: the working directory).
	Allocs bool
	GoDir  string
	// WorkDir holds sockets, logs and generated configs (default: a new
	// temporary directory, removed at the end).
	WorkDir string
	// Log receives progress lines (default: discarded).
	Log io.Writer

	// countSyscalls is set by Run once perf proved to work.
	countSyscalls bool
}

// rounds returns the rounds per job for c.
func (c Config) rounds() int {
	if c.Rounds > 0 {
		return c.Rounds
	}
	if c.Mode == ModeSmoke {
		return 1
	}
	return 3
}

func (c Config) perfBin() string {
	if c.Perf == "" {
		return "perf"
	}
	return c.Perf
}

// runtime returns the time per job for c.
func (c Config) runtime() time.Duration {
	if c.Runtime > 0 {
		return c.Runtime
	}
	switch c.Mode {
	case ModeQuick:
		return 3 * time.Second
	case ModeSmoke:
		return time.Second
	}
	return 10 * time.Second
}

// ceilingOptions bounds the ceilings by mode.
func (c Config) ceilingOptions() ceiling.Options {
	switch c.Mode {
	case ModeSmoke:
		return ceiling.Options{PingPongCount: 2000, Duration: 200 * time.Millisecond}
	case ModeQuick:
		return ceiling.Options{Duration: time.Second}
	}
	return ceiling.Options{PingPongCount: 100000, Duration: 3 * time.Second}
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// ErrMissingTools is returned (wrapped) by CheckTools.
var ErrMissingTools = errors.New("missing tools")

// CheckTools checks that fio and nbdkit (unless skipNbdkit) are installed.
// The error names the Debian packages to install.
func CheckTools(fioBin, nbdkitBin string, skipNbdkit bool) error {
	if fioBin == "" {
		fioBin = "fio"
	}
	if nbdkitBin == "" {
		nbdkitBin = "nbdkit"
	}
	var missing, pkgs []string
	if _, err := exec.LookPath(fioBin); err != nil {
		missing, pkgs = append(missing, fioBin), append(pkgs, "fio")
	}
	if !skipNbdkit {
		if _, err := exec.LookPath(nbdkitBin); err != nil {
			missing, pkgs = append(missing, nbdkitBin), append(pkgs, "nbdkit")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found; install with: apt-get install %s (or run scripts/bench.sh as root, which does)",
			ErrMissingTools, strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	return nil
}

// jobOrder is the order of the table: the list with the two-job
// variants after their one-job jobs, then the verify variants in the same
// order, then other job files in name order.
var jobOrder = []string{
	"randread-4k-qd1", "randread-4k-qd32", "randread-4k-qd32-2jobs", "randwrite-4k-qd32", "randrw70-4k-qd32",
	"seqread-128k-qd8", "seqread-128k-qd8-2jobs", "seqwrite-128k-qd8",
}

// JobFile is one fio job file.
type JobFile struct {
	Name string // file name without .fio
	Path string
}

// ListJobs returns dir's *.fio files in table order, keeping only the names
// in only when it is not empty.
func ListJobs(dir string, only []string) ([]JobFile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.fio"))
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	rank := func(name string) int {
		base := strings.TrimSuffix(name, "-verify")
		i := slices.Index(jobOrder, base)
		if i < 0 {
			return len(jobOrder) * 2
		}
		if base != name {
			i += len(jobOrder)
		}
		return i
	}
	var jobs []JobFile
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".fio")
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		jobs = append(jobs, JobFile{Name: name, Path: p})
	}
	slices.SortStableFunc(jobs, func(a, b JobFile) int {
		if ra, rb := rank(a.Name), rank(b.Name); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(jobs) == 0 {
		return nil, fmt.Errorf("jobs: no *.fio files in %s (only: %v)", dir, only)
	}
	for _, name := range only {
		if !slices.ContainsFunc(jobs, func(j JobFile) bool { return j.Name == name }) {
			return nil, fmt.Errorf("jobs: no %s.fio in %s", name, dir)
		}
	}
	return jobs, nil
}

// side is a target the jobs run against over one topology: engine options
// for fio, the server whose CPU time counts (nil when unknown), the command
// fio runs under (nsenter into a network namespace), and whether UDP
// datagrams count: those of the network namespaces of netnsPIDs (none: the
// runner's), Udp6 too with udp6, dgramSrc naming the source.
type side struct {
	name      string
	topology  string
	label     string // name, with the topology when there are several
	engine    []string
	server    *Server
	wrap      []string
	datagrams bool
	netnsPIDs []int
	udp6      bool
	dgramSrc  string
}

// Short names of the counts' sources, in each Metrics (the report says
// more).
const (
	srcPerf      = "perf stat -e " + SyscallEvent
	srcNetnsSNMP = "/proc/PID/net/snmp Udp, own network namespace"
	srcHostSNMP  = "/proc/net/snmp Udp, host-wide"
	srcVethSNMP  = "/proc/PID/net/snmp Udp + snmp6 Udp6, both namespaces of the veth pair"
)

// runJob runs one job file against s and returns its metrics; a failure is
// recorded in Metrics.Error. CPU counts the fio process's own time (all its
// threads: an external engine's work is not on fio's job thread) and the
// server's, sampled from /proc/PID/stat just before and after fio; system
// calls and datagrams are counted over the same run (see Config.Syscalls,
// side).
func (c Config) runJob(ctx context.Context, s *side, j JobFile, round int) *report.Metrics {
	rt := c.runtime()
	cmd := fio.Command{Fio: c.Fio, JobFile: absPath(j.Path), Engine: s.engine, Runtime: rt, TimeBased: true,
		Extra: []string{"group_reporting=0"}, Dir: c.WorkDir, Wrap: s.wrap}
	perfOut := ""
	if c.countSyscalls {
		perfOut = filepath.Join(c.WorkDir, fmt.Sprintf("perf-fio-%s-%s-%s-%d.csv", s.topology, s.name, j.Name, round))
		cmd.Wrap = append(append(append([]string(nil), s.wrap...), c.perfBin()), perfStatArgs(perfOut, 0)...)
		// fio gets SIGKILL when perf, its parent, dies (a timeout).
		cmd.Wrap = append(cmd.Wrap, "setpriv", "--pdeathsig", "KILL", "--")
	}
	cpu0, csw0 := -1.0, -1.0
	if s.server != nil {
		if v, err := s.server.CPUSeconds(); err == nil {
			cpu0 = v
		}
		if v, err := s.server.CtxSwitches(); err == nil {
			csw0 = v
		}
	}
	in0, out0, snmpErr := -1.0, -1.0, error(nil)
	if s.datagrams {
		in0, out0, snmpErr = udpCounts(s.netnsPIDs, s.udp6)
	}
	// Each job of a file is bounded by the run time, except a verify
	// job's read-back phase; leave generous room.
	jctx, cancel := context.WithTimeout(ctx, 4*rt+2*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := fio.Run(jctx, cmd)
	t1 := time.Now()
	server := -1.0
	if s.server != nil && cpu0 >= 0 {
		if v, err := s.server.CPUSeconds(); err == nil {
			server = v - cpu0
		}
	}
	counts := report.NoCounts
	if res.CtxSwitches >= 0 {
		counts.FioCtxSwitches = float64(res.CtxSwitches)
	}
	if s.server != nil && csw0 >= 0 {
		if v, err := s.server.CtxSwitches(); err == nil {
			counts.ServerCtxSwitches = v - csw0
		}
	}
	if s.datagrams && snmpErr == nil {
		if in1, out1, err := udpCounts(s.netnsPIDs, s.udp6); err == nil {
			counts.DatagramsIn, counts.DatagramsOut = in1-in0, out1-out0
			counts.DatagramSource = s.dgramSrc
		}
	}
	if perfOut != "" {
		counts.SyscallSource = srcPerf
		if b, err := os.ReadFile(perfOut); err == nil {
			if n, err := parsePerfTotal(b); err == nil {
				counts.FioSyscalls = n
			}
		}
		if s.server != nil {
			if n, err := s.server.Syscalls(t0, t1, 3*perfInterval+2*time.Second); err == nil {
				counts.ServerSyscalls = n
			} else {
				c.logf("   %s", err)
			}
		}
	}
	m := &report.Metrics{}
	if res.Output != nil {
		mm, ferr := report.FromFio(res.Output, res.CPU.Seconds(), server)
		if ferr == nil {
			m = &mm
		} else if err == nil {
			err = ferr
		}
	}
	m.SetCounts(counts)
	m.Command = cmd.String()
	name := j.Name
	if c.rounds() > 1 {
		name = fmt.Sprintf("%s #%d", j.Name, round+1)
	}
	if err != nil {
		m.Error = err.Error()
		c.logf("   %-29s %s: %v", name, s.label, err)
		return m
	}
	extra := ""
	if m.FioSyscallsPerIO >= 0 || m.ServerSyscallsPerIO >= 0 {
		extra += "  syscalls/IO " + perIO(m.FioSyscallsPerIO) + "+" + perIO(m.ServerSyscallsPerIO)
	}
	if m.DatagramsPerIO >= 0 {
		extra += "  dgrams/IO " + perIO(m.DatagramsPerIO)
	}
	extra += "  ctxsw/IO " + perIO(m.FioCtxSwitchesPerIO) + "+" + perIO(m.ServerCtxSwitchesPerIO)
	c.logf("   %-29s %s: %8.0f IOPS %8.1f MB/s  p50 %7.1f µs  p99 %8.1f µs  CPU %.1f µs/IO (fio %.1f + server %.1f)%s",
		name, s.label, m.IOPS, m.MBps, m.P50us, m.P99us, m.CPUusPerIO, m.FioCPUusPerIO, m.ServerCPUusPerIO, extra)
	return m
}

// perIO formats a count per I/O, "?" when not counted (negative).
func perIO(v float64) string {
	if v < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", v)
}

// absPath returns p as an absolute path (fio runs in the work directory), or
// p itself when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// prefill writes the whole device once with 1 MiB sequential writes.
func (c Config) prefill(ctx context.Context, s *side) error {
	if !c.Prefill {
		return nil
	}
	cmd := fio.Command{Fio: c.Fio, Engine: s.engine, Dir: c.WorkDir, Wrap: s.wrap,
		Extra: []string{"name=prefill", "rw=write", "bs=1m", "iodepth=8"}}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	res, err := fio.Run(pctx, cmd)
	if err != nil {
		return fmt.Errorf("prefill %s: %w", s.label, err)
	}
	var bytes int64
	for i := range res.Output.Jobs {
		bytes += res.Output.Jobs[i].Bytes()
	}
	c.logf("   prefill %s: %d MiB in %v (%.0f MB/s)", s.label, bytes>>20, res.Wall.Round(time.Millisecond),
		float64(bytes)/res.Wall.Seconds()/1e6)
	return nil
}

// Run runs the benchmark and returns the computed report.
func Run(ctx context.Context, c Config) (*report.Report, error) {
	if c.Mode == "" {
		c.Mode = ModeFull
	}
	if c.MemSize == "" {
		c.MemSize = "1G"
	}
	if err := CheckTools(c.Fio, c.Nbdkit, c.SkipNbdkit); err != nil {
		return nil, err
	}
	jobs, err := ListJobs(c.JobsDir, c.Only)
	if err != nil {
		return nil, err
	}
	if c.WorkDir == "" {
		dir, err := os.MkdirTemp("", "nvmeof-bench-")
		if err != nil {
			return nil, fmt.Errorf("work dir: %w", err)
		}
		defer os.RemoveAll(dir)
		c.WorkDir = dir
	} else {
		// fio runs there, and socket paths must hold from there too.
		c.WorkDir = absPath(c.WorkDir)
	}

	r := &report.Report{
		Started:   time.Now(),
		CPUs:      runtime.NumCPU(),
		Mode:      c.Mode,
		RuntimeS:  c.runtime().Seconds(),
		MemSize:   c.MemSize,
		LoadStart: loadAvg(),
	}
	r.Host, _ = os.Hostname()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	r.Fio, _ = fio.Version(ctx, c.Fio)
	if !c.SkipNbdkit {
		r.Nbdkit = nbdkitVersion(ctx, c.Nbdkit)
	}
	topos := c.Topologies
	if len(topos) == 0 {
		topos = DefaultTopologies(c.Mode)
	}
	for _, t := range topos {
		if !slices.Contains(AllTopologies, t) {
			return nil, fmt.Errorf("bench: topology %q: want one of %s", t, strings.Join(AllTopologies, ", "))
		}
	}
	c.Topologies = topos

	r.Rounds = c.rounds()
	if c.Syscalls {
		if err := CheckPerf(ctx, c.Perf); err != nil {
			r.SyscallSource = "not counted: " + err.Error()
			c.logf("== system calls not counted: %v", err)
		} else {
			c.countSyscalls = true
			r.SyscallSource = fmt.Sprintf("from perf stat -e %s: fio (all threads) run under perf; the servers run under perf stat -I %d, cut to the fio run (±%d ms)",
				SyscallEvent, perfInterval.Milliseconds(), perfInterval.Milliseconds())
		}
	} else {
		r.SyscallSource = "not counted (-syscalls=false)"
	}

	if !c.SkipCeilings {
		c.logf("== ceilings: UDP on loopback, %s <-> %s", ceiling.AddrA, ceiling.AddrB)
		res, err := ceiling.Measure(ctx, c.ceilingOptions())
		if err != nil {
			return nil, err
		}
		r.Ceilings = res
		c.logf("   ping-pong p50 %v p99 %v; 4 KiB sendmmsg %.0f/s %.2f GB/s; GSO+GRO %.2f GB/s",
			res.PingPong.Median, res.PingPong.P99, res.Datagram.PerSecond, res.Datagram.GBps, res.GSO.GBps)
		for _, e := range []string{res.PingPongError, res.DatagramError, res.GSOError} {
			if e != "" {
				c.logf("   %s", e)
			}
		}
	}

	// The servers stop before the Go benchmarks run.
	if err := c.runServers(ctx, jobs, r); err != nil {
		return nil, err
	}
	if c.Allocs {
		c.runAllocs(ctx, r)
	}
	r.LoadEnd = loadAvg()
	r.Compute()
	return r, nil
}

// runServers sets up each topology in turn (its link and servers; one
// that cannot be set up is skipped, why in the report), prefills every
// side, runs the rounds into r and stops everything it started.
func (c Config) runServers(ctx context.Context, jobs []JobFile, r *report.Report) error {
	// All servers stay up for the whole run, so that the jobs can
	// interleave.
	var sides []*side
	var ran []string
	var link *vethLink
	var linkErr error
	defer func() {
		if link != nil {
			link.close(c)
		}
	}()
	for _, topo := range c.Topologies {
		var (
			ss   []*side
			stop func()
			info report.Topology
			err  error
		)
		if topo == TopologyLoopback {
			ss, stop, info, err = c.setupLoopback(ctx, r)
		} else {
			// veth4 and veth6 share the link, made once.
			if link == nil && linkErr == nil {
				link, linkErr = c.newVethLink(ctx)
				if linkErr != nil && ctx.Err() != nil {
					return linkErr
				}
			}
			if linkErr != nil {
				c.logf("== %s: not run: %v", topo, linkErr)
				r.Topologies = append(r.Topologies, report.Topology{Name: topo, Link: vethDescription(topo), Skipped: linkErr.Error()})
				continue
			}
			ss, stop, info, err = c.setupVeth(ctx, topo, link)
		}
		// Deferred in the loop: everything stops at the end of the run,
		// the servers before the link.
		defer stop()
		if err != nil {
			return err
		}
		r.Topologies = append(r.Topologies, info)
		if info.Skipped != "" {
			c.logf("   %s: not run: %s", topo, info.Skipped)
			continue
		}
		sides = append(sides, ss...)
		ran = append(ran, topo)
	}
	labelSides(sides, len(c.Topologies) > 1)
	r.Jobs = topologyJobs(jobs, ran)
	return c.runRounds(ctx, sides, jobs, r)
}

// labelSides names each side for the log: its name, with its topology
// ("nvmeof@veth4") when the run has several.
func labelSides(sides []*side, several bool) {
	for _, s := range sides {
		s.label = s.name
		if several {
			s.label = s.name + "@" + s.topology
		}
	}
}

// topologyJobs returns the report's jobs: one per job file and topology
// that ran, job by job (a job's topologies next to each other in the
// table).
func topologyJobs(jobs []JobFile, topologies []string) []report.Job {
	var out []report.Job
	for _, j := range jobs {
		for _, t := range topologies {
			out = append(out, report.Job{Name: j.Name, File: j.Path, Topology: t})
		}
	}
	return out
}

// setupLoopback starts the loopback topology's servers: nbdkit on the
// host's loopback, the nvmeof side in a network namespace of its own (see
// NvmeofConfig), and prefills both. It returns the sides, a function that
// stops the servers, and the topology's description; an error only when
// the context is done or nbdkit fails.
func (c Config) setupLoopback(ctx context.Context, r *report.Report) ([]*side, func(), report.Topology, error) {
	info := report.Topology{Name: TopologyLoopback, Link: "the host's loopback (lo)"}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	var sides []*side
	if !c.SkipNbdkit {
		how := "TCP on loopback"
		if c.NbdkitUnix {
			how = "Unix socket"
		}
		c.logf("== loopback: nbdkit memory %s, fio nbd engine over %s", c.MemSize, how)
		var w serverWrap
		if c.countSyscalls {
			w.PerfOut = filepath.Join(c.WorkDir, "perf-nbdkit.csv")
			w.Prefix = append([]string{c.perfBin()}, perfStatArgs(w.PerfOut, perfInterval)...)
		}
		nbd, err := StartNbdkit(ctx, c.Nbdkit, c.WorkDir, c.MemSize, c.NbdkitUnix, w)
		if err != nil {
			return nil, stop, info, err
		}
		stops = append(stops, c.stopper(nbd.Server))
		info.NbdkitTarget = fmt.Sprintf("nbdkit memory %s (pid %d), %s", c.MemSize, nbd.PID, nbd.URI())
		s := &side{name: report.SideNbdkit, topology: TopologyLoopback, label: report.SideNbdkit, engine: nbd.Engine(), server: nbd.Server}
		if err := c.prefill(ctx, s); err != nil {
			return nil, stop, info, err
		}
		sides = append(sides, s)
	}

	c.logf("== loopback: nvmeof: nvmetd memory %s, fio engine %s", c.MemSize, c.Nvmeof.Engine)
	nv, nstop, skip, err := c.setupNvmeof(ctx, r)
	stops = append(stops, nstop)
	if err != nil {
		return nil, stop, info, err
	}
	if skip == "" {
		nv.topology, nv.label = TopologyLoopback, nv.name
		if err := c.prefill(ctx, nv); err != nil {
			if ctx.Err() != nil {
				return nil, stop, info, err
			}
			skip = "nvmeof: " + err.Error()
		}
	}
	if skip != "" {
		r.NvmeofSkipped = skip
		c.logf("   skipped: %s", skip)
	} else {
		sides = append(sides, nv)
		if len(nv.netnsPIDs) > 0 {
			info.Link = "loopback (lo): nbdkit on the host's; nvmetd and its fio on that of a network namespace of their own"
		}
		r.DatagramSource = "not counted"
		if len(nv.netnsPIDs) > 0 {
			r.DatagramSource = "from the Udp OutDatagrams counter of the nvmeof side's own network namespace " +
				"(/proc/PID/net/snmp; nvmetd and fio alone in it; a GSO send of several packets counts once)"
		} else {
			r.DatagramSource = "from the Udp OutDatagrams counter of /proc/net/snmp, host-wide: " +
				"other loopback traffic on the machine counts too (a GSO send of several packets counts once)"
		}
	}
	info.NvmeofTarget, info.NvmeofSkipped, info.DatagramSource = r.NvmeofTarget, r.NvmeofSkipped, r.DatagramSource
	return sides, stop, info, nil
}

// runRounds runs every job on every side, c.rounds() times, interleaved:
// round by round, job by job, the sides one after the other (each
// topology's nbdkit and nvmeof, topology by topology), their order
// reversed every other round. r.Jobs holds a job per job file and
// topology. Only a canceled context stops it early;
// once a server has exited, its side's remaining jobs are recorded as failed
// without running fio.
func (c Config) runRounds(ctx context.Context, sides []*side, jobs []JobFile, r *report.Report) error {
	n := c.rounds()
	c.logf("== jobs: %d rounds of %d jobs on %d sides, %v per job", n, len(jobs), len(sides), c.runtime())
	index := make(map[[2]string]int, len(r.Jobs))
	for i, j := range r.Jobs {
		index[[2]string{j.TopologyOf(), j.Name}] = i
	}
	for round := range n {
		order := slices.Clone(sides)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, j := range jobs {
			for _, s := range order {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				var m *report.Metrics
				if s.server != nil && s.server.exited() {
					msg := fmt.Sprintf("%s (pid %d) exited during the run: %v%s", s.server.Name, s.server.PID, s.server.err, s.server.logTail())
					c.logf("   %-29s %s: %s", j.Name, s.label, msg)
					m = &report.Metrics{Error: msg}
					m.SetCounts(report.NoCounts)
				} else {
					m = c.runJob(ctx, s, j, round)
				}
				i, found := index[[2]string{s.topology, j.Name}]
				if !found {
					return fmt.Errorf("bench: no row for job %s over %s", j.Name, s.topology)
				}
				job := &r.Jobs[i]
				if s.name == report.SideNbdkit {
					job.NbdkitRounds = append(job.NbdkitRounds, m)
				} else {
					job.NvmeofRounds = append(job.NvmeofRounds, m)
				}
			}
		}
	}
	// Interrupted during the last job: that job's failure is the
	// interrupt's, not a result.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var v float64
	if _, err := fmt.Sscan(string(b), &v); err != nil {
		return -1
	}
	return v
}

func nbdkitVersion(ctx context.Context, bin string) string {
	if bin == "" {
		bin = "nbdkit"
	}
	b, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "nbdkit "))
}
