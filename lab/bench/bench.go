// Package bench is what the benchmarks under it share: helper processes
// (this executable re-launched as a hidden verb), an in-process replicated
// cluster, and the measuring loops. Each benchmark runs its contenders side by side in one
// run, interleaved in rounds so drift in the machine affects all alike, and
// prints ratios.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/report"
)

// StartHelper starts `neptune bench <args>` (a hidden helper verb) and
// returns the address it announces on its first line of output with
// format, and a function that kills it.
func StartHelper(ctx context.Context, exe, format string, args ...string) (string, func(), error) {
	cmd := exec.CommandContext(ctx, exe, append([]string{"bench"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	var addr string
	if _, err := fmt.Fscanf(out, format, &addr); err != nil {
		stop()
		return "", nil, fmt.Errorf("bench: helper %s did not start: %w", args[0], err)
	}
	return addr, stop, nil
}

// Contender is one way of making a call.
type Contender struct {
	Name string
	Call func(ctx context.Context, body []byte) error
}

// Cell accumulates one contender's calls in one mode over rounds.
type Cell struct {
	mu      sync.Mutex
	lats    []time.Duration
	elapsed time.Duration
}

// Add merges o's calls into c (a round into the run's total).
func (c *Cell) Add(o *Cell) {
	o.mu.Lock()
	lats, elapsed := o.lats, o.elapsed
	o.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lats = append(c.lats, lats...)
	c.elapsed += elapsed
}

// Rate is the cell's completed calls per second.
func (c *Cell) Rate() float64 { return float64(len(c.lats)) / c.elapsed.Seconds() }

// Latency summarises the cell's call latencies.
func (c *Cell) Latency() report.Summary { return report.Summarize(c.lats) }

// RunCell drives conc callers of call for d and adds their latencies to
// res.
func RunCell(ctx context.Context, call func(context.Context, []byte) error, body []byte, conc int, d time.Duration, res *Cell) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	end := start.Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				err := call(ctx, body)
				// The server's copy of the deadline can fire a moment
				// before ours: an error at the very end is the cell ending.
				if ctx.Err() != nil || (err != nil && time.Until(end) < 10*time.Millisecond) {
					break
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					break
				}
				local = append(local, time.Since(t0))
			}
			res.mu.Lock()
			res.lats = append(res.lats, local...)
			res.mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed += time.Since(start)
	if firstErr != nil && !strings.Contains(firstErr.Error(), "context") {
		return firstErr
	}
	return nil
}

// RunRounds runs every contender for cell with conc callers in each of
// rounds rounds, interleaved, and returns their cells by name.
func RunRounds(ctx context.Context, cs []Contender, body []byte, conc int, cell time.Duration, rounds int) (map[string]*Cell, error) {
	results := map[string]*Cell{}
	for r := range rounds {
		for _, c := range cs {
			if results[c.Name] == nil {
				results[c.Name] = &Cell{}
			}
			if err := RunCell(ctx, c.Call, body, conc, cell, results[c.Name]); err != nil {
				return nil, fmt.Errorf("bench: %s (round %d): %w", c.Name, r+1, err)
			}
		}
	}
	return results, nil
}

// Op is one request of a closed loop: it calls c with the caller's session
// and random source.
type Op func(ctx context.Context, c *neptune.Client, sess *neptune.Session, rng *rand.Rand) error

// ClosedLoop runs clients callers, each with its own session and random
// source seeded by seed and its index, calling op back to back for dur, and
// returns the rate of successful calls.
func ClosedLoop(ctx context.Context, c *neptune.Client, clients int, dur time.Duration, seed uint64, op Op) (float64, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(dur)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), seed))
			sess := neptune.NewSession()
			for time.Now().Before(stop) && ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := op(cctx, c, sess, rng)
				cancel()
				if err == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / dur.Seconds(), ctx.Err()
}

// Sleep sleeps for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// MiB formats bytes in mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// Columns formats each of xs with format, for the header of a table with a
// column per degree or node: Columns("deg%-7d", []int{1, 2}).
func Columns(format string, xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		fmt.Fprintf(&b, format, x)
	}
	return b.String()
}
