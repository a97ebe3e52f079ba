package appendbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

// BenchConfig is `neptune bench append`.
type BenchConfig struct {
	Level, Parts, Appenders, Keys int
	// Duration of the fault phase, KillEvery between primary kills, Down
	// how long a killed node stays down.
	Duration, KillEvery, Down time.Duration
	// Cell is the measuring time of each throughput cell; Rounds the
	// interleaved rounds (with identities, without) of the dedup cost.
	Cell   time.Duration
	Rounds int
}

// DefaultConfig is the goal: ≥ 100,000 appends, ≥ 20 kills.
func DefaultConfig() BenchConfig {
	return BenchConfig{Level: 2, Parts: 2, Appenders: 48, Keys: 16, Duration: 4 * time.Minute, KillEvery: 10 * time.Second,
		Down: 500 * time.Millisecond, Cell: 5 * time.Second, Rounds: 3}
}

// Validate reports the first invalid field.
func (c BenchConfig) Validate() error {
	switch {
	case c.Level < 1 || c.Level > 3:
		return fmt.Errorf("--level %d not in 1..3", c.Level)
	case c.Parts < 1 || c.Appenders < 1 || c.Keys < 1:
		return errors.New("--partitions, --appenders and --keys must be positive")
	case c.Duration <= 0 || c.KillEvery < 0 || c.Cell < 0 || c.Rounds < 0:
		return errors.New("--duration must be positive; --kill-every, --cell and --rounds not negative")
	}
	return nil
}

// Goal of issue 13.
const (
	goalAppends = 100_000
	goalKills   = 20
	goalRatio   = 0.95
)

// Run runs the fault phase, checks it, then measures the dedup cost, and
// prints a verdict against the goal.
func Run(ctx context.Context, bc BenchConfig, w io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "neptune-append-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := Config{Exe: exe, Dir: dir, Level: bc.Level, Parts: bc.Parts, Appenders: bc.Appenders, Keys: bc.Keys,
		Duration: bc.Duration, KillEvery: bc.KillEvery, Down: bc.Down}
	// Other work on the machine is judged in the second before the nodes
	// start and in the dedup cells; the pressure in the cells is this
	// benchmark's own (three nodes and the closed-loop appenders, alike in
	// the two interleaved cells) and is printed, not judged.
	before := bench.Before(ctx)
	cl, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(w, "list-append at level %d: 3 node processes, %d partitions, %d appenders, %v, a primary SIGKILLed every %v\n",
		bc.Level, bc.Parts, bc.Appenders, bc.Duration, bc.KillEvery)
	res, err := cl.Run(ctx)
	if err != nil {
		return err
	}
	rep := res.Report
	fmt.Fprintf(w, "appends %d (ok %d, failed %d, unknown %d), kills %d, client retries %d, %.0f appends/s\n",
		res.Appends, rep.Acked, rep.Failed, rep.Unknown, res.Kills, res.Retries, float64(res.Appends)/res.Elapsed.Seconds())
	fmt.Fprintf(w, "duplicates %d, lost %d, divergent %d, other anomalies %d\n", rep.Count(check.Duplicated), rep.Count(check.Lost),
		rep.Count(check.Divergent), rep.Count(check.Phantom)+rep.Count(check.Reordered)+rep.Count(check.RealTime))
	if !rep.Valid() {
		fmt.Fprintln(w, rep)
	}
	var with, without float64
	var rounds []bool
	var during bench.Starvation
	if bc.Rounds > 0 {
		// An unmeasured cell first: the last killed node may still be
		// catching up, which would cost whichever cell came first.
		cl.Throughput(ctx, true, bc.Cell, uint64(1e12)-2e9)
	}
	for r := range bc.Rounds {
		base := uint64(1e12) + uint64(r)*2e9
		probe := bench.StartLagProbe(10 * time.Millisecond)
		// Alternate which goes first, so drift within a round (the
		// machine, the store's compactions) hits both alike.
		var w1, w0 float64
		if r%2 == 0 {
			w1 = cl.Throughput(ctx, true, bc.Cell, base)
			w0 = cl.Throughput(ctx, false, bc.Cell, base+1e9)
		} else {
			w0 = cl.Throughput(ctx, false, bc.Cell, base+1e9)
			w1 = cl.Throughput(ctx, true, bc.Cell, base)
		}
		during = during.Worse(probe.Stop())
		fmt.Fprintf(w, "round %d: %.0f appends/s with identities, %.0f without: %.3f×\n", r, w1, w0, w1/w0)
		with, without = with+w1, without+w0
		rounds = append(rounds, w0 > 0 && w1/w0 >= goalRatio)
	}
	if bc.Rounds > 0 {
		fmt.Fprintf(w, "during the dedup cells: %s; client wake-up lateness up to %.2f ms (this benchmark's own load, not judged)\n",
			during, float64(during.Lag)/float64(time.Millisecond))
	}
	machine := before.WithOthers(during)
	for _, c := range verdicts(res, rep.Valid(), with, without, rounds, machine) {
		fmt.Fprintln(w, c)
	}
	return nil
}

// verdicts judges a run. Exactly-once is a correctness claim: no load on
// the machine excuses a duplicate or a lost append, so it is PASS or FAIL.
// The dedup cost (with and without: appends per second summed over the
// rounds; rounds: whether each round's ratio met the goal) is undecidable
// when the rounds disagree or other work was on the machine (before);
// with no rounds it is not judged.
func verdicts(res *Result, clean bool, with, without float64, rounds []bool, before bench.Starvation) []*report.Check {
	history := "clean"
	if !clean {
		history = "with anomalies"
	}
	exact := &report.Check{Goal: fmt.Sprintf("0 duplicates and 0 lost in ≥ %d appends with ≥ %d primary kills", goalAppends, goalKills),
		Met:      clean && res.Appends >= goalAppends && res.Kills >= goalKills,
		Measured: fmt.Sprintf("%d appends, %d kills, history %s", res.Appends, res.Kills, history)}
	if len(rounds) == 0 {
		return []*report.Check{exact}
	}
	ratio := math.NaN()
	if without > 0 {
		ratio = with / without
	}
	n := float64(len(rounds))
	cost := report.AtLeast(fmt.Sprintf("dedup cost: throughput with write identities ≥ %.2f× without", goalRatio), ratio, goalRatio,
		fmt.Sprintf("%.0f appends/s with, %.0f without: %.3f×", with/n, without/n, ratio))
	return []*report.Check{exact, before.Doubt(report.Rounds(cost, rounds), "the second before the nodes started")}
}
