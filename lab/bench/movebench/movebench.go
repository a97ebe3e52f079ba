// Package movebench measures a replicated partition's write throughput
// while a replica moves (issue 17: replica-set changes while serving,
// goal ≥ 0.8× steady): four in-process nodes, kv partition 0 on three of
// them holding Data MiB; each round has a steady cell and a single move
// of one replica between the third and the fourth node (add, wait until
// it caught up and votes, remove), measured from the add to the removal;
// the ratio of the two rates of acknowledged writes is the figure.
// Continuous mode moves back and forth without pause for a whole cell
// instead (the worst case, not the goal's).
//
// The load is open: writes arrive at a fixed rate (Poisson), Load times
// the capacity a closed-loop cell of Writers measures first, as a
// service in production sees them; a move must not cost that load its
// throughput. Load 0 runs the closed loop itself, the machine saturated:
// on one 2-core machine the new replica's node then takes its CPU (the
// copy, the log it receives, its disk syncs) from the same cores as the
// writes it competes with, which a cluster of machines would not.
package movebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Config configures a run.
type Config struct {
	// Writers write concurrently, one write at a time each, in the
	// closed-loop cell that measures capacity (and in every cell with
	// Load 0).
	Writers int
	// Load is the offered write rate as a fraction of that capacity
	// (open loop, Poisson arrivals); 0: the closed loop throughout.
	Load float64
	// Cell is how long each cell (steady, moving) measures.
	Cell time.Duration
	// Rounds of one steady and one moving cell, interleaved.
	Rounds int
	// Goal is the least moving/steady ratio that passes.
	Goal float64
	// DataMiB is the data the partition holds before the run (what a
	// move copies).
	DataMiB int
	// Continuous moves back and forth for a whole cell instead of once.
	Continuous bool
}

// DefaultConfig is a short run.
func DefaultConfig() Config {
	return Config{Writers: 16, Load: 0.7, Cell: 3 * time.Second, Rounds: 4, Goal: 0.8, DataMiB: 16}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Writers < 1 || c.Cell <= 0 || c.Rounds < 1 || c.Goal <= 0 || c.DataMiB < 0 {
		return errors.New("movebench: writers, cell, rounds and goal must be positive, data not negative")
	}
	if c.Load < 0 || c.Load >= 1 {
		return fmt.Errorf("movebench: load must be in [0, 1), got %g", c.Load)
	}
	return nil
}

