package sched

import (
	"io"

	"github.com/neptune-cluster/neptune/internal/plot"
)

// series is one line of a chart over shared x values.
type series struct {
	name string
	y    []float64
}

// writeLineChart writes an SVG line chart of series over the shared xs.
func writeLineChart(w io.Writer, title, xlabel, ylabel string, xs []float64, ss []series) error {
	c := plot.Chart{Title: title, XLabel: xlabel, YLabel: ylabel}
	for _, s := range ss {
		c.Series = append(c.Series, plot.Series{Name: s.name, X: xs, Y: s.y})
	}
	return c.Write(w, "svg")
}
