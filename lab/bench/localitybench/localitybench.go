// Package localitybench is `neptune bench locality`: what routing for
// cache affinity (the "affinity" balancing policy, issue 32 part 6; USITS
// §2.1, Gage §3.4) buys a cache service. Nodes in-process each host the
// same pcache partition with a small in-memory tier (pcache.WithMemory)
// over a file seeded with every key; closed-loop callers look keys up
// (Zipf-skewed, pcache.Lookup, whose key is the affinity key) through
// clients under each policy in turn, in interleaved rounds, every
// contender starting from empty memory. Printed per policy: the memory
// tier's hit ratio over every node, throughput and mean latency, and the
// affinity policy's ratios to the best of the others, judged against
// goals fixed by flags before the run. Two rows that hash keys are
// printed, not judged: the policy with no bound, and nginx `hash
// $http_x_affinity consistent` in front of the nodes (nginx.go).
package localitybench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/pcache"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Config are the knobs of `neptune bench locality`.
type Config struct {
	// Nodes host the pcache partition, each with its own memory tier.
	Nodes int
	// Keys are looked up, ranked by popularity with Zipf exponent Zipf
	// (0 is uniform).
	Keys int
	Zipf float64
	// Memory is each node's memory tier, in entries.
	Memory int
	// Clients are the neptune clients per contender, Concurrency the
	// closed-loop callers spread over them.
	Clients, Concurrency int
	// Warmup is the unmeasured start of each cell, Cell its measured part.
	Warmup, Cell time.Duration
	// Rounds are interleaved: every contender runs once per round.
	Rounds int
	// LoadBound is the affinity policy's bound (0: its default).
	LoadBound float64
	// Seed seeds the callers' key choices (the same for every contender).
	Seed uint64
	// GoalHits is the least the affinity policy's hit ratio must be, as a
	// multiple of the best other policy's; GoalThroughput the same for
	// throughput.
	GoalHits, GoalThroughput float64
	// DataDir holds the nodes' cache files (default: a temporary
	// directory, removed after).
	DataDir string
	// Nginx is the nginx executable for the "nginx hash" row; the row is
	// skipped, with a message, if it is not found.
	Nginx string
}

// DefaultConfig is a cache whose nodes' memory together holds a fifth of
// the keys, under the skew measured for web caches (Zipf 0.8, Breslau et
// al. 1999). An LRU model of it (every lookup to a random node vs each key
// always to one) predicts hit ratios of 0.34 and 0.58, 1.68×; the goal
// leaves room for the spills the load bound makes.
func DefaultConfig() Config {
	return Config{Nodes: 4, Keys: 20000, Zipf: 0.8, Memory: 1000, Clients: 2, Concurrency: 8,
		Warmup: 2 * time.Second, Cell: 4 * time.Second, Rounds: 2, Seed: 1, GoalHits: 1.5, GoalThroughput: 0.9, Nginx: "nginx"}
}

// Validate names the first bad knob.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 2:
		return fmt.Errorf("locality: --nodes must be >= 2 (a choice to make), got %d", c.Nodes)
	case c.Keys < 1:
		return fmt.Errorf("locality: --keys must be >= 1, got %d", c.Keys)
	case !(c.Zipf >= 0) || math.IsInf(c.Zipf, 0):
		return fmt.Errorf("locality: --zipf must be a number >= 0, got %v", c.Zipf)
	case c.Memory < 1:
		return fmt.Errorf("locality: --memory must be >= 1, got %d", c.Memory)
	case c.Clients < 1 || c.Concurrency < c.Clients:
		return fmt.Errorf("locality: need --clients >= 1 and --concurrency >= --clients, got %d and %d", c.Clients, c.Concurrency)
	case c.Warmup < 0 || c.Cell <= 0:
		return fmt.Errorf("locality: --warmup must be >= 0 and --cell > 0, got %v and %v", c.Warmup, c.Cell)
	case c.Rounds < 1:
		return fmt.Errorf("locality: --rounds must be >= 1, got %d", c.Rounds)
	case c.GoalHits <= 0 || c.GoalThroughput <= 0:
		return fmt.Errorf("locality: goals must be > 0, got --goal-hits %v, --goal-throughput %v", c.GoalHits, c.GoalThroughput)
	}
	b := balance.DefaultConfig()
	b.Policy, b.LoadBound = balance.NameAffinity, c.LoadBound
	if err := b.Validate(); err != nil {
		return fmt.Errorf("locality: --load-bound: %w", err)
	}
	return nil
}

// unbounded is the row of the affinity policy with a bound no load
// reaches: rendezvous hashing alone, what the bound's spills cost. It is
// printed, not judged.
const unbounded = "affinity, no bound"

