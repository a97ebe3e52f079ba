package labcmd

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/lab/bench/appendbench"
	"github.com/neptune-cluster/neptune/lab/bench/appsbench"
	"github.com/neptune-cluster/neptune/lab/bench/burstbench"
	"github.com/neptune-cluster/neptune/lab/bench/dacbench"
	"github.com/neptune-cluster/neptune/lab/bench/elasticbench"
	"github.com/neptune-cluster/neptune/lab/bench/gagebench"
	"github.com/neptune-cluster/neptune/lab/bench/lbbench"
	"github.com/neptune-cluster/neptune/lab/bench/localitybench"
	"github.com/neptune-cluster/neptune/lab/bench/movebench"
	"github.com/neptune-cluster/neptune/lab/bench/overhead"
	"github.com/neptune-cluster/neptune/lab/bench/replbench"
	"github.com/neptune-cluster/neptune/lab/bench/scalebench"
	"github.com/neptune-cluster/neptune/lab/bench/schedbench"
	"github.com/neptune-cluster/neptune/lab/bench/walbench"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

func benchCmd() *cobra.Command {
	return group("bench", "Run a benchmark: overhead, lb, locality, replication, wal, apps, dac, append, burst, faults, lossy, gage, scale, sched",
		`Run a benchmark on real node processes (re-executions of this binary) or
in-process nodes. Each benchmark runs its contenders side by side in one
run, interleaved in rounds so drift in the machine affects all alike, and
prints ratios; --sections picks the parts of those that have several.`,
		overheadCmd(), lbCmd(), localityCmd(), replicationCmd(), walCmd(), appsCmd(), dacBenchCmd(), appendCmd(), burstCmd(), faultsCmd(), lossyCmd(), moveCmd(), restoreCmd(), gageBenchCmd(), scaleCmd(), schedBenchCmd(),
		echoServerCmd(), faultsClientCmd(), delayerCmd(), httpProgramCmd(), lbClientCmd(), lbSlowPollsCmd())
}

func overheadCmd() *cobra.Command {
	cfg := overhead.DefaultConfig()
	cmd := leaf("overhead [flags]", "What Neptune adds to a call, against a raw gRPC echo server",
		`Call one node process hosting echo against one raw gRPC echo server, and
two (polling off, the paper's poll-3, the default policy) against gRPC's
own round_robin over two raw servers, each in its own process,
sequentially and concurrently, in interleaved rounds; print latency and
throughput ratios to the like baseline, the cost of
polling per sequential call with two eligible replicas (goal: the default
policy at most --poll-goal over polling off; PASS, FAIL, or INCONCLUSIVE
when rounds disagree or the client was CPU-starved), the same with mutual
TLS, and the first node's resident memory.`,
		experiment(&cfg, nil, nil, overhead.Run))
	fs := cmd.Flags()
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measuring time per contender per mode per round")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds")
	fs.IntVar(&cfg.Payload, "payload", cfg.Payload, "request body bytes")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "callers in the concurrent mode")
	fs.DurationVar(&cfg.PollGoal, "poll-goal", cfg.PollGoal, "goal: the default policy adds at most this to a sequential call over polling off")
	return cmd
}

func scaleCmd() *cobra.Command {
	cfg := scalebench.DefaultConfig()
	var memberLog string
	cmd := leaf("scale [flags]", "Membership's cost per member and its speed, 16 to 1,000 members (issue 30)",
		`Section members runs the real membership code (memberlist with the yellow
pages, keyed gossip, signed announcements) for each of --sizes members in
this process over an in-memory network, and measures: the time for all to
join, each member's idle CPU and bytes per second, how fast a new epoch
reaches every member, how fast a cut-off member leaves every yellow page,
(at the largest size) live members removed under --loss packet loss over
--loss-watch, and the heap of a client's yellow pages of the cluster.
Members of a size run in dilated time (--dilation): their clocks and
memberlist's timers run that many times slower than real time, so a
thousand members get the CPU a thousand machines would; every time and
rate printed is in their own time.
Section processes starts --processes idle secured node processes and
measures the CPU they use together, and how long a write waits after the
SIGKILL of a replicated partition's primary among them and among 3.

Goals, fixed before the run: idle cost per member at the largest size at
most --flat-goal times the smallest's; a new epoch at 99% of members within
--propagation-goal; a cut member gone everywhere within --detection-goal;
no live member removed under loss; the processes within --process-cores.
PASS, FAIL, or INCONCLUSIVE when the machine was starved.`,
		experiment(&cfg, &cfg.Out, func() error {
			if memberLog == "" {
				return nil
			}
			f, err := os.Create(memberLog)
			if err != nil {
				return fmt.Errorf("--member-log: %w", err)
			}
			cfg.MemberLog = f // written until the process exits
			return nil
		}, scalebench.Run))
	cmd.Example = "  neptune bench scale --sections members --sizes 16,64,256,1000 --out scale"
	fs := cmd.Flags()
	fs.StringVar(&cfg.CPUProfile, "cpu-profile", "", "write a CPU profile of one idle node process over the idle window (processes section) to this file")
	fs.StringVar(&memberLog, "member-log", "", "write every member's log, memberlist's lines included, to this file")
	addSections(fs, &cfg.Sections, scalebench.Sections)
	fs.Var(&numbers[int]{dst: &cfg.Sizes}, "sizes", "in-process cluster sizes, smallest first")
	fs.Var(&numbers[float64]{dst: &cfg.Dilations}, "dilation", "time dilation of each size (its members' time runs that many times slower, so they fit this machine; results are in their time); the last repeats")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions each member leads (3 replicas each)")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "wait after all joined before measuring")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle measuring window per size")
	fs.DurationVar(&cfg.JoinLimit, "join-limit", cfg.JoinLimit, "longest wait for all members to join")
	fs.Float64Var(&cfg.JoinRate, "join-rate", cfg.JoinRate, "members joining per second (of their time)")
	fs.DurationVar(&cfg.EventLimit, "event-limit", cfg.EventLimit, "longest wait for a change or a failure to reach every member")
	fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "packet loss fraction for the false-death watch (largest size)")
	fs.DurationVar(&cfg.LossWatch, "loss-watch", cfg.LossWatch, "how long to watch for live members removed under loss (0: skip)")
	fs.Float64Var(&cfg.FlatGoal, "flat-goal", cfg.FlatGoal, "goal: largest size's idle cost per member at most this times the smallest's")
	fs.DurationVar(&cfg.PropagationGoal, "propagation-goal", cfg.PropagationGoal, "goal: a new epoch reaches 99% of members within this")
	fs.DurationVar(&cfg.DetectionGoal, "detection-goal", cfg.DetectionGoal, "goal: a cut-off member leaves every yellow page within this")
	fs.IntVar(&cfg.Processes, "processes", cfg.Processes, "idle secured node processes of the processes section")
	fs.DurationVar(&cfg.ProcessIdle, "process-idle", cfg.ProcessIdle, "their idle measuring window")
	fs.Float64Var(&cfg.ProcessCores, "process-cores", cfg.ProcessCores, "goal: the processes use at most this many cores together")
	fs.Float64Var(&cfg.FailoverGoal, "failover-goal", cfg.FailoverGoal, "goal: a write after the primary's SIGKILL among the processes waits at most this times what it waits among 3")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the simulated network's losses")
	fs.StringVar(&cfg.HeapProfile, "heap-profile", "", "write each size's heap, once its members settled and after the loss watch, to PREFIX-N.pprof and PREFIX-N-loss.pprof")
	addOut(fs, &cfg.Out, "the table (CSV) and the plot (SVG)")
	return cmd
}

