// Package burstbench is `neptune bench burst`: a burst of large writes on
// three node processes hosting kv at level 2, with each node's resident
// memory before, during and after, whether an election happened and how
// many bytes replication sent twice (issue 13, bounded resources).
package burstbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Config are the knobs of `neptune bench burst`.
type Config struct {
	// Writes of Size bytes each, Concurrency at a time.
	Writes, Size, Concurrency int
	// Settle is how long the nodes idle after the burst before "after" is
	// measured (the best of samples every Sample in the last half).
	Settle, Sample time.Duration
	// Factor and Slack fix the threshold before the run: every node's
	// RSS after must be at most Factor × before + the data kv keeps
	// (Live) + Slack.
	Factor float64
	Slack  int64
	// Exe is the neptune binary to run nodes with (default: this one).
	Exe string
	// ProfileDir, if set, receives each node's heap profile after the
	// settle (<node>.heap.pb.gz, from its /debug/pprof/heap).
	ProfileDir string
}

// DefaultConfig is issue 13's burst: 50 writes of 8 MiB.
func DefaultConfig() Config {
	return Config{Writes: 50, Size: 8 << 20, Concurrency: 4, Settle: 20 * time.Second, Sample: 500 * time.Millisecond,
		Factor: 1, Slack: 64 << 20}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Writes < 1 || c.Concurrency < 1:
		return errors.New("burstbench: writes and concurrency must be at least 1")
	case c.Size < 1 || c.Size > 15<<20:
		return errors.New("burstbench: size must be in 1..15 MiB (the node's 16 MiB message limit)")
	case c.Settle <= 0 || c.Sample <= 0:
		return errors.New("burstbench: settle and sample must be positive")
	case c.Factor < 1 || c.Slack < 0:
		return errors.New("burstbench: factor must be at least 1 and slack not negative")
	}
	return nil
}

// NodeFigures are one node's measurements.
type NodeFigures struct {
	ID                    string
	Before, During, After int64 // RSS in bytes; During is the peak
	Resent                int64 // bytes this node sent a replica twice
	// GoHeap is the Go heap in use after the settle, GoHeld what the Go
	// runtime holds from the OS beyond it (idle, not yet released): the
	// rest of RSS is outside the Go heap (stacks, cgo/pebble allocations).
	GoHeap, GoHeld int64
}

// Result is what a run measured.
type Result struct {
	Nodes                   []NodeFigures
	EpochBefore, EpochAfter uint64
	Acked, Failed           int
	Elapsed                 time.Duration
	Primary                 string
}

// burstKeys is how many keys the burst overwrites.
const burstKeys = 8

// Live is the data kv holds after the burst: its last value of each key,
// in memory (kv keeps its partitions in a map) as a node's steady state
// now includes it.
func (c Config) Live() int64 { return int64(min(c.Writes, burstKeys)) * int64(c.Size) }

// Checks are the run's verdicts, against goals fixed in cfg before it:
// memory returns (every node's RSS after at most Factor × before + Live +
// Slack), no election, nothing retransmitted.
func (r Result) Checks(cfg Config) []*report.Check {
	var worst float64 // the largest excess over its threshold, in MiB
	var measured []string
	for i, n := range r.Nodes {
		excess := float64(n.After) - (cfg.Factor*float64(n.Before) + float64(cfg.Live()+cfg.Slack))
		if i == 0 || excess > worst {
			worst = excess
		}
		measured = append(measured, fmt.Sprintf("%s %s→%s→%s", n.ID, bench.MiB(n.Before), bench.MiB(n.During), bench.MiB(n.After)))
	}
	mem := report.AtMost(fmt.Sprintf("RSS after <= %.2g x before + %s kept by kv + %s", cfg.Factor, bench.MiB(cfg.Live()), bench.MiB(cfg.Slack)),
		worst, 0, strings.Join(measured, ", ")+" (before→peak→after)")
	mem.Doubt(r.Failed > 0, "%d writes failed: the burst was smaller than asked", r.Failed)
	var resent int64
	for _, n := range r.Nodes {
		resent += n.Resent
	}
	return []*report.Check{mem,
		report.AtMost("no election during the burst", float64(r.EpochAfter-r.EpochBefore), 0, fmt.Sprintf("epoch %d before, %d after", r.EpochBefore, r.EpochAfter)),
		report.AtMost("nothing retransmitted", float64(resent), 0, bench.MiB(resent)+" resent"),
	}
}

