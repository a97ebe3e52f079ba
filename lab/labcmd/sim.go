package labcmd

import (
	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/lab/gagesim"
	"github.com/neptune-cluster/neptune/lab/sim/dacsim"
	"github.com/neptune-cluster/neptune/lab/sim/lbsim"
	"github.com/neptune-cluster/neptune/lab/sim/repsim"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

func simCmd() *cobra.Command {
	return group("sim", "Run a simulation of the papers' experiments: lb, sched, classes, dac, gage, replication",
		`Run a discrete-event simulation of one of the papers' experiments. Every
simulation drives the same policy code the nodes run, on virtual time, and
is deterministic for a seed; each prints its tables and writes CSV and SVG
files to --out.`,
		simLBCmd(), simSchedCmd(), simClassesCmd(), simDACCmd(), simGageCmd(), simReplicationCmd())
}

func simReplicationCmd() *cobra.Command {
	o := repsim.DefaultOptions()
	cmd := leaf("replication [flags]", "Replication degree under skewed load (dissertation Fig 5.2)",
		`Simulate 8 nodes serving 64 partitions at 10% writes, level 2, with
replication degrees NoRep (1) to 4, under Zipf-skewed load from balanced
(imbalance factor 1/64) to every request on one partition (1). Clients
pick a read's replica with the client library's load-balancing policy
(internal/balance); a write runs on its primary, then on every secondary.
For each cell it bisects the highest rate at which 98% of the requests
are answered within 2 s, prints the table and the goals (PASS, FAIL or
INCONCLUSIVE), and writes fig5.2-sim.csv and fig5.2-sim.svg to --out.`,
		experiment(&o, &o.Out, nil, repsim.Run))
	fs := cmd.Flags()
	addOut(fs, &o.Out, "the CSV and SVG files")
	addSeed(fs, &o.Base.Seed, "the first round (arrivals, service times, policies)")
	fs.IntVar(&o.Seeds, "rounds", o.Seeds, "independent rounds; every goal must hold in each")
	fs.IntVar(&o.Steps, "steps", o.Steps, "bisection steps per cell")
	fs.DurationVar(&o.Base.Duration, "duration", o.Base.Duration, "simulated measured time per run")
	fs.Var(&numbers[int]{dst: &o.Degrees}, "degrees", "replication degrees (1 is NoRep; 1 and 4 are needed for the goals)")
	fs.Var(&numbers[float64]{dst: &o.Factors}, "factors", "imbalance factors (1/64 and 1 are needed for the goals)")
	fs.Float64Var(&o.Goal, "goal", o.Goal, "goal: degree 4's throughput at least this many times NoRep's at imbalance 1")
	return cmd
}

func simLBCmd() *cobra.Command {
	o := lbsim.DefaultOptions()
	names := []string{"exp", "fine", "medium"}
	var all []string
	for _, w := range lbsim.Workloads {
		all = append(all, w.Name)
	}
	prepare := func() error {
		o.Workloads = nil
		for _, n := range names {
			w, err := lbsim.WorkloadByName(n)
			if err != nil {
				return err
			}
			o.Workloads = append(o.Workloads, w)
		}
		return nil
	}
	cmd := leaf("lb [flags]", "Load balancing (dissertation ch. 3, Figs 3.1-3.3, issue 3's goals)",
		`Simulate clients, each with its own load-balancing policy, sending over a
network with the paper's delays to non-preemptive FIFO servers.

Sections: 3.1 (load-index inaccuracy vs delay), 3.2 (broadcast interval),
3.3 (poll size), goals (issue 3's goals at 90% load; adds the det and hv
workloads), async (issue 18: async probes against the default at 1, 4 and
--clients clients), push (issue 18: servers push their load instead of
being polled, 3 seeds).`,
		experiment(&o, &o.Out, prepare, lbsim.Run))
	fs := cmd.Flags()
	addSections(fs, &o.Sections, lbsim.Sections)
	fs.Var(&choices{dst: &names, allowed: all}, "workloads", "workloads, of exp, fine, medium, det, hv")
	fs.Var(&numbers[float64]{dst: &o.Loads}, "loads", "loads of the figures (the goals run at 0.9)")
	fs.IntVar(&o.Servers, "nodes", o.Servers, "servers")
	fs.IntVar(&o.Clients, "clients", o.Clients, "independent clients, each with its own policy instance")
	addSeed(fs, &o.Seed, "the arrival trace and of the policies")
	fs.IntVar(&o.Requests, "requests", o.Requests, "measured requests per run (a tenth more warm up)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "if set, simulated time per run instead of --requests (at the Poisson/Exp rate at 90% load)")
	addOut(fs, &o.Out, "the CSV and SVG files")
	return cmd
}

func simSchedCmd() *cobra.Command {
	o := schedsim.DefaultSchedOptions()
	cmd := leaf("sched [flags]", "Class scheduling on one node (dissertation Figs 4.8-4.10)",
		`LossPercent against arrival demand for EDF, YID, Greedy and Adaptive on the
Micro-benchmark and Differentiated-Search-like workloads (Figs 4.8, 4.9),
the per-class breakdown at the highest demand (Fig 4.10), and the cost of
a dispatch decision next to FIFO.`,
		experiment(&o, &o.Out, nil, schedsim.RunSched))
	fs := cmd.Flags()
	addOut(fs, &o.Out, "the CSV and SVG files")
	fs.IntVar(&o.Workers, "workers", o.Workers, "workers on the simulated node")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "simulated arrival period per point (the queue then drains)")
	fs.IntVar(&o.Seeds, "seeds", o.Seeds, "independent runs per point, pooled")
	addSeed(fs, &o.Seed, "the first run")
	fs.IntVar(&o.Step, "step", o.Step, "demand step, percent")
	fs.IntVar(&o.Max, "max", o.Max, "highest demand, percent")
	fs.Float64Var(&o.Tolerance, "tolerance", o.Tolerance, "goal: Adaptive's LossPercent at most this many points above the better of YID and Greedy")
	fs.IntVar(&o.Dispatch, "dispatch", o.Dispatch, "decisions timed per contender in the dispatch-cost measurement; 0 skips it")
	return cmd
}

func simClassesCmd() *cobra.Command {
	o := schedsim.DefaultClassesOptions()
	cmd := leaf("classes [flags]", "Class-aware balancing vs server partitioning (dissertation Figs 4.11, 4.12)",
		`A cluster whose nodes run the class scheduler and whose clients run the
polling policy: aggregate yield at 75/125/200% demand on 4-16 nodes (Fig
4.11) and the allocation timeline through a demand spike and a server
failure (Fig 4.12).`,
		experiment(&o, &o.Out, nil, schedsim.RunClasses))
	fs := cmd.Flags()
	addOut(fs, &o.Out, "the CSV and SVG files")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "simulated time per Fig 4.11 point")
	addSeed(fs, &o.Seed, "the arrivals and the client's policy")
	fs.Float64Var(&o.Goal, "goal", o.Goal, "goal: class-aware yield at least this many percent above partitioning at 200% demand on 16 nodes")
	return cmd
}

