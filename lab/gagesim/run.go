// Package gagesim simulates Gage (issue 12, after the paper "Performance
// Guarantee for Cluster-Based Internet Services", Li et al. 2003) on
// virtual time: gateways running the very schedulers of internal/gage in
// front of backends with a fixed capacity, subscribers sending Poisson or
// constant-rate traffic whose requests vary in size. It reproduces the
// paper's Table 1 (isolation), Table 2 (spare sharing) and Figs 3-6
// (deviation from the reservation against the averaging window), adds
// what the paper did not have (a gateway dying among two; 64 backends, 100
// subscribers and 4 gateways), and prints Gage's credit scheduler next to
// the mClock-style tag scheduler (and a FIFO gateway where it shows
// something), with the goals judged PASS or FAIL.
package gagesim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// Sections are the experiments Run can run, in the order it runs them.
var Sections = []string{"table1", "table2", "deviation", "failover", "scale"}

// Config is a run of the simulation; the zero value of a field means its
// default (DefaultConfig).
type Config struct {
	// Sections to run, of Sections; empty runs them all.
	Sections []string
	Seed     uint64
	// Duration is the measured simulated time of each table and failover
	// run; Warmup runs before it, unmeasured.
	Duration time.Duration
	Warmup   time.Duration
	// DeviationDuration is the measured time of each deviation run: four
	// of the longest (8 s) windows by default.
	DeviationDuration time.Duration
	// ScaleDuration is the measured time of the scale run.
	ScaleDuration time.Duration
	// Cycle is the scheduling cycle and AccountingCycle the period of the
	// nodes' usage reports (the goals are judged at this one).
	Cycle           time.Duration
	AccountingCycle time.Duration
	// Backends and BackendGRPS make the cluster of the paper-sized runs:
	// each backend has the CPU and disk of BackendGRPS generic requests
	// per second, and a link of BackendNet bytes per second (100 Mbit/s,
	// the paper's Fast Ethernet: the network is rarely the bottleneck,
	// footnote 1).
	Backends    int
	BackendGRPS float64
	BackendNet  float64
	// The scale run.
	ScaleBackends, ScaleSubscribers, ScaleGateways int
	// TTL and Gossip are the splitter's TTL and the gossip period of the
	// multi-gateway runs; the stated bound for giving a dead gateway's
	// share back is TTL + Gossip + AccountingCycle.
	TTL, Gossip time.Duration
	// Out, if set, is a directory for a CSV file of every table and SVG
	// charts of the deviation figures and of the failover.
	Out string
}

// DefaultConfig is the configuration of `neptune sim gage`.
func DefaultConfig() Config {
	return Config{
		Seed: 1, Duration: 20 * time.Second, Warmup: 2 * time.Second,
		DeviationDuration: 32 * time.Second, ScaleDuration: 10 * time.Second,
		Cycle: 10 * time.Millisecond, AccountingCycle: 100 * time.Millisecond,
		Backends: 8, BackendGRPS: 100, BackendNet: 12.5e6,
		ScaleBackends: 64, ScaleSubscribers: 100, ScaleGateways: 4,
		TTL: time.Second, Gossip: 100 * time.Millisecond,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if len(c.Sections) == 0 {
		c.Sections = Sections
	}
	set := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.Duration, d.Duration)
	set(&c.Warmup, d.Warmup)
	set(&c.DeviationDuration, d.DeviationDuration)
	set(&c.ScaleDuration, d.ScaleDuration)
	set(&c.Cycle, d.Cycle)
	set(&c.AccountingCycle, d.AccountingCycle)
	set(&c.TTL, d.TTL)
	set(&c.Gossip, d.Gossip)
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&c.Backends, d.Backends)
	setInt(&c.ScaleBackends, d.ScaleBackends)
	setInt(&c.ScaleSubscribers, d.ScaleSubscribers)
	setInt(&c.ScaleGateways, d.ScaleGateways)
	if c.BackendGRPS == 0 {
		c.BackendGRPS = d.BackendGRPS
	}
	if c.BackendNet == 0 {
		c.BackendNet = d.BackendNet
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, s := range c.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("gagesim: unknown section %q (have %s)", s, strings.Join(Sections, ", "))
		}
	}
	for name, d := range map[string]time.Duration{"duration": c.Duration, "warmup": c.Warmup, "deviation duration": c.DeviationDuration,
		"scale duration": c.ScaleDuration, "cycle": c.Cycle, "accounting cycle": c.AccountingCycle, "ttl": c.TTL, "gossip": c.Gossip} {
		if d < 0 {
			return fmt.Errorf("gagesim: %s must be > 0, got %v", name, d)
		}
	}
	if c.Backends < 1 || c.ScaleBackends < 1 || c.ScaleSubscribers < 2 || c.ScaleGateways < 1 || c.BackendGRPS <= 0 || c.BackendNet < 0 {
		return errors.New("gagesim: backends, scale backends and gateways must be >= 1, scale subscribers >= 2 and backend GRPS > 0")
	}
	if c.Duration < 2*time.Second || c.DeviationDuration < time.Second {
		return errors.New("gagesim: duration must be >= 2s and deviation duration >= 1s")
	}
	return nil
}

// Goal is one of the goals, fixed before the run, and its verdict.
type Goal struct {
	Name   string
	OK     bool
	Detail string
}

func (g Goal) String() string {
	return fmt.Sprintf("%s  %s: %s", report.Verdict(g.OK), g.Name, g.Detail)
}

// Run runs cfg's sections, printing each table and then the goals with
// their verdicts to w. A failed goal is a result, not an error: Run
// returns an error only if it could not run (bad config, ctx done, Out
// not writable).
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	_, err := run(ctx, cfg, w)
	return err
}

func run(ctx context.Context, cfg Config, w io.Writer) ([]Goal, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Out != "" {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return nil, fmt.Errorf("gagesim: %w", err)
		}
	}
	fmt.Fprintf(w, "Gage simulation: seed %d, scheduling cycle %v, accounting cycle %v; GRU = 10 ms CPU, 10 ms disk, 2000 B network\n",
		cfg.Seed, cfg.Cycle, cfg.AccountingCycle)
	sections := map[string]func(context.Context, Config, io.Writer) ([]Goal, error){
		"table1": table1, "table2": table2, "deviation": deviation, "failover": failover, "scale": scale,
	}
	var goals []Goal
	for _, s := range Sections {
		if !slices.Contains(cfg.Sections, s) {
			continue
		}
		g, err := sections[s](ctx, cfg, w)
		if err != nil {
			return goals, fmt.Errorf("gagesim: %s: %w", s, err)
		}
		goals = append(goals, g...)
	}
	fmt.Fprintf(w, "\nGoals (issue 12, fixed before the run; judged on Gage's credit scheduler)\n")
	pass := 0
	for _, g := range goals {
		fmt.Fprintln(w, g)
		if g.OK {
			pass++
		}
	}
	fmt.Fprintf(w, "%d of %d goals PASS\n", pass, len(goals))
	return goals, nil
}
