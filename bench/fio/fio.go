// Package fio runs fio job files and reads fio's JSON output
// (--output-format=json, as fio 3.33 writes it).
package fio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Output is fio's JSON report of one run.
type Output struct {
	Version       string            `json:"fio version"`
	Timestamp     int64             `json:"timestamp"`
	GlobalOptions map[string]string `json:"global options"`
	Jobs          []Job             `json:"jobs"`
}

// Job is one job's statistics.
type Job struct {
	Name    string            `json:"jobname"`
	GroupID int               `json:"groupid"`
	Error   int               `json:"error"`
	Options map[string]string `json:"job options"`
	Read    IOStats           `json:"read"`
	Write   IOStats           `json:"write"`
	Trim    IOStats           `json:"trim"`
	// RuntimeMS is the job's run time in milliseconds (fio's job_runtime);
	// UsrCPU and SysCPU are the job's CPU use in percent of one CPU over it.
	RuntimeMS int64   `json:"job_runtime"`
	UsrCPU    float64 `json:"usr_cpu"`
	SysCPU    float64 `json:"sys_cpu"`
	Ctx       int64   `json:"ctx"`
}

// IOStats is one direction (read, write or trim) of a job.
type IOStats struct {
	IOBytes   int64   `json:"io_bytes"`
	BwBytes   float64 `json:"bw_bytes"`
	IOPS      float64 `json:"iops"`
	RuntimeMS int64   `json:"runtime"`
	TotalIOs  int64   `json:"total_ios"`
	Slat      Latency `json:"slat_ns"`
	Clat      Latency `json:"clat_ns"`
	Lat       Latency `json:"lat_ns"`
}

// Latency is a latency distribution in nanoseconds. Percentiles maps fio's
// keys ("50.000000") to nanoseconds; it is empty when fio did not compute
// percentiles (no I/O in that direction, or percentiles turned off).
type Latency struct {
	Min         float64            `json:"min"`
	Max         float64            `json:"max"`
	Mean        float64            `json:"mean"`
	Stddev      float64            `json:"stddev"`
	N           int64              `json:"N"`
	Percentiles map[string]float64 `json:"percentile"`
}

// ErrNoJSON is returned by Parse when the input holds no JSON object.
var ErrNoJSON = errors.New("fio: no JSON report in output")

// Parse reads fio's JSON output. Lines that fio or an engine print before the
// report (the nbd engine's "fio: connected to NBD server", error lines) and
// anything after it are skipped.
func Parse(data []byte) (*Output, error) {
	start := -1
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		line := data[off:]
		if end >= 0 {
			line = data[off : off+end]
		}
		if bytes.Equal(bytes.TrimSpace(line), []byte("{")) {
			start = off
			break
		}
		if end < 0 {
			break
		}
		off += end + 1
	}
	if start < 0 {
		return nil, ErrNoJSON
	}
	var out Output
	dec := json.NewDecoder(bytes.NewReader(data[start:]))
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("fio: decode JSON report: %w", err)
	}
	if out.Version == "" && out.Jobs == nil {
		return nil, fmt.Errorf("fio: JSON report has neither a version nor jobs: %w", ErrNoJSON)
	}
	return &out, nil
}

// percentileKey returns p's percentile key as fio writes it ("%f": 50 -> "50.000000").
func percentileKey(p float64) string { return strconv.FormatFloat(p, 'f', 6, 64) }

// Percentile returns the latency at percentile p (for example 50 or 99) in
// nanoseconds, and false when fio did not report it. When fio has no key for
// exactly p, the next higher percentile it reported is used.
func (l Latency) Percentile(p float64) (float64, bool) {
	if v, ok := l.Percentiles[percentileKey(p)]; ok {
		return v, true
	}
	type kv struct{ p, v float64 }
	var all []kv
	for k, v := range l.Percentiles {
		q, err := strconv.ParseFloat(k, 64)
		if err != nil {
			continue
		}
		all = append(all, kv{q, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].p < all[j].p })
	for _, e := range all {
		if e.p >= p {
			return e.v, true
		}
	}
	return 0, false
}

// Option returns the job's option name, from the job's own options or else
// from the global ones (the job file's [global] section and the command line).
func (o *Output) Option(j *Job, name string) (string, bool) {
	if v, ok := j.Options[name]; ok {
		return v, true
	}
	v, ok := o.GlobalOptions[name]
	return v, ok
}

// ParseSize reads a fio size ("4k", "128K", "1m", "4096", "64mi") as bytes.
// fio's k, m, g, t suffixes are powers of 1024 (kb_base=1024, the default).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("fio: bad size %q", s)
	}
	return int64(v * float64(mult)), nil
}

// CPUSeconds is the job's user+system CPU time in seconds.
func (j *Job) CPUSeconds() float64 {
	return (j.UsrCPU + j.SysCPU) / 100 * float64(j.RuntimeMS) / 1000
}

// Bytes is the data the job moved in all directions.
func (j *Job) Bytes() int64 { return j.Read.IOBytes + j.Write.IOBytes + j.Trim.IOBytes }