func lbCmd() *cobra.Command {
	cfg := lbbench.DefaultConfig()
	cmd := leaf("lb [flags]", "Load-balancing policies on a real cluster (dissertation §3.4)",
		`Start --nodes server nodes (one worker each, sleep-emulated service) and,
if found, HAProxy in front of them; replay one seeded open-loop trace per
row group from client processes with every policy, and print mean and p99
response times as ratios to the oracle.

Sections: main (every policy at --loads), fig35 (poll size, Fig 3.5 and
Table 3.2), goals (issue 3's goals at --goal-load, --rounds rounds pooled),
slowpolls (Table 3.2 with --slow-share of the poll answers held for
--slow-delay ± --slow-jitter, in a network namespace of its own; root).
Every goal's load and threshold is a flag, fixed before the run; a goal is
PASS, FAIL or INCONCLUSIVE (a row it compares was CPU-starved in any round,
or its baseline was unhealthy), with the reason printed.`,
		experiment(&cfg, nil, nil, lbbench.Run))
	cmd.Example = "  neptune bench lb --sections goals --rounds 5"
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, lbbench.Sections)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "server nodes, each one FIFO processing unit")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "independent client policy instances")
	fs.IntVar(&cfg.Procs, "procs", cfg.Procs, "client processes the instances are spread over")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "trace length per contender (main and fig35)")
	fs.DurationVar(&cfg.GoalDuration, "goal-duration", cfg.GoalDuration, "trace length per contender per round in the goals section")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "goals section: rounds, each a new trace replayed by every contender in turn, pooled")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured start of each trace")
	fs.Var(&choices{dst: &cfg.Workloads, allowed: []string{"exp", "fine"}}, "workloads", "workloads: exp (Poisson/Exp, 50 ms) and/or fine (fine-grain, 22.2 ms ± 10.0 ms)")
	fs.Var(&numbers[float64]{dst: &cfg.Loads}, "loads", "offered loads of the main section")
	fs.Float64Var(&cfg.Scale, "scale", cfg.Scale, "multiply every service time (and the arrival interval) by this")
	fs.DurationVar(&cfg.Broadcast, "broadcast", cfg.Broadcast, "broadcast policy's mean push interval")
	fs.Float64Var(&cfg.Slow, "slow", cfg.Slow, "slowdown of the degraded replica in the goals section")
	fs.Float64Var(&cfg.GoalLoad, "goal-load", cfg.GoalLoad, "goals section: offered load")
	fs.Float64Var(&cfg.GoalMean, "goal-mean", cfg.GoalMean, "goal: default's mean at most this × the oracle's")
	fs.Float64Var(&cfg.GoalP99, "goal-p99", cfg.GoalP99, "goal: default's p99 at most this × the oracle's")
	fs.Float64Var(&cfg.GoalP2C, "goal-p2c", cfg.GoalP2C, "goal: default's mean at least this × better than localp2c's")
	fs.Float64Var(&cfg.GoalSlow, "goal-slow", cfg.GoalSlow, "goal: with one replica --slow× slow, p99 at most this × the healthy p99")
	fs.Float64Var(&cfg.AsyncMean, "goal-async-mean", cfg.AsyncMean, "goal: the async and push policies' mean at most this × the oracle's")
	fs.Float64Var(&cfg.AsyncP99, "goal-async-p99", cfg.AsyncP99, "goal: the async and push policies' p99 at most this × the oracle's")
	fs.Float64Var(&cfg.AsyncContended, "goal-async-contended", cfg.AsyncContended, "goal with --hog: the async and push policies' mean and p99 at most this × the oracle's")
	fs.IntVar(&cfg.MoreProbes, "more-probes", cfg.MoreProbes, "goals section: add a row (not judged) for the default polling this many replicas per call; 0 skips it")
	fs.IntVar(&cfg.Hog, "hog", cfg.Hog, "run this many CPU-spinning goroutines beside the goals section (the contended async and push goals)")
	addSeed(fs, &cfg.Seed, "the traces (shared by every contender of a row group)")
	fs.StringVar(&cfg.HAProxy, "haproxy", cfg.HAProxy, "HAProxy executable; its rows are skipped if it is not found")
	fs.Float64Var(&cfg.SlowShare, "slow-share", cfg.SlowShare, "slowpolls: share of the poll answers held")
	fs.DurationVar(&cfg.SlowDelay, "slow-delay", cfg.SlowDelay, "slowpolls: mean time a held answer is held")
	fs.DurationVar(&cfg.SlowJitter, "slow-jitter", cfg.SlowJitter, "slowpolls: a held answer is held --slow-delay ± this (uniform)")
	fs.Float64Var(&cfg.SlowGoal, "goal-discard", cfg.SlowGoal, "goal (slowpolls): poll-3 with the 10 ms discard at most this × the mean of poll-3 waiting for every answer")
	return cmd
}

