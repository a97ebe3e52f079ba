// Package scalebench is `neptune bench scale`: what membership costs a
// member as the cluster grows, and how fast changes and failures reach
// everyone, measured on the real membership code (memberlist with
// Neptune's yellow pages, keyed gossip and signed announcements) for up
// to 1,000 members in this process over an in-memory network
// (lab/memnet), and on real secured node processes.
//
// Goals, fixed before the run (issue 30):
//   - flat: a member's idle CPU and bytes per second at the largest size
//     at most FlatGoal× the smallest's;
//   - a new epoch reaches 99% of the members within PropagationGoal at
//     the largest size;
//   - a cut-off (SIGKILLed) member leaves every member's yellow pages
//     within DetectionGoal at the largest size;
//   - no live member is removed anywhere over LossWatch at Loss packet
//     loss at the largest size;
//   - processes: Processes idle secured node processes use at most
//     ProcessCores cores together, and a write after a primary's SIGKILL
//     among them waits at most FailoverGoal× what it waits among 3.
//
// A verdict whose cells ran on a starved machine (lab/bench.Starvation:
// a late client, or other work on the machine) is INCONCLUSIVE.
package scalebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// Sections of the benchmark.
var Sections = []string{"members", "processes"}

// Config are the knobs of `neptune bench scale`.
type Config struct {
	Sections []string
	// Sizes are the in-process cluster sizes, smallest first.
	Sizes []int
	// Dilations are the time dilation of each size (clock.Dilated): its
	// members' clocks and memberlist's timers run that many times slower
	// than real time, so a thousand members fit this machine's CPUs; every
	// time and rate is reported in the members' own (dilated) time. Empty:
	// real time for all; shorter than Sizes: the last repeats.
	Dilations []float64
	// Partitions each member leads (three replicas each).
	Partitions int
	// Settle is the wait after every member joined, Idle the idle
	// measuring window.
	Settle, Idle time.Duration
	// JoinLimit bounds the join of all members; EventLimit the wait for a
	// change or a failure to reach everyone.
	JoinLimit, EventLimit time.Duration
	// JoinRate is how many members join per second of their time.
	JoinRate float64
	// Loss is the packet loss under which LossWatch (at the largest size)
	// counts live members removed; 0 skips it.
	Loss      float64
	LossWatch time.Duration
	// Goals.
	FlatGoal, ProcessCores, FailoverGoal float64
	PropagationGoal, DetectionGoal       time.Duration
	// Processes is the number of idle node processes; ProcessIdle their
	// measuring window.
	Processes   int
	ProcessIdle time.Duration
	Seed        uint64
	// Out, if set, is where the table (CSV) and the plot (SVG) go.
	Out string
	// HeapProfile, if set, is the prefix of heap profiles written once
	// each size's members settled (PREFIX-N.pprof), and after the loss
	// watch (PREFIX-N-loss.pprof): what a member holds.
	HeapProfile string
	// MemberLog, if set, receives every member's log, memberlist's lines
	// included (debug level): which member suspected, refuted or dropped
	// which.
	MemberLog io.Writer
	// CPUProfile, if set, is where the processes section writes a CPU
	// profile of one idle node over the idle window.
	CPUProfile string
}

// DefaultConfig is the run: 16 to 1,000 members, 4 partitions
// each (4,000 at 1,000), 1 minute at 5% loss, 100 processes.
func DefaultConfig() Config {
	return Config{Sections: Sections, Sizes: []int{16, 64, 256, 1000}, Dilations: []float64{1, 1, 2, 4}, JoinRate: 10, Partitions: 4, Settle: 15 * time.Second, Idle: 20 * time.Second,
		JoinLimit: 10 * time.Minute, EventLimit: 30 * time.Second, Loss: 0.05, LossWatch: time.Minute,
		FlatGoal: 1.5, ProcessCores: 0.5, FailoverGoal: 1.5, PropagationGoal: 2 * time.Second, DetectionGoal: 5 * time.Second,
		Processes: 100, ProcessIdle: 30 * time.Second, Seed: 1}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case len(c.Sections) == 0:
		return errors.New("scale: --sections is empty")
	case slices.Contains(c.Sections, "members") && len(c.Sizes) < 2:
		return errors.New("scale: --sizes needs at least two sizes to judge flatness")
	case slices.ContainsFunc(c.Sizes, func(n int) bool { return n < 3 }):
		return errors.New("scale: every size must be at least 3")
	case !slices.IsSorted(c.Sizes):
		return errors.New("scale: --sizes must be sorted, smallest first")
	case slices.ContainsFunc(c.Dilations, func(k float64) bool { return k < 1 }):
		return errors.New("scale: every --dilation must be at least 1")
	case c.Partitions < 1:
		return errors.New("scale: --partitions must be >= 1")
	case c.Idle <= 0 || c.JoinLimit <= 0 || c.EventLimit <= 0:
		return errors.New("scale: --idle, --join-limit and --event-limit must be > 0")
	case c.JoinRate <= 0:
		return errors.New("scale: --join-rate must be > 0")
	case c.Loss < 0 || c.Loss >= 1:
		return errors.New("scale: --loss must be in [0, 1)")
	case c.FlatGoal <= 0 || c.ProcessCores <= 0 || c.PropagationGoal <= 0 || c.DetectionGoal <= 0:
		return errors.New("scale: goals must be > 0")
	case slices.Contains(c.Sections, "processes") && (c.Processes < 3 || c.ProcessIdle <= 0):
		return errors.New("scale: --processes must be >= 3 and --process-idle > 0")
	}
	for _, s := range c.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("scale: unknown section %q (have %s)", s, strings.Join(Sections, ", "))
		}
	}
	return nil
}

