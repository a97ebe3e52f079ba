package sched

import (
	"fmt"
	"io"
	"math"
)

// series is one line of a chart.
type series struct {
	name string
	y    []float64
}

// writeLineChart writes a small hand-rolled SVG line chart of series over
// the shared xs, y from 0 to the data's maximum.
func writeLineChart(w io.Writer, title, xlabel, ylabel string, xs []float64, ss []series) error {
	const width, height, left, right, top, bottom = 640, 400, 60, 130, 30, 50
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	xmax, ymax := xs[len(xs)-1], 0.0
	for _, s := range ss {
		for _, v := range s.y {
			ymax = math.Max(ymax, v)
		}
	}
	ymax = niceCeil(ymax)
	px := func(x float64) float64 { return left + x/xmax*pw }
	py := func(y float64) float64 { return top + ph - y/ymax*ph }
	colors := []string{"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"}

	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>`)
	p(`<text x="%d" y="18" font-size="14">%s</text>`, left, title)
	p(`<path d="M%d %d V%.0f H%.0f" stroke="black" fill="none"/>`, left, top, top+ph, left+pw)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		p(`<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`, left-5, py(y)+4, y)
		p(`<path d="M%d %.1f H%.0f" stroke="#ddd"/>`, left, py(y), left+pw)
	}
	for i := 0; i <= 4; i++ {
		x := xmax * float64(i) / 4
		p(`<text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`, px(x), top+ph+16, x)
	}
	p(`<text x="%.0f" y="%d" text-anchor="middle">%s</text>`, left+pw/2, height-8, xlabel)
	p(`<text transform="translate(16 %.0f) rotate(-90)" text-anchor="middle">%s</text>`, top+ph/2, ylabel)
	for i, s := range ss {
		c := colors[i%len(colors)]
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, c)
		for j, v := range s.y {
			fmt.Fprintf(w, "%.1f,%.1f ", px(xs[j]), py(v))
		}
		p(`"/>`)
		ly := top + 10 + 18*i
		p(`<path d="M%.0f %d h20" stroke="%s" stroke-width="2"/><text x="%.0f" y="%d">%s</text>`, left+pw+10, ly, c, left+pw+35, ly+4, s.name)
	}
	_, err := fmt.Fprintln(w, `</svg>`)
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}