func localityCmd() *cobra.Command {
	cfg := localitybench.DefaultConfig()
	cmd := leaf("locality [flags]", "Routing for cache affinity on pcache (issue 32; USITS §2.1, Gage §3.4)",
		`Start --nodes in-process nodes, each hosting the same pcache partition
over a file seeded with --keys keys and an in-memory tier of --memory
entries; look keys up (Zipf --zipf, the key as the affinity key) from
closed-loop callers through clients under random, polling (the paper's),
prequal (the default) and affinity (bounded-load rendezvous hashing), in
interleaved rounds, every cell starting from empty memory. Print each
policy's hit ratio, throughput and mean latency, and two verdicts with
goals fixed by flags before the run: affinity's hit ratio at least
--goal-hits x, and its throughput at least --goal-throughput x, the best
other policy's; INCONCLUSIVE when rounds disagree, a contender failed
lookups, or the machine was busy.`,
		experiment(&cfg, nil, nil, localitybench.Run))
	cmd.Example = "  neptune bench locality --rounds 3"
	fs := cmd.Flags()
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "in-process nodes hosting pcache partition 0")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys in the partition, all looked up")
	fs.Float64Var(&cfg.Zipf, "zipf", cfg.Zipf, "Zipf exponent of the keys' popularity (0: uniform)")
	fs.IntVar(&cfg.Memory, "memory", cfg.Memory, "entries in each node's in-memory tier")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "clients per policy")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "closed-loop callers per policy, spread over its clients")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured start of each cell")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measured time per policy per round")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds, pooled")
	fs.Float64Var(&cfg.LoadBound, "load-bound", cfg.LoadBound, "the affinity policy's load bound (0: its default, 1.25)")
	addSeed(fs, &cfg.Seed, "the callers' keys")
	fs.StringVar(&cfg.Nginx, "nginx", cfg.Nginx, "nginx executable for the \"nginx hash\" row (skipped if not found)")
	fs.Float64Var(&cfg.GoalHits, "goal-hits", cfg.GoalHits, "goal: affinity's hit ratio at least this x the best other policy's")
	fs.Float64Var(&cfg.GoalThroughput, "goal-throughput", cfg.GoalThroughput, "goal: affinity's throughput at least this x the best other policy's")
	fs.StringVar(&cfg.DataDir, "dir", cfg.DataDir, "`directory` for the nodes' files (default: a temporary one)")
	return cmd
}

func replicationCmd() *cobra.Command {
	cfg := replbench.DefaultConfig()
	cmd := leaf("replication [flags]", "Replication throughput and failures (dissertation §5.4)",
		`Dissertation §5.4 at laptop scale on the kv service.

Sections: fig51 (throughput vs degree for each level at 10% and 50%
writes, in-process nodes; with --cpu against the number of CPU-limited
node processes, --nodes, judged: from the fewest nodes to the most each
line grows >= 70% of proportionally), fig52 (Figs 5.2/5.3: Zipf-skewed load by degree
and by level; --cpu runs them on CPU-limited node processes), failover (--kills SIGKILLs of a primary on node processes,
each restarted after --down: failover p50/p99 and the longest write pause
while the old primary returns, judged PASS, FAIL or INCONCLUSIVE against
goals fixed by flags; then disk and memory under sustained writes), fig54
(three node kills and restarts). Default: fig51,failover.`,
		experiment(&cfg, &cfg.Out, nil, replbench.Run))
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, replbench.Sections)
	addOut(fs, &cfg.Out, "the CSV and SVG files")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measuring time per fig51/fig52 cell")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "closed-loop client goroutines")
	fs.Var(&ranges{dst: &cfg.Degrees}, "degrees", "replication degrees (of 4 nodes), e.g. 1-4")
	fs.Var(&ranges{dst: &cfg.Levels}, "levels", "consistency levels, e.g. 1-3")
	fs.Var(&ranges{dst: &cfg.Nodes}, "nodes", "fig51 with --cpu: node counts, e.g. 2,4,8,16 (--clients is then per 4 nodes)")
	fs.DurationVar(&cfg.Sustain, "sustain", cfg.Sustain, "write load after the failover, before measuring disk and memory")
	fs.DurationVar(&cfg.Sample, "sample", cfg.Sample, "disk and memory sampling period during --sustain")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds of fig51/fig52 cells, pooled")
	fs.DurationVar(&cfg.Phase, "phase", cfg.Phase, "fig54: the steady phase, the time all three victims are down, and between their restarts")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "fig52 partitions (imbalance factors 1/partitions to 1)")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "fig52: fill each partition with this many 1 KiB values and read with kv's digest over them (a read that costs more than a write, as the paper's forum's); 0: reads are len")
	fs.Float64Var(&cfg.CPU, "cpu", cfg.CPU, "fig51, fig52 and fig54 on node processes confined to this many cores each (cgroups, root; e.g. 0.09 for fig51's 16, 0.3 for fig52's 4, 0.15 for fig54's 8); 0: fig52 on in-process nodes, fig54 unconfined (not judged). Judged: fig52 degree 4 >= 2.5x degree 1 at imbalance 1; fig54 the rate with 3 of 8 down >= 0.5x steady, all back >= 0.9x")
	fs.IntVar(&cfg.Kills, "kills", cfg.Kills, "failover: SIGKILLs of partition 0's primary")
	fs.DurationVar(&cfg.Down, "down", cfg.Down, "failover: how long a killed primary stays down")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "failover: time from a restart to the next kill")
	fs.DurationVar(&cfg.FailoverP50, "failover-p50", cfg.FailoverP50, "goal: failover p50 over the kills at most this")
	fs.DurationVar(&cfg.FailoverP99, "failover-p99", cfg.FailoverP99, "goal: failover p99 over the kills at most this")
	fs.DurationVar(&cfg.ReturnGoal, "return-goal", cfg.ReturnGoal, "goal: partition 0's longest write pause while an old primary returns at most this")
	return cmd
}

