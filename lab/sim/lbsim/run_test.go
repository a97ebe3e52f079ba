package lbsim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunWritesFigures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	o := DefaultOptions()
	o.Workloads, o.Loads, o.Requests, o.Clients, o.Out = []Workload{PoissonExp}, []float64{0.9}, 1000, 4, dir
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fig3.1.csv", "fig3.1-load90.svg", "fig3.2.csv", "fig3.2-load90.svg", "fig3.3.csv", "fig3.3-load90.svg", "goals.csv", "async.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	for _, want := range []string{"Fig 3.1", "Fig 3.2", "Fig 3.3", "Goals", "default:", "localp2c", "Async probes", "async mean ≤ the default's"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for name, edit := range map[string]func(*Options){
		"section": func(o *Options) { o.Sections = []string{"3.9"} },
		"load":    func(o *Options) { o.Loads = []float64{1.5} },
		"servers": func(o *Options) { o.Servers = 0 },
	} {
		o := DefaultOptions()
		o.Out = t.TempDir()
		edit(&o)
		if err := Run(context.Background(), o, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: Run succeeded", name)
		}
	}
	if _, err := WorkloadByName("nope"); err == nil {
		t.Error("unknown workload found")
	}
}

func TestInaccuracyApproachesBound(t *testing.T) {
	t.Parallel()
	const rho = 0.5
	w := PoissonExp
	got := Inaccuracy(w, rho, []time.Duration{w.Service.Mean / 100, 500 * w.Service.Mean}, 200_000, 3)
	if got[0] >= got[1] {
		t.Fatalf("inaccuracy %v does not grow with delay", got)
	}
	within(t, "M/M/1 inaccuracy at a long delay", got[1], InaccuracyBound(rho), 0.05)
}