// contenders are the rows: the policies compared, then the affinity
// policy, judged, and unbounded.
var contenders = []string{balance.NameRandom, balance.NamePolling, balance.NamePrequal, balance.NameAffinity, unbounded}

// others reports whether row is one the affinity policy is judged against.
func others(row string) bool { return row != balance.NameAffinity && row != unbounded }

// cell is what one contender did in one measured window (or several,
// pooled).
type cell struct {
	calls, errors int
	latency       time.Duration // summed over calls
	elapsed       time.Duration
	hits, misses  uint64
	firstErr      string
}

func (c *cell) add(o cell) {
	c.calls += o.calls
	c.errors += o.errors
	c.latency += o.latency
	c.elapsed += o.elapsed
	c.hits += o.hits
	c.misses += o.misses
	if c.firstErr == "" {
		c.firstErr = o.firstErr
	}
}

func (c cell) hitRatio() float64 {
	return pcache.MemoryStats{Hits: c.hits, Misses: c.misses}.HitRatio()
}

func (c cell) rate() float64 { return float64(c.calls) / c.elapsed.Seconds() }

func (c cell) mean() time.Duration {
	if c.calls == 0 {
		return 0
	}
	return c.latency / time.Duration(c.calls)
}

// Run starts the nodes, runs every contender in each round and prints the
// table and the verdicts.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	dir := cfg.DataDir
	if dir == "" {
		_, tmp, cleanup, err := localcluster.Scratch("neptune-locality-")
		if err != nil {
			return err
		}
		defer cleanup()
		dir = tmp
	}
	before := bench.Before(ctx)
	caches, join, rpcAddrs, stop, err := startNodes(ctx, cfg, dir)
	if err != nil {
		return err
	}
	defer stop()
	lookups := map[string]lookupFunc{}
	for _, name := range contenders {
		var clients []*neptune.Client
		for range cfg.Clients {
			c, err := dial(ctx, cfg, name, join)
			if err != nil {
				return err
			}
			defer c.Close()
			clients = append(clients, c)
		}
		lookups[name] = func(ctx context.Context, caller int, key string) (bool, error) {
			got, err := pcache.Lookup(ctx, clients[caller%len(clients)], 0, key)
			return got.Found, err
		}
	}
	rows := slices.Clone(contenders)
	switch proxy, err := startNginx(ctx, cfg.Nginx, dir, rpcAddrs); {
	case errors.Is(err, exec.ErrNotFound):
		fmt.Fprintf(w, "nginx row skipped: %q not found (install it with: sudo apt-get install -y nginx)\n", cfg.Nginx)
	case err != nil:
		return err
	default:
		defer proxy.stop()
		lookup, closeConns, err := nginxLookup(proxy.addr)
		if err != nil {
			return err
		}
		defer closeConns()
		lookups[nginxRow] = lookup
		rows = append(rows, nginxRow)
		fmt.Fprintf(w, "%s in front of the %d nodes' gRPC ports (grpc_pass): hash $http_x_affinity consistent, the cache key in that header\n", proxy.version, len(rpcAddrs))
	}
	fmt.Fprintf(w, "locality: %d nodes hosting pcache partition 0, %d keys (Zipf %.2f), memory %d entries per node; %d clients and %d callers per policy; %v warm-up + %v measured per cell, %d rounds\n",
		cfg.Nodes, cfg.Keys, cfg.Zipf, cfg.Memory, cfg.Clients, cfg.Concurrency, cfg.Warmup, cfg.Cell, cfg.Rounds)
	keys := newZipf(cfg.Keys, cfg.Zipf)
	pooled := map[string]*cell{}
	var rounds []map[string]cell
	probe := bench.StartLagProbe(10 * time.Millisecond)
	for r := range cfg.Rounds {
		round := map[string]cell{}
		for _, name := range rows {
			res, err := runCell(ctx, cfg, lookups[name], caches, keys, cfg.Seed+uint64(r))
			if err != nil {
				return fmt.Errorf("locality: %s (round %d): %w", name, r+1, err)
			}
			round[name] = res
			if pooled[name] == nil {
				pooled[name] = &cell{}
			}
			pooled[name].add(res)
			fmt.Fprintf(w, "  round %d %-18s hit ratio %.3f  %7.0f lookups/s  mean %v  errors %d\n", r+1, name, res.hitRatio(), res.rate(), res.mean().Round(time.Microsecond), res.errors)
		}
		rounds = append(rounds, round)
	}
	machine := before.WithOthers(probe.Stop())
	flat := map[string]cell{}
	fmt.Fprintf(w, "\n%-18s %9s %12s %10s %9s %9s\n", "policy", "hit ratio", "lookups/s", "mean", "hits ×", "rate ×")
	best := bestOther(func(c cell) float64 { return c.hitRatio() }, derefAll(pooled))
	bestRate := bestOther(cell.rate, derefAll(pooled))
	for _, name := range rows {
		c := *pooled[name]
		flat[name] = c
		fmt.Fprintf(w, "%-18s %9.3f %12.0f %10v %8.2f× %8.2f×\n", name, c.hitRatio(), c.rate(), c.mean().Round(time.Microsecond),
			c.hitRatio()/best.hitRatio(), c.rate()/bestRate.rate())
	}
	fmt.Fprintf(w, "(× columns: to the best policy other than affinity; %q and %q hash keys and are printed, not judged)\nmachine: %s, wake-up lateness before the run %.2f ms\n",
		unbounded, nginxRow, machine, float64(machine.Lag)/float64(time.Millisecond))
	checks := verdicts(cfg, flat, rounds, machine)
	for _, c := range checks {
		fmt.Fprintln(w, c)
	}
	fmt.Fprintln(w, report.Tally(checks...))
	return nil
}

