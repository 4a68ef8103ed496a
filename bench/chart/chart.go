// Package chart draws grouped bar charts as PNG images with the standard
// library only (image, image/png) and a built-in bitmap font: no plotting
// library, no external binary.
package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
)

// Series is one kind of bar, the same in every group (one legend entry).
type Series struct {
	Name  string
	Color color.RGBA
}

// Group is one cluster of bars: one value per series, in the chart's series
// order. A NaN value draws as "n/a". Label may hold several lines ("\n").
type Group struct {
	Label  string
	Values []float64
}

// RefLine is a horizontal reference line across a panel (a ceiling). A line
// above the panel's scale is named in the panel's corner instead.
type RefLine struct {
	Value float64
	Label string
	Color color.RGBA
}

// Panel is one bar chart with its own y axis.
type Panel struct {
	Title  string
	YLabel string
	Groups []Group
	Lines  []RefLine
	// Format formats values for tick and bar labels (default: FormatSI).
	Format func(float64) string
}

// Chart is the whole picture: a title, a legend, panels stacked vertically
// and an x-axis label under the last one.
type Chart struct {
	Title    string
	Subtitle string
	XLabel   string
	Series   []Series
	Panels   []Panel
	// Notes are lines of small print at the bottom.
	Notes []string
	// Width and Height of the image in pixels (default 1600 × 1200).
	Width, Height int
}

// Colors used by default for two series and for reference lines.
var (
	Blue   = color.RGBA{0x4c, 0x72, 0xb0, 0xff}
	Orange = color.RGBA{0xdd, 0x84, 0x52, 0xff}
	Red    = color.RGBA{0xc4, 0x3c, 0x3c, 0xff}
	Grey   = color.RGBA{0x88, 0x88, 0x88, 0xff}
	ink    = color.RGBA{0x20, 0x20, 0x20, 0xff}
	grid   = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	white  = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// FormatSI formats v with a K, M or G suffix and three significant digits.
func FormatSI(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "K"
	}
	return trim(v)
}