// Run is `neptune bench burst`.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "burst: %d writes of %s to %d keys, %d at a time, kv level 2 on 3 node processes; goals fixed before the run: RSS after <= %.2g x before + %s kept by kv + %s on every node, epoch unchanged, 0 bytes resent\n",
		cfg.Writes, bench.MiB(int64(cfg.Size)), burstKeys, cfg.Concurrency, cfg.Factor, bench.MiB(cfg.Live()), bench.MiB(cfg.Slack))
	res, err := Measure(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-5s %10s %10s %10s %10s %10s %10s\n", "node", "before", "peak", "after", "resent", "go heap", "go idle")
	for _, n := range res.Nodes {
		role := ""
		if n.ID == res.Primary {
			role = " (primary)"
		}
		fmt.Fprintf(stdout, "%-5s %10s %10s %10s %10s %10s %10s%s\n", n.ID, bench.MiB(n.Before), bench.MiB(n.During), bench.MiB(n.After), bench.MiB(n.Resent),
			bench.MiB(n.GoHeap), bench.MiB(n.GoHeld), role)
	}
	fmt.Fprintf(stdout, "writes: %d acknowledged, %d failed in %v (%.1f MiB/s); epoch %d before, %d after\n",
		res.Acked, res.Failed, res.Elapsed.Round(time.Millisecond), float64(res.Acked)*float64(cfg.Size)/(1<<20)/res.Elapsed.Seconds(), res.EpochBefore, res.EpochAfter)
	checks := res.Checks(cfg)
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, report.Tally(checks...))
	return nil
}

