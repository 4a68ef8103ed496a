package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/nvmeof/nvmeof/bench/chart"
)

const dash = "—"

// Columns of Table's rows.
const (
	colJob  = iota
	colLink // the topology
	colSide
	colIOPS
	colMBps
	colP50
	colP99
	colCPU      // CPU µs per I/O, client + server
	colCPUSplit // the same as "fio+server"
	colSyscalls // system calls per I/O, "fio+server"
	colDgrams   // UDP datagrams sent per I/O
	colVs       // nvmeof/nbdkit
	numCols
)

// Table returns the report's rows: a header, the three ceilings, then each
// job's nbdkit and nvmeof rows, over each topology in turn (job by job).
// The job's name and topology are on its nbdkit row. Every row has numCols
// cells.
func (r *Report) Table() [][]string {
	ctxsw := !r.syscallsCounted()
	calls := "syscalls/IO"
	if ctxsw {
		calls = "ctxsw/IO"
	}
	rows := [][]string{{"job", "link", "side", "IOPS", "MB/s", "p50 µs", "p99 µs", "CPU µs/IO", "fio+server", calls, "dgrams/IO", "nvmeof/nbdkit"}}
	c := r.Ceilings
	ceilRow := func(name string) []string {
		return []string{name, TopologyLoopback, "udp", dash, dash, dash, dash, dash, "", "", "", ""}
	}
	// The ceilings' CPU: per datagram (GSO: per 4 KiB segment), sender
	// and receiver together.
	perDgram := func(rt ceilingRate) string {
		if rt.cpuPerGB <= 0 || rt.size <= 0 {
			return dash
		}
		return us(rt.cpuPerGB * float64(rt.size) / 1e3)
	}
	pp := ceilRow("ceiling: 64 B ping-pong RTT")
	if c.PingPongError != "" {
		pp[colVs] = "error: " + short(c.PingPongError)
	} else if c.PingPong.Count > 0 {
		pp[colP50], pp[colP99] = us(float64(c.PingPong.Median)/1e3), us(float64(c.PingPong.P99)/1e3)
	}
	dg := ceilRow("ceiling: 4 KiB dgrams, sendmmsg")
	if c.DatagramError != "" {
		dg[colVs] = "error: " + short(c.DatagramError)
	} else if c.Datagram.Bytes > 0 {
		dg[colIOPS], dg[colMBps] = si(c.Datagram.PerSecond), mbps(c.Datagram.GBps*1e3)
		dg[colCPU] = perDgram(ceilingRate{c.Datagram.CPUSecondsPerGB, c.Datagram.Size})
		dg[colVs] = fmt.Sprintf("loss %.1f %%", c.Datagram.Loss()*100)
	}
	gso := ceilRow("ceiling: UDP GSO + GRO")
	if c.GSOError != "" {
		gso[colVs] = "error: " + short(c.GSOError)
	} else if c.GSO.Bytes > 0 {
		gso[colIOPS], gso[colMBps] = si(c.GSO.PerSecond), mbps(c.GSO.GBps*1e3)
		gso[colCPU] = perDgram(ceilingRate{c.GSO.CPUSecondsPerGB, c.GSO.Size})
		gso[colVs] = fmt.Sprintf("loss %.1f %%", c.GSO.Loss()*100)
	}
	rows = append(rows, pp, dg, gso)

	for _, j := range r.Jobs {
		nbd := sideRow(j.Name, SideNbdkit, j.Nbdkit, "", ctxsw)
		nbd[colLink] = j.TopologyOf()
		rows = append(rows, nbd)
		var vs []string
		if v := j.Ratios.IOPS; v != nil {
			vs = append(vs, fmt.Sprintf("IOPS %.2f×", *v))
		}
		if v := j.Ratios.P50; v != nil {
			vs = append(vs, fmt.Sprintf("p50 %.2f×", *v))
		}
		if v := j.Ratios.CPUPerIO; v != nil {
			vs = append(vs, fmt.Sprintf("CPU/IO %.2f×", *v))
		}
		rows = append(rows, sideRow("", SideNvmeof, j.Nvmeof, strings.Join(vs, ", "), ctxsw))
	}
	return rows
}

// ceilingRate is a ceiling's CPU per GB and datagram size.
type ceilingRate struct {
	cpuPerGB float64
	size     int
}

// syscallsCounted reports whether any job has a system call count.
func (r *Report) syscallsCounted() bool {
	for _, j := range r.Jobs {
		for _, m := range []*Metrics{j.Nbdkit, j.Nvmeof} {
			if ok(m) && (m.FioSyscallsPerIO >= 0 || m.ServerSyscallsPerIO >= 0) {
				return true
			}
		}
	}
	return false
}