func burstCmd() *cobra.Command {
	cfg := burstbench.DefaultConfig()
	cmd := leaf("burst [flags]", "Memory, elections and resends through a burst of large writes",
		`Start three node processes hosting kv at level 2 (degree 3), write
--writes bodies of --size bytes, --concurrency at a time, and print each
node's resident memory before, at its peak during and after the burst
(the lowest sample in the second half of --settle), the epoch before and
after, and the bytes replication sent a replica twice. Three verdicts,
goals fixed before the run: on every node RSS after <= --factor x before
+ the data kv keeps (8 keys x --size) + --slack; the epoch did not
change; nothing was resent.`,
		experiment(&cfg, nil, nil, burstbench.Run))
	cmd.Example = "  neptune bench burst --writes 50 --size 8388608"
	fs := cmd.Flags()
	fs.IntVar(&cfg.Writes, "writes", cfg.Writes, "writes in the burst")
	fs.IntVar(&cfg.Size, "size", cfg.Size, "bytes per write")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "writes in flight")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "idle time after the burst before memory counts as returned")
	fs.DurationVar(&cfg.Sample, "sample", cfg.Sample, "memory sampling period while settling")
	fs.Float64Var(&cfg.Factor, "factor", cfg.Factor, "threshold: RSS after <= factor x before + kv's data + slack")
	fs.Int64Var(&cfg.Slack, "slack", cfg.Slack, "threshold slack in bytes")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "save each node's heap profile after the settle in this directory")
	return cmd
}

func appendCmd() *cobra.Command {
	cfg := appendbench.DefaultConfig()
	cmd := leaf("append [flags]", "Exactly-once writes: list-append through primary kills, and the dedup cost",
		`Three node processes host the durable list-append service, replicated.
Concurrent appenders (each element appended once, retried while
retryable) run while a primary is SIGKILLed and restarted every
--kill-every; then every replica is read directly and the history is
checked: appends, kills, duplicates, lost, with a PASS/FAIL verdict
against the goal (0 duplicates and 0 lost in >= 100,000 appends with
>= 20 primary kills). Then the dedup cost: append throughput with write
identities and without, in interleaved rounds on the same cluster
(goal >= 0.95x; INCONCLUSIVE when the rounds disagree or other work was
on the machine in the second before the nodes started).`,
		experiment(&cfg, nil, nil, appendbench.Run))
	fs := cmd.Flags()
	fs.IntVar(&cfg.Level, "level", cfg.Level, "replication level (1-3)")
	fs.IntVar(&cfg.Parts, "partitions", cfg.Parts, "partitions")
	fs.IntVar(&cfg.Appenders, "appenders", cfg.Appenders, "concurrent appenders")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys per partition")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the fault phase")
	fs.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "time between primary kills (0: none)")
	fs.DurationVar(&cfg.Down, "down", cfg.Down, "how long a killed node stays down")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measuring time per throughput cell")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds of the dedup cost (0: skip)")
	return cmd
}

func walCmd() *cobra.Command {
	cfg := walbench.DefaultConfig()
	cmd := leaf("wal [flags]", "Candidate stores for the replica write log, side by side",
		`Synced appends of fixed-size entries, reads of a run of entries from an
LSN, and prefix truncation, on pebble (the write log's store), bbolt and
tidwall/wal, alternating within each round.`,
		experiment(&cfg, nil, nil, walbench.Run))
	fs := cmd.Flags()
	fs.IntVarP(&cfg.Entries, "entries", "n", cfg.Entries, "entries to append")
	fs.IntVar(&cfg.Size, "size", cfg.Size, "entry size in bytes")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "entries per synced append")
	fs.IntVar(&cfg.Read, "read", cfg.Read, "entries per read-from-LSN")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds; contenders alternate within each round")
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "`directory` for the stores (default: a temporary one; use a real disk)")
	return cmd
}

