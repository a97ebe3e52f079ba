package lbsim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
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

// Each of issue 3's simulated goals passes on figures that meet it and
// fails on figures that miss it.
func TestGoalChecksCanFail(t *testing.T) {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	res := func(mean, p99 float64) Result { return Result{Mean: ms(mean), P99: ms(p99), Measured: 1000} }
	good := map[string]Result{
		"exp/oracle": res(80, 330), "exp/default:prequal": res(92, 350), "exp/localp2c": res(240, 700),
		"exp-slow/default:prequal": res(95, 380),
		"fine/oracle":              res(25, 70), "fine/default:prequal": res(28, 78), "fine/broadcast-1s": res(1500, 9000),
	}
	bad := map[string]Result{
		"exp/oracle": res(80, 330), "exp/default:prequal": res(100, 460), "exp/localp2c": res(150, 700),
		"exp-slow/default:prequal": res(120, 700),
		"fine/oracle":              res(25, 70), "fine/default:prequal": res(31, 80), "fine/broadcast-1s": res(100, 900),
	}
	ws := []Workload{PoissonExp, FineGrain}
	for name, tc := range map[string]struct {
		in   map[string]Result
		want report.Outcome
	}{"good": {good, report.Pass}, "bad": {bad, report.Fail}} {
		got := goalChecks(ws, 16, "default:prequal", tc.in)
		if len(got) != 5 {
			t.Fatalf("%s: %d checks, want 5", name, len(got))
		}
		for _, c := range got {
			if c.Outcome() != tc.want {
				t.Errorf("%s: %s", name, c)
			}
		}
	}
}
