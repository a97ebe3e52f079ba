package elasticbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// RestoreConfig is `neptune bench restore`.
type RestoreConfig struct {
	// SizesMiB are the kv data sizes of partition 0, one cluster each.
	SizesMiB []int
	// Value is the bytes per kv value.
	Value int
	// Grace is placement's grace: the replacement starts this long after
	// the node was last seen.
	Grace time.Duration
	// Goal is the least copy rate (MiB/s, from the replacement's start to
	// full degree) that passes, at sizes of GoalFromMiB and more (smaller
	// ones are dominated by fixed costs and only reported).
	Goal        float64
	GoalFromMiB int
}

// DefaultRestoreConfig is a short run.
func DefaultRestoreConfig() RestoreConfig {
	return RestoreConfig{SizesMiB: []int{1, 16, 64}, Value: 256 << 10, Grace: time.Second, Goal: 8, GoalFromMiB: 16}
}

// Validate reports the first invalid field.
func (c RestoreConfig) Validate() error {
	if len(c.SizesMiB) == 0 || slices.ContainsFunc(c.SizesMiB, func(s int) bool { return s < 1 }) || c.Value < 1 || c.Grace <= 0 || c.Goal <= 0 {
		return errors.New("elasticbench: sizes, value, grace and goal must be positive")
	}
	return nil
}

// RunRestore measures, for each data size, how long a partition takes
// to get back to full degree after one of its replicas' node is killed
// for good: four kv node processes, partition 0 on three, the fourth
// spare; the partition is loaded with the data, a secondary's node is
// SIGKILLed, and placement re-creates the replica on the spare. It
// prints, per size, the time to the replacement's start (membership's
// detection, the grace and the controller's next look), the copy (from
// the new replica's entry in the replica set until it serves at the
// primary's version: full degree again) and the total, with the copy
// rate against the goal.
func RunRestore(ctx context.Context, cfg RestoreConfig, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	exe, dir, cleanup, err := localcluster.Scratch("restorebench")
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stdout, "restore: kv partition 0 on 3 of 4 node processes (degree 3, level 2), %d KiB values, placement grace %v; a secondary's node SIGKILLed for good\n",
		cfg.Value>>10, cfg.Grace)
	fmt.Fprintf(stdout, "%8s %10s %12s %10s %10s %12s\n", "data", "load", "to start", "copy", "total", "copy rate")
	var checks []*report.Check
	for i, size := range cfg.SizesMiB {
		r, err := restoreOnce(ctx, exe, fmt.Sprintf("%s/%d", dir, i), size, cfg)
		if err != nil {
			return fmt.Errorf("restore at %d MiB: %w", size, err)
		}
		rate := float64(size) / r.copy.Seconds()
		rateText := fmt.Sprintf("%8.1f MiB/s", rate)
		if r.copy < 50*time.Millisecond {
			rateText = "  (too short)" // within a few looks at the yellow pages
		}
		fmt.Fprintf(stdout, "%6d MiB %9.2fs %11.2fs %9.2fs %9.2fs %s\n", size, r.load.Seconds(), r.toStart.Seconds(), r.copy.Seconds(),
			r.total.Seconds(), rateText)
		if size >= cfg.GoalFromMiB {
			c := report.AtLeast(fmt.Sprintf("copy rate ≥ %.0f MiB/s at %d MiB", cfg.Goal, size), rate, cfg.Goal,
				fmt.Sprintf("%.1f MiB/s (%.2fs for %d MiB)", rate, r.copy.Seconds(), size))
			checks = append(checks, r.starved.Doubt(c, "the copy"))
		}
	}
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, report.Tally(checks...))
	return nil
}

type restoreResult struct {
	load, toStart, copy, total time.Duration
	starved                    bench.Starvation
}

func restoreOnce(ctx context.Context, exe, dir string, sizeMiB int, cfg RestoreConfig) (restoreResult, error) {
	var r restoreResult
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	cl, err := Start(ctx, Config{Exe: exe, Dir: dir, Service: "kv", Nodes: 4, Parts: 1, Grace: cfg.Grace, Interval: time.Second})
	if err != nil {
		return r, err
	}
	defer cl.Close()
	// e4 is spare: partition 0 is placed on e1..e3.
	if err := cl.WaitFor(ctx, 30*time.Second, "partition 0 on e1..e3", func(l Layout) bool {
		return slices.Equal(l[0].Members, []string{"e1", "e2", "e3"})
	}); err != nil {
		return r, err
	}
	start := time.Now()
	puts := sizeMiB << 20 / cfg.Value
	val := strings.Repeat("v", cfg.Value)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < puts; i += 4 {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := cl.C.Call(cctx, "kv", 0, "put", []byte(fmt.Sprintf("k%06d=%s", i, val)))
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, fmt.Errorf("loading: %w", err)
	}
	r.load = time.Since(start)
	live := []string{"e1", "e2", "e3", "e4"}
	if err := cl.WaitFor(ctx, time.Minute, "loaded replicas converged", func(l Layout) bool { return l.Converged(0, live) }); err != nil {
		return r, err
	}
	l := cl.Layout()
	victim := ""
	for _, m := range l[0].Members {
		if m != l[0].Primary {
			victim = m
		}
	}
	if err := cl.Kill(victim); err != nil {
		return r, err
	}
	live = cl.Live()
	killed := time.Now()
	probe := bench.StartLagProbe(10 * time.Millisecond)
	var started time.Time
	for {
		l := cl.Layout()
		if started.IsZero() && slices.Contains(l[0].Members, "e4") {
			started = time.Now()
		}
		// Full degree: the new replica serves at the primary's version
		// (removing the dead one from the set follows; it is bookkeeping).
		if pt := l[0]; !started.IsZero() && pt.Primary != "" && pt.Serving["e4"] && !slices.Contains(pt.Learners, "e4") &&
			pt.Versions["e4"] == pt.Versions[pt.Primary] {
			break
		}
		if time.Since(killed) > 4*time.Minute || ctx.Err() != nil {
			probe.Stop()
			return r, fmt.Errorf("not at full degree %v after the kill: %+v", time.Since(killed).Round(time.Second), l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.total = time.Since(killed)
	r.toStart, r.copy = started.Sub(killed), time.Since(started)
	r.starved = probe.Stop()
	cl.Logf("%d MiB: restored in %v", sizeMiB, r.total)
	return r, nil
}
