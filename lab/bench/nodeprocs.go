package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Node processes confined to a CPU quota each (issue 33): what the
// benchmarks that run the papers' figures on CPU-bound nodes share.

// QuotaReserve is the CPU left beside the confined nodes for the load
// generator (this process) and the rest of the machine.
const QuotaReserve = 0.5

// MinNodeUtil is the share of its quota the busiest node of a cell must
// use for the cell to count as node-bound.
const MinNodeUtil = 0.8

// WriteServiceConfig writes dir/<service>.yaml, the node config of every
// node process of a cell: the built-in service's partitions 0..parts-1
// replicated as rep says (level, nodes, degree, and min_live and
// staleness when set), and returns its path. The node keeps an app
// service's storage under its --data-dir.
func WriteServiceConfig(dir, service string, parts int, rep neptune.Replication) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: node config: %w", err)
	}
	cfg := filepath.Join(dir, service+".yaml")
	yaml := fmt.Sprintf("services:\n  - name: %s\n    partitions: 0-%d\n    replication:\n      level: %d\n      nodes: [%s]\n      degree: %d\n",
		service, parts-1, rep.Level, strings.Join(rep.Nodes, ", "), rep.Degree)
	if rep.MinLive > 0 {
		yaml += fmt.Sprintf("      min_live: %d\n", rep.MinLive)
	}
	if rep.Staleness > 0 {
		yaml += fmt.Sprintf("      staleness: %s\n", rep.Staleness)
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return "", fmt.Errorf("bench: node config: %w", err)
	}
	return cfg, nil
}

// ProcCluster starts a node process for each of ids with the node config
// cfg and its data under dir/<id>, each confined to cpu cores (0:
// unconfined), and returns a client that sees them all, the nodes (to
// meter) and the function that kills them and closes the client.
func ProcCluster(ctx context.Context, dir, cfg string, ids []string, cpu float64) (*neptune.Client, []*localcluster.Node, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cl := localcluster.New(exe, dir)
	var nodes []*localcluster.Node
	for _, id := range ids {
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
	// A cell's cluster is thrown away after it: killed, not drained (a
	// drain takes seconds per cell and measures nothing).
	stop := func() {
		c.Close()
		for _, n := range nodes {
			_ = n.Kill()
		}
		cl.Close()
	}
	// Members, not writable: that is each service's own readiness (and
	// level 1 names no primary).
	if err := localcluster.WaitMembers(ctx, c, len(ids), 30*time.Second); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return c, nodes, stop, nil
}

// NodeMeter watches node processes, each confined to cpu cores.
func NodeMeter(nodes []*localcluster.Node, cpu float64) *cpuquota.Meter {
	m := &cpuquota.Meter{}
	for _, n := range nodes {
		m.Watch(n.Spec.ID, n.PID(), cpu)
	}
	return m
}

// Metered runs a cell's measuring window of length window (run) while it
// meters nodes, each confined to cpu cores, and judges the window: a
// quota exceeded is an error (nothing measured is valid), a starved
// machine or a window that was not node-bound (NodeBound) is in the
// judgment, for the verdict to doubt. Without nodes it only runs run.
func Metered(nodes []*localcluster.Node, cpu float64, window time.Duration, run func() error) (cpuquota.Judgment, error) {
	if len(nodes) == 0 {
		return cpuquota.Judgment{}, run()
	}
	m := NodeMeter(nodes, cpu)
	if err := m.Start(); err != nil {
		return cpuquota.Judgment{}, err
	}
	if err := run(); err != nil {
		return cpuquota.Judgment{}, err
	}
	judge, used, err := m.Stop()
	if err != nil {
		return judge, err
	}
	if len(judge.Over) > 0 {
		return judge, fmt.Errorf("the CPU quota did not hold: %s", judge.Reason)
	}
	return NodeBound(judge, used, window, cpu), nil
}

// NodeBound marks the judgment of a window starved when its busiest node
// left more than a fifth (1 - MinNodeUtil) of its quota unused: the figures are about
// CPU-bound nodes, and such a window measured the load generator.
func NodeBound(judge cpuquota.Judgment, used []cpuquota.Usage, window time.Duration, cpu float64) cpuquota.Judgment {
	busiest := slices.MaxFunc(used, func(a, b cpuquota.Usage) int { return cmp.Compare(a.Used, b.Used) })
	if util := busiest.Used.Seconds() / (window.Seconds() * cpu); util < MinNodeUtil {
		judge.Starved = true
		judge.Reason = strings.TrimPrefix(judge.Reason+fmt.Sprintf("; the busiest node (%s) used %.0f%% of its quota: the window was not node-bound", busiest.Name, 100*util), "; ")
	}
	return judge
}

// StarvedMark is what a cell's progress line adds when its window was
// starved or not node-bound.
func StarvedMark(starved bool) string {
	if starved {
		return " (starved or not node-bound)"
	}
	return ""
}

// RoundsRatio judges the ratio of the means of num and den (ops/s, one
// per round) against goal, and counts the rounds whose own ratio meets
// it. A starved cell, rounds that disagree or a single round make it
// INCONCLUSIVE.
func RoundsRatio(name string, goal float64, num, den []float64, starved []string) *report.Check {
	mn, _ := report.MeanSD(num)
	md, _ := report.MeanSD(den)
	rounds := min(len(num), len(den))
	met := 0
	for i := range rounds {
		if den[i] > 0 && num[i]/den[i] >= goal {
			met++
		}
	}
	ratio := 0.0
	if md > 0 {
		ratio = mn / md
	}
	c := report.AtLeast(name, ratio, goal, fmt.Sprintf("%.2f× (%.0f against %.0f ops/s; %d/%d rounds meet it)", ratio, mn, md, met, rounds))
	c.Doubt(rounds < 2, "one round cannot show the run's noise; run at least 2")
	c.Doubt(met > 0 && met < rounds, "rounds disagree")
	return DoubtStarved(c, starved)
}

// DoubtStarved doubts c for the cells it rests on that were starved or
// not node-bound (their reasons).
func DoubtStarved(c *report.Check, starved []string) *report.Check {
	return c.Doubt(len(starved) > 0, "%d cells starved or not node-bound (first: %s)", len(starved), strings.Join(starved[:min(2, len(starved))], "; "))
}