// Run runs the benchmark and prints each cell and the verdict.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Other work on the machine is judged in the second before the nodes
	// start and during the run; the pressure during the run is this
	// benchmark's own (four nodes and the writers on the same cores, alike
	// in the steady and the moving cells, which interleave) and is printed,
	// not judged.
	before := bench.Before(ctx)
	dir, err := os.MkdirTemp("", "movebench")
	if err != nil {
		return fmt.Errorf("movebench: %w", err)
	}
	defer os.RemoveAll(dir)
	ids := []string{"a", "b", "c", "d"}
	rep := neptune.Replication{Level: 2, Nodes: ids[:3], Degree: 3}
	var nodes []*neptune.Node
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	var join []string
	for _, id := range ids {
		n, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join,
			AnnounceInterval: 200 * time.Millisecond, AnnounceTTL: time.Second, DataDir: filepath.Join(dir, id),
			Placement: neptune.Placement{Off: true}}) // (the bench moves replicas itself)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		svc := kv.New().Service() // (in memory: no node restarts here)
		r := rep
		svc.Replication = &r
		if err := n.Register(svc, 0); err != nil { // d: on standby
			return err
		}
		if err := n.Start(ctx); err != nil {
			return err
		}
		join = []string{nodes[0].GossipAddr()}
	}
	c := nodes[0].Client()
	if err := waitPrimary(ctx, c); err != nil {
		return err
	}
	loadStart := time.Now()
	if err := load(ctx, c, cfg.DataMiB); err != nil {
		return err
	}
	loaded := time.Since(loadStart)

	var acked atomic.Int64
	var gaps ackMeter
	wctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }()
	put := func(name string) {
		cctx, cancel := context.WithTimeout(wctx, 2*time.Second)
		began := time.Now()
		_, err := c.Call(cctx, "kv", 0, "put", []byte(name+"=v"))
		cancel()
		if err == nil {
			acked.Add(1)
			gaps.ack(time.Since(began))
		}
	}
	closed, stopClosed := context.WithCancel(wctx)
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; closed.Err() == nil; i++ {
				put(fmt.Sprintf("w%d-%d", w, i))
			}
		}()
	}
	time.Sleep(time.Second) // warm up
	load := fmt.Sprintf("closed loop, %d writers", cfg.Writers)
	var shed *atomic.Int64
	if cfg.Load > 0 {
		n0, t0 := acked.Load(), time.Now()
		time.Sleep(cfg.Cell)
		capacity := float64(acked.Load()-n0) / time.Since(t0).Seconds()
		stopClosed()
		rate := cfg.Load * capacity
		load = fmt.Sprintf("open loop, %.0f writes/s Poisson = %g × the capacity of %.0f writes/s a closed loop of %d writers measured first",
			rate, cfg.Load, capacity, cfg.Writers)
		shed = openLoad(wctx, &wg, rate, put)
		time.Sleep(time.Second) // (the closed loop's last writes drain)
	}
	defer stopClosed()

	mode := "one move per round, measured from its add to its removal"
	if cfg.Continuous {
		mode = fmt.Sprintf("moving back and forth without pause for %v per round", cfg.Cell)
	}
	fmt.Fprintf(stdout, "movebench: kv partition 0 (%d MiB, loaded in %v) on 3 of 4 in-process nodes, %s, %v steady cells, %d rounds, %s\n",
		cfg.DataMiB, loaded.Round(time.Millisecond), load, cfg.Cell, cfg.Rounds, mode)
	from, to := "c", "d"
	var steadyN, movingN int64
	var steadyT, movingT time.Duration
	var rounds []bool
	var during bench.Starvation
	for round := range cfg.Rounds {
		probe := bench.StartLagProbe(10 * time.Millisecond)
		n0, t0 := acked.Load(), time.Now()
		gaps.reset()
		time.Sleep(cfg.Cell)
		sn, st, sgap, sp99 := acked.Load()-n0, time.Since(t0), gaps.reset(), gaps.p99

		n0, t0 = acked.Load(), time.Now()
		moves := 0
		for moves == 0 || cfg.Continuous && time.Since(t0) < cfg.Cell {
			if err := change(ctx, c, to, ""); err != nil {
				return fmt.Errorf("round %d, add %s: %w", round, to, err)
			}
			if err := change(ctx, c, "", from); err != nil {
				return fmt.Errorf("round %d, remove %s: %w", round, from, err)
			}
			from, to = to, from
			moves++
		}
		mn, mt, mgap, mp99 := acked.Load()-n0, time.Since(t0), gaps.reset(), gaps.p99
		during = during.Worse(probe.Stop())
		steady, moving := float64(sn)/st.Seconds(), float64(mn)/mt.Seconds()
		fmt.Fprintf(stdout, "round %d: steady %.0f writes/s (p99 %v, longest pause %v), moving %.0f writes/s (%d move(s) in %v, p99 %v, longest pause %v): %.2f×\n",
			round, steady, sp99.Round(time.Millisecond), sgap.Round(time.Millisecond), moving, moves, mt.Round(time.Millisecond),
			mp99.Round(time.Millisecond), mgap.Round(time.Millisecond), moving/steady)
		rounds = append(rounds, moving/steady >= cfg.Goal)
		steadyN, steadyT, movingN, movingT = steadyN+sn, steadyT+st, movingN+mn, movingT+mt
	}
	steady, moving := float64(steadyN)/steadyT.Seconds(), float64(movingN)/movingT.Seconds()
	ratio := moving / steady
	chk := report.AtLeast(fmt.Sprintf("throughput during a move ≥ %.2f× steady", cfg.Goal), ratio, cfg.Goal,
		fmt.Sprintf("steady %.0f writes/s, moving %.0f writes/s: %.2f×", steady, moving, ratio))
	if shed != nil && shed.Load() > 0 {
		chk.Measured += fmt.Sprintf("; %d writes not sent (%d already in flight)", shed.Load(), maxInFlight)
	}
	fmt.Fprintf(stdout, "during the run: %s; client wake-up lateness up to %.2f ms (this benchmark's own load, not judged)\n",
		during, float64(during.Lag)/float64(time.Millisecond))
	machine := before.WithOthers(during)
	fmt.Fprintln(stdout, machine.Doubt(report.Rounds(chk, rounds), "the run (lateness and pressure: the second before the nodes started)"))
	return nil
}

