// Command guests reports the side-by-side benchmark of scripts/bench-guests.sh:
// fio in one kernel-peer guest (the kernel's nvme-rdma host) against two
// targets in the other guest with the same null backing, the kernel's
// nvmet-rdma and nvmetd on the ibverbs provider. It reads the fio JSON
// files the host guest wrote (fio-TARGET-JOB.json), prints a table with
// IOPS, bandwidth, p50 completion latency and the ratios nvmetd/kernel,
// and writes the same as JSON.
//
//	go run ./bench/guests -dir SHARE/out/b [-json results.json] [-meta k=v ...]
//
// Under QEMU TCG the absolute numbers mean little; the ratios are the
// result. The goal (issue 10): nvmetd at least 1.0x the kernel's IOPS and
// at most 1.0x its QD1 p50.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/nvmeof/nvmeof/bench/fio"
	"github.com/nvmeof/nvmeof/bench/report"
)

// Targets and jobs, in table order.
var (
	targets = []string{"kernel", "nvmetd"}
	jobs    = []string{"rr4k-qd32", "rr4k-qd1", "sr128k"}
)

// Side is one job on one target.
type Side struct {
	IOPS     float64 `json:"iops"`
	MBps     float64 `json:"mb_per_s"`
	P50us    float64 `json:"clat_p50_us"`
	P99us    float64 `json:"clat_p99_us"`
	MeanUs   float64 `json:"clat_mean_us"`
	CPUpct   float64 `json:"fio_cpu_pct"`
	Runtime  int64   `json:"runtime_ms"`
	TotalIOs int64   `json:"total_ios"`
}

// Row is one job compared.
type Row struct {
	Job       string           `json:"job"`
	Sides     map[string]*Side `json:"sides"`
	IOPSRatio float64          `json:"iops_ratio_nvmetd_kernel,omitempty"`
	P50Ratio  float64          `json:"p50_ratio_nvmetd_kernel,omitempty"`
}

// Result is the whole report.
type Result struct {
	Meta  map[string]string `json:"meta,omitempty"`
	Rows  []Row             `json:"rows"`
	Goals []Goal            `json:"goals"`
}

// Goal is one of the targets and whether it was met.
type Goal struct {
	What  string  `json:"what"`
	Ratio float64 `json:"ratio"`
	Met   bool    `json:"met"`
}

func main() {
	dir := flag.String("dir", "", "directory with fio-TARGET-JOB.json files (the host guest's out/)")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	meta := report.MetaFlag{}
	flag.Var(meta, "meta", "KEY=VALUE recorded in the JSON (repeatable)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: guests -dir DIR [-json FILE] [-meta K=V ...]")
		os.Exit(2)
	}
	res, err := load(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guests:", err)
		os.Exit(1)
	}
	res.Meta = meta
	printTable(os.Stdout, res)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "guests:", err)
			os.Exit(1)
		}
	}
}

// load reads every fio-TARGET-JOB.json of dir.
func load(dir string) (*Result, error) {
	res := &Result{}
	for _, j := range jobs {
		row := Row{Job: j, Sides: map[string]*Side{}}
		for _, t := range targets {
			p := filepath.Join(dir, fmt.Sprintf("fio-%s-%s.json", t, j))
			b, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out, err := fio.Parse(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if len(out.Jobs) != 1 {
				return nil, fmt.Errorf("%s: %d jobs, want 1", p, len(out.Jobs))
			}
			fj := &out.Jobs[0]
			if fj.Error != 0 {
				return nil, fmt.Errorf("%s: fio error %d", p, fj.Error)
			}
			r := fj.Read
			s := &Side{IOPS: r.IOPS, MBps: r.BwBytes / 1e6, MeanUs: r.Clat.Mean / 1e3, CPUpct: fj.UsrCPU + fj.SysCPU,
				Runtime: r.RuntimeMS, TotalIOs: r.TotalIOs}
			if v, ok := r.Clat.Percentile(50); ok {
				s.P50us = v / 1e3
			}
			if v, ok := r.Clat.Percentile(99); ok {
				s.P99us = v / 1e3
			}
			row.Sides[t] = s
		}
		if len(row.Sides) == 0 {
			continue
		}
		k, n := row.Sides["kernel"], row.Sides["nvmetd"]
		if k != nil && n != nil {
			if k.IOPS > 0 {
				row.IOPSRatio = n.IOPS / k.IOPS
			}
			if k.P50us > 0 {
				row.P50Ratio = n.P50us / k.P50us
			}
		}
		res.Rows = append(res.Rows, row)
	}
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("no fio results in %s", dir)
	}
	for _, r := range res.Rows {
		if r.IOPSRatio > 0 {
			res.Goals = append(res.Goals, Goal{What: r.Job + ": nvmetd IOPS >= 1.0x kernel", Ratio: r.IOPSRatio, Met: r.IOPSRatio >= 1.0})
		}
		if r.Job == "rr4k-qd1" && r.P50Ratio > 0 {
			res.Goals = append(res.Goals, Goal{What: "rr4k-qd1: nvmetd p50 <= 1.0x kernel", Ratio: r.P50Ratio, Met: r.P50Ratio <= 1.0})
		}
	}
	return res, nil
}

func printTable(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\tkernel IOPS\tnvmetd IOPS\tIOPS ratio\tkernel MB/s\tnvmetd MB/s\tkernel p50 µs\tnvmetd p50 µs\tp50 ratio\t")
	f := func(s *Side, v func(*Side) float64, prec int) string {
		if s == nil {
			return "-"
		}
		return fmt.Sprintf("%.*f", prec, v(s))
	}
	ratio := func(r float64) string {
		if r == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", r)
	}
	for _, r := range res.Rows {
		k, n := r.Sides["kernel"], r.Sides["nvmetd"]
		iops := func(s *Side) float64 { return s.IOPS }
		mbps := func(s *Side) float64 { return s.MBps }
		p50 := func(s *Side) float64 { return s.P50us }
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Job,
			f(k, iops, 0), f(n, iops, 0), ratio(r.IOPSRatio),
			f(k, mbps, 1), f(n, mbps, 1),
			f(k, p50, 0), f(n, p50, 0), ratio(r.P50Ratio))
	}
	tw.Flush()
	for _, g := range res.Goals {
		mark := "met"
		if !g.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "goal %-40s %.2fx  %s\n", g.What, g.Ratio, mark)
	}
}