func derefAll(m map[string]*cell) map[string]cell {
	out := make(map[string]cell, len(m))
	for k, v := range m {
		out[k] = *v
	}
	return out
}

// bestOther is the cell of the policy other than affinity with the
// highest by.
func bestOther(by func(cell) float64, cells map[string]cell) cell {
	var best cell
	found := false
	for _, name := range contenders {
		c, ok := cells[name]
		if !others(name) || !ok {
			continue
		}
		if !found || by(c) > by(best) {
			best, found = c, true
		}
	}
	return best
}

// verdicts judges the pooled cells against the goals; each goal also on
// every round alone (report.Rounds), and doubted when the machine was busy,
// a contender failed calls, or a cell measured too few lookups to tell.
func verdicts(cfg Config, pooled map[string]cell, rounds []map[string]cell, machine bench.Starvation) []*report.Check {
	hit := func(c cell) float64 { return c.hitRatio() }
	type goal struct {
		name  string
		by    func(cell) float64
		limit float64
		what  string
	}
	goals := []goal{
		{"hit ratio", hit, cfg.GoalHits, "hit ratio"},
		{"throughput", cell.rate, cfg.GoalThroughput, "lookups/s"},
	}
	var out []*report.Check
	for _, g := range goals {
		aff, other := pooled[balance.NameAffinity], bestOther(g.by, pooled)
		ratio := g.by(aff) / g.by(other)
		c := report.AtLeast(fmt.Sprintf("affinity's %s ≥ %.2f× the best other policy's", g.name, g.limit), ratio, g.limit,
			fmt.Sprintf("%.2f× (%.3g vs %.3g)", ratio, g.by(aff), g.by(other)))
		var met []bool
		for _, r := range rounds {
			met = append(met, g.by(r[balance.NameAffinity])/g.by(bestOther(g.by, r)) >= g.limit)
		}
		c = report.Rounds(c, met)
		for _, name := range contenders {
			p := pooled[name]
			c.Doubt(p.errors > 0, "%s failed %d of %d lookups (first: %s)", name, p.errors, p.calls+p.errors, p.firstErr)
			c.Doubt(p.calls < 1000, "%s measured only %d lookups: lengthen --cell", name, p.calls)
		}
		out = append(out, machine.Doubt(c, "the run"))
	}
	return out
}

