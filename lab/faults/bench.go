package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// BenchConfig is `neptune bench faults`.
type BenchConfig struct {
	Schedules int
	// Ops bounds the operations of all schedules together (0: only time).
	Ops          int
	Seed         uint64
	Steps        int
	Budget, Hold time.Duration
	// Lease is the lease the goals assume (writes resume within lease+1s).
	Lease time.Duration
	Level int
	// Keep keeps each schedule's directory (logs and histories).
	Keep bool
}

// DefaultConfig is the goal scale: 20 schedules of 12 nemeses.
func DefaultConfig() BenchConfig {
	return BenchConfig{Schedules: 20, Ops: 0, Seed: 1, Steps: 12, Budget: 3 * time.Minute, Hold: 4 * time.Second, Lease: 400 * time.Millisecond, Level: 2}
}

// Validate reports the first invalid field.
func (c BenchConfig) Validate() error {
	switch {
	case c.Schedules < 1 || c.Steps < 1:
		return errors.New("--schedules and --steps must be positive")
	case c.Ops < 0 || c.Budget <= 0 || c.Hold <= 0 || c.Lease <= 0:
		return errors.New("--ops must not be negative; --budget, --hold and --lease positive")
	case c.Level < 2 || c.Level > 3:
		return fmt.Errorf("--level %d not 2 or 3", c.Level)
	}
	return nil
}

// The goals.
var benchTargets = GoalTargets{Schedules: 20, Acked: 100_000}

// RunBench runs the schedules one after another and prints progress and
// the tallies with a verdict per goal.
func RunBench(ctx context.Context, bc BenchConfig, w io.Writer) error {
	if err := Available(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var t Tally
	for i := range bc.Schedules {
		dir, err := os.MkdirTemp("", "neptune-faults-")
		if err != nil {
			return err
		}
		cfg := Config{Exe: exe, Dir: dir, Seed: bc.Seed + uint64(i), Steps: bc.Steps, Budget: bc.Budget, Hold: bc.Hold, Lease: bc.Lease, Level: bc.Level, Log: w}
		if bc.Ops > 0 {
			cfg.MaxOps = max(1, bc.Ops/bc.Schedules/2)
		}
		start := time.Now()
		res, err := Run(ctx, cfg)
		if !bc.Keep {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(w, "  kept %s\n", dir)
		}
		if err != nil {
			return fmt.Errorf("schedule %d (seed %d): %w", i+1, cfg.Seed, err)
		}
		t.Add(res)
		fmt.Fprintf(w, "schedule %d/%d seed %d: %v, %s\n", i+1, bc.Schedules, cfg.Seed, time.Since(start).Round(time.Second), res.Summary())
	}
	fmt.Fprintln(w)
	t.Print(w, GoalTargets{Schedules: benchTargets.Schedules, Acked: benchTargets.Acked, Lease: bc.Lease})
	return nil
}

// Summary is one line of a schedule's figures.
func (r *Result) Summary() string {
	lin := "linearizable"
	if !r.Linearizable {
		lin = "level 3 (no linearizable level)"
	}
	if !r.LeaseSet {
		lin += ", no lease key"
	}
	return fmt.Sprintf("ops %d acked %d; appends lost %d dup %d divergent %d; register (%s) non-linearizable keys %d; stale %d (worst +%v) sessions %d; two-primary rounds %d (two claims, leases or not: %d), LSN collisions %d, out of LSN order %d; resume %v failover %v; one primary after %v (%d unsettled)",
		r.Ops, r.Acked, r.List.Counts[0], r.List.Counts[1], r.List.Counts[4]+r.KVDivergent, lin, len(r.Register.NonLinearizable),
		len(r.Stale), r.MaxBeyond.Round(time.Millisecond), len(r.Sessions), r.Primaries.Double, r.Primaries.Claimed, len(r.Collisions), len(r.Order), rounded(r.Resume), rounded(r.Failover), rounded(r.Settle), r.Unsettled)
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
