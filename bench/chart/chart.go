// Package chart draws grouped bar charts as PNG images with
// gonum.org/v1/plot: panels stacked vertically under a title, a subtitle
// and a legend, with notes in small print at the bottom. Labels that would
// run into each other are turned upright: x tick labels wider than their
// group (on one line), value labels wider than their bar.
package chart

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
// above the panel's scale is named under the panel's title instead.
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

// dpi maps pixels to vg lengths: an image of Width pixels is Width/dpi
// inches.
const dpi = 96

// px is n pixels as a vg length.
func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / dpi }

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

// style returns a text style of the default font at size points.
func style(size float64, col color.Color) text.Style {
	return text.Style{Color: col, Font: font.From(plot.DefaultFont, vg.Points(size)), Handler: plot.DefaultTextHandler}
}

// Text sizes in points.
const (
	titleSize = 18
	bigSize   = 13
	smallSize = 11
)

// Draw renders the chart on a new image canvas.
func (ch Chart) Draw() (*vgimg.Canvas, error) {
	w, h := ch.Width, ch.Height
	if w <= 0 {
		w = 1600
	}
	if h <= 0 {
		h = 1200
	}
	c := vgimg.NewWith(vgimg.UseWH(px(float64(w)), px(float64(h))), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(white))
	dc := draw.New(c)
	margin := px(24)
	left, right := dc.Min.X+margin, dc.Max.X-margin

	// Header, top down: title, subtitle, legend.
	y := dc.Max.Y - margin
	line := func(s string, sty text.Style) {
		y -= sty.Height(s)
		dc.FillText(sty, vg.Point{X: left, Y: y}, s)
		y -= px(6)
	}
	if ch.Title != "" {
		line(ch.Title, style(titleSize, ink))
	}
	if ch.Subtitle != "" {
		line(ch.Subtitle, style(smallSize, Grey))
	}
	if len(ch.Series) > 0 {
		sty := style(bigSize, ink)
		sty.YAlign = draw.YCenter
		lh := sty.Height("M")
		mid := y - lh/2
		x := left
		for _, s := range ch.Series {
			dc.FillPolygon(s.Color, []vg.Point{{X: x, Y: mid - px(7)}, {X: x + px(22), Y: mid - px(7)}, {X: x + px(22), Y: mid + px(7)}, {X: x, Y: mid + px(7)}})
			dc.FillText(sty, vg.Point{X: x + px(30), Y: mid}, s.Name)
			x += px(30) + sty.Width(s.Name) + px(40)
		}
		y -= lh + px(10)
	}

	// Footer, bottom up: notes, then the x-axis label.
	bottom := dc.Min.Y + margin
	for i := len(ch.Notes) - 1; i >= 0; i-- {
		sty := style(smallSize, Grey)
		dc.FillText(sty, vg.Point{X: left, Y: bottom}, ch.Notes[i])
		bottom += sty.Height(ch.Notes[i]) + px(4)
	}
	if ch.XLabel != "" {
		sty := style(bigSize, ink)
		sty.XAlign = draw.XCenter
		dc.FillText(sty, vg.Point{X: (left + right) / 2, Y: bottom}, ch.XLabel)
		bottom += sty.Height(ch.XLabel) + px(6)
	}

	if n := len(ch.Panels); n > 0 && y > bottom {
		ph := (y - bottom) / vg.Length(n)
		for i, p := range ch.Panels {
			top := y - ph*vg.Length(i)
			pc := draw.Crop(dc, left-dc.Min.X, right-dc.Max.X, top-ph+px(8)-dc.Min.Y, top-dc.Max.Y)
			pl, err := ch.panelPlot(p, right-left)
			if err != nil {
				return nil, fmt.Errorf("chart: panel %q: %w", p.Title, err)
			}
			pl.Draw(pc)
		}
	}
	return c, nil
}

// layout is where a panel's bars go, in vg lengths, for a panel width.
type layout struct {
	groupW, barW vg.Length
}

// axisW is what the y axis, its ticks and label take of a panel's width.
var axisW = px(90)

func (ch Chart) layout(p Panel, width vg.Length) layout {
	n := max(len(p.Groups), 1)
	ns := max(len(ch.Series), 1)
	gw := (width - axisW) / vg.Length(n)
	return layout{groupW: gw, barW: gw * 0.8 / vg.Length(ns)}
}

// tickLabels returns the x tick labels as drawn, and their rotation:
// level when the widest line of every label fits its group, else upright
// on one line each (level or slanted, they ran into each other).
func tickLabels(labels []string, groupW vg.Length, sty text.Style) ([]string, float64) {
	for _, l := range labels {
		for _, line := range strings.Split(l, "\n") {
			if sty.Width(line) > groupW*0.95 {
				out := make([]string, len(labels))
				for i, l := range labels {
					out[i] = strings.ReplaceAll(l, "\n", " ")
				}
				return out, math.Pi / 2
			}
		}
	}
	return labels, 0
}

// ticker puts ticks every step from 0 to max, formatted by format.
type ticker struct {
	step   float64
	format func(float64) string
}

func (t ticker) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for v := 0.0; v <= hi+t.step/2; v += t.step {
		out = append(out, plot.Tick{Value: v, Label: t.format(v)})
	}
	return out
}

