package dac

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// series is one line of a chart.
type series struct {
	name string
	x, y []float64
}

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// writeSVG draws a small line chart; with logX the x axis is log2.
func writeSVG(path, title, xlabel, ylabel string, logX bool, ss []series) error {
	const w, h, l, r, t, b = 640.0, 400.0, 70.0, 150.0, 40.0, 50.0
	fx := func(v float64) float64 {
		if logX {
			return math.Log2(v)
		}
		return v
	}
	x0, x1, y1 := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for i := range s.x {
			x0, x1, y1 = min(x0, fx(s.x[i])), max(x1, fx(s.x[i])), max(y1, s.y[i])
		}
	}
	if x1 <= x0 {
		x1 = x0 + 1
	}
	if y1 <= 0 {
		y1 = 1
	}
	y1 *= 1.05
	px := func(v float64) float64 { return l + (fx(v)-x0)/(x1-x0)*(w-l-r) }
	py := func(v float64) float64 { return h - b - v/y1*(h-t-b) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="20" font-size="14">%s</text>`+"\n", l, title)
	fmt.Fprintf(&sb, `<path d="M%g %g V%g H%g" fill="none" stroke="black"/>`+"\n", l, t, h-b, w-r)
	for i := 0; i <= 4; i++ {
		v := y1 / 1.05 * float64(i) / 4
		fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="end">%.3g</text>`+"\n", l-5, py(v)+4, v)
	}
	ticks := map[float64]bool{}
	for _, s := range ss {
		for _, x := range s.x {
			if !ticks[x] {
				ticks[x] = true
				fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="middle">%.4g</text>`+"\n", px(x), h-b+15, x)
			}
		}
	}
	fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (l+w-r)/2, h-10, xlabel)
	fmt.Fprintf(&sb, `<text transform="translate(15 %g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (t+h-b)/2, ylabel)
	for k, s := range ss {
		c := palette[k%len(palette)]
		var d strings.Builder
		for i := range s.x {
			fmt.Fprintf(&d, "%s%.1f %.1f ", map[bool]string{true: "M", false: "L"}[i == 0], px(s.x[i]), py(s.y[i]))
		}
		fmt.Fprintf(&sb, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", d.String(), c)
		fmt.Fprintf(&sb, `<text x="%g" y="%g" fill="%s">%s</text>`+"\n", w-r+10, t+20+float64(k)*18, c, s.name)
	}
	sb.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}
