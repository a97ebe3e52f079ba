package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/lab/report"
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
	// BaselineExe, if set, turns the run into a throughput comparison
	// without faults (RunThroughput): Rounds rounds of Quiet each, with
	// this build's nodes and with BaselineExe's, in alternating order.
	BaselineExe string
	Rounds      int
	Quiet       time.Duration
	// ThroughputGoal is the least ratio of this build's throughput to the
	// baseline's (issue 14: leases cost at most 5%).
	ThroughputGoal float64
}

// DefaultConfig is the goal scale: 20 schedules of 12 nemeses.
func DefaultConfig() BenchConfig {
	return BenchConfig{Schedules: 20, Ops: 0, Seed: 1, Steps: 12, Budget: 3 * time.Minute, Hold: 4 * time.Second, Lease: 400 * time.Millisecond, Level: 2,
		Rounds: 3, Quiet: 15 * time.Second, ThroughputGoal: 0.95}
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
	case c.BaselineExe != "" && (c.Rounds < 1 || c.Quiet <= 0):
		return errors.New("--rounds and --quiet must be positive with --baseline-exe")
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
	if bc.BaselineExe != "" {
		return RunThroughput(ctx, bc, exe, w)
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
		if finding := res.Finding(bc.Lease); bc.Keep || err != nil || finding != "" {
			fmt.Fprintf(w, "  kept %s%s\n", dir, note(finding))
		} else {
			os.RemoveAll(dir)
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

// RunThroughput compares this build's nodes with BaselineExe's (issue 14:
// list appends at the list-append service's level and level-3 kv
// operations with leases at least ThroughputGoal× what they were without):
// no faults, the same clients (this build) and workload, Rounds rounds of
// Quiet each in alternating order, so drift on a shared machine hits both.
// Each round's ratio must agree with the verdict (report.Rounds).
func RunThroughput(ctx context.Context, bc BenchConfig, exe string, w io.Writer) error {
	type cell struct{ appends, kv float64 }
	var ours, base []cell
	fmt.Fprintf(w, "throughput without faults: this build's nodes vs %s, %d rounds of %v (clients of this build)\n", bc.BaselineExe, bc.Rounds, bc.Quiet)
	for r := range bc.Rounds {
		order := []string{exe, bc.BaselineExe}
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, nodeExe := range order {
			dir, err := os.MkdirTemp("", "neptune-faults-")
			if err != nil {
				return err
			}
			res, err := Run(ctx, Config{Exe: exe, NodeExe: nodeExe, Dir: dir, Seed: bc.Seed + uint64(r), Lease: bc.Lease, Level: bc.Level, Quiet: bc.Quiet, Log: io.Discard})
			os.RemoveAll(dir)
			if err != nil {
				return fmt.Errorf("round %d, nodes %s: %w", r+1, nodeExe, err)
			}
			a, k := res.Throughput.PerSecond()
			c := cell{a, k}
			who := "this build"
			if nodeExe == exe {
				ours = append(ours, c)
			} else {
				base = append(base, c)
				who = "baseline"
			}
			fmt.Fprintf(w, "round %d/%d %-10s appends %7.1f/s  kv ops %7.1f/s  (lost %d, duplicated %d, stale %d)\n", r+1, bc.Rounds, who, a, k,
				res.List.Count(check.Lost), res.List.Count(check.Duplicated), len(res.Stale))
		}
	}
	mean := func(cs []cell, f func(cell) float64) float64 {
		var s float64
		for _, c := range cs {
			s += f(c)
		}
		return s / float64(len(cs))
	}
	for _, m := range []struct {
		name string
		f    func(cell) float64
	}{{fmt.Sprintf("list appends (level %d)", bc.Level), func(c cell) float64 { return c.appends }}, {"kv operations (level 3)", func(c cell) float64 { return c.kv }}} {
		ratio := mean(ours, m.f) / mean(base, m.f)
		var rounds []bool
		for i := range ours {
			rounds = append(rounds, m.f(ours[i])/m.f(base[i]) >= bc.ThroughputGoal)
		}
		c := report.AtLeast(fmt.Sprintf("%s with leases >= %.2fx without", m.name, bc.ThroughputGoal), ratio, bc.ThroughputGoal,
			fmt.Sprintf("%.3fx (%.1f vs %.1f per second)", ratio, mean(ours, m.f), mean(base, m.f)))
		fmt.Fprintln(w, report.Rounds(c, rounds))
	}
	return nil
}

// Finding names the goals this schedule alone fails ("" if none), so the
// bench keeps its logs and histories to look at. It judges the schedule
// with the same goals as the whole run, so the two never drift apart,
// except failover's percentiles, which one schedule's kills cannot show.
func (r *Result) Finding(lease time.Duration) string {
	if r == nil {
		return ""
	}
	var t Tally
	t.Add(r)
	var f []string
	for _, g := range t.Goals(GoalTargets{Lease: lease}) {
		if g.Verdict == "FAIL" && g.Name != failoverGoal {
			f = append(f, g.Name)
		}
	}
	return strings.Join(f, ", ")
}
