package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteRendersEveryFormatAndSeries(t *testing.T) {
	c := Chart{Title: "latency", XLabel: "load", YLabel: "ms", Series: []Series{
		{Name: "poll-3", X: []float64{0.5, 0.9}, Y: []float64{1, 3}},
		{Name: "prequal", X: []float64{0.5, 0.9}, Y: []float64{1, 2}},
	}}
	var svg bytes.Buffer
	if err := c.Write(&svg, "svg"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "latency", "poll-3", "prequal"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	var png bytes.Buffer
	if err := c.Write(&png, "png"); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Error("png output is not a PNG")
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	if err := (Chart{}).Write(&bytes.Buffer{}, "gif"); err == nil {
		t.Error("gif accepted")
	}
	bad := Chart{Series: []Series{{Name: "x", X: []float64{1}, Y: nil}}}
	if err := bad.Write(&bytes.Buffer{}, "svg"); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("mismatched series: err = %v", err)
	}
}

func TestLogAndCategoricalAxes(t *testing.T) {
	c := Chart{LogX: true, Series: []Series{{Name: "s", X: []float64{0, 1, 10, 100}, Y: []float64{1, 2, 3, 4}}}}
	if err := c.Write(&bytes.Buffer{}, "svg"); err != nil {
		t.Fatalf("log x with a zero point: %v", err)
	}
	c = Chart{XTicks: []string{"random", "poll-3"}, Series: []Series{{Name: "s", X: []float64{0, 1}, Y: []float64{2, 1}}}}
	var b bytes.Buffer
	if err := c.Write(&b, "svg"); err != nil || !strings.Contains(b.String(), "poll-3") {
		t.Fatalf("categorical x: err=%v", err)
	}
}
