// Package report turns fio runs and loopback ceilings into the benchmark's
// results: per-job metrics for each side (nbdkit, nvmeof), the ratios
// nvmeof/nbdkit and side/ceiling, the project's goals, an aligned text table,
// JSON and a PNG chart.
package report

import (
	"encoding/json"
	"fmt"
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

// Metrics is one job file run on one side.
type Metrics struct {
	// RW, BlockSize and IODepth describe the measured job, from fio's options.
	RW        string `json:"rw"`
	BlockSize int64  `json:"block_size"`
	IODepth   int    `json:"iodepth"`
	// IOPS and MBps (1e6 bytes/s) are the measured jobs' I/Os and bytes, all
	// directions together, over their run time.
	IOPS float64 `json:"iops"`
	MBps float64 `json:"mb_per_s"`
	// P50us and P99us are completion latency (fio's clat) percentiles in
	// microseconds of LatencyOf ("read", or "write" for write-only jobs).
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	LatencyOf string  `json:"latency_of"`
	// Bytes and RuntimeS are the measured jobs' data and run time.
	Bytes    int64   `json:"bytes"`
	RuntimeS float64 `json:"runtime_s"`
	// CPU, in user+system seconds, over the whole fio run of the file
	// (prep jobs too). FioCPUs is the fio process's own, from wait4: all
	// its threads, an external engine's included (the client side).
	// FioJobCPUs is the sum of fio's per-job usr_cpu and sys_cpu, kept for
	// reference only: under --thread it counts each job's thread and leaves
	// out an engine's own threads (our Go engine's), so it understates a
	// client that does its work off the job thread. ServerCPUs is the
	// server's (nbdkit, nvmetd: all threads, from /proc/PID/stat), or -1
	// when it could not be read. AllBytes is the data all jobs moved.
	// FioCPUsPerGB and ServerCPUsPerGB are each side per 1e9 bytes of
	// AllBytes (ServerCPUsPerGB is 0 when not measured); CPUsPerGB is their
	// sum, or 0 when not measurable.
	FioCPUs         float64 `json:"fio_cpu_s"`
	FioJobCPUs      float64 `json:"fio_job_cpu_s"`
	ServerCPUs      float64 `json:"server_cpu_s"`
	AllBytes        int64   `json:"all_bytes"`
	FioCPUsPerGB    float64 `json:"fio_cpu_s_per_gb"`
	ServerCPUsPerGB float64 `json:"server_cpu_s_per_gb"`
	CPUsPerGB       float64 `json:"cpu_s_per_gb"`
	// Command is the fio command line; Error is set when fio failed.
	Command string `json:"command,omitempty"`
	Error   string `json:"error,omitempty"`
}

// FromFio computes a side's metrics from fio's report of one job file.
// fioCPU is the fio process's CPU seconds over the run (fio.Result.CPU), or
// negative when unknown (fio's per-job figures stand in for it then);
// serverCPU is the server's CPU seconds over the fio run, or negative when
// unknown (CPU per GB then counts fio alone and is still reported).
func FromFio(out *fio.Output, fioCPU, serverCPU float64) (Metrics, error) {
	m := Metrics{ServerCPUs: serverCPU}
	var main *fio.Job
	var ios int64
	var runtimeMS int64
	for i := range out.Jobs {
		j := &out.Jobs[i]
		m.FioJobCPUs += j.CPUSeconds()
		m.AllBytes += j.Bytes()
		if strings.HasPrefix(j.Name, PrepPrefix) {
			continue
		}
		n := j.Read.TotalIOs + j.Write.TotalIOs + j.Trim.TotalIOs
		if main == nil || n > main.Read.TotalIOs+main.Write.TotalIOs+main.Trim.TotalIOs {
			main = j
		}
		ios += n
		m.Bytes += j.Bytes()
		runtimeMS += j.RuntimeMS
	}
	if main == nil {
		return m, fmt.Errorf("report: fio report has no measured job (only %s* jobs or none)", PrepPrefix)
	}
	if runtimeMS <= 0 {
		return m, fmt.Errorf("report: job %s ran for 0 ms", main.Name)
	}
	m.RuntimeS = float64(runtimeMS) / 1000
	m.IOPS = float64(ios) / m.RuntimeS
	m.MBps = float64(m.Bytes) / m.RuntimeS / 1e6

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
	lat, dir := main.Read.Clat, "read"
	switch m.RW {
	case "write", "randwrite", "trimwrite":
		lat, dir = main.Write.Clat, "write"
	}
	m.LatencyOf = dir
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
	return m, nil
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
	// IOPS and P50 are nvmeof/nbdkit (MB/s moves with IOPS for a job).
	IOPS *float64 `json:"iops_nvmeof_over_nbdkit"`
	P50  *float64 `json:"p50_nvmeof_over_nbdkit"`
	// Ceiling names what the job compares to (CeilingRTT, ...); Nbdkit
	// and Nvmeof are each side's ratio to it.
	Ceiling string   `json:"ceiling"`
	Nbdkit  *float64 `json:"nbdkit_over_ceiling"`
	Nvmeof  *float64 `json:"nvmeof_over_ceiling"`
}

// Job is one job file's results on both sides.
type Job struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Nbdkit and Nvmeof are nil when that side did not run the job.
	Nbdkit *Metrics `json:"nbdkit"`
	Nvmeof *Metrics `json:"nvmeof"`
	Ratios Ratios   `json:"ratios"`
}

