// Package appendbench is the list-append workload on real node processes:
// three nodes host apps/listappend replicated at a level, concurrent
// appenders (each element appended once, retried while retryable) run
// while the primary is SIGKILLed and restarted again and again, and at the
// end every replica's lists are read directly and judged by
// internal/replica/check's ListAppend: lost acknowledged appends,
// duplicates, divergent replicas. Throughput measures what exactly-once
// costs: appends per second with write identities and without, on the
// same cluster. The test suite runs a bounded version; `neptune bench
// append` a longer one.
package appendbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// Config is one run.
type Config struct {
	// Exe is the neptune binary the nodes run; Dir holds their data.
	Exe, Dir string
	// Level is the replication level (1, 2 or 3); Parts the partitions.
	Level, Parts int
	// Appenders run concurrently; Keys is the number of keys per partition.
	Appenders, Keys int
	// Duration of the fault phase; a primary is killed every KillEvery
	// (0: no kills) and restarted after Down.
	Duration, KillEvery, Down time.Duration
	// Log receives progress lines (nil: none).
	Log io.Writer
	// NodeDir is node id's data directory (nil: Dir/id); Extra is added
	// to the nodes' config file (top-level YAML keys).
	NodeDir func(id string) string
	Extra   string
	// Fault, if set, runs (on Run's goroutine) once the appenders started,
	// beside the kills; the fault phase still lasts Duration.
	Fault func(ctx context.Context, cl *Cluster) error
	// Retry is the client's retry policy (zero: the default;
	// config.NoRetry shows what the cluster itself hides from callers).
	Retry config.RetryPolicy
}

// Cluster is three listappend nodes and a client.
type Cluster struct {
	cfg   Config
	lc    *localcluster.Cluster
	Nodes []*localcluster.Node
	C     *client.Client
}

// Start starts the nodes and waits until every partition has a primary
// (level 1: is announced).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Parts == 0 {
		cfg.Parts = 2
	}
	if cfg.Down == 0 {
		cfg.Down = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	yamlPath := filepath.Join(cfg.Dir, "listappend.yaml")
	yaml := fmt.Sprintf("services:\n  - name: %s\n    partitions: 0-%d\n    replication:\n      level: %d\n      nodes: [a1, a2, a3]\n      degree: 3\n%s",
		listappend.Name, cfg.Parts-1, cfg.Level, cfg.Extra)
	if err := os.WriteFile(yamlPath, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	cl := &Cluster{cfg: cfg, lc: localcluster.New(cfg.Exe, cfg.Dir)}
	for i := range 3 {
		id := fmt.Sprintf("a%d", i+1)
		dir := filepath.Join(cfg.Dir, id)
		if cfg.NodeDir != nil {
			dir = cfg.NodeDir(id)
		}
		n, err := cl.lc.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", yamlPath, "--data-dir", dir,
			"--announce-interval", "200ms", "--announce-ttl", "1s"}})
		if err != nil {
			cl.Close()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, n)
	}
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		cl.Close()
		return nil, err
	}
	c, err := client.New(ctx, client.Config{Client: config.Client{Join: cl.lc.Seeds(), AnnounceTTL: time.Second, Retry: cfg.Retry}, Material: insecure})
	if err != nil {
		cl.Close()
		return nil, err
	}
	cl.C = c
	for ctx.Err() == nil {
		ok := len(c.Partitions()) == cfg.Parts
		for p := 0; ok && p < cfg.Parts && cfg.Level > 1; p++ {
			ok = cl.Primary(p) != ""
		}
		if ok {
			return cl, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl.Close()
	return nil, fmt.Errorf("appendbench: cluster not ready: %w", ctx.Err())
}

// Restart starts a stopped node again on its data directory.
func (cl *Cluster) Restart(ctx context.Context, n *localcluster.Node) error {
	return cl.lc.Restart(ctx, n)
}

// Close stops the client and the nodes.
func (cl *Cluster) Close() {
	if cl.C != nil {
		cl.C.Close()
	}
	cl.lc.Close()
}

// Primary is partition p's announced primary of the highest epoch.
func (cl *Cluster) Primary(p int) string {
	best, epoch := "", uint64(0)
	for _, pi := range cl.C.Partitions() {
		if pi.Partition != p {
			continue
		}
		for _, r := range pi.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				best, epoch = r.Node, r.Epoch
			}
		}
	}
	return best
}

