package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench/elasticbench"
)

// TestDeadNodeReplacedAutomatically: a node SIGKILLed for good under a
// stream of list appends has its replicas re-created on the others by
// placement once the grace (2 s here) passed: every partition is back at
// 3 serving replicas on live nodes, no acknowledged append is lost or
// applied twice, and the write logs, which waited for the dead replica,
// are truncated again.
func TestDeadNodeReplacedAutomatically(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startElastic(t, ctx, 4, 4)
	s := cl.Appenders(ctx, 8, 6)
	time.Sleep(2 * time.Second)
	if err := cl.Kill("e4"); err != nil {
		t.Fatal(err)
	}
	live := cl.Live()
	killed := time.Now()
	err := cl.WaitFor(ctx, 45*time.Second, "every partition back at full degree without e4", func(l elasticbench.Layout) bool {
		for p := range 4 {
			if !l.Full(p, live) {
				return false
			}
		}
		return true
	})
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	cl.Logf("full degree %v after the kill", time.Since(killed).Round(time.Millisecond))
	if since := time.Since(killed); since < 2*time.Second {
		t.Errorf("replaced %v after the kill, within the 2 s grace", since)
	}
	// Writes after the repair let every log truncate past the kill.
	time.Sleep(2 * time.Second)
	appends := s.Stop()
	judge(t, ctx, cl, appends)
	layout := cl.Layout()
	cl.Close()
	perPart := len(appends) / 4
	for p := range 4 {
		for _, m := range layout[p].Members {
			n, err := cl.LogLength(m, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("partition %d at %s: %d log entries (of ~%d writes)", p, m, n, perPart)
			if n > perPart/4 {
				t.Errorf("partition %d at %s: %d log entries of ~%d writes: the log is not truncated", p, m, n, perPart)
			}
		}
	}
}

// TestGrowthSpreadsReplicasAndPrimaries: two nodes join a 4-node cluster
// under a stream of list appends; placement moves replicas and primaries
// until every node holds within one of every other, and the history is
// clean.
func TestGrowthSpreadsReplicasAndPrimaries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	cl := startElastic(t, ctx, 4, 8)
	s := cl.Appenders(ctx, 8, 4)
	time.Sleep(time.Second)
	for _, id := range []string{"e5", "e6"} {
		if err := cl.AddNode(ctx, id); err != nil {
			s.Stop()
			t.Fatal(err)
		}
	}
	live := cl.Live()
	added := time.Now()
	err := cl.WaitFor(ctx, 60*time.Second, "replicas and primaries within one per node", func(l elasticbench.Layout) bool {
		for p := range 8 {
			if !l.Full(p, live) {
				return false
			}
		}
		r, pr := l.Spread(live)
		return r <= 1 && pr <= 1
	})
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	cl.Logf("even %v after the joins", time.Since(added).Round(time.Millisecond))
	appends := s.Stop()
	judge(t, ctx, cl, appends)
}
