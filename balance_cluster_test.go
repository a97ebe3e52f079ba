package neptune_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/localcluster"
)

// TestPausedReplicaGetsNoRequestsUntilResumed runs four real node processes
// hosting the work service, SIGSTOPs one and checks that, once its polls go
// unanswered and its yellow-page entry expires, no call goes to it (a call
// that did would hang until its deadline), then that it serves calls again
// after SIGCONT.
func TestPausedReplicaGetsNoRequestsUntilResumed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	const interval, ttl = 200 * time.Millisecond, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "work.yaml")
	if err := os.WriteFile(cfg, []byte("services:\n  - name: work\n    partitions: [0]\n    workers: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range 4 {
		n, err := cl.Start(ctx, localcluster.Spec{
			ID:   fmt.Sprintf("w%d", i+1),
			Args: []string{"-config", cfg, "-announce-interval", interval.String(), "-announce-ttl", ttl.String()},
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), AnnounceTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, func() bool { return len(memberIDs(ctx, c)) == 4 })
	victim := nodes[3]
	pid := victim.PID()

	// drive sends calls from three goroutines for d and returns how many
	// each node's process served and how many calls failed.
	drive := func(d time.Duration) (served map[int]int, failed int, firstErr error) {
		served = map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10_000 && time.Now().Before(end); i++ {
					callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
					resp, err := c.Call(callCtx, nil, "work", 0, "work", neptune.Read, work.Encode(2*time.Millisecond))
					cancel()
					mu.Lock()
					if err == nil {
						var p int
						p, err = work.PID(resp.Body)
						served[p]++
					}
					if err != nil {
						failed++
						firstErr = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return served, failed, firstErr
	}

	served, failed, err := drive(time.Second)
	if failed > 0 || served[pid] == 0 {
		t.Fatalf("healthy cluster: victim served %d calls, %d failed (%v); served %v", served[pid], failed, err, served)
	}

	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// Calls already sent to the victim, and those picked before its polls
	// timed out three times in a row, hang; let them fail.
	_, transition, _ := drive(ttl + 500*time.Millisecond)
	t.Logf("%d calls failed while the paused node's polls timed out and its entry expired", transition)
	served, failed, err = drive(2 * time.Second)
	if failed > 0 {
		t.Fatalf("%d calls failed %v after SIGSTOP (TTL %v): a paused replica still received requests (last: %v)", failed, time.Since(paused).Round(time.Millisecond), ttl, err)
	}
	if served[pid] != 0 || len(served) != 3 {
		t.Fatalf("after SIGSTOP the calls were served by %v; want the three other nodes only", served)
	}

	if err := victim.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	back := false
	for time.Since(resumed) < 30*time.Second && !back {
		served, _, _ = drive(300 * time.Millisecond)
		back = served[pid] > 0
	}
	if !back {
		t.Fatalf("the resumed node served no call %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	}
	t.Logf("the resumed node served calls again %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	if served, failed, err = drive(time.Second); failed > 0 {
		t.Fatalf("after SIGCONT %d calls failed: %v (served %v)", failed, err, served)
	}
}
