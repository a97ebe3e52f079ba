package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestFloodCannotStarveAGuaranteedClass runs a real node process hosting
// the work service (calls sleep as long as they ask) with two classes under EDF: gold with a 50 % guarantee
// and bronze without. 96 bronze callers flood the node (each call sleeps
// 20 ms on one of 4 workers) while 8 gold callers run alongside. EDF with
// equal deadlines serves in arrival order, so without the guarantee gold
// would get about 8/104 of the workers; the guarantee must hold gold's share of the completed work
// (sleep-emulated, so completions measure worker time) at ≥ g − 10 points
// and its throughput at ≥ g − 20 points of the service capacity.
func TestFloodCannotStarveAGuaranteedClass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	const (
		workers   = 4
		svc       = 20 * time.Millisecond
		guarantee = 0.5
		floods    = 96
		golds     = 8
		warmup    = time.Second
		window    = 3 * time.Second
	)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`id: ignored
metrics: 127.0.0.1:0
services:
  - name: work
    partitions: [0]
    workers: %d
    queue_limit: 4096
    policy: edf
    classes:
      - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: %v}
      - {name: bronze, yield: throughput, value: 1, deadline: 2s}
`, workers, guarantee)
	cfgPath := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "n1", Args: []string{"-config", cfgPath}}); err != nil {
		t.Fatal(err)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, func() bool { return len(c.Members(ctx, 0)) == 1 })

	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	var gold, bronze, failed atomic.Int64
	var wg sync.WaitGroup
	caller := func(class string, done *atomic.Int64) {
		defer wg.Done()
		// Calls do not inherit a run deadline: EDF would see every late
		// call due at the same instant.
		for time.Now().Before(to) {
			callCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := c.Call(callCtx, "work", 0, "work", work.Encode(svc), neptune.WithClass(class))
			cancel()
			now := time.Now()
			switch {
			case err == nil && now.After(from) && now.Before(to):
				done.Add(1)
			case err != nil && !errors.Is(err, neptune.ErrDeadline):
				if failed.Add(1) == 1 {
					t.Errorf("%s call: %v", class, err)
				}
			}
		}
	}
	for range floods {
		wg.Add(1)
		go caller("bronze", &bronze)
	}
	for range golds {
		wg.Add(1)
		go caller("gold", &gold)
	}
	wg.Wait()

	g, b := float64(gold.Load()), float64(bronze.Load())
	capacity := window.Seconds() * workers / svc.Seconds()
	share := g / (g + b)
	t.Logf("in %v: gold %v, bronze %v completions (capacity %v): gold share %.2f, gold %.2f of capacity", window, g, b, capacity, share, g/capacity)
	if share < guarantee-0.1 {
		t.Errorf("gold got %.2f of the completed work, want ≥ %.2f (guarantee %.2f)", share, guarantee-0.1, guarantee)
	}
	if g < (guarantee-0.2)*capacity {
		t.Errorf("gold completed %v requests, want ≥ %.0f (guarantee %.2f of capacity %v)", g, (guarantee-0.2)*capacity, guarantee, capacity)
	}

	// The node exports the per-class view of the same run.
	var metricsAddr string
	for _, m := range c.Members(ctx, 0) {
		metricsAddr = m.MetricsAddr
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`neptune_class_completions_total{class="gold",service="work"}`,
		`neptune_class_guarantee{class="gold",service="work"} 0.5`,
		`neptune_class_resource_share{class="bronze",service="work"}`,
		`neptune_class_loss_ratio{class="bronze",service="work"}`,
		`neptune_sched_mode{policy="edf",service="work"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
