// Package demo is `neptune demo`: a local cluster of node processes
// serving the replicated forum, driven through a node failure and restart,
// then checked replica by replica.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/lab/forumload"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Config are the knobs of `neptune demo`.
type Config struct {
	// Nodes in the local cluster.
	Nodes int
	// Degree is the number of replicas per forum partition (>= 2, <=
	// Nodes).
	Degree int
	// Duration is how long the workload runs (>= 3 s).
	Duration time.Duration
	// Concurrency is the number of concurrent callers.
	Concurrency int
	// Partitions of the forum, two topics each.
	Partitions int
	// Writes is the fraction of calls that are AddMsg; the rest are
	// ViewHeaders and ViewMsg.
	Writes float64
	// Seed seeds the workload.
	Seed uint64
	// KeepLogs keeps the nodes' logs and data directories.
	KeepLogs bool
	// Balance is the load-balancing policy of the demo's client.
	Balance string
	// Insecure runs the cluster without TLS, gossip key or poll
	// authentication; by default it runs secured with throwaway material
	// in its scratch directory.
	Insecure bool
}

// DefaultConfig is 4 nodes, 8 partitions of 3 replicas, 8 callers for
// 20 s with 20 % writes.
func DefaultConfig() Config {
	return Config{Nodes: 4, Degree: 3, Duration: 20 * time.Second, Concurrency: 8, Partitions: 8, Writes: 0.2, Seed: 1,
		Balance: balance.DefaultConfig().Policy}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Degree < 2 || c.Degree > c.Nodes:
		return fmt.Errorf("demo: degree must be in [2, nodes] so that a replica can fail, got %d of %d nodes", c.Degree, c.Nodes)
	case c.Duration < 3*time.Second:
		return fmt.Errorf("demo: duration must be >= 3s, got %v", c.Duration)
	case c.Concurrency < 1 || c.Partitions < 1:
		return errors.New("demo: concurrency and partitions must be >= 1")
	}
	if err := c.load().Validate(); err != nil {
		return err
	}
	if err := (neptune.Balancing{Policy: c.Balance}).Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func (c Config) load() forumload.Config {
	l := forumload.DefaultConfig()
	l.Partitions, l.WriteFraction = c.Partitions, c.Writes
	return l
}

