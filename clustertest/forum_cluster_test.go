package clustertest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/forumload"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestForumClusterPrimaryKill clusters the forum (SQLite, level 2) on
// three real node processes and runs readers and writers while the
// primary of partition 0 is SIGKILLed and later restarted. Reading every
// replica directly at the end, each holds every acknowledged message and
// the replicas of each partition are identical.
func TestForumClusterPrimaryKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const parts = 4
	cl, nodes, c := appProcs(t, ctx, "f", "forum", parts, 2, "")
	cfg := forumload.DefaultConfig()
	cfg.Partitions, cfg.WriteFraction = parts, 0.4
	conns, err := cl.Conns("client/client")
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	cfg.Conns = conns
	load, err := forumload.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seedCtx, cancelSeed := context.WithTimeout(ctx, 20*time.Second)
	err = load.Seed(seedCtx)
	cancelSeed()
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		calls  atomic.Int64
		failed atomic.Int64
	)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			load.Run(runCtx, w, rand.New(rand.NewPCG(7, uint64(w))), func(op forumload.Op) {
				calls.Add(1)
				if op.Err != nil {
					failed.Add(1)
				}
			})
		}()
	}
	countP0 := func() int {
		n := 0
		for _, a := range load.Acked() {
			if a.Partition == 0 {
				n++
			}
		}
		return n
	}
	time.Sleep(time.Second)
	victim := waitPrimary(t, c, 0)
	node := nodes[slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == victim })]
	before := countP0()
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	during := countP0() - before
	if err := cl.Restart(ctx, node); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	stop()
	wg.Wait()
	t.Logf("killed and restarted %s (primary of partition 0): %d calls, %d failed; %d messages acknowledged on partition 0 while it was down",
		victim, calls.Load(), failed.Load(), during)
	if during == 0 {
		t.Errorf("no message acknowledged on partition 0 while its primary was down: no failover")
	}
	acked := load.Acked()
	if len(acked) < 20 {
		t.Fatalf("only %d messages acknowledged", len(acked))
	}
	reports, err := load.Verify(ctx, 3, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		t.Logf("partition %d on %v: %d messages, lsn %d, sha256 %.12s; %d acknowledged, all on every replica", r.Partition, r.Replicas, r.Digest.Messages, r.Digest.LSN, r.Digest.SHA256, r.Acked)
		if r.Digest.Messages < r.Acked {
			t.Errorf("partition %d: %d messages but %d acknowledged", r.Partition, r.Digest.Messages, r.Acked)
		}
	}
}
