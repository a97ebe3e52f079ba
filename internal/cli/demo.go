package cli

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/localcluster"
)

func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("demo", "[-nodes 4] [-duration 20s]")
	var (
		nodes       = fs.Int("nodes", 4, "nodes in the local cluster (>= 2)")
		duration    = fs.Duration("duration", 20*time.Second, "how long to drive the workload")
		concurrency = fs.Int("concurrency", 8, "concurrent callers")
		partitions  = fs.Int("partitions", 8, "kv partitions, each on two nodes")
		seed        = fs.Uint64("seed", 1, "random seed of the workload")
		keep        = fs.Bool("keep-logs", false, "keep the nodes' log directory")
		policy      = fs.String("balance", balance.DefaultConfig().Policy, "load-balancing policy of the demo's client: "+strings.Join(balance.Names, ", "))
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *nodes < 2 {
		return usagef("-nodes must be >= 2 so that a node can fail, got %d", *nodes)
	}
	if *duration < 3*time.Second {
		return usagef("-duration must be >= 3s, got %v", *duration)
	}
	if *concurrency < 1 || *partitions < 1 {
		return usagef("-concurrency and -partitions must be >= 1")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "neptune-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	cl := localcluster.New(exe, dir)
	defer cl.Close()

	fmt.Fprintf(stdout, "Starting %d nodes (logs in %s): echo on every node, kv partitions 0-%d on two nodes each\n", *nodes, dir, *partitions-1)
	var procs []*localcluster.Node
	for i := range *nodes {
		var kvParts []string
		for p := range *partitions {
			if p%*nodes == i || (p+1)%*nodes == i {
				kvParts = append(kvParts, fmt.Sprint(p))
			}
		}
		spec := localcluster.Spec{ID: fmt.Sprintf("node%d", i+1), Services: []string{"echo:0-3"}, Args: []string{"-metrics", "127.0.0.1:0"}}
		if len(kvParts) > 0 {
			spec.Services = append(spec.Services, "kv:"+strings.Join(kvParts, ","))
		}
		n, err := cl.Start(ctx, spec)
		if err != nil {
			return err
		}
		procs = append(procs, n)
	}
	bal := balance.DefaultConfig()
	bal.Policy = *policy
	if err := bal.Validate(); err != nil {
		return usagef("-balance: %v", err)
	}
	client, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: bal})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := waitMembers(ctx, client, *nodes, 15*time.Second); err != nil {
		return err
	}
	printStatus(stdout, client.Members(ctx, 50*time.Millisecond))

	victim := procs[len(procs)-1]
	killAt, restartAt := *duration*3/10, *duration*6/10
	fmt.Fprintf(stdout, "\nDriving %d callers for %v; SIGKILL %s at %v, restart it at %v\n\n", *concurrency, *duration, victim.Spec.ID, killAt, restartAt)

	// Resident memory is sampled after a warm-up (a tenth of the run) and
	// at the end: growth between the two would be a leak.
	rssWarm := map[string]int64{}
	rec := newRecorder()
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(runCtx, client, rand.New(rand.NewPCG(*seed, uint64(w))), *partitions, rec, start)
		}()
	}
	events := []struct {
		at   time.Duration
		what string
		do   func() error
	}{
		{*duration / 10, "resident memory sampled after warm-up", func() error {
			for _, n := range procs {
				rssWarm[n.Spec.ID], _ = localcluster.RSS(n.PID())
			}
			return nil
		}},
		{killAt, "SIGKILL " + victim.Spec.ID, victim.Kill},
		{restartAt, "restart " + victim.Spec.ID, func() error { return cl.Restart(ctx, victim) }},
	}
	for _, ev := range events {
		select {
		case <-runCtx.Done():
		case <-time.After(time.Until(start.Add(ev.at))):
			err := ev.do()
			rec.event(time.Since(start), ev.what, err)
			if err != nil {
				cancel()
				wg.Wait()
				return fmt.Errorf("demo: %s: %w", ev.what, err)
			}
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rec.report(stdout, killAt, restartAt)
	fmt.Fprintln(stdout, "\nResident memory per node (after warm-up → end of run):")
	for _, n := range procs {
		after, _ := localcluster.RSS(n.PID())
		note := ""
		if n == victim {
			note = " (restarted mid-run)"
		}
		fmt.Fprintf(stdout, "  %-8s %6.1f MiB → %6.1f MiB%s\n", n.Spec.ID, float64(rssWarm[n.Spec.ID])/(1<<20), float64(after)/(1<<20), note)
	}
	fmt.Fprintln(stdout)
	_ = waitMembers(ctx, client, *nodes, 5*time.Second)
	printStatus(stdout, client.Members(ctx, 50*time.Millisecond))
	if rec.okRatio() < 0.99 {
		return fmt.Errorf("demo: only %.2f%% of calls succeeded", 100*rec.okRatio())
	}
	return nil
}

func waitMembers(ctx context.Context, c *neptune.Client, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if len(c.Members(ctx, 0)) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: only %d of %d nodes announced after %v", len(c.Members(ctx, 0)), n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// drive issues a mix of calls until ctx ends: half 1 KiB echoes, a quarter
// kv puts, a quarter kv gets.
func drive(ctx context.Context, c *neptune.Client, rng *rand.Rand, partitions int, rec *recorder, start time.Time) {
	payload := make([]byte, 1024)
	sess := neptune.NewSession()
	for ctx.Err() == nil {
		var (
			service, method string
			mode            = neptune.Read
			part            int
			body            []byte
		)
		switch x := rng.IntN(4); {
		case x < 2:
			service, method, part, body = "echo", "echo", rng.IntN(4), payload
		default:
			key := fmt.Sprintf("key%d", rng.IntN(1000))
			h := fnv.New32a()
			h.Write([]byte(key))
			service, part = "kv", int(h.Sum32()%uint32(partitions))
			if x == 2 {
				method, mode, body = "put", neptune.Write, []byte(key+"=v")
			} else {
				method, body = "get", []byte(key)
			}
		}
		// Not derived from ctx: a call in flight when the run ends finishes
		// and counts, instead of failing with the run's deadline.
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		t0 := time.Now()
		_, err := c.Call(callCtx, sess, service, part, method, mode, body)
		lat := time.Since(t0)
		cancel()
		// A get may miss: without replication (a later issue) the two
		// replicas of a kv partition hold different keys.
		miss := err != nil && strings.Contains(err.Error(), kv.ErrNotFound.Error())
		if miss {
			err = nil
		}
		rec.add(t0.Sub(start), lat, err)
	}
}

// recorder keeps per-second outcomes and latencies of the demo workload.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	events []string
	errs   map[string]int
}

type call struct {
	at, lat time.Duration
	ok      bool
}

func newRecorder() *recorder { return &recorder{errs: map[string]int{}} }

func (r *recorder) add(at, lat time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{at: at, lat: lat, ok: err == nil})
	if err != nil {
		msg := err.Error()
		if len(msg) > 100 {
			msg = msg[:100] + "..."
		}
		r.errs[msg]++
	}
}