// Run is `neptune demo`: it clusters the forum (SQLite, level 2) on local
// node processes, drives readers and writers through a SIGKILL and restart
// of one node, and ends by reading every replica directly: every
// acknowledged message must be on every replica, and the replicas of each
// partition identical.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	lcfg := cfg.load()
	bal := neptune.Balancing{Policy: cfg.Balance}
	exe, dir, cleanup, err := localcluster.Scratch("neptune-demo-")
	if err != nil {
		return err
	}
	if !cfg.KeepLogs {
		defer cleanup()
	}
	var ids []string
	for i := range cfg.Nodes {
		ids = append(ids, fmt.Sprintf("node%d", i+1))
	}
	cfgPath := filepath.Join(dir, "forum.yaml")
	yaml := fmt.Sprintf("services:\n  - name: forum\n    partitions: 0-%d\n    replication:\n      level: 2\n      nodes: [%s]\n      degree: %d\n",
		cfg.Partitions-1, strings.Join(ids, ", "), cfg.Degree)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	cl := localcluster.New(exe, dir)
	if !cfg.Insecure {
		if cl, err = localcluster.NewSecure(exe, dir, "demo"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Secured: mutual TLS, keyed gossip and authenticated polls with throwaway material in %s (--insecure turns it off)\n", cl.PKIDir())
	} else {
		fmt.Fprintln(stdout, "INSECURE: plaintext gRPC, gossip without key, unauthenticated polls (as asked by --insecure)")
	}
	defer cl.Close()
	if lcfg.Conns, err = cl.Conns("client/client"); err != nil {
		return err
	}
	defer lcfg.Conns.Close()

	// Every node serves the live dashboard on its metrics address; the
	// ports are chosen now so the addresses can be printed first.
	dashboards := map[string]string{}
	for _, id := range ids {
		port, err := localcluster.FreePort()
		if err != nil {
			return err
		}
		dashboards[id] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	// A secured cluster's dashboards are HTTPS for an operator: the
	// first link carries a token (kept in a cookie by the page), and the
	// browser warns about the demo's own CA.
	scheme, login := "http", ""
	if !cfg.Insecure {
		ca, err := pki.LoadCA(cl.PKIDir())
		if err != nil {
			return err
		}
		tok, err := ca.IssueToken(pki.Identity{Role: pki.RoleOperator, Name: "demo"}, 24*time.Hour, time.Now())
		if err != nil {
			return err
		}
		scheme, login = "https", "?"+security.TokenParam+"="+tok
	}
	fmt.Fprintf(stdout, "Dashboard: %s://%s/%s (live; every node serves one:", scheme, dashboards[ids[len(ids)-1]], login)
	for _, id := range ids {
		fmt.Fprintf(stdout, " %s %s://%s/", id, scheme, dashboards[id])
	}
	fmt.Fprintln(stdout, ")")
	if login != "" {
		fmt.Fprintf(stdout, "(HTTPS under the demo's throwaway CA, %s/ca.pem: accept the browser's warning; the link's operator token is kept in a cookie for the other nodes' pages too)\n", cl.PKIDir())
	}
	fmt.Fprintf(stdout, "Starting %d nodes (logs and data in %s): forum on SQLite, partitions 0-%d, level 2, %d replicas each\n",
		cfg.Nodes, dir, cfg.Partitions-1, cfg.Degree)
	var procs []*localcluster.Node
	for _, id := range ids {
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", cfgPath, "--data-dir", filepath.Join(dir, id),
			"--metrics", dashboards[id], "--announce-interval", "200ms", "--announce-ttl", "1s"}})
		if err != nil {
			return err
		}
		procs = append(procs, n)
	}
	client, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: bal, AnnounceTTL: time.Second, Security: cl.ClientSecurity("client/client")})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := localcluster.WaitMembers(ctx, client, cfg.Nodes, 15*time.Second); err != nil {
		return err
	}
	if err := localcluster.WaitServing(ctx, client, "forum", cfg.Partitions, cfg.Degree, 20*time.Second); err != nil {
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
	status(ctx, stdout, exe, cl)

	// The victim is partition 0's primary, so the run includes a failover
	// (and, on restart, the bully hand-back of the partitions it prefers).
	victim := procs[0]
	if p := primaries(client.Partitions())[0]; p != "" {
		victim = procs[slices.Index(ids, p)]
	}
	var victimParts []string
	prim := primaries(client.Partitions())
	for part := range cfg.Partitions {
		if prim[part] == victim.Spec.ID {
			victimParts = append(victimParts, fmt.Sprint(part))
		}
	}
	killAt, restartAt := cfg.Duration*3/10, cfg.Duration*6/10
	fmt.Fprintf(stdout, "\nDriving %d callers (%.0f%% AddMsg, the rest ViewHeaders/ViewMsg over %d topics) for %v;\nSIGKILL %s (primary of partitions %s) at %v, restart it at %v\n",
		cfg.Concurrency, 100*cfg.Writes, len(load.Topics()), cfg.Duration, victim.Spec.ID, strings.Join(victimParts, ","), killAt, restartAt)
	for _, id := range ids {
		if id != victim.Spec.ID {
			fmt.Fprintf(stdout, "Watch the failover live: %s://%s/cluster (%s greys out) and %s://%s/partitions (a new primary, a higher epoch)\n\n",
				scheme, dashboards[id], victim.Spec.ID, scheme, dashboards[id])
			break
		}
	}

	// Resident memory is sampled after a warm-up (a tenth of the run) and
	// at the end: growth between the two would be a leak.
	rssWarm := map[string]int64{}
	rec := newRecorder()
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			load.Run(runCtx, w, rand.New(rand.NewPCG(cfg.Seed, uint64(w))), func(op forumload.Op) { rec.add(start, op) })
		}()
	}
	events := []struct {
		at   time.Duration
		what string
		do   func() error
	}{
		{cfg.Duration / 10, "resident memory sampled after warm-up", func() error {
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
	reports, verr := load.Verify(ctx, cfg.Degree, 20*time.Second)
	took := time.Since(t0)
	status(ctx, stdout, exe, cl)
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
		took.Round(time.Millisecond), acked, cfg.Degree)
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

// status prints the cluster as `neptune status` shows it (nodes,
// services, partitions and their replicas), by running it.
func status(ctx context.Context, stdout io.Writer, exe string, cl *localcluster.Cluster) {
	args := append([]string{"status", "--join", strings.Join(cl.Seeds(), ","), "--wait", "500ms"}, cl.SecurityArgs("client/client")...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(stdout, "(neptune status: %v)\n", err)
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
	const reads, writes, stale, bad = 0, 1, 2, 3
	tl := report.NewTimeline(time.Second, int(end/time.Second)+1, 4)
	for _, c := range r.calls {
		switch {
		case !c.ok:
			tl.Add(c.at, bad, 1)
		case c.w:
			tl.Add(c.at, writes, 1)
		default:
			tl.Add(c.at, reads, 1)
			if c.stale {
				tl.Add(c.at, stale, 1)
			}
		}
	}
	for s := range tl.Len() {
		n := int(tl.Sum(s, reads) + tl.Sum(s, writes))
		fmt.Fprintf(w, "  %3ds  reads %6.0f  writes %5.0f  stale %3.0f  errors %3.0f  %s\n", s, tl.Sum(s, reads), tl.Sum(s, writes), tl.Sum(s, stale), tl.Sum(s, bad), strings.Repeat("#", min(n/100, 60)))
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
		all, wr := report.Summarize(lats), report.Summarize(wlats)
		secs := (ph.to - ph.from).Seconds()
		fmt.Fprintf(w, "  %-16s %9d %7d %10.0f %9.0f %9s %9s %9s\n", ph.name, all.N, errs, float64(all.N)/secs, float64(wr.N)/secs, all.Fmt(all.P50), all.Fmt(all.P99), wr.Fmt(wr.P99))
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