// Goal is one of the project's benchmark goals and how this run did.
type Goal struct {
	Name string `json:"name"`
	Job  string `json:"job"`
	// Pass is nil when the nvmeof side was not measured.
	Pass *bool `json:"pass"`
	// Measured describes the nvmeof value; Reference the nbdkit one.
	Measured  string `json:"measured"`
	Reference string `json:"reference"`
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
	// Sizes of the memory backends, as given to them ("1G").
	MemSize  string         `json:"mem_size"`
	Ceilings ceiling.Result `json:"ceilings"`
	Jobs     []Job          `json:"jobs"`
	// NvmeofSkipped says why the nvmeof side did not run, if it did not.
	NvmeofSkipped string `json:"nvmeof_skipped,omitempty"`
	// NvmeofTarget describes the target the nvmeof side ran against.
	NvmeofTarget string `json:"nvmeof_target,omitempty"`
	// LoadStart and LoadEnd are the machine's 1-minute load average when
	// the run started and ended (/proc/loadavg), or -1: other work on the
	// machine takes CPU from both sides.
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
	Goals     []Goal  `json:"goals"`
}

func ptr(v float64) *float64 { return &v }

// Compute fills every job's Ratios and the report's Goals.
func (r *Report) Compute() {
	for i := range r.Jobs {
		j := &r.Jobs[i]
		j.Ratios = Ratios{}
		if j.Nbdkit == nil && j.Nvmeof == nil {
			continue
		}
		ref := j.Nbdkit
		if ref == nil || ref.Error != "" {
			ref = j.Nvmeof
		}
		j.Ratios.Ceiling = CeilingKind(*ref)
		if m := j.Nbdkit; m != nil && m.Error == "" {
			if v, ok := VsCeiling(*m, j.Ratios.Ceiling, r.Ceilings); ok {
				j.Ratios.Nbdkit = ptr(v)
			}
		}
		if m := j.Nvmeof; m != nil && m.Error == "" {
			if v, ok := VsCeiling(*m, j.Ratios.Ceiling, r.Ceilings); ok {
				j.Ratios.Nvmeof = ptr(v)
			}
			if n := j.Nbdkit; n != nil && n.Error == "" {
				if n.IOPS > 0 {
					j.Ratios.IOPS = ptr(m.IOPS / n.IOPS)
				}
				if n.P50us > 0 && m.P50us > 0 {
					j.Ratios.P50 = ptr(m.P50us / n.P50us)
				}
			}
		}
	}
	r.Goals = r.goals()
}

// Job returns the job named name, or nil.
func (r *Report) Job(name string) *Job {
	for i := range r.Jobs {
		if r.Jobs[i].Name == name {
			return &r.Jobs[i]
		}
	}
	return nil
}

// Goal thresholds, from the project's benchmark issue.
const (
	GoalQD32IOPSRatio = 1.5  // 4k randread QD32: nvmeof IOPS ≥ 1.5 × nbdkit's
	GoalSeqReadGBps   = 2.5  // 128k seqread ≥ 2.5 GB/s ...
	GoalSeqReadOfGSO  = 0.60 // ... or ≥ 60 % of the UDP GSO ceiling
	GoalQD1P50OverRTT = 2.0  // 4k randread QD1 p50 ≤ 2 × the ping-pong RTT
)

// Names of the jobs (examples/fio/NAME.fio) the goals are about.
const (
	JobRandRead4kQD32 = "randread-4k-qd32"
	JobSeqRead128kQD8 = "seqread-128k-qd8"
	JobRandRead4kQD1  = "randread-4k-qd1"
)

