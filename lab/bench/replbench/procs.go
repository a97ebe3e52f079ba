package replbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// quotaReserve is the CPU left beside the confined nodes for the load
// generator (this process) and the rest of the machine.
const quotaReserve = 0.5

// scaleGoal is Fig 5.2's shape on CPU-limited node processes (issue 33):
// at imbalance 1 (all load on one partition), level 2, degree 4 serves at
// least this multiple of degree 1 (the paper: about 3×).
const scaleGoal = 2.5

// minNodeUtil is the share of its quota the busiest node of a cell must
// use for the cell to count as node-bound.
const minNodeUtil = 0.8

// procCluster starts the node processes rep names, each confined to cpu
// cores, hosting kv partitions 0..parts-1 replicated as rep says, and
// returns a client of them and the nodes (to meter).
func procCluster(ctx context.Context, dir string, rep neptune.Replication, parts int, cpu float64) (*neptune.Client, []*localcluster.Node, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	cfg, err := writeKVConfig(dir, parts, rep)
	if err != nil {
		return nil, nil, nil, err
	}
	cl := localcluster.New(exe, dir)
	var nodes []*localcluster.Node
	for _, id := range rep.Nodes {
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, CPU: cpu, Args: []string{"--config", cfg, "--data-dir", filepath.Join(dir, id)}})
		if err != nil {
			cl.Close()
			return nil, nil, nil, err
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		cl.Close()
		return nil, nil, nil, err
	}
	stop := func() { c.Close(); cl.Close() }
	// Writable (replCellOn waits for it) is the readiness of every
	// level; level 1 names no primary.
	if err := localcluster.WaitMembers(ctx, c, len(rep.Nodes), 30*time.Second); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return c, nodes, stop, nil
}

// meter watches the cell's node processes, each confined to cpu cores.
func meter(nodes []*localcluster.Node, cpu float64) *cpuquota.Meter {
	m := &cpuquota.Meter{}
	for _, n := range nodes {
		m.Watch(n.Spec.ID, n.PID(), cpu)
	}
	return m
}

// writeKVConfig writes dir/kv.yaml, the node config of every node process
// of these benchmarks: kv partitions 0..parts-1 replicated as rep says, and
// returns its path.
func writeKVConfig(dir string, parts int, rep neptune.Replication) (string, error) {
	cfg := filepath.Join(dir, "kv.yaml")
	yaml := fmt.Sprintf("services:\n  - name: kv\n    partitions: 0-%d\n    replication:\n      level: %d\n      nodes: [%s]\n      degree: %d\n",
		parts-1, rep.Level, strings.Join(rep.Nodes, ", "), rep.Degree)
	if rep.MinLive > 0 {
		yaml += fmt.Sprintf("      min_live: %d\n", rep.MinLive)
	}
	return cfg, os.WriteFile(cfg, []byte(yaml), 0o644)
}
