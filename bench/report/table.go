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
	colJob = iota
	colSide
	colIOPS
	colMBps
	colP50
	colP99
	colCPU      // CPU s/GB, client + server
	colCPUSplit // the same as "fio + server"
	colVs       // nvmeof/nbdkit
	colCeiling  // vs ceiling
	numCols
)

// Table returns the report's rows: a header, the three ceilings, then each
// job's nbdkit and nvmeof rows. Every row has numCols cells.
func (r *Report) Table() [][]string {
	rows := [][]string{{"job", "side", "IOPS", "MB/s", "p50 µs", "p99 µs", "CPU s/GB", "fio+server", "nvmeof/nbdkit", "vs ceiling"}}
	c := r.Ceilings
	ceilRow := func(name string) []string {
		return []string{name, "udp", dash, dash, dash, dash, dash, "", "", ""}
	}
	pp := ceilRow("ceiling: 64 B ping-pong RTT")
	if c.PingPongError != "" {
		pp[colCeiling] = "error: " + short(c.PingPongError)
	} else if c.PingPong.Count > 0 {
		pp[colP50], pp[colP99] = us(float64(c.PingPong.Median)/1e3), us(float64(c.PingPong.P99)/1e3)
	}
	dg := ceilRow("ceiling: 4 KiB dgrams, sendmmsg")
	if c.DatagramError != "" {
		dg[colCeiling] = "error: " + short(c.DatagramError)
	} else if c.Datagram.Bytes > 0 {
		dg[colIOPS], dg[colMBps], dg[colCPU] = si(c.Datagram.PerSecond), mbps(c.Datagram.GBps*1e3), cpu(c.Datagram.CPUSecondsPerGB)
		dg[colCeiling] = fmt.Sprintf("loss %.1f %%", c.Datagram.Loss()*100)
	}
	gso := ceilRow("ceiling: UDP GSO + GRO")
	if c.GSOError != "" {
		gso[colCeiling] = "error: " + short(c.GSOError)
	} else if c.GSO.Bytes > 0 {
		gso[colIOPS], gso[colMBps], gso[colCPU] = si(c.GSO.PerSecond), mbps(c.GSO.GBps*1e3), cpu(c.GSO.CPUSecondsPerGB)
		gso[colCeiling] = fmt.Sprintf("loss %.1f %%", c.GSO.Loss()*100)
	}
	rows = append(rows, pp, dg, gso)

	for _, j := range r.Jobs {
		rows = append(rows, sideRow(j.Name, SideNbdkit, j.Nbdkit, "", ceilingCell(j.Ratios.Ceiling, j.Ratios.Nbdkit)))
		vs := ""
		if j.Ratios.IOPS != nil {
			vs = fmt.Sprintf("IOPS %.2f×", *j.Ratios.IOPS)
			if j.Ratios.P50 != nil {
				vs += fmt.Sprintf(", p50 %.2f×", *j.Ratios.P50)
			}
		}
		rows = append(rows, sideRow("", SideNvmeof, j.Nvmeof, vs, ceilingCell(j.Ratios.Ceiling, j.Ratios.Nvmeof)))
	}
	return rows
}

func sideRow(name, side string, m *Metrics, vs, ceil string) []string {
	row := []string{name, side, dash, dash, dash, dash, dash, "", vs, ceil}
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
		if m.CPUsPerGB > 0 {
			row[colCPU] = cpu(m.CPUsPerGB)
			srv := "?"
			if m.ServerCPUs >= 0 {
				srv = fmt.Sprintf("%.2f", m.ServerCPUsPerGB)
			}
			row[colCPUSplit] = fmt.Sprintf("%.2f+%s", m.FioCPUsPerGB, srv)
		}
	}
	return row
}

