package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestSubscriberClassesHoldThroughTheGateway is issue 32's "classes from
// identity" on processes (dissertation §4.2.2, §4.5.1: a service class
// per client): a node process hosts work under EDF with two guaranteed
// classes, gold (50 %) and silver (25 %), and bronze without a
// guarantee; a `neptune gateway` process with reservations off (fifo),
// so only the node's class scheduler can protect anyone, maps its
// subscribers to them: partner → gold, member → silver, and flood,
// which names no class, gets the route's bronze. 96 flood callers and 8
// of each other subscriber, all calling the same route (each call sleeps
// 20 ms on one of 4 workers). By arrival order partner and member would
// get about 8/112 of the workers each; each must hold its class's
// guarantee share of the completed work within 10 points, and the node
// must have counted completions under each class. The control, a second
// gateway with the same subscribers and no classes, must leave them
// under a fifth each.
func TestSubscriberClassesHoldThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node and gateway processes")
	}
	const (
		workers = 4
		svc     = 20 * time.Millisecond
		floods  = 96
		each    = 8
		warmup  = time.Second
		window  = 3 * time.Second
	)
	guarantee := map[string]float64{"gold": 0.5, "silver": 0.25}
	bin := neptuneBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	nodeCfg := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(nodeCfg, []byte(fmt.Sprintf(`id: ignored
metrics: 127.0.0.1:0
services:
  - name: work
    partitions: [0]
    workers: %d
    queue_limit: 4096
    policy: edf
    classes:
      - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: %v}
      - {name: silver, yield: throughput, value: 2, deadline: 2s, guarantee: %v}
      - {name: bronze, yield: throughput, value: 1, deadline: 2s}
`, workers, guarantee["gold"], guarantee["silver"])), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := localcluster.New(bin, dir)
	defer cl.Close()
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "n1", Args: []string{"-config", nodeCfg, "--announce-interval", "200ms"}}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"partner": "partner-key", "member": "member-key", "flood": "flood-key"}
	gateway := func(name, gold, silver string) *gatewayProc {
		return startGateway(t, ctx, dir, name, fmt.Sprintf(`
name: %s
listen: 127.0.0.1:0
metrics: 127.0.0.1:0
gossip: 127.0.0.1:0
join: [%s]
scheduler: fifo
capacity_grps: 100000
queue: 1024
timeout: 10s
subscribers:
  - {name: partner, reservation: 10, api_keys: [%s], class: %q}
  - {name: member, reservation: 10, api_keys: [%s], class: %q}
  - {name: flood, reservation: 10, api_keys: [%s]}
routes: [{path_prefix: /work, service: work, method: work, class: bronze}]
`, name, strings.Join(cl.Seeds(), ", "), gage.HashKey(keys["partner"]), gold, gage.HashKey(keys["member"]), silver, gage.HashKey(keys["flood"])),
			cl.SecurityArgs("gateway/"+name)...)
	}
	classes := gateway("gw", "gold", "silver")
	// The control: the same subscribers without classes, all bronze.
	plain := gateway("plain", "", "")

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * floods}}
	body := work.Encode(svc)
	// call reports whether gw served a call of sub; a call past its
	// class's deadline in the node's queue (504, ErrDeadline) was not
	// served, and is no failure.
	call := func(gw *gatewayProc, sub string) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw.http+"/work", bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("X-API-Key", keys[sub])
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusGatewayTimeout:
			return false, nil
		}
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	// shares runs the load through gw and returns each subscriber's share
	// of the completed work.
	shares := func(gw *gatewayProc) map[string]float64 {
		// Ready: the gateway sees the node.
		waitFor(t, 15*time.Second, func() bool { ok, err := call(gw, "partner"); return ok && err == nil })
		return shareOfWork(t, ctx, func(sub string) (bool, error) { return call(gw, sub) }, map[string]int{"flood": floods, "partner": each, "member": each}, warmup, window)
	}
	got := shares(classes)
	for sub, class := range map[string]string{"partner": "gold", "member": "silver"} {
		if g := guarantee[class]; got[sub] < g-0.1 {
			t.Errorf("%s (class %s, guarantee %.2f) got %.2f of the completed work, want ≥ %.2f", sub, class, g, got[sub], g-0.1)
		}
	}
	if ctl := shares(plain); ctl["partner"] > 0.2 || ctl["member"] > 0.2 {
		t.Errorf("control: without their classes partner and member got %.2f and %.2f of the work; the test cannot tell the classes' effect", ctl["partner"], ctl["member"])
	}

	// The node served each subscriber's calls in its class.
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, func() bool { return len(c.Members(ctx, 0)) == 1 })
	resp, err := http.Get("http://" + c.Members(ctx, 0)[0].MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, class := range []string{"gold", "silver", "bronze"} {
		if want := fmt.Sprintf(`neptune_class_completions_total{class=%q,service="work"}`, class); !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// shareOfWork drives callers[sub] closed-loop callers of call per caller
// sub for warmup+window and returns each one's share of the calls served
// in the window. call reports whether the call was served; a call not
// served without an error (past its deadline) is no failure.
func shareOfWork(t *testing.T, ctx context.Context, call func(sub string) (bool, error), callers map[string]int, warmup, window time.Duration) map[string]float64 {
	t.Helper()
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	var (
		mu     sync.Mutex
		done   = map[string]int{}
		failed = map[string]int{}
		first  = map[string]string{}
		wg     sync.WaitGroup
	)
	caller := func(sub string) {
		defer wg.Done()
		for time.Now().Before(to) && ctx.Err() == nil {
			served, err := call(sub)
			now := time.Now()
			mu.Lock()
			switch {
			case err != nil:
				failed[sub]++
				if first[sub] == "" {
					first[sub] = err.Error()
				}
			case served && now.After(from) && now.Before(to):
				done[sub]++
			}
			mu.Unlock()
		}
	}
	for sub, n := range callers {
		for range n {
			wg.Add(1)
			go caller(sub)
		}
	}
	wg.Wait()
	total := 0
	for _, n := range done {
		total += n
	}
	t.Logf("in %v: completions %v, failures %v %v", window, done, failed, first)
	out := map[string]float64{}
	for sub := range callers {
		if failed[sub] > 0 {
			t.Errorf("%s: %d calls failed (first: %s)", sub, failed[sub], first[sub])
		}
		out[sub] = float64(done[sub]) / float64(max(total, 1))
	}
	return out
}
