package scalebench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// runProcesses starts cfg.Processes secured node processes, each hosting
// one echo partition, and measures what they use together when idle.
func runProcesses(ctx context.Context, cfg Config, w io.Writer) ([]*report.Check, error) {
	exe, dir, cleanup, err := localcluster.Scratch("neptune-scale-procs-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cl, err := localcluster.NewSecure(exe, dir, "scale")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	fmt.Fprintf(w, "\n[processes] starting %d secured node processes...\n", cfg.Processes)
	nodes := make([]*localcluster.Node, cfg.Processes)
	start := func(i int) error {
		n, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("p%03d", i), Services: []string{fmt.Sprintf("echo:%d", i)}})
		nodes[i] = n
		return err
	}
	if err := start(0); err != nil {
		return nil, err
	}
	const batch = 4
	for i := 1; i < cfg.Processes; i += batch {
		var wg sync.WaitGroup
		errs := make([]error, batch)
		for j := range batch {
			if i+j < cfg.Processes {
				wg.Go(func() { errs[j] = start(i + j) })
			}
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		if (i/batch)%5 == 0 {
			fmt.Fprintf(w, "[processes] %d up\n", min(i+batch, cfg.Processes))
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Security: cl.ClientSecurity("client/client")})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, cfg.Processes, 2*time.Minute); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "[processes] all %d in the yellow pages; settling %v, then idle for %v\n", cfg.Processes, cfg.Settle, cfg.ProcessIdle)
	bench.Sleep(ctx, cfg.Settle)
	total := func() time.Duration {
		var sum time.Duration
		for _, n := range nodes {
			if d, ok := bench.ProcCPU(n.PID()); ok {
				sum += d
			}
		}
		return sum
	}
	probe := bench.StartLagProbe(10 * time.Millisecond)
	c0, w0 := total(), time.Now()
	bench.Sleep(ctx, cfg.ProcessIdle)
	used, wall := total()-c0, time.Since(w0)
	starved := probe.Stop()
	cores := used.Seconds() / wall.Seconds()
	perNode := float64(used.Milliseconds()) / wall.Seconds() / float64(cfg.Processes)
	fmt.Fprintf(w, "[processes] %d idle node processes: %.3f cores together, %.2f ms CPU/s each\n", cfg.Processes, cores, perNode)
	check := report.AtMost(fmt.Sprintf("%d idle secured node processes use ≤ %.2f cores together", cfg.Processes, cfg.ProcessCores), cores, cfg.ProcessCores,
		fmt.Sprintf("%.3f cores (%.2f ms/s per node over %v)", cores, perNode, wall.Round(time.Second)))
	return []*report.Check{starved.Doubt(check, "the idle window")}, nil
}