// sideRow is one side's row of a job; with ctxsw, the calls column holds
// context switches instead of system calls.
func sideRow(name, side string, m *Metrics, vs string, ctxsw bool) []string {
	row := []string{name, "", side, dash, dash, dash, dash, dash, "", "", "", vs}
	switch {
	case m == nil:
		row[colVs] = "not run"
	case m.Error != "":
		row[colVs] = "error: " + short(m.Error)
	default:
		row[colIOPS], row[colMBps] = si(m.IOPS), mbps(m.MBps)
		if m.P50us > 0 {
			row[colP50] = us(m.P50us)
		}
		if m.P99us > 0 {
			row[colP99] = us(m.P99us)
		}
		if m.CPUusPerIO > 0 {
			row[colCPU] = us(m.CPUusPerIO)
			srv := "?"
			if m.ServerCPUs >= 0 {
				srv = us(m.ServerCPUusPerIO)
			}
			row[colCPUSplit] = us(m.FioCPUusPerIO) + "+" + srv
		}
		fio, srv := m.FioSyscallsPerIO, m.ServerSyscallsPerIO
		if ctxsw {
			fio, srv = m.FioCtxSwitchesPerIO, m.ServerCtxSwitchesPerIO
		}
		if fio >= 0 || srv >= 0 {
			row[colSyscalls] = count(fio) + "+" + count(srv)
		}
		if m.DatagramsPerIO >= 0 {
			row[colDgrams] = count(m.DatagramsPerIO)
		}
	}
	return row
}