func appsCmd() *cobra.Command {
	cfg := appsbench.DefaultConfig()
	cmd := leaf("apps [flags]", "The applications on their storage, behind the HTTP adapter, and replicated",
		`Sections: storage (the forum's handlers in-process on SQLite vs
PostgreSQL), adapter (an HTTP program called directly vs through a node
hosting it with the HTTP adapter, three processes), replication (auction
and pcache throughput vs replication degree and node count, dissertation
Figs 5.5/5.6: in-process nodes, or with --cpu node processes confined to a
CPU quota each, judged against goals fixed before the run: from the fewest
--nodes to the most each line grows >= 70% of proportionally; at the most
nodes the auction's degree 4 >= 0.65x its degree 1, and the cache loses
more to replication than the auction; PASS, FAIL, or INCONCLUSIVE when
rounds disagree, a cell was starved or not node-bound, or the nodes were
not confined).`,
		experiment(&cfg, &cfg.Out, nil, appsbench.Run))
	cmd.Example = "  neptune bench apps --sections replication --cpu 0.15 --nodes 4,8 --rounds 2 --repl-cell 3s --out out/apps"
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, appsbench.Sections)
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measuring time per contender per round (storage, adapter)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds of every section")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "callers in the concurrent storage and adapter cells")
	fs.StringVar(&cfg.PGDSN, "pg-dsn", cfg.PGDSN, "PostgreSQL server for the forum (default $NEPTUNE_TEST_PG_DSN); empty skips PostgreSQL")
	fs.DurationVar(&cfg.Work, "work", cfg.Work, "service time of the adapter's second HTTP route")
	fs.Var(&ranges{dst: &cfg.Degrees}, "degrees", "replication degrees of the replication section, e.g. 1-4 (a degree above a node count skips that cell)")
	fs.Var(&ranges{dst: &cfg.Nodes}, "nodes", "node counts of the replication section, e.g. 4,8")
	fs.DurationVar(&cfg.ReplCell, "repl-cell", cfg.ReplCell, "measuring time per replication cell")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "closed-loop clients per 4 nodes in the replication cells")
	fs.Float64Var(&cfg.CPU, "cpu", cfg.CPU, "replication on node processes confined to this many cores each (cgroups, root; e.g. 0.15 for 8 nodes) and judged; 0: in-process nodes sharing the cores (not judged)")
	addOut(fs, &cfg.Out, "the replication section's CSV and SVG")
	return cmd
}

func dacBenchCmd() *cobra.Command {
	cfg := dacbench.DefaultConfig()
	cmd := leaf("dac [flags]", "Data Aggregation Calls on node processes (the DAC paper §5)",
		`Open-loop Poisson arrivals of aggregations over every partition of the
micro service on --nodes node processes (local ~Exp(25ms), reduce
~Exp(5ms), sleep-emulated; a node's capacity is its workers).

Sections: trees (Figs 14-17, homogeneous and heterogeneous), ed (Figs
18-19, event-driven vs blocking), fig20 (quality-aware throughput through
slow nodes), stop (SIGSTOPped nodes), hedge (replication 2 with hedging).
Every goal's rate and threshold is a flag, fixed before the run; a goal is
PASS, FAIL or INCONCLUSIVE (a cell's client was CPU-starved, or a baseline
was unhealthy at the goal's rate), with the reason printed.`,
		experiment(&cfg, &cfg.Out, nil, dacbench.Run))
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, dacbench.Sections)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "node processes, one micro partition each")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers per node (a dual-CPU node of the paper)")
	fs.IntVar(&cfg.Fast, "fast", cfg.Fast, "heterogeneous setting: nodes with twice the workers")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "arrival window per contender per rate")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured start of each cell")
	fs.Var(&numbers[float64]{dst: &cfg.Rates}, "rates", "request rates (aggregations/s) of Figs 14-17")
	fs.Var(&numbers[float64]{dst: &cfg.EDRates}, "ed-rates", "request rates of Figs 18-19 (event-driven vs blocking)")
	fs.Float64Var(&cfg.TreesGoalRate, "trees-goal-rate", cfg.TreesGoalRate, "trees goal: the high-load rate it is judged at (added to --rates if missing)")
	fs.Float64Var(&cfg.TreesGoal, "trees-goal", cfg.TreesGoal, "trees goal: LAT's mean at least this many percent below Flat's and Binomial's")
	fs.DurationVar(&cfg.Deadline, "deadline", cfg.Deadline, "aggregation deadline T")
	fs.DurationVar(&cfg.Budget, "budget", cfg.Budget, "staged-timeout budget per reduction rank (a; 4× the mean reduction)")
	fs.Float64Var(&cfg.Fig20Rate, "fig20-rate", cfg.Fig20Rate, "Fig 20 request rate (the paper: 75% of capacity; here the highest at which None and Base are healthy)")
	fs.Float64Var(&cfg.Fig20Goal, "fig20-goal", cfg.Fig20Goal, "Fig 20 goal: EP+ED's quality-aware throughput with both nodes slow at least this × None's and Base's")
	fs.DurationVar(&cfg.Fig20Len, "fig20-len", cfg.Fig20Len, "Fig 20 timeline (paper: 60s; at least 18s); node A is slow from len/6 to len/2, node B from len/3 to 2len/3")
	fs.Float64Var(&cfg.Slow, "slow", cfg.Slow, "fig20 and hedge: slowdown factor of the slow nodes")
	fs.Float64Var(&cfg.StopRate, "stop-rate", cfg.StopRate, "request rate with SIGSTOPped nodes")
	fs.Var(&numbers[int]{dst: &cfg.StopK}, "stop-k", "numbers of SIGSTOPped nodes")
	fs.Float64Var(&cfg.HedgeRate, "hedge-rate", cfg.HedgeRate, "request rate of the hedge section")
	fs.DurationVar(&cfg.HedgeCell, "hedge-cell", cfg.HedgeCell, "arrival window per hedging contender")
	addSeed(fs, &cfg.Seed, "the arrivals")
	addOut(fs, &cfg.Out, "the CSV and SVG files (empty: none)")
	fs.BoolVarP(&cfg.Verbose, "verbose", "v", cfg.Verbose, "print the failed calls of every cell by error")
	return cmd
}