// Run runs the sections and prints tables and verdicts to w.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	var checks []*report.Check
	if slices.Contains(cfg.Sections, "members") {
		rs, err := runMembers(ctx, cfg, w)
		if err != nil {
			return err
		}
		checks = append(checks, judgeMembers(cfg, rs)...)
		printMembers(w, rs)
		if cfg.Out != "" {
			if err := saveMembers(cfg.Out, rs); err != nil {
				return err
			}
		}
	}
	if slices.Contains(cfg.Sections, "processes") {
		c, err := runProcesses(ctx, cfg, w)
		if err != nil {
			return err
		}
		checks = append(checks, c...)
	}
	fmt.Fprintln(w, "\nVerdicts (goals fixed before the run):")
	for _, c := range checks {
		fmt.Fprintln(w, " ", c)
	}
	fmt.Fprintln(w, " ", report.Tally(checks...))
	return nil
}

func runMembers(ctx context.Context, cfg Config, w io.Writer) ([]sizeResult, error) {
	dir, err := os.MkdirTemp("", "neptune-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	mat, err := newMaterial(dir, slices.Max(cfg.Sizes), w)
	if err != nil {
		return nil, err
	}
	var rs []sizeResult
	for i, n := range cfg.Sizes {
		r, err := measureSize(ctx, cfg, mat, n, cfg.dilation(i), i == len(cfg.Sizes)-1, w)
		if err != nil {
			return nil, err
		}
		r.pagesBytes, r.pages = pagesHeap(r.pages), nil
		fmt.Fprintf(w, "[%d members] a client's yellow pages of %d nodes and %d partitions: %d KiB of heap\n", n, n, n*cfg.Partitions, r.pagesBytes>>10)
		rs = append(rs, r)
	}
	return rs, nil
}

// dilation is the time dilation of the i-th size.
func (c Config) dilation(i int) float64 {
	if len(c.Dilations) == 0 {
		return 1
	}
	return c.Dilations[min(i, len(c.Dilations)-1)]
}

// pct is the p-th percentile of sorted ds, counting missed members as
// never (an infinite time).
func pct(ds []time.Duration, missed int, p float64) (time.Duration, bool) {
	total := len(ds) + missed
	if total == 0 {
		return 0, false
	}
	i := int(p*float64(total)+0.999999) - 1
	if i >= len(ds) {
		return 0, false
	}
	return ds[max(i, 0)], true
}

func describe(ds []time.Duration, missed int) string {
	if len(ds) == 0 {
		return fmt.Sprintf("no member (%d missed)", missed)
	}
	p50, _ := pct(ds, missed, 0.5)
	p99, ok := pct(ds, missed, 0.99)
	s99 := "never"
	if ok {
		s99 = p99.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("p50 %v, p99 %s, max %v, %d missed", p50.Round(time.Millisecond), s99, slices.Max(ds).Round(time.Millisecond), missed)
}

func judgeMembers(cfg Config, rs []sizeResult) []*report.Check {
	small, big := rs[0], rs[len(rs)-1]
	starved := func(c *report.Check, rs ...sizeResult) *report.Check {
		for _, r := range rs {
			r.starved.Doubt(c, fmt.Sprintf("the %d-member cell", r.n))
		}
		return c
	}
	cpuRatio := big.cpuPerMember / small.cpuPerMember
	byteRatio := big.bytesPerMember / small.bytesPerMember
	var checks []*report.Check
	for _, r := range rs {
		if r.unjoined != "" {
			c := report.AtMost(fmt.Sprintf("all %d members join within %v", r.n, cfg.JoinLimit), 1, 0, r.unjoined)
			checks = append(checks, c)
		}
	}
	checks = append(checks,
		starved(report.AtMost(fmt.Sprintf("idle CPU per member at %d ≤ %.1f× at %d", big.n, cfg.FlatGoal, small.n), cpuRatio, cfg.FlatGoal,
			fmt.Sprintf("%.2f× (%.2f vs %.2f ms/s)", cpuRatio, big.cpuPerMember, small.cpuPerMember)), small, big),
		report.AtMost(fmt.Sprintf("idle bytes per member at %d ≤ %.1f× at %d", big.n, cfg.FlatGoal, small.n), byteRatio, cfg.FlatGoal,
			fmt.Sprintf("%.2f× (%.0f vs %.0f B/s)", byteRatio, big.bytesPerMember, small.bytesPerMember)))
	p99, ok := pct(big.propagation, big.propagationMissed, 0.99)
	c := report.AtMost(fmt.Sprintf("a new epoch reaches 99%% of %d members within %v", big.n, cfg.PropagationGoal), p99.Seconds(), cfg.PropagationGoal.Seconds(),
		describe(big.propagation, big.propagationMissed))
	c.Met = c.Met && ok
	checks = append(checks, starved(c, big))
	worst, missed := time.Duration(0), big.detectionMissed
	if len(big.detection) > 0 {
		worst = slices.Max(big.detection)
	}
	c = report.AtMost(fmt.Sprintf("a cut-off member leaves all %d yellow pages within %v", big.n-1, cfg.DetectionGoal), worst.Seconds(), cfg.DetectionGoal.Seconds(),
		describe(big.detection, missed))
	c.Met = c.Met && missed == 0
	checks = append(checks, starved(c, big))
	if big.falseDeaths >= 0 {
		checks = append(checks, report.AtMost(fmt.Sprintf("no live member removed over %v at %.0f%% loss (%d members)", big.lossWatched, cfg.Loss*100, big.n-1),
			float64(big.falseDeaths), 0, fmt.Sprintf("%d removals", big.falseDeaths)))
	}
	return checks
}

func membersTable(rs []sizeResult) *report.Table {
	t := report.NewTable("members", "dilation", "join all", "CPU ms/s per member", "bytes/s per member", "cores busy", "epoch p50", "epoch p99", "detect p50", "detect max", "pages KiB", "timer lag (mean)")
	for _, r := range rs {
		e50, _ := pct(r.propagation, r.propagationMissed, 0.5)
		e99, _ := pct(r.propagation, r.propagationMissed, 0.99)
		d50, _ := pct(r.detection, r.detectionMissed, 0.5)
		var dmax time.Duration
		if len(r.detection) > 0 {
			dmax = slices.Max(r.detection)
		}
		t.Addf("%d,%g×,%v,%.2f,%.0f,%.2f,%v,%v,%v,%v,%d,%v", r.n, r.dilation, r.join.Round(100*time.Millisecond), r.cpuPerMember, r.bytesPerMember, r.busy,
			e50.Round(time.Millisecond), e99.Round(time.Millisecond), d50.Round(time.Millisecond), dmax.Round(time.Millisecond), r.pagesBytes>>10, r.starved.Lag.Round(time.Millisecond))
	}
	return t
}

func printMembers(w io.Writer, rs []sizeResult) {
	fmt.Fprintln(w, "\nMembership at scale (in-process members over an in-memory network; keyed gossip, signed announcements;")
	fmt.Fprintln(w, "times and rates in the members' own time, which runs `dilation` times slower than real time; cores busy is real):")
	membersTable(rs).Print(w)
}

func saveMembers(dir string, rs []sizeResult) error {
	if err := membersTable(rs).Save(filepath.Join(dir, "scale-members.csv")); err != nil {
		return err
	}
	cpu := report.Series{Name: "CPU per member (ms/s)"}
	kb := report.Series{Name: "KB sent per member per second"}
	for _, r := range rs {
		cpu.Add(float64(r.n), r.cpuPerMember)
		kb.Add(float64(r.n), r.bytesPerMember/1000)
	}
	ch := report.Chart{Title: "Idle cost per member against cluster size", XLabel: "members", YLabel: "per member", LogX: true, Series: []report.Series{cpu, kb}}
	return ch.Save(filepath.Join(dir, "scale-members.svg"))
}
