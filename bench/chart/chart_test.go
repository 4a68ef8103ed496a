package chart

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"strings"
	"testing"
)

func sample() Chart {
	return Chart{
		Title:    "sample",
		Subtitle: "two series, one missing value",
		XLabel:   "job",
		Series:   []Series{{"a", Blue}, {"b", Orange}},
		Panels: []Panel{
			{Title: "IOPS", YLabel: "IOPS", Groups: []Group{
				{"randread\n4k qd1", []float64{36000, math.NaN()}},
				{"seqread\n128k qd8", []float64{11000, 22000}},
			}, Lines: []RefLine{{190000, "ceiling", Red}}},
			{Title: "MB/s", YLabel: "MB/s", Groups: []Group{
				{"x", []float64{150, 300}},
			}, Lines: []RefLine{{200, "line", Red}}},
		},
		Notes:  []string{"note"},
		Width:  800,
		Height: 600,
	}
}

func TestWritePNG(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 600 {
		t.Fatalf("size %v, want 800×600", b)
	}
	// Both series colours must appear (the bars), and the background.
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}] = true
		}
	}
	for _, c := range []color.RGBA{Blue, Orange, white, Red} {
		if !seen[c] {
			t.Errorf("colour %v not drawn", c)
		}
	}
}

func TestDefaultSize(t *testing.T) {
	var buf bytes.Buffer
	if err := (Chart{}).WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1600 || b.Dy() != 1200 {
		t.Errorf("default size %v, want 1600×1200", b)
	}
	// No panels, no series: still a valid white image.
	if r, g, b, _ := img.At(0, 0).RGBA(); r>>8 != 0xff || g>>8 != 0xff || b>>8 != 0xff {
		t.Errorf("background %v", img.At(0, 0))
	}
}

// TestTickRotation: x tick labels wider than their group are turned
// upright on one line (the hand-drawn chart's ran into each other with
// many jobs); labels that fit stay level. A multi-line label is as wide as
// its widest line.
func TestTickRotation(t *testing.T) {
	sty := style(smallSize, ink)
	labels := []string{"randread\n4k qd1", "seqwrite\n128k qd32\nverify"}
	for _, tt := range []struct {
		width  int // panel width, pixels
		groups int
		want   bool // turned
	}{
		{1800, 2, false},
		{1800, 14, false},
		{1800, 40, true},
		{800, 14, true},
	} {
		p := Panel{}
		for i := range tt.groups {
			p.Groups = append(p.Groups, Group{Label: labels[i%2]})
		}
		lay := Chart{Series: []Series{{"a", Blue}, {"b", Orange}}}.layout(p, px(float64(tt.width)))
		var ls []string
		for _, g := range p.Groups {
			ls = append(ls, g.Label)
		}
		out, rot := tickLabels(ls, lay.groupW, sty)
		if got := rot != 0; got != tt.want {
			t.Errorf("%d groups in %d px (group %.0f pt): turned %v, want %v", tt.groups, tt.width, lay.groupW.Points(), got, tt.want)
		}
		for i, l := range out {
			if tt.want && (strings.Contains(l, "\n") || sty.Height("M") > lay.groupW) {
				t.Errorf("turned label %q: not one line, or taller than its group", l)
			}
			if !tt.want && l != ls[i] {
				t.Errorf("level label %q changed to %q", ls[i], l)
			}
		}
	}
}

// TestManyGroups: a chart of 40 jobs (a job over each topology) draws.
func TestManyGroups(t *testing.T) {
	ch := sample()
	var gs []Group
	for i := range 40 {
		gs = append(gs, Group{Label: "randread\n4k qd1", Values: []float64{float64(1000 * i), math.NaN()}})
	}
	ch.Panels[0].Groups = gs
	var buf bytes.Buffer
	if err := ch.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Fatal(err)
	}
}

func TestFormatSI(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {5, "5"}, {12.5, "12.5"}, {999, "999"}, {1000, "1K"},
		{41265, "41.3K"}, {190000, "190K"}, {2.5e6, "2.5M"}, {4.2e9, "4.2G"},
		{math.NaN(), "n/a"}, {0.25, "0.25"},
	} {
		if got := FormatSI(c.v); got != c.want {
			t.Errorf("FormatSI(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		max  float64
		n    int
		want float64
	}{{100, 5, 20}, {45000, 5, 10000}, {1, 5, 0.2}, {0, 5, 1}, {730, 5, 200}} {
		if got := niceStep(c.max, c.n); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceStep(%v, %d) = %v, want %v", c.max, c.n, got, c.want)
		}
	}
}

// TestWriteCSV: the chart's data beside the picture, one row per bar; a
// missing value is an empty cell.
func TestWriteCSV(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	want := `panel,group,series,value
IOPS,randread 4k qd1,a,36000
IOPS,randread 4k qd1,b,
IOPS,seqread 128k qd8,a,11000
IOPS,seqread 128k qd8,b,22000
MB/s,x,a,150
MB/s,x,b,300
`
	if buf.String() != want {
		t.Errorf("CSV:\n%s\nwant\n%s", buf.String(), want)
	}
}
