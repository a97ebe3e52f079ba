package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMainWritesFigures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	args := []string{"-fig", "all", "-workload", "exp", "-load", "0.9", "-requests", "1000", "-clients", "4", "-out", dir}
	if err := Main(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fig3.1.csv", "fig3.1-load90.svg", "fig3.2.csv", "fig3.2-load90.svg", "fig3.3.csv", "fig3.3-load90.svg", "goals.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	for _, want := range []string{"Fig 3.1", "Fig 3.2", "Fig 3.3", "Goals", "default:", "localp2c"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestMainRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-fig", "3.9"}, {"-workload", "nope"}, {"-load", "1.5"}, {"-servers", "0"}} {
		if err := Main(context.Background(), append(args, "-out", t.TempDir()), &bytes.Buffer{}); err == nil {
			t.Errorf("Main(%v) succeeded", args)
		}
	}
	var out bytes.Buffer
	if err := Main(context.Background(), []string{"-h"}, &out); err != nil || !strings.Contains(out.String(), "-fig") {
		t.Errorf("-h: err %v, usage %q", err, out.String())
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