func simDACCmd() *cobra.Command {
	o := dacsim.DefaultOptions()
	cmd := leaf("dac [flags]", "Data Aggregation Calls (the DAC paper, Figs 14-17 and 22)",
		`Simulate aggregation calls on the MICRO service (local ~Exp(25ms), reduce
~Exp(5ms)) through the tree builders, deadlines and state machine the
nodes run.

Sections: trees (the tree schemes vs request rate, homogeneous and
heterogeneous, Figs 14-17), scale (LAT from 4 to 512 nodes, Fig 22),
loads (LAT on 900 nodes with loads exact, polled from every node, or
announced every --announce with k fresh polls per call for each k of
--polls, judged PASS/FAIL against issue 30's goals: mean within 10% of
exact loads, at least 50x fewer control messages per call than polling
every node).`,
		experiment(&o, &o.Out, nil, dacsim.Run))
	fs := cmd.Flags()
	addSections(fs, &o.Sections, dacsim.Sections)
	addOut(fs, &o.Out, "the CSV and SVG files")
	addSeed(fs, &o.Seed, "the arrivals, trees and service times")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "simulated measurement window per point (default 30s, 5s with --quick; 10s for loads)")
	fs.BoolVar(&o.Quick, "quick", o.Quick, "fewer points")
	fs.DurationVar(&o.Announce, "announce", o.Announce, "loads: how often every node announces its load")
	fs.IntSliceVar(&o.Polls, "polls", o.Polls, "loads: the numbers of fresh polls per call (k) to try")
	return cmd
}

func simGageCmd() *cobra.Command {
	o := gagesim.DefaultConfig()
	cmd := leaf("gage [flags]", "Guaranteed request rates per subscriber (Gage, issue 12: Tables 1-2, Figs 3-6)",
		`Simulate Gage gateways in front of backends with a fixed capacity, running
the schedulers of internal/gage on virtual time: Gage's credit scheduler
next to an mClock-style tag scheduler and a FIFO gateway (reservations
off), with the issue's goals judged PASS or FAIL.

Sections: table1 (isolation under a flood), table2 (spare shared in
proportion to reservations), deviation (Figs 3-6: deviation from the
reservation against the averaging window), failover (two gateways, one
dies), scale (many backends, subscribers and gateways).`,
		experiment(&o, &o.Out, nil, gagesim.Run))
	fs := cmd.Flags()
	addSections(fs, &o.Sections, gagesim.Sections)
	addOut(fs, &o.Out, "the CSV and SVG files")
	addSeed(fs, &o.Seed, "the arrivals and request sizes")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured simulated time of each table and failover run")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "unmeasured simulated time before each run")
	fs.DurationVar(&o.DeviationDuration, "deviation-duration", o.DeviationDuration, "measured simulated time of each deviation run")
	fs.DurationVar(&o.ScaleDuration, "scale-duration", o.ScaleDuration, "measured simulated time of the scale run")
	fs.DurationVar(&o.Cycle, "cycle", o.Cycle, "scheduling cycle")
	fs.DurationVar(&o.AccountingCycle, "accounting-cycle", o.AccountingCycle, "period of the nodes' usage reports (the goals are judged at this one)")
	fs.IntVar(&o.Backends, "nodes", o.Backends, "backends of the paper-sized runs")
	fs.Float64Var(&o.BackendGRPS, "node-grps", o.BackendGRPS, "CPU and disk capacity of each backend, in generic requests per second")
	fs.Float64Var(&o.BackendNet, "node-net", o.BackendNet, "link of each backend, bytes per second")
	fs.IntVar(&o.ScaleBackends, "scale-nodes", o.ScaleBackends, "backends of the scale run")
	fs.IntVar(&o.ScaleSubscribers, "scale-subscribers", o.ScaleSubscribers, "subscribers of the scale run")
	fs.IntVar(&o.ScaleGateways, "scale-gateways", o.ScaleGateways, "gateways of the scale run")
	fs.DurationVar(&o.TTL, "ttl", o.TTL, "how long a gateway counts a silent peer's demand (multi-gateway runs)")
	fs.DurationVar(&o.Gossip, "gossip", o.Gossip, "gossip period of the gateways' demand (multi-gateway runs)")
	return cmd
}