// panelPlot builds the plot of one panel, width wide.
func (ch Chart) panelPlot(p Panel, width vg.Length) (*plot.Plot, error) {
	format := p.Format
	if format == nil {
		format = FormatSI
	}
	pl := plot.New()
	pl.BackgroundColor = white
	pl.Title.Text = p.Title
	pl.Y.Label.Text = p.YLabel
	// Sizes and colours only: plot's styles hold the alignments.
	for _, st := range []struct {
		s    *text.Style
		size float64
	}{{&pl.Title.TextStyle, bigSize}, {&pl.Y.Label.TextStyle, bigSize}, {&pl.Y.Tick.Label, smallSize}, {&pl.X.Tick.Label, smallSize}} {
		st.s.Font, st.s.Color = font.From(plot.DefaultFont, vg.Points(st.size)), ink
	}

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
	pl.Y.Min, pl.Y.Max = 0, ymax
	pl.Y.Tick.Marker = ticker{step: step, format: format}
	gl := plotter.NewGrid()
	gl.Vertical.Width = 0
	gl.Horizontal.Color = grid
	gl.Horizontal.Dashes = nil
	pl.Add(gl)

	lay := ch.layout(p, width)
	labels := make([]string, len(p.Groups))
	for i, g := range p.Groups {
		labels[i] = g.Label
	}
	labels, rot := tickLabels(labels, lay.groupW, pl.X.Tick.Label)
	if rot != 0 {
		pl.X.Tick.Label.Rotation = rot
		pl.X.Tick.Label.XAlign = draw.XRight
		pl.X.Tick.Label.YAlign = draw.YCenter
	}
	pl.NominalX(labels...)
	pl.X.Padding = 0
	pl.X.Min, pl.X.Max = -0.5, float64(len(p.Groups))-0.5

	ns := max(len(ch.Series), 1)
	for si := 0; si < ns; si++ {
		col := Grey
		if si < len(ch.Series) {
			col = ch.Series[si].Color
		}
		vals := make(plotter.Values, len(p.Groups))
		xys := make(plotter.XYs, len(p.Groups))
		texts := make([]string, len(p.Groups))
		styles := make([]text.Style, len(p.Groups))
		for gi, g := range p.Groups {
			v := math.NaN()
			if si < len(g.Values) {
				v = g.Values[si]
			}
			sty := style(smallSize, ink)
			texts[gi] = format(v)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v, texts[gi], sty.Color = 0, "n/a", Grey
			}
			vals[gi] = v
			xys[gi] = plotter.XY{X: float64(gi), Y: v}
			sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
			if sty.Width(texts[gi]) > lay.barW {
				// Upright: side by side they ran into each other.
				sty.Rotation, sty.XAlign, sty.YAlign = math.Pi/2, draw.XLeft, draw.YCenter
			}
			styles[gi] = sty
		}
		if len(p.Groups) == 0 {
			continue
		}
		off := lay.barW*vg.Length(si) - lay.barW*vg.Length(ns-1)/2
		bars, err := plotter.NewBarChart(vals, lay.barW*0.95)
		if err != nil {
			return nil, err
		}
		bars.Color = col
		bars.LineStyle.Width = 0
		bars.Offset = off
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return nil, err
		}
		lbl.TextStyle = styles
		lbl.Offset = vg.Point{X: off, Y: px(4)}
		pl.Add(bars, lbl)
	}

	// Reference lines: drawn when on scale, named under the title
	// otherwise.
	for _, l := range p.Lines {
		label := l.Label + " " + format(l.Value)
		if l.Value > ymax {
			pl.Title.Text += "\n" + label + " (above this scale)"
			continue
		}
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: l.Value}, {X: float64(len(p.Groups)) - 0.5, Y: l.Value}})
		if err != nil {
			return nil, err
		}
		ln.Color = l.Color
		ln.Width = px(2)
		ln.Dashes = []vg.Length{px(7), px(5)}
		sty := style(smallSize, l.Color)
		sty.XAlign, sty.YAlign = draw.XRight, draw.YBottom
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(len(p.Groups)) - 0.5, Y: l.Value}}, Labels: []string{label}})
		if err != nil {
			return nil, err
		}
		lbl.TextStyle = []text.Style{sty}
		lbl.Offset = vg.Point{X: -px(4), Y: px(4)}
		pl.Add(ln, lbl)
	}
	return pl, nil
}

// WritePNG draws the chart and encodes it as PNG to w.
func (ch Chart) WritePNG(w io.Writer) error {
	c, err := ch.Draw()
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("chart: encode PNG: %w", err)
	}
	return nil
}

// WriteCSV writes the chart's data as CSV, one row per bar: panel, group
// (its label on one line), series and value (empty for a missing one), so
// the numbers behind the picture can be read and compared.
func (ch Chart) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"panel", "group", "series", "value"})
	for _, p := range ch.Panels {
		for _, g := range p.Groups {
			for si, s := range ch.Series {
				v := ""
				if si < len(g.Values) && !math.IsNaN(g.Values[si]) && !math.IsInf(g.Values[si], 0) {
					v = strconv.FormatFloat(g.Values[si], 'g', -1, 64)
				}
				_ = cw.Write([]string{p.Title, strings.ReplaceAll(g.Label, "\n", " "), s.Name, v})
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("chart: write CSV: %w", err)
	}
	return nil
}