// ceilingCell formats a side's ratio to its ceiling.
func ceilingCell(kind string, v *float64) string {
	if v == nil {
		return ""
	}
	switch kind {
	case CeilingRTT:
		return fmt.Sprintf("p50 %.1f× RTT", *v)
	case CeilingDatagram:
		return fmt.Sprintf("%.0f %% of dgram rate", *v*100)
	case CeilingGSO:
		return fmt.Sprintf("%.0f %% of GSO", *v*100)
	}
	return ""
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

func cpu(v float64) string {
	if math.IsNaN(v) || v <= 0 {
		return dash
	}
	return fmt.Sprintf("%.2f", v)
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
var rightAligned = map[int]bool{colIOPS: true, colMBps: true, colP50: true, colP99: true, colCPU: true, colCPUSplit: true}

// WriteTable prints the report as a heading, the aligned table and the goals.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "nvmeof benchmark · %s · %s · kernel %s · %d CPUs · %s · nbdkit %s · memory %s · %s, %g s per job\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Host, r.Kernel, r.CPUs, r.Fio, r.Nbdkit, r.MemSize, r.Mode, r.RuntimeS)
	rows := r.Table()
	widths := make([]int, numCols)
	for _, row := range rows {
		for i, cell := range row {
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
			if rightAligned[i] {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	b.WriteString("\nIOPS of the ceilings: datagrams (GSO: 4 KiB segments) received per second. MB/s = 1e6 bytes/s.\n")
	b.WriteString("CPU s/GB: user+system CPU seconds per 1e9 bytes moved (all jobs of the file, prep jobs too), client + server:\n")
	b.WriteString("the fio process (all threads, the engine's included; from wait4) + the server (nbdkit, nvmetd; from /proc/PID/stat).\n")
	b.WriteString("Ceilings: sender + receiver.\n")
	if l := max(r.Ceilings.Datagram.Loss(), r.Ceilings.GSO.Loss()); l > 0.2 {
		fmt.Fprintf(&b, "WARNING: the receiver lost up to %.0f %% of the ceilings' datagrams (other work on the machine?): ratios to them are unreliable.\n", l*100)
	}
	if r.LoadStart >= 0 && r.LoadEnd >= 0 && (r.LoadStart != 0 || r.LoadEnd != 0) {
		fmt.Fprintf(&b, "Load average (1 min) %.2f at the start, %.2f at the end, on %d CPUs.\n", r.LoadStart, r.LoadEnd, r.CPUs)
	}
	if r.NvmeofTarget != "" {
		fmt.Fprintf(&b, "nvmeof target: %s.\n", r.NvmeofTarget)
	}
	if r.NvmeofSkipped != "" {
		fmt.Fprintf(&b, "nvmeof: not run: %s\n", r.NvmeofSkipped)
	}
	b.WriteString("\ngoals (memory backend, loopback, measured in this run)\n")
	for _, g := range r.Goals {
		status := "NOT MEASURED"
		if g.Pass != nil {
			status = "FAIL"
			if *g.Pass {
				status = "PASS"
			}
		}
		fmt.Fprintf(&b, "  %-12s %s: %s (%s)\n", status, g.Name, g.Measured, g.Reference)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("report: write table: %w", err)
	}
	return nil
}

// Chart returns the report as a bar chart: one group per job, an IOPS panel
// and an MB/s panel, nbdkit and nvmeof side by side, the ceilings as lines.
func (r *Report) Chart() chart.Chart {
	nvName := "nvmeof, fio external engine"
	if r.NvmeofSkipped != "" {
		nvName += " (not run)"
	}
	ch := chart.Chart{
		Title: "nvmeof vs nbdkit: fio jobs on loopback, memory backends",
		Subtitle: fmt.Sprintf("%s · %s · kernel %s · %d CPUs · %s · %g s per job",
			r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Host, r.Kernel, r.CPUs, r.Fio, r.RuntimeS),
		XLabel: "fio job (examples/fio/NAME.fio): pattern, block size, queue depth",
		Series: []chart.Series{
			{Name: "nbdkit memory + fio nbd engine", Color: chart.Blue},
			{Name: nvName, Color: chart.Orange},
		},
		Width:  1800,
		Height: 1200,
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
		label := strings.Replace(strings.Replace(j.Name, "-", "\n", 1), "-verify", "\nverify", 1)
		label = strings.ReplaceAll(label, "-", " ")
		iops.Groups = append(iops.Groups, chart.Group{Label: label, Values: []float64{
			val(j.Nbdkit, func(m *Metrics) float64 { return m.IOPS }),
			val(j.Nvmeof, func(m *Metrics) float64 { return m.IOPS }),
		}})
		mb.Groups = append(mb.Groups, chart.Group{Label: label, Values: []float64{
			val(j.Nbdkit, func(m *Metrics) float64 { return m.MBps }),
			val(j.Nvmeof, func(m *Metrics) float64 { return m.MBps }),
		}})
	}
	if d := r.Ceilings.Datagram.PerSecond; d > 0 {
		iops.Lines = append(iops.Lines, chart.RefLine{Value: d, Label: "UDP 4 KiB datagrams/s (sendmmsg) ceiling:", Color: chart.Red})
	}
	if g := r.Ceilings.GSO.GBps; g > 0 {
		mb.Lines = append(mb.Lines, chart.RefLine{Value: g * 1e3, Label: "UDP GSO+GRO ceiling:", Color: chart.Red})
	}
	ch.Panels = []chart.Panel{iops, mb}
	if r.NvmeofSkipped != "" {
		ch.Notes = append(ch.Notes, "nvmeof not run: "+cut(r.NvmeofSkipped, 120))
	}
	if m := r.Ceilings.PingPong.Median; m > 0 {
		ch.Notes = append(ch.Notes, fmt.Sprintf("UDP 64 B ping-pong RTT: p50 %.1f µs, p99 %.1f µs", float64(m)/1e3, float64(r.Ceilings.PingPong.P99)/1e3))
	}
	return ch
}
