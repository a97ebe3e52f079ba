package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/forumload"
	"github.com/neptune-cluster/neptune/internal/localcluster"
)

// runDemo clusters the forum (SQLite, level 2) on local node processes,
// drives readers and writers through a SIGKILL and restart of one node,
// and ends by reading every replica directly: every acknowledged message
// must be on every replica, and the replicas of each partition identical.
func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("demo", "[-nodes 4] [-degree 3] [-duration 20s]")
	var (
		nodes       = fs.Int("nodes", 4, "nodes in the local cluster")
		degree      = fs.Int("degree", 3, "replicas per forum partition (>= 2, <= nodes)")
		duration    = fs.Duration("duration", 20*time.Second, "how long to drive the workload")
		concurrency = fs.Int("concurrency", 8, "concurrent callers")
		partitions  = fs.Int("partitions", 8, "forum partitions, two topics each")
		writes      = fs.Float64("writes", 0.2, "fraction of calls that are AddMsg; the rest are ViewHeaders and ViewMsg")
		seed        = fs.Uint64("seed", 1, "random seed of the workload")
		keep        = fs.Bool("keep-logs", false, "keep the nodes' logs and data directories")
		policy      = fs.String("balance", balance.DefaultConfig().Policy, "load-balancing policy of the demo's client: "+strings.Join(balance.Names, ", "))
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *degree < 2 || *degree > *nodes {
		return usagef("-degree must be in [2, -nodes] so that a replica can fail, got %d of %d nodes", *degree, *nodes)
	}
	if *duration < 3*time.Second {
		return usagef("-duration must be >= 3s, got %v", *duration)
	}
	if *concurrency < 1 || *partitions < 1 {
		return usagef("-concurrency and -partitions must be >= 1")
	}
	lcfg := forumload.DefaultConfig()
	lcfg.Partitions, lcfg.WriteFraction = *partitions, *writes
	if err := lcfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	bal := balance.DefaultConfig()
	bal.Policy = *policy
	if err := bal.Validate(); err != nil {
		return usagef("-balance: %v", err)
	}
	exe, dir, cleanup, err := scratch("neptune-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer cleanup()
	}
	var ids []string
	for i := range *nodes {
		ids = append(ids, fmt.Sprintf("node%d", i+1))
	}
	cfgPath := filepath.Join(dir, "forum.yaml")
	yaml := fmt.Sprintf("services:\n  - name: forum\n    partitions: 0-%d\n    replication:\n      level: 2\n      nodes: [%s]\n      degree: %d\n",
		*partitions-1, strings.Join(ids, ", "), *degree)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	cl := localcluster.New(exe, dir)
	defer cl.Close()

	fmt.Fprintf(stdout, "Starting %d nodes (logs and data in %s): forum on SQLite, partitions 0-%d, level 2, %d replicas each\n",
		*nodes, dir, *partitions-1, *degree)
	var procs []*localcluster.Node
	for _, id := range ids {
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"-config", cfgPath, "-data-dir", filepath.Join(dir, id),
			"-metrics", "127.0.0.1:0", "-announce-interval", "200ms", "-announce-ttl", "1s"}})
		if err != nil {
			return err
		}
		procs = append(procs, n)
	}
	client, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: bal, AnnounceTTL: time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := waitMembers(ctx, client, *nodes, 15*time.Second); err != nil {
		return err
	}
	if err := waitServing(ctx, client, *partitions, *degree, 20*time.Second); err != nil {
		return err
	}
	load, err := forumload.New(client, lcfg)
	if err != nil {
		return err
	}
	seedCtx, cancelSeed := context.WithTimeout(ctx, 20*time.Second)
	err = load.Seed(seedCtx)
	cancelSeed()
	if err != nil {
		return err
	}
	printStatus(stdout, client.Members(ctx, 50*time.Millisecond))
	printPartitions(stdout, client.Partitions())

	// The victim is partition 0's primary, so the run includes a failover
	// (and, on restart, the bully hand-back of the partitions it prefers).
	victim := procs[0]
	if p := primaries(client.Partitions())[0]; p != "" {
		victim = procs[slices.Index(ids, p)]
	}
	var victimParts []string
	prim := primaries(client.Partitions())
	for part := range *partitions {
		if prim[part] == victim.Spec.ID {
			victimParts = append(victimParts, fmt.Sprint(part))
		}
	}
	killAt, restartAt := *duration*3/10, *duration*6/10
	fmt.Fprintf(stdout, "\nDriving %d callers (%.0f%% AddMsg, the rest ViewHeaders/ViewMsg over %d topics) for %v;\nSIGKILL %s (primary of partitions %s) at %v, restart it at %v\n\n",
		*concurrency, 100**writes, len(load.Topics()), *duration, victim.Spec.ID, strings.Join(victimParts, ","), killAt, restartAt)

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
			load.Run(runCtx, w, rand.New(rand.NewPCG(*seed, uint64(w))), func(op forumload.Op) { rec.add(start, op) })
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

	fmt.Fprintf(stdout, "\nVerifying: reading every replica directly (Digest, then ViewHeaders of every topic)...\n")
	t0 := time.Now()
	reports, verr := load.Verify(ctx, *degree, 20*time.Second)
	printPartitions(stdout, client.Partitions())
	if verr != nil {
		return fmt.Errorf("demo: %w", verr)
	}
	fmt.Fprintf(stdout, "\n%-9s %-22s %8s %6s %-16s %s\n", "partition", "replicas", "messages", "lsn", "sha256", "acknowledged: on every replica")
	acked := 0
	for _, r := range reports {
		fmt.Fprintf(stdout, "%-9d %-22s %8d %6d %-16s %d\n", r.Partition, strings.Join(r.Replicas, ","), r.Digest.Messages, r.Digest.LSN, r.Digest.SHA256[:12]+"…", r.Acked)
		acked += r.Acked
	}
	fmt.Fprintf(stdout, "\nVerified in %v: all %d acknowledged messages are on all %d replicas of their partition, and the replicas of every partition are identical.\n",
		time.Since(t0).Round(time.Millisecond), acked, *degree)
	if r := rec.okRatio(); r < 0.99 {
		return fmt.Errorf("demo: only %.2f%% of calls succeeded", 100*r)
	}
	return nil
}