func gageBenchCmd() *cobra.Command {
	cfg := gagebench.DefaultConfig()
	cmd := leaf("gage [flags]", "Guaranteed request rates per subscriber through gateway processes (issue 12)",
		`Start --nodes node processes hosting echo and, per contender, a
neptune gateway process (credit: Gage; tag: mClock-style; fifo:
reservations off) and nginx with limit_req per subscriber in front of a
FIFO gateway; send each subscriber's open-loop Poisson load, told apart
by Host, through each in interleaved rounds.

Profiles (--profile): net, echo, network-bound; cpu, a 10 ms spin (1 GRU of CPU) per
request at a quarter of --scale; disk, 100 KB written and fsynced per
request, disk_bandwidth 10 MB/s.

Sections: table1 (isolation: 250:150:50 x --scale GRPS, the small one
asking 8x), table2 (spare sharing: 250:200, both over), split (two
gateways gossiping demand, A's demand split 90/10, then one SIGKILLed),
overhead (direct client vs gateway with and without reservations vs
nginx as a plain proxy: latency added, throughput, proxy CPU per
request), pace (Fig 6: how far each subscriber's response bytes stray
from its reservation, whole responses against pace_responses).
Goals are flags, fixed before the run; each is PASS, FAIL or
INCONCLUSIVE (a starved cell, rounds that disagree, nginx missing).

Section backends (Figs 7-8, Tables 3-4; not in the default run, needs
root for cgroups): for each of --backends N, N node processes hosting
work, each confined to --backend-cpu cores, behind a credit gateway that
never paces below them; a closed loop of --backend-spin CPU spins
(--backend-callers per back end) through the gateway and from a direct
client, alternated ABBA; throughput against N, the gateway's CPU per
request and against its throughput, and the back ends one gateway core
could serve, beside the paper's. Goals fixed in code: through the
gateway the most back ends >= 70% of proportional to the fewest; at
every N the gateway >= 0.95x direct; INCONCLUSIVE when a cell was
starved, a baseline cell not node-bound (its busiest back end under 80%
of its quota), rounds disagree, or one round. Writes --out/gage-backends.csv,
.svg and -cpu.svg.

Section deviation (Figs 3-5, --figures; not in the default run, needs
root): the simulation's deviation set-up on --deviation-backends node
processes hosting work, each confined to --deviation-cpu cores: four
subscribers reserving 300:200:150:100 x --deviation-scale GRPS each ask
1.5x through a credit gateway whose capacity is the reservations, with
work.spin calls of --deviation-spin CPU on average; Fig 3 through
gateways of accounting_cycle 100ms, 500ms, 1s, 2s and usage per response
(size CV 50%), Fig 5 at the paper's size CVs. Fig 4 sends work.read
calls, that CPU and a 64 KiB block of a file of each footprint (<1, 32,
64, 128 MB), to back ends whose cgroups also limit their memory, page
cache included, to --deviation-memory MiB, so that large footprints
really miss the cache; it prints the share of reads that missed (the
back ends' read_bytes) beside the simulation's 0/10/50/90%. Each
subscriber's served GRU is read every 20 ms; the deviation from its
reservation over windows of 250 ms to 8 s (cells of 2 x --cell). Goals
the simulation's: <= 5% at 1 s and <= 2% at 4 s windows (Fig 3 at the
100 ms cycle, Figs 4 and 5 their worst row); INCONCLUSIVE when a cell
was starved or a back end saturated, rounds disagree, or one round, and
Fig 4 when its smallest footprint missed 10% or more of its reads or its
largest under 50%. Writes --out/gage-deviation.csv and
gage-deviation-fig{3,4,5}.svg.`,
		experiment(&cfg, nil, nil, gagebench.Run))
	cmd.Example = "  neptune bench gage --sections table1,table2\n" +
		"  sudo neptune bench gage --sections backends --backends 1,2,4,8 --backend-cpu 0.15 --rounds 3 --cell 10s --out out/gage\n" +
		"  sudo neptune bench gage --sections deviation --rounds 2 --cell 8s --out out/gage\n" +
		"  sudo neptune bench gage --sections deviation --figures 4 --rounds 2 --cell 8s --out out/gage"
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, gagebench.Sections)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "node processes hosting echo")
	fs.StringSliceVar(&cfg.Profiles, "profile", cfg.Profiles, "service profiles of table1 and table2, of net (echo), cpu (a 10 ms spin), disk (100 KB written and fsynced); split and overhead run with net")
	fs.Float64Var(&cfg.Scale, "scale", cfg.Scale, "multiply the paper's reservations and capacity (600 GRPS) by this")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measured time per contender per round")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured start of each cell")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds, pooled")
	fs.IntVar(&cfg.Body, "body", cfg.Body, "echo request bytes (about one GRU of network with the answer)")
	fs.DurationVar(&cfg.MaxWait, "max-wait", cfg.MaxWait, "the gateways' max_wait (and nginx's burst at the rate)")
	fs.StringVar(&cfg.Nginx, "nginx", cfg.Nginx, "nginx executable; its cells are INCONCLUSIVE if it is not found")
	fs.DurationVar(&cfg.PeerTTL, "peer-ttl", cfg.PeerTTL, "split: the gateways' peer_ttl")
	fs.DurationVar(&cfg.GossipPeriod, "gossip-period", cfg.GossipPeriod, "split: the gateways' gossip_period")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "overhead: closed-loop callers")
	fs.DurationVar(&cfg.OverheadCell, "overhead-cell", cfg.OverheadCell, "overhead: time per contender per mode per round")
	fs.IntVar(&cfg.Procs, "gomaxprocs", cfg.Procs, "GOMAXPROCS of the gateway processes and the load generator (0: Go's default, every core); the nodes keep the default")
	fs.Var(&ranges{dst: &cfg.Backends}, "backends", "backends: counts of back-end node processes, e.g. 1,2,4,8")
	fs.Float64Var(&cfg.BackendCPU, "backend-cpu", cfg.BackendCPU, "backends: cores each back end is confined to (cgroups, root); the largest count's quotas plus 0.5 cores must fit the machine")
	fs.DurationVar(&cfg.BackendSpin, "backend-spin", cfg.BackendSpin, "backends: CPU each request spins on its back end")
	fs.IntVar(&cfg.BackendCallers, "backend-callers", cfg.BackendCallers, "backends: closed-loop callers per back end")
	fs.IntVar(&cfg.DeviationBackends, "deviation-backends", cfg.DeviationBackends, "deviation: back-end node processes hosting work")
	fs.Float64Var(&cfg.DeviationCPU, "deviation-cpu", cfg.DeviationCPU, "deviation: cores each back end is confined to (cgroups, root)")
	fs.DurationVar(&cfg.DeviationSpin, "deviation-spin", cfg.DeviationSpin, "deviation: mean CPU a request spins on its back end (sizes drawn around it)")
	fs.Float64Var(&cfg.DeviationScale, "deviation-scale", cfg.DeviationScale, "deviation: multiply the simulation's reservations (300:200:150:100 GRPS) by this")
	fs.Var(&ranges{dst: &cfg.DeviationFigures}, "figures", "deviation: the figures to run, of 3, 4, 5")
	fs.IntVar(&cfg.DeviationMemory, "deviation-memory", cfg.DeviationMemory, "deviation: Fig 4's memory limit of each back end in MiB, page cache included (cgroups, root): the 32 MB footprint should stay cached, the 128 MB one mostly miss")
	addOut(fs, &cfg.Out, "the backends and deviation sections' CSV and SVG")
	addSeed(fs, &cfg.Seed, "the arrivals")
	fs.Float64Var(&cfg.GoalGot, "goal-got", cfg.GoalGot, "goal: subscribers within reservation get at least this fraction of what they ask")
	fs.Float64Var(&cfg.GoalSpare, "goal-spare", cfg.GoalSpare, "goal: spare ratio within this fraction of the reservation ratio")
	fs.Float64Var(&cfg.GoalSplit, "goal-split", cfg.GoalSplit, "goal: a subscriber's total through two gateways within this fraction of its reservation")
	fs.Float64Var(&cfg.GoalThroughput, "goal-throughput", cfg.GoalThroughput, "goal: throughput with reservations at least this x without")
	return cmd
}

