package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/lab/localcluster"
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
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(), AnnounceTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, func() bool { return len(memberIDs(ctx, c)) == 4 })
	victim := nodes[3]
	pid := victim.PID()

	// drive sends calls from three goroutines for d and returns how many
	// each node's process served and how many failed calls named each node.
	// On a loaded machine a healthy node may miss a deadline too, so
	// failures are attributed rather than all counted against the victim.
	type outcome struct {
		served   map[int]int
		failedAt map[string]int
		lastErr  error
	}
	drive := func(d time.Duration) outcome {
		o := outcome{served: map[int]int{}, failedAt: map[string]int{}}
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10_000 && time.Now().Before(end); i++ {
					callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
					resp, err := c.Call(callCtx, "work", 0, "work", work.Encode(2*time.Millisecond))
					cancel()
					mu.Lock()
					if err == nil {
						var p int
						p, err = work.PID(resp.Body)
						o.served[p]++
					}
					if err != nil {
						node := "?"
						for _, n := range nodes {
							if strings.Contains(err.Error(), "(node "+n.Spec.ID+")") {
								node = n.Spec.ID
							}
						}
						o.failedAt[node]++
						o.lastErr = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return o
	}

	if o := drive(time.Second); o.served[pid] == 0 {
		t.Fatalf("healthy cluster: the victim served no call; served %v, failed %v (%v)", o.served, o.failedAt, o.lastErr)
	}

	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// Calls already sent to the victim, and those picked before its polls
	// timed out three times in a row, hang; let them fail.
	o := drive(ttl + 500*time.Millisecond)
	t.Logf("while the paused node's polls timed out and its entry expired: failed %v", o.failedAt)
	o = drive(2 * time.Second)
	if o.failedAt[victim.Spec.ID] > 0 || o.served[pid] > 0 {
		t.Fatalf("%v after SIGSTOP (TTL %v) the paused node still received requests: %d timed out there (last error: %v); served %v",
			time.Since(paused).Round(time.Millisecond), ttl, o.failedAt[victim.Spec.ID], o.lastErr, o.served)
	}
	if len(o.served) == 0 {
		t.Fatalf("after SIGSTOP no call succeeded: failed %v (%v)", o.failedAt, o.lastErr)
	}

	if err := victim.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	back := false
	for time.Since(resumed) < 30*time.Second && !back {
		back = drive(300 * time.Millisecond).served[pid] > 0
	}
	if !back {
		t.Fatalf("the resumed node served no call %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	}
	t.Logf("the resumed node served calls again %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
}

// TestServiceBalanceOnNodeProcesses: one client, three node processes
// hosting work and whoami (a program that prints its node's pid).
// ServiceBalance gives whoami the affinity policy over the client's
// random: every keyed call to whoami is served by one node, the same
// for each key, while the same keys' calls to work spread.
func TestServiceBalanceOnNodeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "svc.yaml")
	yaml := fmt.Sprintf(`services:
  - name: work
    partitions: [0]
  - name: whoami
    partitions: [0]
    exec: {command: sh, args: [-c, 'echo $PPID'], data_dir: %s, methods: [{name: id, mode: read}]}
`, filepath.Join(dir, "whoami"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	for i := range 3 {
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("s%d", i+1), Args: []string{"-config", cfg}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(),
		Balance: neptune.Balancing{Policy: "random"}, ServiceBalance: map[string]neptune.Balancing{"whoami": {Policy: "affinity"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, func() bool { return len(memberIDs(ctx, c)) == 3 })

	call := func(svc, method string, body []byte, key string) int {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.Call(cctx, svc, 0, method, body, neptune.WithAffinity(key))
		if err != nil {
			t.Fatalf("%s with key %s: %v", svc, key, err)
		}
		if svc == "work" {
			pid, err := work.PID(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		var pid int
		if _, err := fmt.Sscan(string(resp.Body), &pid); err != nil {
			t.Fatalf("whoami answered %q: %v", resp.Body, err)
		}
		return pid
	}
	whoami, spread := map[int]bool{}, 0
	for k := range 6 {
		key := fmt.Sprint("key-", k)
		first := call("whoami", "id", nil, key)
		whoami[first] = true
		served := map[int]bool{}
		for range 8 {
			if got := call("whoami", "id", nil, key); got != first {
				t.Fatalf("whoami (affinity): %s served by pids %d and %d", key, first, got)
			}
			served[call("work", "work", work.Encode(0), key)] = true
		}
		if len(served) > 1 {
			spread++
		}
	}
	if len(whoami) < 2 {
		t.Fatalf("6 keys all served by pid %v: the key is not what chooses", whoami)
	}
	if spread == 0 {
		t.Fatal("work (random): every key's 8 calls went to one node each, as if it balanced by affinity too")
	}
}
