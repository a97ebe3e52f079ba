package labcmd

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/demo"
)

func demoCmd() *cobra.Command {
	cfg := demo.DefaultConfig()
	cmd := leaf("demo [flags]", "Run a local cluster through a node failure and check every replica",
		`Start a local cluster of node processes serving the forum (SQLite,
replication level 2), drive readers and writers through a SIGKILL and
restart of the primary of partition 0, print a per-second timeline and a
summary, then read every replica directly: every acknowledged message must
be on every replica and the replicas of each partition identical.`,
		experiment(&cfg, nil, nil, demo.Run))
	cmd.Example = "  neptune demo\n  neptune demo --nodes 5 --degree 3 --duration 30s"
	fs := cmd.Flags()
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes in the local cluster")
	fs.IntVar(&cfg.Degree, "degree", cfg.Degree, "replicas per forum partition (>= 2, <= --nodes)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to drive the workload")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "concurrent callers")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "forum partitions, two topics each")
	fs.Float64Var(&cfg.Writes, "writes", cfg.Writes, "fraction of calls that are AddMsg; the rest are ViewHeaders and ViewMsg")
	addSeed(fs, &cfg.Seed, "the workload")
	fs.BoolVar(&cfg.KeepLogs, "keep-logs", cfg.KeepLogs, "keep the nodes' logs and data directories")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "run the cluster without TLS, gossip key or poll authentication (default: secured with throwaway material)")
	fs.StringVar(&cfg.Balance, "balance", cfg.Balance, "load-balancing policy of the demo's client: "+strings.Join(balance.Names, ", "))
	return cmd
}