// Result is a fault run's outcome.
type Result struct {
	Report  *check.ListReport
	Appends int
	Kills   int
	Elapsed time.Duration
	// Retries counts attempts after the first one of an append; Errors
	// the calls that returned an error (each a failed call as a user sees
	// it, the client library's own retries inside it).
	Retries, Errors int64
}

// Run runs the fault phase and the final check on a started cluster.
func (cl *Cluster) Run(ctx context.Context) (*Result, error) {
	cfg := cl.cfg
	var (
		mu      sync.Mutex
		appends []check.AppendOp
		next    atomic.Uint64
		retries atomic.Int64
		errs    atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("w%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				elem := next.Add(1)
				p := int(elem % uint64(cfg.Parts))
				key := fmt.Sprintf("p%d-k%d", p, (int(elem)/cfg.Parts)%cfg.Keys)
				op := check.AppendOp{Key: key, Element: elem, Client: name, Start: time.Now()}
				op.Outcome = cl.append(ctx, p, key, elem, &retries, &errs)
				op.End = time.Now()
				mu.Lock()
				appends = append(appends, op)
				mu.Unlock()
			}
		}()
	}
	kills := 0
	if cfg.KillEvery > 0 {
		tick := time.NewTicker(cfg.KillEvery)
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-tick.C:
			}
			if time.Since(start) > cfg.Duration-cfg.Down {
				break
			}
			target := cl.Primary(kills % cfg.Parts)
			if cfg.Level == 1 {
				target = fmt.Sprintf("a%d", kills%3+1)
			}
			i := slices.IndexFunc(cl.Nodes, func(n *localcluster.Node) bool { return n.Spec.ID == target })
			if i < 0 {
				continue
			}
			if err := cl.Nodes[i].Kill(); err != nil {
				tick.Stop()
				close(stop)
				wg.Wait()
				return nil, err
			}
			kills++
			fmt.Fprintf(cfg.Log, "t=%v: killed %s (kill %d)\n", time.Since(start).Round(time.Millisecond), target, kills)
			time.Sleep(cfg.Down)
			if err := cl.lc.Restart(ctx, cl.Nodes[i]); err != nil {
				tick.Stop()
				close(stop)
				wg.Wait()
				return nil, err
			}
		}
		tick.Stop()
	}
	if cfg.Fault != nil {
		if err := cfg.Fault(ctx, cl); err != nil {
			close(stop)
			wg.Wait()
			return nil, err
		}
	}
	if rest := cfg.Duration - time.Since(start); rest > 0 {
		select {
		case <-time.After(rest):
		case <-ctx.Done():
		}
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	finals, err := cl.finals(ctx, appends)
	if err != nil {
		return nil, err
	}
	rep, err := check.ListAppend(check.ListHistory{Appends: appends, Finals: finals})
	if err != nil {
		return nil, err
	}
	return &Result{Report: rep, Appends: len(appends), Kills: kills, Elapsed: elapsed, Retries: retries.Load(), Errors: errs.Load()}, nil
}

// append appends elem to key, retrying while the error is retryable (a
// write of unknown outcome with its identity, WithRetryOf), for at most
// 20 s. The outcome is AppendFailed only if no attempt may have run.
func (cl *Cluster) append(ctx context.Context, p int, key string, elem uint64, retries, errs *atomic.Int64) check.AppendOutcome {
	body := listappend.EncodeAppend(key, elem)
	deadline := time.Now().Add(20 * time.Second)
	var err error
	maybeRan := false
	for attempt := 0; ctx.Err() == nil && time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			retries.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cl.C.Call(callCtx, listappend.Name, p, "append", body, client.WithRetryOf(err))
		cancel()
		if err == nil {
			return check.AppendOK
		}
		errs.Add(1)
		maybeRan = maybeRan || errors.Is(err, nerr.ErrUnknownOutcome)
		var remote *transport.RemoteError
		if errors.As(err, &remote) {
			if maybeRan {
				return check.AppendUnknown
			}
			return check.AppendFailed // the handler refused it
		}
		if !nerr.Retryable(err) {
			break
		}
	}
	if maybeRan || err == nil {
		return check.AppendUnknown
	}
	return check.AppendFailed
}

