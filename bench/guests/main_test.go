package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// testdata holds the rr4k-qd1 pair of a quick run of
// scripts/bench-guests.sh (fio 3.33 JSON from the host guest).
func TestLoadAndTable(t *testing.T) {
	res, err := load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0].Job != "rr4k-qd1" {
		t.Fatalf("rows %+v, want the rr4k-qd1 row only", res.Rows)
	}
	r := res.Rows[0]
	k, n := r.Sides["kernel"], r.Sides["nvmetd"]
	if k == nil || n == nil {
		t.Fatalf("sides %v", r.Sides)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, b) }
	if !near(k.IOPS, 81.051369) || !near(n.IOPS, 42.827194) || !near(k.P50us, 8224.768) || !near(n.P50us, 14352.384) {
		t.Errorf("kernel %+v, nvmetd %+v", k, n)
	}
	if !near(r.IOPSRatio, 42.827194/81.051369) || !near(r.P50Ratio, 14352.384/8224.768) {
		t.Errorf("ratios %v %v", r.IOPSRatio, r.P50Ratio)
	}
	if len(res.Goals) != 2 || res.Goals[0].Met || res.Goals[1].Met {
		t.Errorf("goals %+v: both missed in this run", res.Goals)
	}
	var b bytes.Buffer
	printTable(&b, res)
	for _, want := range []string{"rr4k-qd1", "81", "43", "0.53x", "1.75x", "MISSED"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestLoadEmpty(t *testing.T) {
	if _, err := load(t.TempDir()); err == nil {
		t.Fatal("no error for a directory without fio results")
	}
}
