// Package report turns fio runs and loopback ceilings into the benchmark's
// results: per-job metrics for each side (nbdkit, nvmeof), the ratios
// nvmeof/nbdkit and side/ceiling, the project's goals, an aligned text table,
// JSON and a PNG chart.
package report

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nvmeof/nvmeof/bench/ceiling"
	"github.com/nvmeof/nvmeof/bench/chart"
	"github.com/nvmeof/nvmeof/bench/fio"
)

// The two sides compared.
const (
	SideNbdkit = "nbdkit"
	SideNvmeof = "nvmeof"
)

// PrepPrefix marks jobs in a job file that only prepare data (the verify
// variants write the blocks their read job checks): they count towards CPU
// per GB but not towards IOPS, MB/s or latency.
const PrepPrefix = "prep-"

// Metrics is one job file run on one side: one round, or the median of
// several (Rounds > 1).
type Metrics struct {
	// RW, BlockSize and IODepth describe the measured job, from fio's
	// options; Jobs is how many measured fio jobs ran at once (numjobs:
	// each its own connection on both sides).
	RW        string `json:"rw"`
	BlockSize int64  `json:"block_size"`
	IODepth   int    `json:"iodepth"`
	Jobs      int    `json:"jobs"`
	// IOPS and MBps (1e6 bytes/s) are the measured jobs' I/Os and bytes, all
	// directions together, per second: each job's over its own run time,
	// summed over jobs that ran at once.
	IOPS float64 `json:"iops"`
	MBps float64 `json:"mb_per_s"`
	// P50us and P99us are total latency (fio's lat: from the I/O's
	// preparation to its completion, the submission included) percentiles
	// in microseconds of LatencyOf ("read", or "write" for write-only
	// jobs), of the measured job with the most I/Os. Completion latency
	// (clat) alone does not compare engines: fio's nbd engine sends its
	// request before fio stamps the issue time, ours after. ClatP50us is
	// the clat median, kept for comparison with earlier runs; P50us falls
	// back to it when fio reported no total latency percentiles.
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	ClatP50us float64 `json:"clat_p50_us,omitempty"`
	LatencyOf string  `json:"latency_of"`
	// Bytes and IOs are the measured jobs' data and I/Os; RuntimeS is the
	// longest measured job's run time.
	Bytes    int64   `json:"bytes"`
	IOs      int64   `json:"ios"`
	RuntimeS float64 `json:"runtime_s"`
	// CPU, in user+system seconds, over the whole fio run of the file
	// (prep jobs too). FioCPUs is the fio process's own, from wait4: all
	// its threads, an external engine's included (the client side).
	// FioJobCPUs is the sum of fio's per-job usr_cpu and sys_cpu, kept for
	// reference only: under --thread it counts each job's thread and leaves
	// out an engine's own threads (our Go engine's), so it understates a
	// client that does its work off the job thread. ServerCPUs is the
	// server's (nbdkit, nvmetd: all threads, from /proc/PID/stat), or -1
	// when it could not be read. AllBytes and AllIOs are what all jobs
	// moved, prep jobs too.
	// FioCPUsPerGB and ServerCPUsPerGB are each side per 1e9 bytes of
	// AllBytes (ServerCPUsPerGB is 0 when not measured); CPUsPerGB is their
	// sum, or 0 when not measurable. The *CPUusPerIO fields are the same
	// in microseconds per I/O of AllIOs.
	FioCPUs          float64 `json:"fio_cpu_s"`
	FioJobCPUs       float64 `json:"fio_job_cpu_s"`
	ServerCPUs       float64 `json:"server_cpu_s"`
	AllBytes         int64   `json:"all_bytes"`
	AllIOs           int64   `json:"all_ios"`
	FioCPUsPerGB     float64 `json:"fio_cpu_s_per_gb"`
	ServerCPUsPerGB  float64 `json:"server_cpu_s_per_gb"`
	CPUsPerGB        float64 `json:"cpu_s_per_gb"`
	FioCPUusPerIO    float64 `json:"fio_cpu_us_per_io"`
	ServerCPUusPerIO float64 `json:"server_cpu_us_per_io"`
	CPUusPerIO       float64 `json:"cpu_us_per_io"`
	// Counts are the system calls and datagrams counted around the fio
	// run (Counts says where from), and the same per I/O of AllIOs:
	// -1 where not counted.
	Counts
	FioSyscallsPerIO    float64 `json:"fio_syscalls_per_io"`
	ServerSyscallsPerIO float64 `json:"server_syscalls_per_io"`
	DatagramsPerIO      float64 `json:"datagrams_per_io"`
	// Context switches per I/O, fio and server.
	FioCtxSwitchesPerIO    float64 `json:"fio_ctx_switches_per_io"`
	ServerCtxSwitchesPerIO float64 `json:"server_ctx_switches_per_io"`
	// Rounds is how many rounds these figures are the median of (0 or 1:
	// a single run).
	Rounds int `json:"rounds,omitempty"`
	// Command is the fio command line; Error is set when fio failed.
	Command string `json:"command,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Counts are what the runner counted around one fio run besides fio's own
// report. A count of -1 was not taken.
type Counts struct {
	// FioSyscalls and ServerSyscalls are the system calls the fio process
	// (all threads) and the server (all threads) entered during the run;
	// SyscallSource says how they were counted.
	FioSyscalls    float64 `json:"fio_syscalls"`
	ServerSyscalls float64 `json:"server_syscalls"`
	SyscallSource  string  `json:"syscall_source,omitempty"`
	// DatagramsOut and DatagramsIn are UDP datagrams sent and received
	// (both ends together: the initiator's and the target's soft RoCE
	// devices) during the run; DatagramSource says how they were counted.
	DatagramsOut   float64 `json:"udp_datagrams_out"`
	DatagramsIn    float64 `json:"udp_datagrams_in"`
	DatagramSource string  `json:"datagram_source,omitempty"`
	// FioCtxSwitches and ServerCtxSwitches are the context switches
	// (voluntary and involuntary) of the fio process (all threads, from
	// wait4) and of the server (its threads' /proc/PID/task/TID/status)
	// during the run: counted without perf, and shown instead of the
	// system calls when those were not counted.
	FioCtxSwitches    float64 `json:"fio_ctx_switches"`
	ServerCtxSwitches float64 `json:"server_ctx_switches"`
}

// NoCounts is Counts with nothing counted.
var NoCounts = Counts{FioSyscalls: -1, ServerSyscalls: -1, DatagramsOut: -1, DatagramsIn: -1, FioCtxSwitches: -1, ServerCtxSwitches: -1}

// SetCounts stores c and computes the per-I/O figures from it.
func (m *Metrics) SetCounts(c Counts) {
	m.Counts = c
	per := func(v float64) float64 {
		if v < 0 || m.AllIOs <= 0 {
			return -1
		}
		return v / float64(m.AllIOs)
	}
	m.FioSyscallsPerIO = per(c.FioSyscalls)
	m.ServerSyscallsPerIO = per(c.ServerSyscalls)
	m.DatagramsPerIO = per(c.DatagramsOut)
	m.FioCtxSwitchesPerIO = per(c.FioCtxSwitches)
	m.ServerCtxSwitchesPerIO = per(c.ServerCtxSwitches)
}

// FromFio computes a side's metrics from fio's report of one job file.
// fioCPU is the fio process's CPU seconds over the run (fio.Result.CPU), or
// negative when unknown (fio's per-job figures stand in for it then);
// serverCPU is the server's CPU seconds over the fio run, or negative when
// unknown (CPU per GB then counts fio alone and is still reported). Nothing
// is counted yet (NoCounts): see SetCounts.
func FromFio(out *fio.Output, fioCPU, serverCPU float64) (Metrics, error) {
	m := Metrics{ServerCPUs: serverCPU}
	m.SetCounts(NoCounts)
	var main *fio.Job
	var runtimeMS int64
	for i := range out.Jobs {
		j := &out.Jobs[i]
		n := j.Read.TotalIOs + j.Write.TotalIOs + j.Trim.TotalIOs
		m.FioJobCPUs += j.CPUSeconds()
		m.AllBytes += j.Bytes()
		m.AllIOs += n
		if strings.HasPrefix(j.Name, PrepPrefix) {
			continue
		}
		if main == nil || n > main.Read.TotalIOs+main.Write.TotalIOs+main.Trim.TotalIOs {
			main = j
		}
		m.Jobs++
		m.IOs += n
		m.Bytes += j.Bytes()
		runtimeMS = max(runtimeMS, j.RuntimeMS)
		// The measured jobs of a file run at once (numjobs, or
		// several sections without stonewall): rates add up.
		if j.RuntimeMS > 0 {
			m.IOPS += float64(n) / (float64(j.RuntimeMS) / 1000)
			m.MBps += float64(j.Bytes()) / (float64(j.RuntimeMS) / 1000) / 1e6
		}
	}
	if main == nil {
		return m, fmt.Errorf("report: fio report has no measured job (only %s* jobs or none)", PrepPrefix)
	}
	if runtimeMS <= 0 {
		return m, fmt.Errorf("report: job %s ran for 0 ms", main.Name)
	}
	m.RuntimeS = float64(runtimeMS) / 1000

	m.RW, _ = out.Option(main, "rw")
	if bs, ok := out.Option(main, "bs"); ok {
		if v, err := fio.ParseSize(bs); err == nil {
			m.BlockSize = v
		}
	}
	m.IODepth = 1
	if qd, ok := out.Option(main, "iodepth"); ok {
		fmt.Sscan(qd, &m.IODepth)
	}
	st, dir := main.Read, "read"
	switch m.RW {
	case "write", "randwrite", "trimwrite":
		st, dir = main.Write, "write"
	}
	m.LatencyOf = dir
	lat := st.Lat
	if _, ok := lat.Percentile(50); !ok {
		lat = st.Clat
	}
	if v, ok := st.Clat.Percentile(50); ok {
		m.ClatP50us = v / 1e3
	}
	if v, ok := lat.Percentile(50); ok {
		m.P50us = v / 1e3
	}
	if v, ok := lat.Percentile(99); ok {
		m.P99us = v / 1e3
	}
	m.FioCPUs = fioCPU
	if fioCPU < 0 {
		m.FioCPUs = m.FioJobCPUs
	}
	if m.AllBytes > 0 {
		gb := float64(m.AllBytes) / 1e9
		m.FioCPUsPerGB = m.FioCPUs / gb
		if serverCPU > 0 {
			m.ServerCPUsPerGB = serverCPU / gb
		}
		m.CPUsPerGB = m.FioCPUsPerGB + m.ServerCPUsPerGB
	}
	if m.AllIOs > 0 {
		n := float64(m.AllIOs)
		m.FioCPUusPerIO = m.FioCPUs / n * 1e6
		if serverCPU > 0 {
			m.ServerCPUusPerIO = serverCPU / n * 1e6
		}
		m.CPUusPerIO = m.FioCPUusPerIO + m.ServerCPUusPerIO
	}
	return m, nil
}

// Median returns the median of rounds, field by field (each figure's own
// median: IOPS, p50 and CPU may come from different rounds), with Rounds
// set. A round that failed makes the result that round's failure, its
// round named in Error. Nil when rounds is empty.
func Median(rounds []*Metrics) *Metrics {
	if len(rounds) == 0 {
		return nil
	}
	for i, r := range rounds {
		if r == nil || r.Error != "" {
			f := &Metrics{Error: "not run"}
			if r != nil {
				c := *r
				f = &c
			}
			if len(rounds) > 1 {
				f.Error = fmt.Sprintf("round %d of %d: %s", i+1, len(rounds), f.Error)
			}
			f.Rounds = len(rounds)
			return f
		}
	}
	m := *rounds[0]
	m.Rounds = len(rounds)
	floats := []func(*Metrics) *float64{
		func(m *Metrics) *float64 { return &m.IOPS },
		func(m *Metrics) *float64 { return &m.MBps },
		func(m *Metrics) *float64 { return &m.P50us },
		func(m *Metrics) *float64 { return &m.P99us },
		func(m *Metrics) *float64 { return &m.ClatP50us },
		func(m *Metrics) *float64 { return &m.RuntimeS },
		func(m *Metrics) *float64 { return &m.FioCPUs },
		func(m *Metrics) *float64 { return &m.FioJobCPUs },
		func(m *Metrics) *float64 { return &m.ServerCPUs },
		func(m *Metrics) *float64 { return &m.FioCPUsPerGB },
		func(m *Metrics) *float64 { return &m.ServerCPUsPerGB },
		func(m *Metrics) *float64 { return &m.CPUsPerGB },
		func(m *Metrics) *float64 { return &m.FioCPUusPerIO },
		func(m *Metrics) *float64 { return &m.ServerCPUusPerIO },
		func(m *Metrics) *float64 { return &m.CPUusPerIO },
		func(m *Metrics) *float64 { return &m.FioSyscalls },
		func(m *Metrics) *float64 { return &m.ServerSyscalls },
		func(m *Metrics) *float64 { return &m.DatagramsOut },
		func(m *Metrics) *float64 { return &m.DatagramsIn },
		func(m *Metrics) *float64 { return &m.FioSyscallsPerIO },
		func(m *Metrics) *float64 { return &m.ServerSyscallsPerIO },
		func(m *Metrics) *float64 { return &m.DatagramsPerIO },
		func(m *Metrics) *float64 { return &m.FioCtxSwitches },
		func(m *Metrics) *float64 { return &m.ServerCtxSwitches },
		func(m *Metrics) *float64 { return &m.FioCtxSwitchesPerIO },
		func(m *Metrics) *float64 { return &m.ServerCtxSwitchesPerIO },
	}
	vals := make([]float64, len(rounds))
	for _, f := range floats {
		for i, r := range rounds {
			vals[i] = *f(r)
		}
		*f(&m) = median(vals)
	}
	ints := []func(*Metrics) *int64{
		func(m *Metrics) *int64 { return &m.Bytes },
		func(m *Metrics) *int64 { return &m.IOs },
		func(m *Metrics) *int64 { return &m.AllBytes },
		func(m *Metrics) *int64 { return &m.AllIOs },
	}
	for _, f := range ints {
		for i, r := range rounds {
			vals[i] = float64(*f(r))
		}
		*f(&m) = int64(math.Round(median(vals)))
	}
	return &m
}

// median returns the median of v (the mean of the middle two for an even
// count), sorting v. A value of -1 (not counted) in any round makes the
// median -1.
func median(v []float64) float64 {
	if slices.Contains(v, -1) {
		return -1
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// Ceiling kinds a job is compared against.
const (
	// CeilingRTT compares QD1 p50 latency with the 64-byte ping-pong RTT
	// (the ratio is p50 / RTT: lower is better, ≥ 1).
	CeilingRTT = "ping-pong RTT"
	// CeilingDatagram compares small-block IOPS with the 4 KiB datagram rate
	// (a fraction: higher is better).
	CeilingDatagram = "4 KiB datagram rate"
	// CeilingGSO compares large-block MB/s with UDP GSO+GRO throughput
	// (a fraction: higher is better).
	CeilingGSO = "UDP GSO throughput"
)

// CeilingKind says which ceiling a job with these parameters compares to:
// queue depth 1 against the RTT, 64 KiB blocks or more against GSO
// throughput, the rest against the datagram rate.
func CeilingKind(m Metrics) string {
	switch {
	case m.IODepth <= 1:
		return CeilingRTT
	case m.BlockSize >= 64<<10:
		return CeilingGSO
	}
	return CeilingDatagram
}

// VsCeiling returns m's ratio to the ceiling of kind in c, and false when
// either side of it is missing.
func VsCeiling(m Metrics, kind string, c ceiling.Result) (float64, bool) {
	var num, den float64
	switch kind {
	case CeilingRTT:
		num, den = m.P50us, float64(c.PingPong.Median)/1e3
	case CeilingDatagram:
		num, den = m.IOPS, c.Datagram.PerSecond
	case CeilingGSO:
		num, den = m.MBps, c.GSO.GBps*1e3
	}
	if num <= 0 || den <= 0 {
		return 0, false
	}
	return num / den, true
}

// Ratios compares the sides of one job. A nil field was not measurable.
type Ratios struct {
	// IOPS, MBps, P50 and CPUPerIO are nvmeof/nbdkit.
	IOPS     *float64 `json:"iops_nvmeof_over_nbdkit"`
	MBps     *float64 `json:"mbps_nvmeof_over_nbdkit,omitempty"`
	P50      *float64 `json:"p50_nvmeof_over_nbdkit"`
	CPUPerIO *float64 `json:"cpu_per_io_nvmeof_over_nbdkit,omitempty"`
	// Ceiling names the loopback ceiling the job compares to (CeilingRTT,
	// ...), for reference only; Nbdkit and Nvmeof are each side's ratio
	// to it.
	Ceiling string   `json:"ceiling"`
	Nbdkit  *float64 `json:"nbdkit_over_ceiling"`
	Nvmeof  *float64 `json:"nvmeof_over_ceiling"`
}

// Job is one job file's results on both sides, over one topology.
type Job struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Topology names the network path both sides ran over (a
	// Report.Topologies entry); empty reads as TopologyLoopback (results
	// written before there were several).
	Topology string `json:"topology,omitempty"`
	// Nbdkit and Nvmeof are nil when that side did not run the job; with
	// several rounds they are the medians of NbdkitRounds and
	// NvmeofRounds, each round's own figures.
	Nbdkit       *Metrics   `json:"nbdkit"`
	Nvmeof       *Metrics   `json:"nvmeof"`
	NbdkitRounds []*Metrics `json:"nbdkit_rounds,omitempty"`
	NvmeofRounds []*Metrics `json:"nvmeof_rounds,omitempty"`
	Ratios       Ratios     `json:"ratios"`
}

// Goal is one of the project's benchmark goals and how this run did.
type Goal struct {
	Name string `json:"name"`
	Job  string `json:"job"`
	// Topology is the network path the goal was judged on (the goals are
	// judged on each topology against nbdkit over the same one); empty
	// for goals not about a link (allocations).
	Topology string `json:"topology,omitempty"`
	// Pass is nil when the goal could not be judged: a side was not
	// measured, or the goal does not apply (NotApplicable, why in
	// Measured).
	Pass          *bool `json:"pass"`
	NotApplicable bool  `json:"not_applicable,omitempty"`
	// Measured describes the nvmeof value; Reference the nbdkit one.
	Measured  string `json:"measured"`
	Reference string `json:"reference"`
}

// Status is the goal's verdict as printed: PASS, FAIL, N/A (does not
// apply) or NOT MEASURED.
func (g Goal) Status() string {
	switch {
	case g.NotApplicable:
		return "N/A"
	case g.Pass == nil:
		return "NOT MEASURED"
	case *g.Pass:
		return "PASS"
	}
	return "FAIL"
}

// AllocBench is one Go benchmark's result, run with -benchmem.
type AllocBench struct {
	Package     string  `json:"package"`
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

// Report is the whole run, as written to bench-results.json.
type Report struct {
	Started  time.Time `json:"started"`
	Host     string    `json:"host"`
	Kernel   string    `json:"kernel"`
	CPUs     int       `json:"cpus"`
	Fio      string    `json:"fio"`
	Nbdkit   string    `json:"nbdkit"`
	Mode     string    `json:"mode"`
	RuntimeS float64   `json:"runtime_per_job_s"`
	// Rounds is how many times every job ran on each side, interleaved
	// (round by round, job by job, the two sides one after the other, in
	// turn first); the jobs' figures are the medians.
	Rounds int `json:"rounds"`
	// Sizes of the memory backends, as given to them ("1G").
	MemSize  string         `json:"mem_size"`
	Ceilings ceiling.Result `json:"ceilings"`
	// Jobs are the job files' results, each over one topology: job by
	// job, the topologies in run order.
	Jobs []Job `json:"jobs"`
	// Topologies are the network paths of the run, in order; a topology
	// that could not be set up is listed with Skipped and has no jobs.
	Topologies []Topology `json:"topologies,omitempty"`
	// NvmeofSkipped says why the nvmeof side did not run on loopback, if
	// it did not (each topology's Topology.NvmeofSkipped says it for all).
	NvmeofSkipped string `json:"nvmeof_skipped,omitempty"`
	// NvmeofTarget describes the target the nvmeof side ran against on
	// loopback (see Topologies for the others).
	NvmeofTarget string `json:"nvmeof_target,omitempty"`
	// SyscallSource says how system calls were counted, or why they were
	// not; DatagramSource the same of datagrams on loopback.
	SyscallSource  string `json:"syscall_source,omitempty"`
	DatagramSource string `json:"datagram_source,omitempty"`
	// LoadStart and LoadEnd are the machine's 1-minute load average when
	// the run started and ended (/proc/loadavg), or -1: other work on the
	// machine takes CPU from both sides.
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
	// Allocs are Go benchmarks of the I/O path run with -benchmem (the
	// "0 allocations per I/O" goal), AllocsCommand how they were run,
	// AllocsError why they could not be.
	Allocs        []AllocBench `json:"allocs,omitempty"`
	AllocsCommand string       `json:"allocs_command,omitempty"`
	AllocsError   string       `json:"allocs_error,omitempty"`
	Goals         []Goal       `json:"goals"`
	// GoalsJudged is false for a smoke run: too short to measure, its
	// goals are listed with their figures but not judged. GoalsMissed
	// counts the goals judged FAIL.
	GoalsJudged bool `json:"goals_judged"`
	GoalsMissed int  `json:"goals_missed"`
}

// TopologyLoopback is the topology of the original benchmark: both sides
// on the host's loopback (the nvmeof side in a network namespace of its
// own). The ceilings are measured on loopback, so only its jobs are
// compared with them.
const TopologyLoopback = "loopback"

// Topology is one network path the jobs ran over.
type Topology struct {
	// Name labels the topology's rows ("loopback", "veth4", "veth6").
	Name string `json:"name"`
	// Link describes the path: interfaces, addresses, namespaces.
	Link string `json:"link"`
	// Skipped says why the topology did not run, if it did not.
	Skipped string `json:"skipped,omitempty"`
	// NbdkitTarget and NvmeofTarget describe the servers; NvmeofSkipped
	// says why the nvmeof side did not run over this topology.
	NbdkitTarget  string `json:"nbdkit_target,omitempty"`
	NvmeofTarget  string `json:"nvmeof_target,omitempty"`
	NvmeofSkipped string `json:"nvmeof_skipped,omitempty"`
	// DatagramSource says how the nvmeof side's datagrams were counted.
	DatagramSource string `json:"datagram_source,omitempty"`
}

// TopologyOf returns the topology j ran over (TopologyLoopback when
// unnamed).
func (j Job) TopologyOf() string {
	if j.Topology == "" {
		return TopologyLoopback
	}
	return j.Topology
}

// topologyNames returns the topologies the jobs ran over, in order of
// first appearance.
func (r *Report) topologyNames() []string {
	var names []string
	for _, j := range r.Jobs {
		if t := j.TopologyOf(); !slices.Contains(names, t) {
			names = append(names, t)
		}
	}
	return names
}

func ptr(v float64) *float64 { return &v }

// Compute fills every job's Ratios and the report's Goals.
func (r *Report) Compute() {
	for i := range r.Jobs {
		j := &r.Jobs[i]
		if len(j.NbdkitRounds) > 0 {
			j.Nbdkit = Median(j.NbdkitRounds)
		}
		if len(j.NvmeofRounds) > 0 {
			j.Nvmeof = Median(j.NvmeofRounds)
		}
		j.Ratios = Ratios{}
		if j.Nbdkit == nil && j.Nvmeof == nil {
			continue
		}
		ref := j.Nbdkit
		if ref == nil || (ref.Error != "" && j.Nvmeof != nil) {
			ref = j.Nvmeof
		}
		j.Ratios.Ceiling = CeilingKind(*ref)
		// The ceilings are loopback's: other links are not compared
		// with them.
		loop := j.TopologyOf() == TopologyLoopback
		if m := j.Nbdkit; loop && m != nil && m.Error == "" {
			if v, ok := VsCeiling(*m, j.Ratios.Ceiling, r.Ceilings); ok {
				j.Ratios.Nbdkit = ptr(v)
			}
		}
		if m := j.Nvmeof; m != nil && m.Error == "" {
			if v, ok := VsCeiling(*m, j.Ratios.Ceiling, r.Ceilings); loop && ok {
				j.Ratios.Nvmeof = ptr(v)
			}
			if n := j.Nbdkit; n != nil && n.Error == "" {
				if n.IOPS > 0 {
					j.Ratios.IOPS = ptr(m.IOPS / n.IOPS)
				}
				if n.MBps > 0 {
					j.Ratios.MBps = ptr(m.MBps / n.MBps)
				}
				if n.P50us > 0 && m.P50us > 0 {
					j.Ratios.P50 = ptr(m.P50us / n.P50us)
				}
				if n.CPUusPerIO > 0 && m.CPUusPerIO > 0 {
					j.Ratios.CPUPerIO = ptr(m.CPUusPerIO / n.CPUusPerIO)
				}
			}
		}
	}
	r.Goals = r.goals()
	r.GoalsJudged = r.Mode != ModeSmoke
	r.GoalsMissed = 0
	for _, g := range r.Goals {
		if r.GoalsJudged && g.Status() == "FAIL" {
			r.GoalsMissed++
		}
	}
}

// ModeSmoke is the runner's mode for 1 s runs that only check that
// everything runs: their goals are not judged.
const ModeSmoke = "smoke"

// Job returns the first job named name (over the first topology that ran
// it), or nil.
func (r *Report) Job(name string) *Job {
	for i := range r.Jobs {
		if r.Jobs[i].Name == name {
			return &r.Jobs[i]
		}
	}
	return nil
}

// JobOn returns the job named name over topology, or nil.
func (r *Report) JobOn(topology, name string) *Job {
	for i := range r.Jobs {
		if r.Jobs[i].Name == name && r.Jobs[i].TopologyOf() == topology {
			return &r.Jobs[i]
		}
	}
	return nil
}

// Goal thresholds, from the project's benchmark issue (#12): judged
// against nbdkit measured in the same run, on the same machine.
const (
	GoalQD32IOPSRatio    = 1.0 // 4K randread QD32: nvmeof IOPS ≥ 1.0 × nbdkit's
	GoalSeqReadRatio     = 1.0 // 128K seqread: nvmeof MB/s ≥ 1.0 × nbdkit's
	GoalQD1P50Ratio      = 1.0 // 4K randread QD1: nvmeof p50 ≤ 1.0 × nbdkit's
	GoalTwoJobScaling    = 1.6 // two jobs ≥ 1.6 × one job, where nbdkit's do
	GoalAllocsPerIO      = 0   // Go benchmarks of the I/O path: allocations per op
	GoalAllocsBenchLabel = "0 allocations per I/O in steady state (Go benchmarks, -benchmem)"
)

// Names of the jobs (examples/fio/NAME.fio) the goals are about.
const (
	JobRandRead4kQD32     = "randread-4k-qd32"
	JobSeqRead128kQD8     = "seqread-128k-qd8"
	JobRandRead4kQD1      = "randread-4k-qd1"
	JobRandRead4kQD32Two  = "randread-4k-qd32-2jobs"
	JobSeqRead128kQD8Two  = "seqread-128k-qd8-2jobs"
	nvmeofNotMeasured     = "nvmeof not measured"
	nbdkitNotMeasured     = "nbdkit not measured"
	nbdkitScalingNotKnown = "nbdkit's scaling not measured"
)

func ok(m *Metrics) bool { return m != nil && m.Error == "" }

// ratioGoal judges nvmeof's figure of job against nbdkit's: value picks
// the figure, better says whether a ratio passes, format writes a value.
func (r *Report) ratioGoal(topo, name, job string, threshold float64, value func(*Metrics) float64, pass func(ratio float64) bool, format func(float64) string) Goal {
	g := Goal{Name: name, Job: job, Topology: topo, Measured: nvmeofNotMeasured, Reference: nbdkitNotMeasured}
	j := r.JobOn(topo, job)
	if j == nil {
		return g
	}
	if ok(j.Nbdkit) {
		g.Reference = "nbdkit " + format(value(j.Nbdkit))
	}
	if ok(j.Nvmeof) {
		g.Measured = "nvmeof " + format(value(j.Nvmeof))
		if ok(j.Nbdkit) && value(j.Nbdkit) > 0 && value(j.Nvmeof) > 0 {
			ratio := value(j.Nvmeof) / value(j.Nbdkit)
			g.Measured += " = " + ratioText(ratio, threshold) + " nbdkit"
			g.Pass = boolPtr(pass(ratio))
		}
	}
	return g
}

// scalingGoal judges how nvmeof's figure grows from job one to job two
// (two fio jobs, two connections), where nbdkit's grows by the goal too.
func (r *Report) scalingGoal(topo, name, one, two string, value func(*Metrics) float64, format func(float64) string) Goal {
	g := Goal{Name: name, Job: two, Topology: topo, Measured: nvmeofNotMeasured, Reference: nbdkitNotMeasured}
	j1, j2 := r.JobOn(topo, one), r.JobOn(topo, two)
	if j1 == nil || j2 == nil {
		return g
	}
	scale := func(a, b *Metrics) (float64, bool) {
		if !ok(a) || !ok(b) || value(a) <= 0 {
			return 0, false
		}
		return value(b) / value(a), true
	}
	ns, nok := scale(j1.Nbdkit, j2.Nbdkit)
	if nok {
		g.Reference = fmt.Sprintf("nbdkit %s → %s = %s", format(value(j1.Nbdkit)), format(value(j2.Nbdkit)), ratioText(ns, GoalTwoJobScaling))
	}
	vs, vok := scale(j1.Nvmeof, j2.Nvmeof)
	if !vok {
		return g
	}
	g.Measured = fmt.Sprintf("nvmeof %s → %s = %s", format(value(j1.Nvmeof)), format(value(j2.Nvmeof)), ratioText(vs, GoalTwoJobScaling))
	switch {
	case !nok:
		g.Measured += ", " + nbdkitScalingNotKnown
	case ns < GoalTwoJobScaling:
		g.NotApplicable = true
		g.Measured += fmt.Sprintf(", not judged: nbdkit's two jobs reach only %s its one (< %.1f×) on this machine", ratioText(ns, GoalTwoJobScaling), GoalTwoJobScaling)
	default:
		g.Pass = boolPtr(vs >= GoalTwoJobScaling)
	}
	return g
}

// ratioText formats a ratio with two decimals, or three when two would
// round it onto the goal's threshold (0.998× must not read 1.00×).
func ratioText(x, threshold float64) string {
	if math.Abs(x-threshold) < 0.005 && x != threshold {
		return fmt.Sprintf("%.3f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

func (r *Report) goals() []Goal {
	iops := func(m *Metrics) float64 { return m.IOPS }
	mbps := func(m *Metrics) float64 { return m.MBps }
	p50 := func(m *Metrics) float64 { return m.P50us }
	fmtIOPS := func(v float64) string { return si(v) + " IOPS" }
	fmtMBps := func(v float64) string { return fmt.Sprintf("%.0f MB/s", v) }
	fmtP50 := func(v float64) string { return fmt.Sprintf("p50 %.1f µs", v) }
	// The goals are judged on each topology, against nbdkit over the
	// same one (loopback only when there are no jobs yet).
	topos := r.topologyNames()
	if len(topos) == 0 {
		topos = []string{TopologyLoopback}
	}
	var goals []Goal
	for _, t := range topos {
		goals = append(goals,
			r.ratioGoal(t, fmt.Sprintf("4K random read QD32 IOPS ≥ %.1f× nbdkit", GoalQD32IOPSRatio), JobRandRead4kQD32, GoalQD32IOPSRatio,
				iops, func(x float64) bool { return x >= GoalQD32IOPSRatio }, fmtIOPS),
			r.ratioGoal(t, fmt.Sprintf("128K sequential read throughput ≥ %.1f× nbdkit", GoalSeqReadRatio), JobSeqRead128kQD8, GoalSeqReadRatio,
				mbps, func(x float64) bool { return x >= GoalSeqReadRatio }, fmtMBps),
			r.ratioGoal(t, fmt.Sprintf("4K random read QD1 p50 total latency (fio's lat) ≤ %.1f× nbdkit's", GoalQD1P50Ratio), JobRandRead4kQD1, GoalQD1P50Ratio,
				p50, func(x float64) bool { return x <= GoalQD1P50Ratio }, fmtP50),
			r.scalingGoal(t, fmt.Sprintf("4K random read QD32, two jobs ≥ %.1f× one job (where nbdkit's are)", GoalTwoJobScaling),
				JobRandRead4kQD32, JobRandRead4kQD32Two, iops, fmtIOPS),
			r.scalingGoal(t, fmt.Sprintf("128K sequential read, two jobs ≥ %.1f× one job (where nbdkit's are)", GoalTwoJobScaling),
				JobSeqRead128kQD8, JobSeqRead128kQD8Two, mbps, fmtMBps),
		)
	}
	if len(r.Allocs) > 0 || r.AllocsError != "" {
		g := Goal{Name: GoalAllocsBenchLabel, Job: "go test -bench", Measured: "not measured: " + r.AllocsError, Reference: r.AllocsCommand}
		if len(r.Allocs) > 0 {
			worst := r.Allocs[0]
			for _, a := range r.Allocs {
				if a.AllocsPerOp > worst.AllocsPerOp {
					worst = a
				}
			}
			g.Measured = fmt.Sprintf("most: %g allocs/op (%s %s), %d benchmarks", worst.AllocsPerOp, worst.Package, worst.Name, len(r.Allocs))
			g.Reference = "see the allocations table"
			g.Pass = boolPtr(worst.AllocsPerOp <= GoalAllocsPerIO)
		}
		goals = append(goals, g)
	}
	return goals
}

func boolPtr(b bool) *bool { return &b }

// si formats a count with a K, M or G suffix (three significant digits).
func si(v float64) string { return chart.FormatSI(v) }

// MarshalIndent returns the report as indented JSON.
func (r *Report) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("report: encode JSON: %w", err)
	}
	return append(b, '\n'), nil
}