// count formats a per-I/O count, "?" when not counted.
func count(v float64) string {
	switch {
	case v < 0 || math.IsNaN(v):
		return "?"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func us(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func mbps(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// short cuts an error message to its first line and 60 runes.
func short(s string) string { return cut(s, 60) }

// cut cuts s to its first line and n runes.
func cut(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// numeric columns are right-aligned.
var rightAligned = map[int]bool{colIOPS: true, colMBps: true, colP50: true, colP99: true, colCPU: true, colCPUSplit: true,
	colSyscalls: true, colDgrams: true}

// WriteTable prints the report as a heading, the aligned table, notes on
// the sources of the figures, the Go allocation benchmarks and the goals
// with their verdicts, ending with how many goals were missed.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "nvmeof benchmark · %s · %s · kernel %s · %d CPUs · %s · nbdkit %s · memory %s · %s, %g s per job%s\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Host, r.Kernel, r.CPUs, r.Fio, r.Nbdkit, r.MemSize, r.Mode, r.RuntimeS, medianOf(r.Rounds))
	writeAligned(&b, r.Table(), rightAligned)
	b.WriteString("\nIOPS of the ceilings: datagrams (GSO: 4 KiB segments) received per second. MB/s = 1e6 bytes/s.\n")
	b.WriteString("CPU µs/IO: user+system CPU µs per I/O (all jobs of the file, prep jobs too), client + server: the fio process\n")
	b.WriteString("(all threads, the engine's included; from wait4) + the server (nbdkit, nvmetd; all threads, from /proc/PID/stat).\n")
	b.WriteString("Ceilings: CPU µs per datagram (GSO: per 4 KiB segment), sender + receiver.\n")
	fmt.Fprintf(&b, "syscalls/IO: fio + server, %s.\n", orUnknown(r.SyscallSource))
	if !r.syscallsCounted() {
		b.WriteString("ctxsw/IO, shown instead: context switches per I/O, fio (all threads, from wait4) + server (its threads' /proc/PID/task/TID/status).\n")
	}
	if len(r.Topologies) == 0 {
		fmt.Fprintf(&b, "dgrams/IO (nvmeof): UDP datagrams sent per I/O, both ends, %s.\n", orUnknown(r.DatagramSource))
	}
	if l := max(r.Ceilings.Datagram.Loss(), r.Ceilings.GSO.Loss()); l > 0.2 {
		fmt.Fprintf(&b, "WARNING: the receiver lost up to %.0f %% of the ceilings' datagrams (other work on the machine?): ratios to them are unreliable.\n", l*100)
	}
	if r.LoadStart >= 0 && r.LoadEnd >= 0 && (r.LoadStart != 0 || r.LoadEnd != 0) {
		fmt.Fprintf(&b, "Load average (1 min) %.2f at the start, %.2f at the end, on %d CPUs.\n", r.LoadStart, r.LoadEnd, r.CPUs)
	}
	if len(r.Topologies) == 0 {
		if r.NvmeofTarget != "" {
			fmt.Fprintf(&b, "nvmeof target: %s.\n", r.NvmeofTarget)
		}
		if r.NvmeofSkipped != "" {
			fmt.Fprintf(&b, "nvmeof: not run: %s\n", r.NvmeofSkipped)
		}
	}
	r.writeTopologies(&b)
	if len(r.Allocs) > 0 || r.AllocsError != "" {
		fmt.Fprintf(&b, "\nGo benchmarks of the I/O path (%s)\n", r.AllocsCommand)
		if r.AllocsError != "" {
			fmt.Fprintf(&b, "  not run: %s\n", r.AllocsError)
		}
		rows := [][]string{{"package", "benchmark", "ns/op", "B/op", "allocs/op"}}
		for _, a := range r.Allocs {
			rows = append(rows, []string{strings.TrimPrefix(a.Package, modulePrefix), a.Name, fmt.Sprintf("%.0f", a.NsPerOp), fmt.Sprintf("%.0f", a.BytesPerOp), fmt.Sprintf("%g", a.AllocsPerOp)})
		}
		if len(r.Allocs) > 0 {
			var t strings.Builder
			writeAligned(&t, rows, map[int]bool{2: true, 3: true, 4: true})
			for _, l := range strings.SplitAfter(strings.TrimSuffix(t.String(), "\n"), "\n") {
				b.WriteString("  " + l)
			}
			b.WriteString("\n")
		}
	}
	if r.GoalsJudged {
		b.WriteString("\ngoals (against nbdkit measured in this run over the same link; memory backends)\n")
	} else {
		fmt.Fprintf(&b, "\ngoals: NOT JUDGED on a smoke run (%g s per job, %s: too short to measure); figures for the record only\n",
			r.RuntimeS, plural(max(r.Rounds, 1), "round"))
	}
	for _, g := range r.Goals {
		status := g.Status()
		if !r.GoalsJudged {
			status = "not judged"
		}
		link := ""
		if g.Topology != "" {
			link = "[" + g.Topology + "] "
		}
		fmt.Fprintf(&b, "  %-12s %s%s: %s (%s)\n", status, link, g.Name, g.Measured, g.Reference)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("report: write table: %w", err)
	}
	return nil
}

// writeTopologies writes, for each topology, its link, servers and how
// its datagrams were counted, or why it did not run.
func (r *Report) writeTopologies(b *strings.Builder) {
	if len(r.Topologies) == 0 {
		return
	}
	b.WriteString("links (each side's ratios are against nbdkit over the same link; dgrams/IO of nvmeof: UDP datagrams sent per I/O, both ends):\n")
	for _, t := range r.Topologies {
		if t.Skipped != "" {
			fmt.Fprintf(b, "  %s: not run: %s\n", t.Name, t.Skipped)
			continue
		}
		fmt.Fprintf(b, "  %s: %s.\n", t.Name, t.Link)
		if t.NbdkitTarget != "" {
			fmt.Fprintf(b, "    nbdkit: %s.\n", t.NbdkitTarget)
		}
		if t.NvmeofTarget != "" {
			fmt.Fprintf(b, "    nvmeof: %s.\n", t.NvmeofTarget)
		}
		if t.NvmeofSkipped != "" {
			fmt.Fprintf(b, "    nvmeof: not run: %s\n", t.NvmeofSkipped)
		}
		if t.DatagramSource != "" {
			fmt.Fprintf(b, "    dgrams/IO: %s.\n", t.DatagramSource)
		}
	}
}

// GoalsLine is the last line of the output: how many goals were missed,
// and whether that fails the run (strict).
func (r *Report) GoalsLine(strict bool) string {
	switch {
	case !r.GoalsJudged:
		return "goals: not judged (smoke run)"
	case r.GoalsMissed == 0:
		return "goals missed: 0"
	case strict:
		return fmt.Sprintf("goals missed: %d (-strict: exit status %d)", r.GoalsMissed, ExitGoalsMissed)
	}
	return fmt.Sprintf("goals missed: %d (not enforced without -strict)", r.GoalsMissed)
}

// modulePrefix is left out of package names in the allocations table.
const modulePrefix = "github.com/nvmeof/nvmeof/"

// ExitGoalsMissed is nvmeof-bench's exit status under -strict when a goal
// was missed.
const ExitGoalsMissed = 4

// medianOf names the rounds the figures are medians of, if several.
func medianOf(rounds int) string {
	if rounds > 1 {
		return fmt.Sprintf(", median of %d interleaved rounds", rounds)
	}
	return ""
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func orUnknown(s string) string {
	if s == "" {
		return "not counted"
	}
	return s
}

// writeAligned writes rows as aligned columns, two spaces apart.
func writeAligned(b *strings.Builder, rows [][]string, right map[int]bool) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				line.WriteString("  ")
			}
			if right[i] {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// Chart returns the report as a bar chart: one group per job, an IOPS panel
// and an MB/s panel, nbdkit and nvmeof side by side, the ceilings as lines.
func (r *Report) Chart() chart.Chart {
	topos := r.topologyNames()
	if len(topos) == 0 {
		topos = []string{TopologyLoopback}
	}
	nvName := "nvmeof, fio external engine"
	if r.NvmeofSkipped != "" && len(topos) == 1 {
		nvName += " (not run)"
	}
	ch := chart.Chart{
		Title: "nvmeof vs nbdkit: fio jobs on " + strings.Join(topos, ", ") + ", memory backends",
		Subtitle: fmt.Sprintf("%s · %s · kernel %s · %d CPUs · %s · %g s per job%s",
			r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Host, r.Kernel, r.CPUs, r.Fio, r.RuntimeS, medianOf(r.Rounds)),
		XLabel: "fio job (examples/fio/NAME.fio): pattern, block size, queue depth",
		Series: []chart.Series{
			{Name: "nbdkit memory + fio nbd engine", Color: chart.Blue},
			{Name: nvName, Color: chart.Orange},
		},
		// Wider with more groups (a job over each topology).
		Width:  max(1800, 1800*len(r.Jobs)/14),
		Height: 1600,
	}
	iops := chart.Panel{Title: "IOPS (higher is better)", YLabel: "I/Os per second"}
	mb := chart.Panel{Title: "Throughput (higher is better)", YLabel: "MB/s (1e6 bytes/s)", Format: func(v float64) string {
		if v >= 1000 {
			return fmt.Sprintf("%.0f", v)
		}
		return chart.FormatSI(v)
	}}
	val := func(m *Metrics, f func(*Metrics) float64) float64 {
		if !ok(m) {
			return math.NaN()
		}
		return f(m)
	}
	for _, j := range r.Jobs {
		label := jobLabel(j, len(topos) > 1)
		iops.Groups = append(iops.Groups, chart.Group{Label: label, Values: []float64{
			val(j.Nbdkit, func(m *Metrics) float64 { return m.IOPS }),
			val(j.Nvmeof, func(m *Metrics) float64 { return m.IOPS }),
		}})
		mb.Groups = append(mb.Groups, chart.Group{Label: label, Values: []float64{
			val(j.Nbdkit, func(m *Metrics) float64 { return m.MBps }),
			val(j.Nvmeof, func(m *Metrics) float64 { return m.MBps }),
		}})
	}
	cpuPanel := chart.Panel{Title: "CPU per I/O, client + server (lower is better)", YLabel: "CPU µs per I/O", Format: func(v float64) string {
		if v >= 100 {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.1f", v)
	}}
	for _, j := range r.Jobs {
		label := jobLabel(j, len(topos) > 1)
		cpuVal := func(m *Metrics) float64 {
			if !ok(m) || m.CPUusPerIO <= 0 {
				return math.NaN()
			}
			return m.CPUusPerIO
		}
		cpuPanel.Groups = append(cpuPanel.Groups, chart.Group{Label: label, Values: []float64{cpuVal(j.Nbdkit), cpuVal(j.Nvmeof)}})
	}
	if d := r.Ceilings.Datagram.PerSecond; d > 0 {
		iops.Lines = append(iops.Lines, chart.RefLine{Value: d, Label: "UDP 4 KiB datagrams/s (sendmmsg) ceiling:", Color: chart.Red})
	}
	if g := r.Ceilings.GSO.GBps; g > 0 {
		mb.Lines = append(mb.Lines, chart.RefLine{Value: g * 1e3, Label: "UDP GSO+GRO ceiling:", Color: chart.Red})
	}
	ch.Panels = []chart.Panel{iops, mb, cpuPanel}
	if r.NvmeofSkipped != "" {
		ch.Notes = append(ch.Notes, "nvmeof not run on loopback: "+cut(r.NvmeofSkipped, 120))
	}
	for _, t := range r.Topologies {
		switch {
		case t.Skipped != "":
			ch.Notes = append(ch.Notes, t.Name+" not run: "+cut(t.Skipped, 120))
		case t.NvmeofSkipped != "" && t.Name != TopologyLoopback:
			ch.Notes = append(ch.Notes, "nvmeof not run on "+t.Name+": "+cut(t.NvmeofSkipped, 120))
		}
	}
	if m := r.Ceilings.PingPong.Median; m > 0 {
		ch.Notes = append(ch.Notes, fmt.Sprintf("UDP 64 B ping-pong RTT: p50 %.1f µs, p99 %.1f µs", float64(m)/1e3, float64(r.Ceilings.PingPong.P99)/1e3))
	}
	return ch
}

// jobLabel is a job's label under its bar group: the name on two lines
// ("randread\n4k qd1"), "verify" on its own line, and with topologies the
// topology last.
func jobLabel(j Job, topology bool) string {
	label := strings.Replace(strings.Replace(j.Name, "-", "\n", 1), "-verify", "\nverify", 1)
	label = strings.ReplaceAll(label, "-", " ")
	if topology {
		label += "\n" + j.TopologyOf()
	}
	return label
}
