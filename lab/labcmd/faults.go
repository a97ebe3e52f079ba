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
restart, a torn write-log tail) against three node processes, each in its
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