// maxInFlight bounds the open loop's writes under way: arrivals beyond it
// are not sent (counted), so a stalled partition cannot pile up
// goroutines without end; they count as throughput lost.
const maxInFlight = 4096

// openLoad starts writes by put at Poisson arrivals of rate per second
// until ctx ends, and returns the count of arrivals not sent because
// maxInFlight writes were under way.
func openLoad(ctx context.Context, wg *sync.WaitGroup, rate float64, put func(name string)) *atomic.Int64 {
	var shed atomic.Int64
	sem := make(chan struct{}, maxInFlight)
	rng := rand.New(rand.NewPCG(17, 0))
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := time.Now()
		for i := 0; ; i++ {
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			} else if ctx.Err() != nil {
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				shed.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				put(fmt.Sprintf("o-%d", i))
				<-sem
			}()
		}
	}()
	return &shed
}

// ackMeter follows acknowledged writes (of any writer) between resets:
// the longest pause between two, and each one's latency.
type ackMeter struct {
	mu      sync.Mutex
	last    time.Time
	gap     time.Duration
	resetAt time.Time
	lats    []time.Duration
	// p99 is the 99th percentile latency of the writes acknowledged
	// before the last reset since the one before.
	p99 time.Duration
}

func (g *ackMeter) ack(lat time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	from := g.last
	if from.Before(g.resetAt) {
		from = g.resetAt
	}
	g.gap = max(g.gap, now.Sub(from))
	g.last = now
	g.lats = append(g.lats, lat)
}

// reset returns the longest pause so far (the pause still open
// included), sets p99, and starts over.
func (g *ackMeter) reset() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	from := g.last
	if from.Before(g.resetAt) {
		from = g.resetAt
	}
	gap := max(g.gap, now.Sub(from))
	g.gap, g.resetAt = 0, now
	g.p99 = 0
	if n := len(g.lats); n > 0 {
		slices.Sort(g.lats)
		g.p99 = g.lats[min(n-1, n*99/100)]
	}
	g.lats = g.lats[:0]
	return gap
}

// load puts mib MiB of 64 KiB values into partition 0, 8 at a time.
func load(ctx context.Context, c *neptune.Client, mib int) error {
	n := mib << 20 / (64 << 10)
	val := strings.Repeat("v", 64<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Call(cctx, "kv", 0, "put", []byte(fmt.Sprintf("data%06d=%s", i, val)))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("movebench: loading: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// change makes one replica-set change at the primary and waits for it.
func change(ctx context.Context, c *neptune.Client, add, remove string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		primary, err := primaryOf(c)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var rs neptune.ReplicaSet
			rs, err = c.ChangeReplicas(cctx, primary, "kv", 0, add, 1, remove)
			cancel()
			if err == nil && rs.Done {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("not done: %+v", rs)
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func primaryOf(c *neptune.Client) (string, error) {
	best, epoch := "", uint64(0)
	for _, p := range c.Partitions() {
		if p.Service == "kv" && p.Partition == 0 {
			for _, r := range p.Replicas {
				if r.Role == "primary" && r.Epoch >= epoch {
					best, epoch = r.Node, r.Epoch
				}
			}
		}
	}
	if best == "" {
		return "", errors.New("no primary announced")
	}
	return best, nil
}

func waitPrimary(ctx context.Context, c *neptune.Client) error {
	for end := time.Now().Add(20 * time.Second); ; {
		if _, err := primaryOf(c); err == nil {
			_, err := c.Call(ctx, "kv", 0, "put", []byte("warm=v"))
			if err == nil {
				return nil
			}
		}
		if time.Now().After(end) {
			return errors.New("movebench: no primary within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
