// Package movebench measures a replicated partition's write throughput
// while its replicas move (issue 17: replica-set changes while serving,
// goal ≥ 0.8× steady): four in-process nodes, kv partition 0 on three of
// them, concurrent writers; each round has a steady cell and a cell during
// which one replica moves back and forth between the third and the fourth
// node (add, then remove) without pause; the ratio of the two cells'
// acknowledged writes is the figure.
package movebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
)

// Config configures a run.
type Config struct {
	// Writers write concurrently, one write at a time each.
	Writers int
	// Cell is how long each cell (steady, moving) measures.
	Cell time.Duration
	// Rounds of one steady and one moving cell, interleaved.
	Rounds int
	// Goal is the least moving/steady ratio that passes.
	Goal float64
}

// DefaultConfig is a short run.
func DefaultConfig() Config {
	return Config{Writers: 16, Cell: 3 * time.Second, Rounds: 3, Goal: 0.8}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Writers < 1 || c.Cell <= 0 || c.Rounds < 1 || c.Goal <= 0 {
		return errors.New("movebench: writers, cell, rounds and goal must be positive")
	}
	return nil
}

// Run runs the benchmark and prints each cell and the verdict.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
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
			AnnounceInterval: 200 * time.Millisecond, AnnounceTTL: time.Second, DataDir: filepath.Join(dir, id)})
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

	var acked atomic.Int64
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				cctx, cancel := context.WithTimeout(wctx, 2*time.Second)
				_, err := c.Call(cctx, "kv", 0, "put", fmt.Appendf(nil, "w%d-%d=v", w, i))
				cancel()
				if err == nil {
					acked.Add(1)
				}
			}
		}()
	}
	defer func() { stopWriters(); wg.Wait() }()
	time.Sleep(time.Second) // warm up

	fmt.Fprintf(stdout, "movebench: kv partition 0 on 3 of 4 in-process nodes, %d writers, %v cells, %d rounds (machine shared: see the report)\n",
		cfg.Writers, cfg.Cell, cfg.Rounds)
	from, to := "c", "d"
	var steadySum, movingSum float64
	for round := range cfg.Rounds {
		n0 := acked.Load()
		time.Sleep(cfg.Cell)
		steady := float64(acked.Load()-n0) / cfg.Cell.Seconds()

		n0 = acked.Load()
		end := time.Now().Add(cfg.Cell)
		moves := 0
		for time.Now().Before(end) {
			if err := change(ctx, c, to, ""); err != nil {
				return fmt.Errorf("round %d, add %s: %w", round, to, err)
			}
			if err := change(ctx, c, "", from); err != nil {
				return fmt.Errorf("round %d, remove %s: %w", round, from, err)
			}
			from, to = to, from
			moves++
		}
		took := time.Since(end.Add(-cfg.Cell))
		moving := float64(acked.Load()-n0) / took.Seconds()
		fmt.Fprintf(stdout, "round %d: steady %.0f writes/s, moving %.0f writes/s (%d moves in %v): %.2f×\n",
			round, steady, moving, moves, took.Round(time.Millisecond), moving/steady)
		steadySum += steady
		movingSum += moving
	}
	ratio := movingSum / steadySum
	verdict := "PASS"
	if ratio < cfg.Goal {
		verdict = "FAIL"
	}
	fmt.Fprintf(stdout, "throughput while moving / steady: %.2f× (goal ≥ %.2f×): %s\n", ratio, cfg.Goal, verdict)
	return nil
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
