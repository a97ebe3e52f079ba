package localitybench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

var quiet = bench.Starvation{Pressure: 0.05, Others: 0.02}

// cells builds a contender table: hit ratio and lookups/s per policy.
func cells(aff, other [2]float64) map[string]cell {
	mk := func(hit, rate float64) cell {
		const n = 100000
		return cell{calls: int(rate * 4), elapsed: 4 * time.Second, hits: uint64(hit * n), misses: uint64((1 - hit) * n)}
	}
	out := map[string]cell{}
	for _, name := range contenders {
		out[name] = mk(other[0], other[1])
	}
	out[balance.NamePolling] = mk(other[0]*0.9, other[1]*0.8) // a worse other: the best is judged against
	out[balance.NameAffinity] = mk(aff[0], aff[1])
	return out
}

func outcomes(t *testing.T, pooled map[string]cell, rounds int, machine bench.Starvation) []report.Outcome {
	t.Helper()
	var rs []map[string]cell
	for range rounds {
		rs = append(rs, pooled)
	}
	return report.Outcomes(verdicts(DefaultConfig(), pooled, rs, machine))
}

func TestVerdicts(t *testing.T) {
	P, F, I := report.Pass, report.Fail, report.Inconclusive
	for _, tc := range []struct {
		name      string
		aff, oth  [2]float64 // hit ratio, lookups/s
		rounds    int
		machine   bench.Starvation
		hit, rate report.Outcome
	}{
		{"affinity wins", [2]float64{0.6, 9000}, [2]float64{0.35, 9500}, 2, quiet, P, P},
		{"hits too few", [2]float64{0.45, 9000}, [2]float64{0.35, 9500}, 2, quiet, F, P},
		{"throughput lost", [2]float64{0.6, 7000}, [2]float64{0.35, 9500}, 2, quiet, P, F},
		{"one round", [2]float64{0.6, 9000}, [2]float64{0.35, 9500}, 1, quiet, I, I},
		{"busy machine", [2]float64{0.6, 9000}, [2]float64{0.35, 9500}, 2, bench.Starvation{Pressure: 0.5, Others: 1.1}, I, I},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := outcomes(t, cells(tc.aff, tc.oth), tc.rounds, tc.machine)
			if got[0] != tc.hit || got[1] != tc.rate {
				t.Fatalf("hit %v, throughput %v; want %v, %v", got[0], got[1], tc.hit, tc.rate)
			}
		})
	}
}

// The nginx row hashes keys too: printed, never the baseline affinity is
// judged against.
func TestNginxRowIsNotJudged(t *testing.T) {
	pooled := cells([2]float64{0.6, 9000}, [2]float64{0.35, 9500})
	pooled[nginxRow] = cell{calls: 40000, elapsed: 4 * time.Second, hits: 90000, misses: 10000}
	got := report.Outcomes(verdicts(DefaultConfig(), pooled, []map[string]cell{pooled, pooled}, quiet))
	if got[0] != report.Pass || got[1] != report.Pass {
		t.Fatalf("with a better nginx row: hit %v, throughput %v; want both PASS", got[0], got[1])
	}
}

// Failed lookups leave a goal undecided, whatever the figures.
func TestVerdictDoubtsFailedLookups(t *testing.T) {
	pooled := cells([2]float64{0.6, 9000}, [2]float64{0.35, 9500})
	c := pooled[balance.NameRandom]
	c.errors, c.firstErr = 3, "boom"
	pooled[balance.NameRandom] = c
	for _, ch := range verdicts(DefaultConfig(), pooled, []map[string]cell{pooled, pooled}, quiet) {
		if ch.Outcome() != report.Inconclusive || !strings.Contains(ch.String(), "boom") {
			t.Errorf("%s", ch)
		}
	}
}

func TestZipfFavoursLowRanks(t *testing.T) {
	z := newZipf(1000, 0.8)
	rng := newRNG()
	n := map[string]int{}
	for range 100000 {
		n[z.key(rng)]++
	}
	if n["key-0"] < 5*n["key-99"] || n["key-999"] == 0 {
		t.Fatalf("key-0 %d, key-99 %d, key-999 %d draws: not Zipf-skewed over every key", n["key-0"], n["key-99"], n["key-999"])
	}
}

func TestValidate(t *testing.T) {
	for _, edit := range []func(*Config){
		func(c *Config) { c.Nodes = 1 },
		func(c *Config) { c.Zipf = -1 },
		func(c *Config) { c.Concurrency = 1 },
		func(c *Config) { c.LoadBound = 0.5 },
		func(c *Config) { c.GoalHits = 0 },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// A small run end to end: seeded files, every policy measured without a
// failed lookup, the table and both verdicts printed.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes")
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Keys, cfg.Memory, cfg.Concurrency = 3, 2000, 100, 4
	cfg.Warmup, cfg.Cell, cfg.Rounds = 200*time.Millisecond, 500*time.Millisecond, 1
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	t.Log(s)
	for _, want := range []string{"affinity's hit ratio ≥", "affinity's throughput ≥", "random", "prequal"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !strings.Contains(s, "nginx row skipped") && !strings.Contains(s, nginxRow) {
		t.Errorf("output neither skips nor shows the nginx row")
	}
	if strings.Contains(s, "failed") {
		t.Errorf("lookups failed:\n%s", s)
	}
}

func newRNG() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
