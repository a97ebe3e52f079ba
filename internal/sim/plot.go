package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// series is one line of a plot.
type series struct {
	name string
	x, y []float64
}

// chart is a small hand-written SVG line chart; it avoids a plotting
// dependency for a handful of figures.
type chart struct {
	title, xlabel, ylabel string
	logX                  bool
	xticks                []string // categorical labels at x = 0, 1, …; nil for numeric ticks
	lines                 []series
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

func (c chart) writeSVG(w io.Writer) error {
	const W, H, left, right, top, bottom = 640.0, 400.0, 70.0, 170.0, 40.0, 50.0
	fx := func(x float64) float64 {
		if c.logX {
			return math.Log10(x)
		}
		return x
	}
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for _, s := range c.lines {
		for i := range s.x {
			xmin, xmax = min(xmin, fx(s.x[i])), max(xmax, fx(s.x[i]))
			ymax = max(ymax, s.y[i])
		}
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	ymax = niceCeil(ymax)
	px := func(x float64) float64 { return left + (fx(x)-xmin)/(xmax-xmin)*(W-left-right) }
	py := func(y float64) float64 { return H - bottom - (y-ymin)/(ymax-ymin)*(H-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="20" text-anchor="middle" font-size="14">%s</text>`+"\n", (W-right+left)/2, esc(c.title))
	fmt.Fprintf(&b, `<path d="M%g %gV%gH%g" stroke="black" fill="none"/>`+"\n", left, top, H-bottom, W-right)
	for i := 0; i <= 5; i++ {
		y := ymin + (ymax-ymin)*float64(i)/5
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%s</text><path d="M%g %gH%g" stroke="#ddd"/>`+"\n",
			left-5, py(y)+4, trim(y), left, py(y), W-right)
	}
	switch {
	case c.xticks != nil:
		for i, l := range c.xticks {
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", px(float64(i)), H-bottom+16, esc(l))
		}
	default:
		seen := map[float64]bool{}
		for _, s := range c.lines {
			for _, x := range s.x {
				if !seen[x] {
					seen[x] = true
					fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle" font-size="10">%s</text>`+"\n", px(x), H-bottom+16, trim(x))
				}
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (W-right+left)/2, H-10, esc(c.xlabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (H-bottom+top)/2, esc(c.ylabel))
	for i, s := range c.lines {
		col := palette[i%len(palette)]
		var d strings.Builder
		for j := range s.x {
			fmt.Fprintf(&d, "%s%.1f %.1f", map[bool]string{true: "M", false: "L"}[j == 0], px(s.x[j]), py(s.y[j]))
		}
		fmt.Fprintf(&b, `<path d="%s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", d.String(), col)
		for j := range s.x {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.x[j]), py(s.y[j]), col)
		}
		ly := top + 10 + float64(i)*18
		fmt.Fprintf(&b, `<path d="M%g %gh20" stroke="%s" stroke-width="2"/><text x="%g" y="%g">%s</text>`+"\n",
			W-right+10, ly, col, W-right+35, ly+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.4g", v), ".0") }

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
