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
	for _, c := range []color.RGBA{Blue, Orange, white, ink, Red} {
		if !seen[c] {
			t.Errorf("colour %v not drawn", c)
		}
	}
}

func TestDefaultSize(t *testing.T) {
	img := Chart{}.Draw()
	if b := img.Bounds(); b.Dx() != 1600 || b.Dy() != 1200 {
		t.Errorf("default size %v, want 1600×1200", b)
	}
	// No panels, no series: still a valid white image.
	if img.RGBAAt(0, 0) != white {
		t.Errorf("background %v", img.RGBAAt(0, 0))
	}
}

func TestFont(t *testing.T) {
	for r := rune(32); r < 127; r++ {
		if _, ok := glyphs[r]; !ok {
			t.Errorf("no glyph for %q", r)
		}
	}
	for r, s := range glyphRows {
		rows := strings.Fields(s)
		if len(rows) != glyphH {
			t.Errorf("glyph %q has %d rows", r, len(rows))
		}
		for _, row := range rows {
			if len(row) != glyphW || strings.Trim(row, ".#") != "" {
				t.Errorf("glyph %q row %q", r, row)
			}
		}
	}
	if glyphFor('\u2603') != box {
		t.Error("an unknown rune does not draw as a box")
	}
	if got := TextWidth("abc", 2); got != (3*advance-1)*2 {
		t.Errorf("TextWidth = %d", got)
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