const (
	nvmeofNotMeasured  = "nvmeof not measured"
	nbdkitNotMeasured  = "nbdkit not measured"
	ceilingNotMeasured = "ceiling not measured"
)

func ok(m *Metrics) bool { return m != nil && m.Error == "" }

func (r *Report) goals() []Goal {
	gso := r.Ceilings.GSO.GBps
	rtt := float64(r.Ceilings.PingPong.Median) / 1e3

	g1 := Goal{Name: fmt.Sprintf("4k random read QD32 IOPS ≥ %.1f× nbdkit", GoalQD32IOPSRatio), Job: JobRandRead4kQD32,
		Measured: nvmeofNotMeasured, Reference: nbdkitNotMeasured}
	if j := r.Job(JobRandRead4kQD32); j != nil {
		if ok(j.Nbdkit) {
			g1.Reference = fmt.Sprintf("nbdkit %s IOPS", si(j.Nbdkit.IOPS))
		}
		if ok(j.Nvmeof) {
			g1.Measured = fmt.Sprintf("nvmeof %s IOPS", si(j.Nvmeof.IOPS))
			if j.Ratios.IOPS != nil {
				g1.Measured += fmt.Sprintf(" = %.2f× nbdkit", *j.Ratios.IOPS)
				g1.Pass = boolPtr(*j.Ratios.IOPS >= GoalQD32IOPSRatio)
			}
		}
	}

	g2 := Goal{Name: fmt.Sprintf("128k sequential read ≥ %.1f GB/s or ≥ %.0f %% of UDP GSO", GoalSeqReadGBps, GoalSeqReadOfGSO*100),
		Job: JobSeqRead128kQD8, Measured: nvmeofNotMeasured, Reference: nbdkitNotMeasured}
	seq := func(m *Metrics) string {
		s := fmt.Sprintf("%.2f GB/s", m.MBps/1e3)
		if gso > 0 {
			s += fmt.Sprintf(" = %.0f %% of GSO %.2f GB/s", m.MBps/1e3/gso*100, gso)
		}
		return s
	}
	if j := r.Job(JobSeqRead128kQD8); j != nil {
		// A ceiling that either side went past was not one in this run
		// (measured while other work starved the receiver): the goal
		// then falls back to its absolute figure alone.
		gsoNote := ""
		for _, m := range []*Metrics{j.Nbdkit, j.Nvmeof} {
			if gso > 0 && ok(m) && m.MBps/1e3 > gso && gsoNote == "" {
				gsoNote = fmt.Sprintf("; GSO %.2f GB/s is below what was moved here, so not a ceiling in this run: not used", gso)
			}
		}
		if ok(j.Nbdkit) {
			g2.Reference = "nbdkit " + seq(j.Nbdkit)
		}
		if ok(j.Nvmeof) {
			g2.Measured = "nvmeof " + seq(j.Nvmeof) + gsoNote
			gbps := j.Nvmeof.MBps / 1e3
			g2.Pass = boolPtr(gbps >= GoalSeqReadGBps || (gso > 0 && gsoNote == "" && gbps/gso >= GoalSeqReadOfGSO))
		}
	}

	g3 := Goal{Name: fmt.Sprintf("4k random read QD1 p50 ≤ %.0f× ping-pong RTT", GoalQD1P50OverRTT), Job: JobRandRead4kQD1,
		Measured: nvmeofNotMeasured, Reference: nbdkitNotMeasured}
	lat := func(m *Metrics) string {
		s := fmt.Sprintf("p50 %.1f µs", m.P50us)
		if rtt > 0 {
			s += fmt.Sprintf(" = %.1f× RTT %.1f µs", m.P50us/rtt, rtt)
		}
		return s
	}
	if j := r.Job(JobRandRead4kQD1); j != nil {
		if ok(j.Nbdkit) {
			g3.Reference = "nbdkit " + lat(j.Nbdkit)
		}
		if ok(j.Nvmeof) {
			g3.Measured = "nvmeof " + lat(j.Nvmeof)
			if rtt > 0 && j.Nvmeof.P50us > 0 {
				g3.Pass = boolPtr(j.Nvmeof.P50us/rtt <= GoalQD1P50OverRTT)
			} else {
				g3.Measured += ", " + ceilingNotMeasured
			}
		}
	}
	return []Goal{g1, g2, g3}
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
