package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSchedules runs one short seeded randomized schedule (every nemesis
// once) against three node processes in network namespaces and fails on
// any finding. It needs root and iproute2: it skips loudly without them,
// but fails in CI (CI set).
//
// The assertions are listed in goals below, one per line, so that a
// check that cannot pass yet (see docs/experiments/faults.md for which
// fail on which build) is visible rather than hidden.
func TestSchedules(t *testing.T) {
	if testing.Short() {
		t.Skip("faults: skipped in -short")
	}
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("faults: CI is set but network namespaces cannot be made: %v", err)
		}
		t.Skipf("!!! FAULT SUITE NOT RUN: network namespaces cannot be made here (%v); run as root with iproute2, as CI does", err)
	}
	t.Cleanup(Sweep)
	exe := testExe(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano() % 1000)
	if s := os.Getenv("NEPTUNE_FAULTS_SEED"); s != "" {
		seed = 0
		for _, c := range s {
			seed = seed*10 + uint64(c-'0')
		}
	}
	var log strings.Builder
	cfg := Config{Exe: exe, Dir: dir, Seed: seed, Steps: len(Kinds), Budget: 95 * time.Second, Hold: 3 * time.Second, Lease: 400 * time.Millisecond,
		Log: &testLog{t}}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v\nlogs in %s", seed, err, dir)
	}
	t.Logf("seed %d (rerun with NEPTUNE_FAULTS_SEED=%d): %s", seed, seed, res.Summary())
	var tally Tally
	tally.Add(res)
	tally.Print(&log, GoalTargets{Schedules: 1, Acked: 500, Lease: cfg.Lease})
	t.Log("\n" + log.String())
	goals := map[string]bool{}
	for _, g := range tally.Goals(GoalTargets{Schedules: 1, Acked: 500, Lease: cfg.Lease}) {
		goals[g.Name] = g.Verdict != "FAIL"
	}
	// Every finding of issue 14: any one fails the test. The timing goals
	// ("writes resume after isolation", "failover after SIGKILL") are
	// printed above but not asserted: one short schedule on shared cores
	// gives two or three samples; `neptune bench faults` judges them.
	for _, name := range []string{
		"lost",
		"duplicated",
		"divergent",
		"other list anomalies",
		"stale beyond bound",
		"non-linearizable", // fails while the binary has no linearizable level
		"two primaries",    // sampled claims and LSN collisions
	} {
		if !goals[name] {
			t.Errorf("goal failed: %s (seed %d)", name, seed)
		}
	}
	if t.Failed() {
		if keep, err := os.MkdirTemp("", fmt.Sprintf("neptune-faults-failed-seed%d-", seed)); err == nil {
			if err := exec.Command("cp", "-r", dir+"/.", keep).Run(); err == nil {
				t.Logf("logs and histories copied to %s", keep)
			}
		}
	}
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestGenerateCoversEveryNemesisWithinBudget(t *testing.T) {
	for seed := range uint64(20) {
		steps := Generate(seed, 10, 90*time.Second, 3*time.Second, 2*time.Second, 2)
		var used time.Duration
		seen := map[Kind]bool{}
		for _, s := range steps {
			used += s.Hold + s.Rest
			seen[s.Kind] = true
			if s.Kind == Pause && s.Hold < 3*time.Second {
				t.Errorf("seed %d: pause %v not longer than lease+1s", seed, s.Hold)
			}
		}
		if used > 90*time.Second {
			t.Errorf("seed %d: %v over budget", seed, used)
		}
		if len(steps) >= len(Kinds) && len(seen) != len(Kinds) {
			t.Errorf("seed %d: %d steps cover only %v", seed, len(steps), seen)
		}
		if again := Generate(seed, 10, 90*time.Second, 3*time.Second, 2*time.Second, 2); len(again) != len(steps) || again[0] != steps[0] {
			t.Errorf("seed %d: not deterministic", seed)
		}
	}
}