// trim formats with three significant digits and no trailing zeros.
func trim(v float64) string {
	var s string
	switch a := math.Abs(v); {
	case a >= 100:
		s = fmt.Sprintf("%.0f", v)
	case a >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// niceStep returns a 1, 2 or 5 × 10^n step that splits max into about n
// intervals.
func niceStep(max float64, n int) float64 {
	if max <= 0 || math.IsNaN(max) || math.IsInf(max, 0) {
		return 1
	}
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// canvas wraps an RGBA image with drawing helpers that clip to its bounds.
type canvas struct{ *image.RGBA }

func (c canvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	r := image.Rect(x0, y0, x1, y1).Canon().Intersect(c.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.SetRGBA(x, y, col)
		}
	}
}

func (c canvas) dashedH(x0, x1, y int, col color.RGBA) {
	for x := x0; x < x1; x++ {
		if (x-x0)%12 < 7 {
			c.fill(x, y-1, x+1, y+1, col)
		}
	}
}

// text draws s with its top-left corner at (x, y).
func (c canvas) text(x, y int, s string, scale int, col color.RGBA) {
	for i, r := range []rune(s) {
		g := glyphFor(r)
		ox := x + i*advance*scale
		y := y
		if descenders[r] {
			y += 2 * scale
		}
		for gy := 0; gy < glyphH; gy++ {
			for gx := 0; gx < glyphW; gx++ {
				if g[gy][gx] {
					c.fill(ox+gx*scale, y+gy*scale, ox+(gx+1)*scale, y+(gy+1)*scale, col)
				}
			}
		}
	}
}

// centered draws s centred horizontally on cx.
func (c canvas) centered(cx, y int, s string, scale int, col color.RGBA) {
	c.text(cx-TextWidth(s, scale)/2, y, s, scale, col)
}

// vtext draws s rotated 90° counter-clockwise (reading bottom to top), with
// its bottom-left corner at (x, y).
func (c canvas) vtext(x, y int, s string, scale int, col color.RGBA) {
	for i, r := range []rune(s) {
		g := glyphFor(r)
		oy := y - i*advance*scale
		x := x
		if descenders[r] {
			x += 2 * scale
		}
		for gy := 0; gy < glyphH; gy++ {
			for gx := 0; gx < glyphW; gx++ {
				if g[gy][gx] {
					px := x + gy*scale
					py := oy - (gx+1)*scale
					c.fill(px, py, px+scale, py+scale, col)
				}
			}
		}
	}
}

// Draw renders the chart.
func (ch Chart) Draw() *image.RGBA {
	w, h := ch.Width, ch.Height
	if w <= 0 {
		w = 1600
	}
	if h <= 0 {
		h = 1200
	}
	c := canvas{image.NewRGBA(image.Rect(0, 0, w, h))}
	c.fill(0, 0, w, h, white)

	const margin = 24
	y := margin
	if ch.Title != "" {
		c.text(margin, y, ch.Title, 3, ink)
		y += lineH * 3
	}
	if ch.Subtitle != "" {
		c.text(margin, y, ch.Subtitle, 2, Grey)
		y += lineH * 2
	}
	// Legend.
	lx := margin
	y += 6
	for _, s := range ch.Series {
		c.fill(lx, y, lx+22, y+14, s.Color)
		c.text(lx+30, y, s.Name, 2, ink)
		lx += 30 + TextWidth(s.Name, 2) + 40
	}
	y += lineH*2 + 10

	bottom := h - margin
	if ch.XLabel != "" {
		bottom -= lineH * 2
	}
	bottom -= len(ch.Notes) * lineH * 2
	if n := len(ch.Panels); n > 0 {
		ph := (bottom - y) / n
		for i, p := range ch.Panels {
			ch.drawPanel(c, p, margin, y+i*ph, w-margin, y+(i+1)*ph-8)
		}
	}
	yb := bottom
	if ch.XLabel != "" {
		c.centered(w/2, yb+4, ch.XLabel, 2, ink)
		yb += lineH * 2
	}
	for _, n := range ch.Notes {
		c.text(margin, yb+4, n, 2, Grey)
		yb += lineH * 2
	}
	return c.RGBA
}

// drawPanel draws p inside the rectangle (x0, y0)-(x1, y1).
func (ch Chart) drawPanel(c canvas, p Panel, x0, y0, x1, y1 int) {
	format := p.Format
	if format == nil {
		format = FormatSI
	}
	c.text(x0, y0, p.Title, 2, ink)
	top := y0 + lineH*2 + 8

	// Labels under the bars take as many lines as the longest label.
	labelLines := 1
	for _, g := range p.Groups {
		labelLines = max(labelLines, strings.Count(g.Label, "\n")+1)
	}
	base := y1 - labelLines*lineH*2 - 6 // the x axis

	maxV := 0.0
	for _, g := range p.Groups {
		for _, v := range g.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				maxV = math.Max(maxV, v)
			}
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	step := niceStep(maxV*1.1, 5)
	ymax := math.Ceil(maxV*1.1/step) * step

	// Y axis: tick labels, grid, axis label.
	tickW := 0
	for v := 0.0; v <= ymax+step/2; v += step {
		tickW = max(tickW, TextWidth(format(v), 2))
	}
	axisX := x0 + lineH*2 + 8 + tickW + 8
	scaleY := func(v float64) int { return base - int(math.Round(v/ymax*float64(base-top))) }
	for v := 0.0; v <= ymax+step/2; v += step {
		yy := scaleY(v)
		c.fill(axisX, yy, x1, yy+1, grid)
		s := format(v)
		c.text(axisX-8-TextWidth(s, 2), yy-TextHeight(2)/2, s, 2, ink)
	}
	if p.YLabel != "" {
		mid := (top + base) / 2
		c.vtext(x0, mid+TextWidth(p.YLabel, 2)/2, p.YLabel, 2, ink)
	}
	c.fill(axisX-1, top, axisX+1, base+1, ink)
	c.fill(axisX, base, x1, base+2, ink)

	// Bars.
	n := len(p.Groups)
	if n > 0 {
		gw := float64(x1-axisX) / float64(n)
		ns := max(len(ch.Series), 1)
		bw := gw * 0.8 / float64(ns)
		for gi, g := range p.Groups {
			gx := float64(axisX) + gw*float64(gi) + gw*0.1
			for si := 0; si < ns; si++ {
				v := math.NaN()
				if si < len(g.Values) {
					v = g.Values[si]
				}
				col := Grey
				if si < len(ch.Series) {
					col = ch.Series[si].Color
				}
				bx0 := int(gx + bw*float64(si))
				bx1 := int(gx + bw*float64(si+1) - 2)
				cx := (bx0 + bx1) / 2
				if math.IsNaN(v) || math.IsInf(v, 0) {
					s := labelScale("n/a", bx1-bx0+4)
					c.centered(cx, base-TextHeight(s)-4, "n/a", s, Grey)
					continue
				}
				c.fill(bx0, scaleY(v), bx1, base, col)
				label := format(v)
				s := labelScale(label, bx1-bx0+4)
				c.centered(cx, scaleY(v)-TextHeight(s)-4, label, s, ink)
			}
			for li, line := range strings.Split(g.Label, "\n") {
				c.centered(int(gx+gw*0.4), base+8+li*lineH*2, line, 2, ink)
			}
		}
	}

	// Reference lines: drawn when on scale, named in the corner otherwise.
	corner := top
	for _, l := range p.Lines {
		label := l.Label + " " + format(l.Value)
		if l.Value <= ymax {
			yy := scaleY(l.Value)
			c.dashedH(axisX, x1, yy, l.Color)
			c.text(x1-TextWidth(label, 2)-4, yy-TextHeight(2)-4, label, 2, l.Color)
			continue
		}
		label += " (above this scale)"
		c.text(x1-TextWidth(label, 2)-4, corner-lineH*2-4, label, 2, l.Color)
		corner += lineH * 2
	}
}

// labelScale is 2 when s fits in width pixels at that scale, else 1.
func labelScale(s string, width int) int {
	if TextWidth(s, 2) <= width {
		return 2
	}
	return 1
}

// WritePNG draws the chart and encodes it as PNG to w.
func (ch Chart) WritePNG(w io.Writer) error {
	if err := png.Encode(w, ch.Draw()); err != nil {
		return fmt.Errorf("chart: encode PNG: %w", err)
	}
	return nil
}
