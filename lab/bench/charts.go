package cli

import "github.com/neptune-cluster/neptune/internal/plot"

// chartLine is one line of a benchmark's chart.
type chartLine struct {
	name string
	x, y []float64
}

func (l *chartLine) add(x, y float64) { l.x, l.y = append(l.x, x), append(l.y, y) }

// saveChart writes a line chart to path (SVG or PNG by its extension).
func saveChart(path, title, xlabel, ylabel string, ls []chartLine) error {
	c := plot.Chart{Title: title, XLabel: xlabel, YLabel: ylabel}
	for _, l := range ls {
		c.Series = append(c.Series, plot.Series{Name: l.name, X: l.x, Y: l.y})
	}
	return c.Save(path)
}
