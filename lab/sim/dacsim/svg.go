package dac

import "github.com/neptune-cluster/neptune/internal/plot"

// series is one line of a chart.
type series struct {
	name string
	x, y []float64
}

// writeSVG writes a line chart to path; with logX the x axis is logarithmic.
func writeSVG(path, title, xlabel, ylabel string, logX bool, ss []series) error {
	c := plot.Chart{Title: title, XLabel: xlabel, YLabel: ylabel, LogX: logX}
	for _, s := range ss {
		c.Series = append(c.Series, plot.Series{Name: s.name, X: s.x, Y: s.y})
	}
	return c.Save(path)
}