func schedBenchCmd() *cobra.Command {
	cfg := schedbench.DefaultConfig()
	cmd := leaf("sched [flags]", "Class scheduling on CPU-limited node processes (dissertation Figs 4.8-4.12)",
		`Section policies (Figs 4.8-4.10) runs what `+"`neptune sim sched`"+` simulates,
on a real node: one node process
confined to --cpu cores (a cgroup quota; root) hosts work with --workers
workers and the class scheduler under one policy (a fresh node per cell),
and this process sends the workload of `+"`neptune sim sched`"+` (--workload)
open-loop, Poisson, seeded, the same arrivals for every policy of a round
and demand level, each call in its class with its class's deadline. Every
time of the dissertation's workload is divided by --scale, and a request
spins its scaled service time times a worker's share of the quota
(--cpu / --workers) of CPU. Demand is a share of the derived capacity
(--workers / the mean scaled service time). Each request's yield is
scored client-side; the policies run interleaved at each level, in an
order rotated between rounds, and the simulator's figure for the same
point is printed beside each.

Goals, fixed before the run: Adaptive's LossPercent at most --tolerance
points above min(YID, Greedy) at every level, in every round; the node
within its quota in every cell; the node CPU-bound (>= 80% of its
quota) at demand >= 100%. PASS, FAIL, or INCONCLUSIVE when a cell ran
on a starved machine, was not node-bound, or the rounds disagree.

Section classes (Figs 4.11-4.12) runs what `+"`neptune sim classes`"+` simulates:
--classes-nodes node processes, each confined to --classes-cpu cores,
host work with the search-hybrid classes (20% guarantees, Adaptive), and
this process sends Fig 4.12's timeline, times divided by --classes-scale:
steady demand (--classes-demand), silver's tripled, steady, node n0
SIGKILLed, n0 restarted. Class-aware (every class on every node, the
client's --classes-balance policy picks) and partitioning (each class
sent only to its own nodes, re-divided every interval by the
dissertation's rule on the planned demand, whole nodes) run the same
arrivals on fresh nodes each round. Goals, fixed before the run:
class-aware's LossPercent at most partitioning's in the spike and in the
failure, in every round; every node within its quota. INCONCLUSIVE as
above, or when class-aware's nodes were not CPU-bound in a judged phase.`,
		experiment(&cfg, &cfg.Out, nil, schedbench.Run))
	cmd.Example = "  neptune bench sched --rounds 3 --out out/bench-sched\n" +
		"  neptune bench sched --sections classes --rounds 3 --out out/bench-sched"
	fs := cmd.Flags()
	addSections(fs, &cfg.Sections, schedbench.Sections)
	fs.Float64Var(&cfg.CPU, "cpu", cfg.CPU, "the node process's CPU quota, cores")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "the node's workers for the service (the dissertation's dual-CPU nodes: 2)")
	fs.Var(&numbers[int]{dst: &cfg.Demands}, "demands", "demand levels, percent of the node's capacity")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measured arrival window per policy per level per round")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured arrivals before each cell's window")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds, pooled")
	fs.StringVar(&cfg.Workload, "workload", cfg.Workload, "workload of sim sched: "+strings.Join(schedsim.WorkloadNames(), ", "))
	fs.Float64Var(&cfg.Scale, "scale", cfg.Scale, "divide every time of the dissertation's workload (service times, yield deadlines) by this")
	addSeed(fs, &cfg.Seed, "the arrivals (the same for every policy of a round and level)")
	fs.Float64Var(&cfg.Tolerance, "tolerance", cfg.Tolerance, "goal: Adaptive's LossPercent at most this many points above min(YID, Greedy)")
	fs.DurationVar(&cfg.SimDuration, "sim-duration", cfg.SimDuration, "the simulator's arrival window per point for the figures beside (0: none, in either section)")
	fs.IntVar(&cfg.Classes.Nodes, "classes-nodes", cfg.Classes.Nodes, "classes: node processes")
	fs.Float64Var(&cfg.Classes.CPU, "classes-cpu", cfg.Classes.CPU, "classes: each node's CPU quota, cores")
	fs.IntVar(&cfg.Classes.Demand, "classes-demand", cfg.Classes.Demand, "classes: steady demand, percent of the nodes' capacity")
	fs.Float64Var(&cfg.Classes.Scale, "classes-scale", cfg.Classes.Scale, "classes: divide every time of the workload and of Fig 4.12's 300 s timeline by this")
	fs.StringVar(&cfg.Classes.Balance, "classes-balance", cfg.Classes.Balance, "classes: the client's balancing policy (empty: the product's default)")
	addOut(fs, &cfg.Out, "the CSV and SVG files (empty: none)")
	return cmd
}

