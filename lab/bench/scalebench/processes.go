package scalebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// runProcesses starts cfg.Processes secured node processes, each hosting
// one echo partition and the first three a replicated kv partition, and
// measures what they use together when idle, and how long a write waits
// when the kv primary is SIGKILLed, against the same in a cluster of just
// those three.
func runProcesses(ctx context.Context, cfg Config, w io.Writer) ([]*report.Check, error) {
	fmt.Fprintf(w, "\n[processes] failover in a cluster of 3 node processes...\n")
	small, _, err := processCluster(ctx, cfg, 3, w)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "[processes] 3 nodes: a write waited %v (median) after the primary's SIGKILL\n", small.Round(time.Millisecond))
	big, checks, err := processCluster(ctx, cfg, cfg.Processes, w)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "[processes] %d nodes: a write waited %v (median) after the primary's SIGKILL\n", cfg.Processes, big.Round(time.Millisecond))
	ratio := big.Seconds() / small.Seconds()
	checks = append(checks, report.AtMost(fmt.Sprintf("failover among %d node processes ≤ %.1f× among 3", cfg.Processes, cfg.FailoverGoal), ratio, cfg.FailoverGoal,
		fmt.Sprintf("%.2f× (%v vs %v)", ratio, big.Round(time.Millisecond), small.Round(time.Millisecond))))
	return checks, nil
}

// processCluster starts n secured node processes (p000 …), the first
// three hosting replicated kv partition 0 (level 2), the rest an echo
// partition each; with more than 3 it measures the idle CPU of all; then
// it SIGKILLs kv's primary failoverKills times (restarting it after each)
// and returns the median of how long a write waited.
func processCluster(ctx context.Context, cfg Config, n int, w io.Writer) (time.Duration, []*report.Check, error) {
	exe, dir, cleanup, err := localcluster.Scratch("neptune-scale-procs-")
	if err != nil {
		return 0, nil, err
	}
	defer cleanup()
	cl, err := localcluster.NewSecure(exe, dir, "scale")
	if err != nil {
		return 0, nil, err
	}
	defer cl.Close()
	kvConf := filepath.Join(dir, "kv.yaml")
	if err := os.WriteFile(kvConf, []byte("services:\n  - name: kv\n    partitions: 0\n    replication:\n      level: 2\n      nodes: [p000, p001, p002]\n      degree: 3\n"), 0o644); err != nil {
		return 0, nil, err
	}
	if n > 3 {
		fmt.Fprintf(w, "[processes] starting %d secured node processes...\n", n)
	}
	nodes := make([]*localcluster.Node, n)
	// One idle echo node serves pprof, for --cpu-profile.
	profiled, profileAddr := -1, ""
	if cfg.CPUProfile != "" && n > 3 {
		port, err := localcluster.FreePort()
		if err != nil {
			return 0, nil, err
		}
		profiled, profileAddr = n/2, fmt.Sprintf("127.0.0.1:%d", port)
	}
	start := func(i int) error {
		spec := localcluster.Spec{ID: fmt.Sprintf("p%03d", i), Services: []string{fmt.Sprintf("echo:%d", i)}}
		if i < 3 {
			spec.Args = []string{"--config", kvConf, "--data-dir", filepath.Join(dir, spec.ID)}
		}
		if i == profiled {
			spec.Args = append(spec.Args, "--pprof", "--metrics", profileAddr)
		}
		nd, err := cl.Start(ctx, spec)
		nodes[i] = nd
		return err
	}
	if err := start(0); err != nil {
		return 0, nil, err
	}
	const batch = 4
	for i := 1; i < n; i += batch {
		var wg sync.WaitGroup
		errs := make([]error, batch)
		for j := range batch {
			if i+j < n {
				wg.Go(func() { errs[j] = start(i + j) })
			}
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, nil, err
		}
		if n > 3 && (i/batch)%5 == 0 {
			fmt.Fprintf(w, "[processes] %d up\n", min(i+batch, n))
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Security: cl.ClientSecurity("client/client")})
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, n, 2*time.Minute); err != nil {
		return 0, nil, err
	}
	if err := localcluster.WaitServing(ctx, c, "kv", 1, 3, time.Minute); err != nil {
		return 0, nil, err
	}
	var checks []*report.Check
	if n > 3 {
		fmt.Fprintf(w, "[processes] all %d in the yellow pages; settling %v, then idle for %v\n", n, cfg.Settle, cfg.ProcessIdle)
		bench.Sleep(ctx, cfg.Settle)
		total := func() time.Duration {
			var sum time.Duration
			for _, nd := range nodes {
				if d, err := cpuquota.ProcessCPU(nd.PID()); err == nil {
					sum += d
				}
			}
			return sum
		}
		probe := bench.StartLagProbe(10 * time.Millisecond)
		c0, w0 := total(), time.Now()
		profiling := make(chan error, 1)
		if profiled >= 0 {
			go func() { profiling <- writeNodeProfile(ctx, cl, profileAddr, cfg.ProcessIdle, cfg.CPUProfile) }()
		}
		bench.Sleep(ctx, cfg.ProcessIdle)
		used, wall := total()-c0, time.Since(w0)
		starved := probe.Stop()
		cores := used.Seconds() / wall.Seconds()
		perNode := float64(used.Milliseconds()) / wall.Seconds() / float64(n)
		fmt.Fprintf(w, "[processes] %d idle node processes: %.3f cores together, %.2f ms CPU/s each\n", n, cores, perNode)
		check := report.AtMost(fmt.Sprintf("%d idle secured node processes use ≤ %.2f cores together", n, cfg.ProcessCores), cores, cfg.ProcessCores,
			fmt.Sprintf("%.3f cores (%.2f ms/s per node over %v)", cores, perNode, wall.Round(time.Second)))
		checks = append(checks, starved.Doubt(check, "the idle window"))
		if profiled >= 0 {
			if err := <-profiling; err != nil {
				return 0, nil, err
			}
			fmt.Fprintf(w, "[processes] CPU profile of idle node %s over the window: %s\n", nodes[profiled].Spec.ID, cfg.CPUProfile)
		}
	}
	// The median of three kills: one failover is too noisy to compare.
	var waits []time.Duration
	for k := range failoverKills {
		wait, killed, err := killPrimary(ctx, c, nodes)
		if err != nil {
			return 0, nil, err
		}
		fmt.Fprintf(w, "[processes] %d nodes, kill %d: a write waited %v\n", n, k+1, wait.Round(time.Millisecond))
		waits = append(waits, wait)
		if err := cl.Restart(ctx, killed); err != nil {
			return 0, nil, err
		}
		if err := localcluster.WaitServing(ctx, c, "kv", 1, 3, time.Minute); err != nil {
			return 0, nil, err
		}
	}
	slices.Sort(waits)
	return waits[len(waits)/2], checks, nil
}