func (r *recorder) event(at time.Duration, what string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("t=%5.1fs  %s", at.Seconds(), what)
	if err != nil {
		s += ": " + err.Error()
	}
	r.events = append(r.events, s)
}

func (r *recorder) okRatio() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := 0
	for _, c := range r.calls {
		if c.ok {
			ok++
		}
	}
	if len(r.calls) == 0 {
		return 0
	}
	return float64(ok) / float64(len(r.calls))
}

func (r *recorder) report(w io.Writer, killAt, restartAt time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		fmt.Fprintln(w, e)
	}
	fmt.Fprintln(w, "\nTimeline (calls per second):")
	var end time.Duration
	for _, c := range r.calls {
		end = max(end, c.at)
	}
	for s := time.Duration(0); s <= end; s += time.Second {
		ok, bad := 0, 0
		for _, c := range r.calls {
			if c.at >= s && c.at < s+time.Second {
				if c.ok {
					ok++
				} else {
					bad++
				}
			}
		}
		fmt.Fprintf(w, "  %3ds  ok %6d  errors %3d  %s\n", int(s.Seconds()), ok, bad, strings.Repeat("#", min(ok/100, 60)))
	}
	fmt.Fprintln(w, "\nSummary:")
	fmt.Fprintf(w, "  %-22s %9s %7s %10s %9s %9s\n", "phase", "requests", "errors", "req/s", "p50", "p99")
	phases := []struct {
		name     string
		from, to time.Duration
	}{
		{"before failure", 0, killAt},
		{"node down", killAt, restartAt},
		{"after restart", restartAt, end + time.Second},
		{"whole run", 0, end + time.Second},
	}
	for _, ph := range phases {
		var lats []time.Duration
		errs := 0
		for _, c := range r.calls {
			if c.at >= ph.from && c.at < ph.to {
				lats = append(lats, c.lat)
				if !c.ok {
					errs++
				}
			}
		}
		slices.Sort(lats)
		secs := (ph.to - ph.from).Seconds()
		fmt.Fprintf(w, "  %-22s %9d %7d %10.0f %9s %9s\n", ph.name, len(lats), errs, float64(len(lats))/secs, pct(lats, 0.50), pct(lats, 0.99))
	}
	if len(r.errs) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		for msg, n := range r.errs {
			fmt.Fprintf(w, "  %5d  %s\n", n, msg)
		}
	}
	ok := 0
	for _, c := range r.calls {
		if c.ok {
			ok++
		}
	}
	fmt.Fprintf(w, "\n%d of %d calls succeeded (%.3f%%) through a node failure and restart.\n", ok, len(r.calls), 100*float64(ok)/float64(max(len(r.calls), 1)))
}

func pct(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)].Round(10 * time.Microsecond).String()
}