// Measure starts the cluster, runs the burst and measures.
func Measure(ctx context.Context, cfg Config, log io.Writer) (Result, error) {
	var res Result
	exe := cfg.Exe
	_, dir, cleanup, err := localcluster.Scratch("neptune-bench-burst-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return res, err
		}
	}
	conf := filepath.Join(dir, "kv.yaml")
	if err := os.WriteFile(conf, []byte("services:\n  - name: kv\n    partitions: 0-0\n    replication:\n      level: 2\n      nodes: [b1, b2, b3]\n      degree: 3\n"), 0o644); err != nil {
		return res, err
	}
	cl := localcluster.New(exe, dir)
	defer cl.Close()
	type proc struct {
		n       *localcluster.Node
		metrics string
	}
	var procs []proc
	for i := range 3 {
		id := fmt.Sprintf("b%d", i+1)
		port, err := localcluster.FreePort()
		if err != nil {
			return res, err
		}
		maddr := fmt.Sprintf("127.0.0.1:%d", port)
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", conf, "--data-dir", filepath.Join(dir, id), "--metrics", maddr,
			"--announce-interval", "200ms", "--announce-ttl", "1s", "--pprof"}})
		if err != nil {
			return res, err
		}
		procs = append(procs, proc{n, maddr})
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(), AnnounceTTL: time.Second})
	if err != nil {
		return res, err
	}
	defer c.Close()
	if res.Primary, err = localcluster.Primary(ctx, c, "kv", 0, 20*time.Second); err != nil {
		return res, err
	}
	if err := localcluster.WaitWritable(ctx, 1, 15*time.Second, func(ctx context.Context, p int) error {
		_, err := c.Call(ctx, "kv", p, "put", []byte("warm=1"))
		return err
	}); err != nil {
		return res, err
	}
	bench.Sleep(ctx, 2*time.Second) // steady state: announcements, a flush of the warm-up
	rss := func() ([]int64, error) {
		out := make([]int64, len(procs))
		for i, p := range procs {
			v, err := localcluster.RSS(p.n.PID())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.n.Spec.ID, err)
			}
			out[i] = v
		}
		return out, nil
	}
	before, err := rss()
	if err != nil {
		return res, err
	}
	res.EpochBefore = epoch(c)
	peak := append([]int64(nil), before...)
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	var mu sync.Mutex
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			if now, err := rss(); err == nil {
				mu.Lock()
				for i := range now {
					peak[i] = max(peak[i], now[i])
				}
				mu.Unlock()
			}
		}
	}()
	value := bytes.Repeat([]byte("v"), cfg.Size)
	var next, acked, failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Writes) {
					return
				}
				body := append(fmt.Appendf(nil, "big%d=", i%burstKeys), value...) // burstKeys keys overwritten: the store stays small
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.Call(cctx, "kv", 0, "put", body)
				for errors.Is(err, neptune.ErrOverloaded) && cctx.Err() == nil {
					// The primary's in-flight byte budget is full; the
					// write never ran: send it again shortly.
					bench.Sleep(cctx, 20*time.Millisecond)
					_, err = c.Call(cctx, "kv", 0, "put", body)
				}
				cancel()
				if err != nil {
					failed.Add(1)
					fmt.Fprintf(log, "write %d: %v\n", i, err)
					continue
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Acked, res.Failed = int(acked.Load()), int(failed.Load())
	// After: the lowest RSS sampled in the second half of the settle time
	// (a GC cycle or a flush may be under way at any one instant).
	bench.Sleep(ctx, cfg.Settle/2)
	after := []int64(nil)
	for end := time.Now().Add(cfg.Settle / 2); time.Now().Before(end) && ctx.Err() == nil; bench.Sleep(ctx, cfg.Sample) {
		now, err := rss()
		if err != nil {
			return res, err
		}
		if after == nil {
			after = now
		}
		for i := range now {
			after[i] = min(after[i], now[i])
		}
	}
	close(stopSampling)
	sampling.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.EpochAfter = epoch(c)
	for i, p := range procs {
		resent, err := scrape(ctx, p.metrics, "neptune_replication_resent_bytes_total")
		if err != nil {
			return res, fmt.Errorf("%s: %w", p.n.Spec.ID, err)
		}
		f := NodeFigures{ID: p.n.Spec.ID, Before: before[i], During: peak[i], After: after[i], Resent: int64(resent)}
		if f.GoHeap, f.GoHeld, err = goHeap(ctx, p.metrics); err != nil {
			return res, fmt.Errorf("%s: %w", p.n.Spec.ID, err)
		}
		if cfg.ProfileDir != "" {
			if err := saveHeapProfile(ctx, p.metrics, filepath.Join(cfg.ProfileDir, p.n.Spec.ID+".heap.pb.gz")); err != nil {
				return res, fmt.Errorf("%s: %w", p.n.Spec.ID, err)
			}
		}
		res.Nodes = append(res.Nodes, f)
	}
	if cfg.ProfileDir != "" { // diagnosis only: RSS once the profile's GC ran
		bench.Sleep(ctx, 3*time.Second)
		now, _ := rss()
		for i, p := range procs {
			in, held, _ := goHeap(ctx, p.metrics)
			fmt.Fprintf(log, "%s after a GC: rss %s go heap %s idle %s\n", p.n.Spec.ID, bench.MiB(now[i]), bench.MiB(in), bench.MiB(held))
		}
	}
	return res, nil
}

// epoch is the highest epoch any replica of kv partition 0 announces.
func epoch(c *neptune.Client) uint64 {
	var e uint64
	for _, p := range c.Partitions() {
		if p.Service != "kv" || p.Partition != 0 {
			continue
		}
		for _, r := range p.Replicas {
			e = max(e, r.Epoch)
		}
	}
	return e
}

// goHeap reads the Go heap in use and the idle heap the runtime has not
// returned to the OS from a node's Go collector metrics.
func goHeap(ctx context.Context, addr string) (inuse, held int64, err error) {
	in, err := scrape(ctx, addr, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return 0, 0, err
	}
	idle, err := scrape(ctx, addr, "go_memstats_heap_idle_bytes")
	if err != nil {
		return 0, 0, err
	}
	rel, err := scrape(ctx, addr, "go_memstats_heap_released_bytes")
	if err != nil {
		return 0, 0, err
	}
	return int64(in), int64(idle - rel), nil
}

// saveHeapProfile writes a node's heap profile to path.
func saveHeapProfile(ctx context.Context, addr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// scrape reads one unlabelled metric from a node's /metrics.
func scrape(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no metric %s at %s", name, addr)
}
