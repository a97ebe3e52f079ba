package labcmd

import (
	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/lab/faults"
)

func faultsCmd() *cobra.Command {
	cfg := faults.DefaultConfig()
	cmd := leaf("faults [flags]", "Fault suite: partitions, pauses, kills and torn logs against three nodes in network namespaces",
		`Run --schedules seeded random schedules of nemeses (isolate the primary,
majority/minority split, bridge, SIGSTOP past the lease, SIGKILL and
restart, a torn write-log tail, lossy links: 10% loss and 30 ± 20 ms
with reordering on every node) against three node processes, each in its
own network namespace (root and iproute2 needed), while two client
processes in their own namespaces append to lists, put and get registers
and read at level 3. Each schedule's history is checked; the tallies are
printed with PASS/FAIL/INCONCLUSIVE against issue 14's goals (>= 20
schedules and >= 100,000 acknowledged operations; 0 lost, duplicated,
divergent, stale, non-linearizable; never two primaries; writes resume
within lease + 1 s of an isolation; one primary in every client's yellow
pages within 2 s of a heal; failover p50 <= 500 ms, p99 <= 1.5 s).

With --baseline-exe it instead compares throughput without faults: this
build's nodes against the given binary's (e.g. built from a commit before
leases), the same clients and workload, --rounds rounds of --quiet each.`,
		experiment(&cfg, nil, nil, faults.RunBench))
	cmd.Example = "  neptune bench faults --schedules 20 --seed 1"
	fs := cmd.Flags()
	fs.IntVar(&cfg.Schedules, "schedules", cfg.Schedules, "schedules, each on a fresh cluster")
	fs.IntVar(&cfg.Ops, "ops", cfg.Ops, "bound on the operations of all schedules together (0: only the time budget)")
	addSeed(fs, &cfg.Seed, "the first schedule (schedule i uses seed+i)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "nemeses per schedule (at most)")
	fs.DurationVar(&cfg.Budget, "budget", cfg.Budget, "time bound of each schedule's nemeses and rests")
	fs.DurationVar(&cfg.Hold, "hold", cfg.Hold, "typical time a nemesis is held")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "replication.lease of both services (when the binary has the key) and what the goals assume")
	fs.IntVar(&cfg.Level, "level", cfg.Level, "list-append service's level (kv runs at level 3 or linearizable)")
	fs.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep each schedule's logs and histories")
	fs.StringVar(&cfg.BaselineExe, "baseline-exe", cfg.BaselineExe, "compare throughput without faults against nodes of this neptune binary (e.g. one built before leases) instead of running schedules")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of the throughput comparison (--baseline-exe)")
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "length of each throughput cell (--baseline-exe)")
	fs.Float64Var(&cfg.ThroughputGoal, "throughput-goal", cfg.ThroughputGoal, "least ratio of this build's throughput to the baseline's (--baseline-exe)")
	return cmd
}

func faultsClientCmd() *cobra.Command {
	cmd := leaf(faults.ClientVerb, "Client process of bench faults (reads its job from stdin)", "", func(cmd *cobra.Command, _ []string) error {
		return faults.Client(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
	})
	cmd.Hidden = true
	return cmd
}

func delayerCmd() *cobra.Command {
	cmd := leaf(faults.DelayerVerb, "Packet delayer of the fault suite's lossy links (reads its job from stdin)", "", func(cmd *cobra.Command, _ []string) error {
		return faults.Delayer(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
	})
	cmd.Hidden = true
	return cmd
}

func lossyCmd() *cobra.Command {
	cfg := faults.DefaultLossyConfig()
	cmd := leaf("lossy [flags]", "Lossy links: elections and write throughput, replicated vs one unreplicated node, through the same impaired links",
		`Impair every node's egress (--loss dropped silently in the switch,
--delay ± --jitter added by a packet delayer in the node's namespace, so
packets reorder) and run, side by side in each round, one unreplicated
node and a three-node cluster per --levels, each on fresh namespaces,
with the same two client processes appending to lists (writes only)
for --window. Prints each cell's acknowledged writes per second and
elections (epochs entered, from the nodes' logs), the ratios to the
unreplicated node, and a verdict per goal fixed before the run (issue
28: at most one election per minute, writes at least half the
unreplicated node's). A cell with fewer than --min-writes writes is
starved: INCONCLUSIVE. Root, iproute2, iptables (NFQUEUE) and nft needed.`,
		experiment(&cfg, nil, nil, faults.RunLossy))
	cmd.Example = "  neptune bench lossy --rounds 2 --window 60s"
	fs := cmd.Flags()
	fs.Float64Var(&cfg.Link.Loss, "loss", cfg.Link.Loss, "fraction of each node's packets dropped")
	fs.DurationVar(&cfg.Link.Delay, "delay", cfg.Link.Delay, "mean delay added to each node's packets")
	fs.DurationVar(&cfg.Link.Jitter, "jitter", cfg.Link.Jitter, "delays are uniform in delay ± jitter (packets reorder)")
	fs.IntSliceVar(&cfg.Levels, "levels", cfg.Levels, "replicated contenders (levels 2 and 3)")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "measured time of each cell")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds; each runs every contender once")
	addSeed(fs, &cfg.Seed, "the first round")
	fs.IntVar(&cfg.Appenders, "appenders", cfg.Appenders, "appenders per client process (two processes)")
	fs.Float64Var(&cfg.ElectionsPerMinute, "elections-goal", cfg.ElectionsPerMinute, "most elections per minute (all partitions)")
	fs.Float64Var(&cfg.ThroughputGoal, "throughput-goal", cfg.ThroughputGoal, "least ratio of replicated to unreplicated writes per second")
	fs.IntVar(&cfg.MinWrites, "min-writes", cfg.MinWrites, "fewest acknowledged writes of a judged cell")
	fs.StringVar(&cfg.BaselineExe, "baseline-exe", cfg.BaselineExe, "also run each level on nodes of this neptune binary (e.g. built from main before a fix), judged apart")
	fs.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep each cell's logs and histories")
	return cmd
}
