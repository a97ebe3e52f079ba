// Package report is how the lab's experiments report what they measured:
// summaries of latencies (mean, percentiles), per-interval timelines,
// tables printed aligned and saved as CSV, and line charts drawn through
// gonum.org/v1/plot (SVG or PNG), so every figure of docs/EXPERIMENTS.md
// looks the same and no experiment draws or formats its own.
package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// Add appends the point (x, y).
func (s *Series) Add(x, y float64) { s.X, s.Y = append(s.X, x), append(s.Y, y) }

// Chart is a line chart of one or more series.
type Chart struct {
	Title, XLabel, YLabel string
	// LogX uses a logarithmic x axis; points with x <= 0 are left out.
	LogX bool
	// XTicks, if set, labels x = 0, 1, … with these names (categorical x).
	XTicks []string
	Series []Series
}

// Size of every figure.
const (
	width  = 7 * vg.Inch
	height = 4.5 * vg.Inch
)

// Save writes the chart to path, as SVG or PNG by its extension.
func (c Chart) Save(path string) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := c.Write(f, format); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write renders the chart in format ("svg" or "png") to w.
func (c Chart) Write(w io.Writer, format string) error {
	if format != "svg" && format != "png" {
		return fmt.Errorf("report: format %q is neither svg nor png", format)
	}
	p := gplot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if c.LogX {
		p.X.Scale = gplot.LogScale{}
		p.X.Tick.Marker = gplot.LogTicks{Prec: -1}
	}
	if len(c.XTicks) > 0 {
		p.NominalX(c.XTicks...)
	}
	nonNegative := true
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("report: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		pts := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			if c.LogX && s.X[j] <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: s.X[j], Y: s.Y[j]})
			nonNegative = nonNegative && s.Y[j] >= 0
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("report: series %q: %w", s.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	if nonNegative {
		p.Y.Min = 0
	}
	wt, err := p.WriterTo(width, height, format)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