// The hidden verbs the benchmarks re-launch this binary with.

func echoServerCmd() *cobra.Command {
	cmd := leaf(overhead.EchoServerVerb, "Raw gRPC echo server, the baseline of bench overhead", "", func(cmd *cobra.Command, _ []string) error {
		return overhead.EchoServer(cmd.Context(), cmd.OutOrStdout())
	})
	cmd.Hidden = true
	return cmd
}

func httpProgramCmd() *cobra.Command {
	work := time.Millisecond
	cmd := leaf(appsbench.HTTPProgramVerb, "HTTP program of bench apps' adapter section", "", func(cmd *cobra.Command, _ []string) error {
		return appsbench.HTTPProgram(cmd.Context(), work, cmd.OutOrStdout())
	})
	cmd.Flags().DurationVar(&work, "work", work, "service time of POST /work")
	cmd.Hidden = true
	return cmd
}

func lbClientCmd() *cobra.Command {
	cmd := leaf(lbbench.ClientVerb, "Client process of bench lb (reads its job from stdin)", "", func(cmd *cobra.Command, _ []string) error {
		return lbbench.Client(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
	})
	cmd.Hidden = true
	return cmd
}

func lbSlowPollsCmd() *cobra.Command {
	cmd := leaf(lbbench.SlowPollsVerb, "bench lb's slowpolls section inside its network namespace (reads the config from stdin)", "", func(cmd *cobra.Command, _ []string) error {
		return lbbench.SlowPolls(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
	})
	cmd.Hidden = true
	return cmd
}

func restoreCmd() *cobra.Command {
	cfg := elasticbench.DefaultRestoreConfig()
	cmd := leaf("restore [flags]", "Time to restore a partition's full degree after a node dies, versus its data (issue 17)",
		`For each --sizes (MiB of kv data in partition 0): four node processes,
partition 0 replicated on three, the fourth spare; load the data, SIGKILL
a secondary's node for good, and time automatic placement re-creating
the replica on the spare: to the replacement's start (detection, the
--grace, the controller's next look), the copy (until the new replica
serves at the primary's version) and the total. The copy rate at sizes
from --goal-from MiB is judged against --goal.`,
		experiment(&cfg, nil, nil, elasticbench.RunRestore))
	fs := cmd.Flags()
	fs.IntSliceVar(&cfg.SizesMiB, "sizes", cfg.SizesMiB, "kv data sizes in MiB, one cluster each")
	fs.IntVar(&cfg.Value, "value", cfg.Value, "bytes per kv value")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "placement grace")
	fs.Float64Var(&cfg.Goal, "goal", cfg.Goal, "goal: copy rate at least this many MiB/s")
	fs.IntVar(&cfg.GoalFromMiB, "goal-from", cfg.GoalFromMiB, "judge the goal at sizes of at least this many MiB")
	return cmd
}

func moveCmd() *cobra.Command {
	cfg := movebench.DefaultConfig()
	cmd := leaf("move [flags]", "Write throughput while a partition's replica moves (issue 17)",
		`Four in-process nodes, kv partition 0 replicated on three and loaded
with --data MiB first. A closed loop of --writers concurrent writers
measures the capacity; then writes arrive at --load times it (open loop,
Poisson; --load 0 keeps the closed loop, the machine saturated). In
interleaved rounds, a steady cell and a single move of one replica
between two nodes (add, wait for it to catch up and vote, remove),
measured from the add to the removal (--continuous: moves back and forth
without pause for a whole cell instead). Prints each cell's acknowledged
writes per second and the moving/steady ratio against --goal.`,
		experiment(&cfg, nil, nil, movebench.Run))
	fs := cmd.Flags()
	fs.IntVar(&cfg.Writers, "writers", cfg.Writers, "concurrent writers of the closed loop")
	fs.Float64Var(&cfg.Load, "load", cfg.Load, "offered write rate as a fraction of the closed loop's capacity (0: the closed loop throughout)")
	fs.DurationVar(&cfg.Cell, "cell", cfg.Cell, "measuring time per cell")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "interleaved rounds")
	fs.Float64Var(&cfg.Goal, "goal", cfg.Goal, "goal: moving throughput at least this × steady")
	fs.IntVar(&cfg.DataMiB, "data", cfg.DataMiB, "MiB of kv data in the partition before the run")
	fs.BoolVar(&cfg.Continuous, "continuous", cfg.Continuous, "move back and forth for a whole cell per round instead of once")
	return cmd
}