// primaries maps each partition to its announced primary of the highest
// epoch ("" if none).
func primaries(parts []neptune.PartitionInfo) map[int]string {
	out := map[int]string{}
	for _, pi := range parts {
		var epoch uint64
		for _, r := range pi.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				out[pi.Partition], epoch = r.Node, r.Epoch
			}
		}
	}
	return out
}

// waitServing waits until every forum partition announces degree replicas,
// none of them recovering, one of them the primary.
func waitServing(ctx context.Context, c *neptune.Client, partitions, degree int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ready := 0
		for _, pi := range c.Partitions() {
			if pi.Service == "forum" && len(pi.Replicas) == degree && !slices.ContainsFunc(pi.Replicas, func(r neptune.ReplicaInfo) bool { return r.Role == "recovering" }) &&
				slices.ContainsFunc(pi.Replicas, func(r neptune.ReplicaInfo) bool { return r.Role == "primary" }) {
				ready++
			}
		}
		if ready == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: only %d of %d forum partitions serving on all replicas after %v", ready, partitions, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// recorder keeps per-second outcomes and latencies of the demo workload.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	events []string
	errs   map[string]int
}

type call struct {
	at, lat      time.Duration
	ok, w, stale bool
}

func newRecorder() *recorder { return &recorder{errs: map[string]int{}} }

func (r *recorder) add(start time.Time, op forumload.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{at: op.Start.Sub(start), lat: op.Latency, ok: op.Err == nil, w: op.Method == "AddMsg", stale: op.Stale})
	if op.Err != nil {
		msg := op.Method + ": " + op.Err.Error()
		if len(msg) > 110 {
			msg = msg[:110] + "..."
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
	fmt.Fprintln(w, "\nTimeline (calls per second; a stale read is a ViewMsg/ViewHeaders a secondary answered before applying the write):")
	var end time.Duration
	for _, c := range r.calls {
		end = max(end, c.at)
	}
	for s := time.Duration(0); s <= end; s += time.Second {
		reads, writes, stale, bad := 0, 0, 0, 0
		for _, c := range r.calls {
			if c.at >= s && c.at < s+time.Second {
				switch {
				case !c.ok:
					bad++
				case c.w:
					writes++
				default:
					reads++
					if c.stale {
						stale++
					}
				}
			}
		}
		fmt.Fprintf(w, "  %3ds  reads %6d  writes %5d  stale %3d  errors %3d  %s\n", int(s.Seconds()), reads, writes, stale, bad, strings.Repeat("#", min((reads+writes)/100, 60)))
	}
	fmt.Fprintln(w, "\nSummary:")
	fmt.Fprintf(w, "  %-16s %9s %7s %10s %9s %9s %9s %9s\n", "phase", "requests", "errors", "req/s", "writes/s", "p50", "p99", "write p99")
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
		var lats, wlats []time.Duration
		errs := 0
		for _, c := range r.calls {
			if c.at >= ph.from && c.at < ph.to {
				lats = append(lats, c.lat)
				if c.w {
					wlats = append(wlats, c.lat)
				}
				if !c.ok {
					errs++
				}
			}
		}
		slices.Sort(lats)
		slices.Sort(wlats)
		secs := (ph.to - ph.from).Seconds()
		fmt.Fprintf(w, "  %-16s %9d %7d %10.0f %9.0f %9s %9s %9s\n", ph.name, len(lats), errs, float64(len(lats))/secs, float64(len(wlats))/secs, pct(lats, 0.50), pct(lats, 0.99), pct(wlats, 0.99))
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