// startNodes starts cfg.Nodes in-process nodes, each hosting pcache
// partition 0 over its own file seeded with every key, and returns their
// caches and a gossip address to join.
func startNodes(ctx context.Context, cfg Config, dir string) ([]*pcache.Cache, []string, []string, func(), error) {
	var (
		caches []*pcache.Cache
		nodes  []*neptune.Node
		join   []string
		rpc    []string
	)
	stop := func() {
		for _, n := range nodes {
			n.Close()
		}
		for _, c := range caches {
			c.Close()
		}
	}
	img := image(cfg.Keys)
	for i := range cfg.Nodes {
		id := fmt.Sprintf("n%d", i)
		c, err := pcache.Open(filepath.Join(dir, id, "pcache"), pcache.WithMemory(cfg.Memory))
		if err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		caches = append(caches, c)
		if _, err := c.Restore(ctx, 0, bytes.NewReader(img)); err != nil {
			stop()
			return nil, nil, nil, nil, fmt.Errorf("locality: seeding %s: %w", id, err)
		}
		n, err := neptune.NewNode(neptune.NodeConfig{ID: id, Join: join, DataDir: filepath.Join(dir, id), AnnounceInterval: 100 * time.Millisecond,
			Security: neptune.Security{Insecure: true}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		if err := n.Register(c.Service(), 0); err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		if err := n.Start(ctx); err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		nodes = append(nodes, n)
		join = []string{n.GossipAddr()}
		rpc = append(rpc, n.RPCAddr())
	}
	return caches, join, rpc, stop, nil
}

// dial is a client for row that sees every node.
func dial(ctx context.Context, cfg Config, row string, join []string) (*neptune.Client, error) {
	bal := neptune.Balancing{Policy: row, LoadBound: cfg.LoadBound}
	if row == unbounded {
		bal = neptune.Balancing{Policy: balance.NameAffinity, LoadBound: math.MaxInt32}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join, Security: neptune.Security{Insecure: true}, Balance: bal, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := localcluster.WaitMembers(ctx, c, cfg.Nodes, 20*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// runCell empties every node's memory, warms the contender's clients up
// for cfg.Warmup and measures cfg.Cell: lookups, errors, latency, and the
// memory tier's hits and misses over every node in the measured window.
func runCell(ctx context.Context, cfg Config, lookup lookupFunc, caches []*pcache.Cache, keys *zipf, seed uint64) (cell, error) {
	for _, c := range caches {
		c.ResetMemory()
	}
	if cfg.Warmup > 0 {
		if _, err := loop(ctx, cfg, lookup, keys, seed, cfg.Warmup); err != nil {
			return cell{}, err
		}
	}
	var h0 pcache.MemoryStats
	for _, c := range caches {
		s := c.MemoryStats()
		h0.Hits, h0.Misses = h0.Hits+s.Hits, h0.Misses+s.Misses
	}
	res, err := loop(ctx, cfg, lookup, keys, seed+1<<32, cfg.Cell)
	if err != nil {
		return cell{}, err
	}
	for _, c := range caches {
		s := c.MemoryStats()
		res.hits, res.misses = res.hits+s.Hits, res.misses+s.Misses
	}
	res.hits -= h0.Hits
	res.misses -= h0.Misses
	return res, nil
}

// lookupFunc looks key up for caller (0 ≤ caller < Concurrency) and
// reports whether it was found.
type lookupFunc func(ctx context.Context, caller int, key string) (bool, error)

// loop runs cfg.Concurrency closed-loop callers of lookup for d.
func loop(ctx context.Context, cfg Config, lookup lookupFunc, keys *zipf, seed uint64, d time.Duration) (cell, error) {
	var (
		mu  sync.Mutex
		out cell
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			var mine cell
			for time.Now().Before(end) && ctx.Err() == nil {
				key := keys.key(rng)
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				found, err := lookup(cctx, i, key)
				cancel()
				switch {
				case err == nil && !found:
					err = fmt.Errorf("key %s not found: the node's file was not seeded", key)
					fallthrough
				case err != nil:
					mine.errors++
					if mine.firstErr == "" {
						mine.firstErr = err.Error()
					}
				default:
					mine.calls++
					mine.latency += time.Since(t0)
				}
			}
			mu.Lock()
			out.add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out, ctx.Err()
}

// zipf draws key names by rank: P(rank i) ∝ 1/(i+1)^s.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range n {
		sum += math.Pow(float64(i+1), -s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return &zipf{cdf: cdf}
}

func (z *zipf) key(rng *rand.Rand) string {
	i := sort.SearchFloat64s(z.cdf, rng.Float64())
	return keyName(min(i, len(z.cdf)-1))
}

func keyName(i int) string { return fmt.Sprintf("key-%d", i) }

// image is a pcache snapshot of a partition holding keys key-0… with
// 100-byte values, in the format pcache.Cache.Restore reads
// (apps/pcache/snapshot.go): seeding a file through one Restore is one
// transaction, where an update per key would sync the file per key.
func image(keys int) []byte {
	put := func(b, s []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := put(nil, []byte("neptune-pcache-snapshot/1"))
	b = binary.AppendUvarint(b, 0) // LSN
	names := make([]string, keys)
	for i := range names {
		names[i] = keyName(i)
	}
	slices.Sort(names) // bbolt's order, as Snapshot writes it
	value := bytes.Repeat([]byte("v"), 100)
	for _, k := range names {
		b = put(put(b, []byte(k)), value)
	}
	b = binary.AppendUvarint(b, 0) // the end of the pairs
	b = binary.AppendUvarint(b, uint64(keys))
	return put(b, []byte("end"))
}