// failoverKills is how many times each cluster's kv primary is killed.
const failoverKills = 3

// killPrimary SIGKILLs kv partition 0's primary and returns how long a
// write issued then waited for its acknowledgement, and the killed node.
func killPrimary(ctx context.Context, c *neptune.Client, nodes []*localcluster.Node) (time.Duration, *localcluster.Node, error) {
	primary, err := localcluster.Primary(ctx, c, "kv", 0, time.Minute)
	if err != nil {
		return 0, nil, err
	}
	if _, err := c.Call(ctx, "kv", 0, "put", []byte("warm=1")); err != nil {
		return 0, nil, fmt.Errorf("warm-up write: %w", err)
	}
	i := slices.IndexFunc(nodes, func(nd *localcluster.Node) bool { return nd.Spec.ID == primary })
	if i < 0 {
		return 0, nil, fmt.Errorf("kv's primary %q is none of the node processes", primary)
	}
	if err := nodes[i].Kill(); err != nil {
		return 0, nil, err
	}
	killed := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.Call(callCtx, "kv", 0, "put", []byte("after=1")); err != nil {
		return 0, nil, fmt.Errorf("write after the primary's kill: %w", err)
	}
	return time.Since(killed), nodes[i], nil
}

// writeNodeProfile writes the CPU profile of the node whose metrics
// listener is addr, taken over d, to path.
func writeNodeProfile(ctx context.Context, cl *localcluster.Cluster, addr string, d time.Duration, path string) error {
	hc, scheme, err := cl.HTTP("operator/operator")
	if err != nil {
		return err
	}
	hc.Timeout = d + 30*time.Second
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s/debug/pprof/profile?seconds=%d", scheme, addr, int(d.Seconds())), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("cpu profile: %w", err)
	}
	return f.Close()
}
