package appendbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
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
	clean := rep.Valid()
	if !clean {
		fmt.Fprintln(w, rep)
	}
	var with, without float64
	for r := range bc.Rounds {
		base := uint64(1e12) + uint64(r)*2e9
		with += cl.Throughput(ctx, true, bc.Cell, base)
		without += cl.Throughput(ctx, false, bc.Cell, base+1e9)
	}
	ratio := 0.0
	if without > 0 {
		ratio = with / without
	}
	if bc.Rounds > 0 {
		fmt.Fprintf(w, "dedup cost: %.0f appends/s with identities, %.0f without, ratio %.3f (goal >= %.2f)\n",
			with/float64(bc.Rounds), without/float64(bc.Rounds), ratio, goalRatio)
	}
	verdict := "PASS"
	if !clean || res.Appends < goalAppends || res.Kills < goalKills || bc.Rounds > 0 && ratio < goalRatio {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s: goal 0 duplicates and 0 lost in >= %d appends with >= %d primary kills, dedup cost ratio >= %.2f\n",
		verdict, goalAppends, goalKills, goalRatio)
	return nil
}