// finals waits until every replica serves and all have executed the same
// version, then reads every key from every replica directly.
func (cl *Cluster) finals(ctx context.Context, appends []check.AppendOp) ([]check.FinalList, error) {
	keys := map[int][]string{}
	seen := map[string]bool{}
	for _, a := range appends {
		if !seen[a.Key] {
			seen[a.Key] = true
			var p int
			fmt.Sscanf(a.Key, "p%d-", &p)
			keys[p] = append(keys[p], a.Key)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if cl.converged() {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("appendbench: replicas did not converge: %+v", cl.C.Partitions())
		}
		time.Sleep(100 * time.Millisecond)
	}
	conns := transport.NewConns()
	defer conns.Close()
	addrs := map[string]string{}
	for _, m := range cl.C.Members(ctx, 0) {
		addrs[m.Node] = m.RPCAddr
	}
	var out []check.FinalList
	for _, n := range cl.Nodes {
		rpc, err := conns.ClientFor(n.Spec.ID, addrs[n.Spec.ID])
		if err != nil {
			return nil, err
		}
		for p := range cl.cfg.Parts {
			for _, k := range keys[p] {
				// Sent to this node only: a serving replica answers from its
				// own state.
				resp, err := rpc.Call(ctx, &pb.CallRequest{Service: listappend.Name, Partition: int32(p), Method: "read", Mode: pb.Mode_MODE_READ, Body: []byte(k)})
				if err != nil {
					return nil, fmt.Errorf("appendbench: read %s at %s: %w", k, n.Spec.ID, err)
				}
				list, err := listappend.DecodeList(resp.Body)
				if err != nil {
					return nil, err
				}
				if cl.cfg.Level == 1 {
					// Level 1 orders only each origin's writes: replicas that
					// took appends to one key at once end with the same
					// elements in different orders. Compared as multisets
					// (sorted: elements are numbered when their append
					// starts, so the order of appends that did not overlap is
					// kept), duplicates and losses still show.
					slices.Sort(list)
				}
				out = append(out, check.FinalList{Partition: fmt.Sprint(p), Replica: n.Spec.ID, Key: k, List: list})
			}
		}
	}
	return out, nil
}

// converged: every replica of every partition is announced serving at the
// same version (a few announcements in a row).
func (cl *Cluster) converged() bool {
	for range 3 {
		ps := cl.C.Partitions()
		if len(ps) != cl.cfg.Parts {
			return false
		}
		for _, pi := range ps {
			if len(pi.Replicas) != 3 {
				return false
			}
			for _, r := range pi.Replicas {
				if r.Role == "recovering" || (cl.cfg.Level > 1 && r.Version != pi.Replicas[0].Version) {
					return false
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if cl.cfg.Level == 1 {
		time.Sleep(2 * time.Second) // level 1 versions are local: let gossip settle
	}
	return true
}

// Throughput runs appenders for d without faults and returns appends per
// second, with write identities or without.
func (cl *Cluster) Throughput(ctx context.Context, identities bool, d time.Duration, base uint64) float64 {
	cl.C.SetWriteIdentities(identities)
	defer cl.C.SetWriteIdentities(true)
	var n atomic.Int64
	var next atomic.Uint64
	next.Store(base)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range cl.cfg.Appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				elem := next.Add(1)
				p := int(elem % uint64(cl.cfg.Parts))
				body := listappend.EncodeAppend(fmt.Sprintf("tput-%d", elem%64), elem)
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if _, err := cl.C.Call(callCtx, listappend.Name, p, "append", body); err == nil {
					n.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds()
}
