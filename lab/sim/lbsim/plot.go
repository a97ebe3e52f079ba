package sim

import (
	"io"

	"github.com/neptune-cluster/neptune/internal/plot"
)

// series is one line of a plot.
type series struct {
	name string
	x, y []float64
}

// chart is one figure of the simulator's output.
type chart struct {
	title, xlabel, ylabel string
	logX                  bool
	xticks                []string // categorical labels at x = 0, 1, …; nil for numeric ticks
	lines                 []series
}

func (c chart) writeSVG(w io.Writer) error {
	pc := plot.Chart{Title: c.title, XLabel: c.xlabel, YLabel: c.ylabel, LogX: c.logX, XTicks: c.xticks}
	for _, s := range c.lines {
		pc.Series = append(pc.Series, plot.Series{Name: s.name, X: s.x, Y: s.y})
	}
	return pc.Write(w, "svg")
}
