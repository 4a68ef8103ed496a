package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SyscallEvent is the perf tracepoint counted: every system call entry.
const SyscallEvent = "raw_syscalls:sys_enter"

// perfInterval is the interval of the servers' perf stat -I output: the
// resolution with which their system calls are cut to a job's run.
const perfInterval = 100 * time.Millisecond

// CheckPerf reports whether `perf stat -e raw_syscalls:sys_enter` counts the
// system calls of a command it runs here, and why not. (On this project's
// VMs perf cannot attach to a running process, -p counts nothing, so the
// runner runs fio and the servers under perf.)
func CheckPerf(ctx context.Context, perf string) error {
	if perf == "" {
		perf = "perf"
	}
	if _, err := exec.LookPath(perf); err != nil {
		return fmt.Errorf("%s not found (apt-get install linux-perf)", perf)
	}
	dir, err := os.MkdirTemp("", "nvmeof-bench-perf-")
	if err != nil {
		return fmt.Errorf("perf check: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "perf.csv")
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := exec.CommandContext(cctx, perf, perfStatArgs(out, 0, "true")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf stat -e %s: %w: %s", SyscallEvent, err, cut(string(b), 200))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("perf stat: %w", err)
	}
	n, err := parsePerfTotal(data)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("perf stat -e %s counted %v system calls of `true`", SyscallEvent, n)
	}
	return nil
}

// perfStatArgs returns perf's arguments to count the system calls of argv
// (all its threads and children) into out as CSV, every interval if not 0.
func perfStatArgs(out string, interval time.Duration, argv ...string) []string {
	args := []string{"stat", "-e", SyscallEvent, "-x", ",", "-o", out}
	if interval > 0 {
		args = append(args, "-I", strconv.FormatInt(interval.Milliseconds(), 10))
	}
	return append(append(args, "--"), argv...)
}

// perfLine is one line of perf stat -x, output: the interval's end (in
// seconds from perf's start; 0 without -I) and the count; notCounted when
// perf printed "<not counted>" (count 0).
type perfLine struct {
	at         float64
	count      float64
	notCounted bool
}

// parsePerfLines reads perf stat -x, output: "COUNT,UNIT,EVENT,..." or,
// with -I, "TIME,COUNT,UNIT,EVENT,...". Comment and empty lines are
// skipped. "<not counted>" reads as 0, notCounted: perf prints it for an
// interval in which no counted task ran (an idle server), and, without
// -I, when it could not count at all.
func parsePerfLines(data []byte) ([]perfLine, error) {
	var lines []perfLine
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ",")
		i := slices.IndexFunc(f, func(v string) bool { return strings.TrimSpace(v) == SyscallEvent })
		if i < 0 {
			continue
		}
		var pl perfLine
		switch i {
		case 2: // COUNT,UNIT,EVENT
		case 3: // TIME,COUNT,UNIT,EVENT
			t, err := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
			if err != nil {
				return nil, fmt.Errorf("perf output %q: %w", l, err)
			}
			pl.at = t
		default:
			return nil, fmt.Errorf("perf output %q: unexpected fields", l)
		}
		c := strings.TrimSpace(f[i-2])
		if strings.HasPrefix(c, "<") {
			pl.notCounted = true
			lines = append(lines, pl)
			continue
		}
		v, err := strconv.ParseFloat(c, 64)
		if err != nil {
			return nil, fmt.Errorf("perf output %q: %w", l, err)
		}
		pl.count = v
		lines = append(lines, pl)
	}
	return lines, nil
}

// parsePerfTotal returns the count of perf stat -x, output without -I.
func parsePerfTotal(data []byte) (float64, error) {
	lines, err := parsePerfLines(data)
	if err != nil {
		return 0, err
	}
	if len(lines) == 0 {
		return 0, fmt.Errorf("perf output: no %s line", SyscallEvent)
	}
	var n float64
	counted := false
	for _, l := range lines {
		n += l.count
		counted = counted || !l.notCounted
	}
	if !counted {
		return 0, fmt.Errorf("perf output: %s <not counted> (perf could not count)", SyscallEvent)
	}
	return n, nil
}

