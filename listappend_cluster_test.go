package neptune_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/lab/bench/appendbench"
)

// runListAppend runs the list-append workload on three node processes at
// level while primaries are SIGKILLed and restarted, and checks the
// history: no duplicate, no lost acknowledged append, identical replicas.
func runListAppend(t *testing.T, level int, d, killEvery time.Duration) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
	defer cancel()
	cfg := appendbench.Config{Exe: neptuneBinary(t), Dir: t.TempDir(), Level: level, Parts: 2, Appenders: 24, Keys: 8,
		Duration: d, KillEvery: killEvery, Down: 400 * time.Millisecond}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cl, err := appendbench.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("level %d: %d appends, %d kills, %d retries in %v\n%v", level, res.Appends, res.Kills, res.Retries, res.Elapsed.Round(time.Millisecond), res.Report)
	rep := res.Report
	if rep.Count(check.Duplicated) != 0 || rep.Count(check.Lost) != 0 || rep.Count(check.Divergent) != 0 || !rep.Valid() {
		t.Errorf("list-append anomalies:\n%v", rep)
	}
	if res.Kills < 2 || rep.Acked < 1000 {
		t.Errorf("too little happened to judge: %d kills, %d acknowledged appends", res.Kills, rep.Acked)
	}
}

// TestListAppendExactlyOnceThroughPrimaryKills: many appenders through a
// client that retries every retryable error, the primary SIGKILLed and
// restarted every few seconds (level 2): every append is applied exactly
// once and the replicas end identical.
func TestListAppendExactlyOnceThroughPrimaryKills(t *testing.T) {
	runListAppend(t, 2, 35*time.Second, 5*time.Second)
}

// TestListAppendExactlyOnceLevel3 is a shorter level-3 run.
func TestListAppendExactlyOnceLevel3(t *testing.T) {
	runListAppend(t, 3, 15*time.Second, 5*time.Second)
}