// windowCount sums perf -I intervals over the window [from, to] (seconds
// from perf's start), each interval pro rata of its overlap with the window.
// The first interval starts at 0. ok is false while the output does not
// reach the window's end yet.
func windowCount(lines []perfLine, from, to float64) (n float64, ok bool) {
	prev := 0.0
	for _, l := range lines {
		a, b := prev, l.at
		prev = l.at
		if b <= a {
			continue
		}
		lo, hi := max(a, from), min(b, to)
		if hi > lo {
			n += l.count * (hi - lo) / (b - a)
		}
	}
	return n, prev >= to
}

// snmpUDP reads the Udp InDatagrams and OutDatagrams counters of the network
// namespace /proc/PID/net/snmp shows (pid 0: /proc/net/snmp, the caller's).
func snmpUDP(pid int) (in, out float64, err error) {
	path := "/proc/net/snmp"
	if pid > 0 {
		path = filepath.Join("/proc", strconv.Itoa(pid), "net", "snmp")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("udp counters: %w", err)
	}
	return parseSNMPUDP(string(b))
}

// parseSNMPUDP reads InDatagrams and OutDatagrams from the text of
// /proc/net/snmp: a "Udp:" line of names, then one of values.
func parseSNMPUDP(text string) (in, out float64, err error) {
	var names []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "Udp: ") {
			continue
		}
		f := strings.Fields(l)[1:]
		if names == nil {
			names = f
			continue
		}
		if len(f) != len(names) {
			return 0, 0, errors.New("udp counters: names and values differ in number")
		}
		in, out = -1, -1
		for i, n := range names {
			v, perr := strconv.ParseFloat(f[i], 64)
			if perr != nil {
				return 0, 0, fmt.Errorf("udp counters: %s: %w", n, perr)
			}
			switch n {
			case "InDatagrams":
				in = v
			case "OutDatagrams":
				out = v
			}
		}
		if in < 0 || out < 0 {
			return 0, 0, errors.New("udp counters: no InDatagrams or OutDatagrams")
		}
		return in, out, nil
	}
	return 0, 0, errors.New("udp counters: no Udp lines")
}

// udpCounts sums the UDP InDatagrams and OutDatagrams counters of the
// network namespaces of pids (0: the runner's), with the Udp6 ones of
// /proc/PID/net/snmp6 when v6 (IPv4 and IPv6 counters are separate).
func udpCounts(pids []int, v6 bool) (in, out float64, err error) {
	if len(pids) == 0 {
		pids = []int{0}
	}
	for _, pid := range pids {
		i, o, err := snmpUDP(pid)
		if err != nil {
			return 0, 0, err
		}
		in, out = in+i, out+o
		if !v6 {
			continue
		}
		path := "/proc/net/snmp6"
		if pid > 0 {
			path = filepath.Join("/proc", strconv.Itoa(pid), "net", "snmp6")
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, 0, fmt.Errorf("udp6 counters: %w", err)
		}
		i, o, err = parseSNMP6UDP(string(b))
		if err != nil {
			return 0, 0, err
		}
		in, out = in+i, out+o
	}
	return in, out, nil
}

// parseSNMP6UDP reads Udp6InDatagrams and Udp6OutDatagrams from the text
// of /proc/net/snmp6: one "name value" pair a line.
func parseSNMP6UDP(text string) (in, out float64, err error) {
	in, out = -1, -1
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || (f[0] != "Udp6InDatagrams" && f[0] != "Udp6OutDatagrams") {
			continue
		}
		v, perr := strconv.ParseFloat(f[1], 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("udp6 counters: %s: %w", f[0], perr)
		}
		if f[0] == "Udp6InDatagrams" {
			in = v
		} else {
			out = v
		}
	}
	if in < 0 || out < 0 {
		return 0, 0, errors.New("udp6 counters: no Udp6InDatagrams or Udp6OutDatagrams")
	}
	return in, out, nil
}

// cut cuts s to its first line and n bytes.
func cut(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
