package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// LossyConfig is `neptune bench lossy` (issue 28, part 4): replicated
// list appends through lossy, slow, reordering links against what one
// unreplicated node serves the same clients through the same links.
type LossyConfig struct {
	Link Impairment
	// Levels are the replicated contenders (the list-append service's
	// level); each is compared with the unreplicated node.
	Levels []int
	// Window is each cell's measured time; Rounds the rounds, each
	// running every contender once (in a rotated order).
	Window time.Duration
	Rounds int
	Seed   uint64
	// Appenders per client process (two processes).
	Appenders int
	Lease     time.Duration
	// Goals, fixed before the run: at most ElectionsPerMinute elections
	// per minute (over every partition) and at least ThroughputGoal× the
	// unreplicated node's acknowledged writes per second.
	ElectionsPerMinute, ThroughputGoal float64
	// MinWrites is the fewest writes a cell must acknowledge to be judged
	// (fewer: the cell is starved).
	MinWrites int
	// BaselineExe, if set, adds a contender per level whose nodes run
	// this binary (e.g. built from main before a fix), judged apart;
	// clients and the unreplicated node run this build.
	BaselineExe string
	Keep        bool
}

// DefaultLossyConfig is the setting: 10% loss, 30 ± 20 ms.
func DefaultLossyConfig() LossyConfig {
	return LossyConfig{Link: Impairment{Loss: 0.10, Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond}, Levels: []int{3, 2},
		Window: time.Minute, Rounds: 2, Seed: 1, Appenders: 4, Lease: 400 * time.Millisecond, ElectionsPerMinute: 1, ThroughputGoal: 0.5, MinWrites: 200}
}

// Validate reports the first invalid field.
func (c LossyConfig) Validate() error {
	if err := c.Link.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Levels) == 0:
		return errors.New("--levels: name at least one of 2, 3")
	case slices.ContainsFunc(c.Levels, func(l int) bool { return l < 2 || l > 3 }):
		return fmt.Errorf("--levels %v: only 2 and 3", c.Levels)
	case c.Window < 5*time.Second || c.Rounds < 1 || c.Appenders < 1:
		return errors.New("--window must be at least 5s, --rounds and --appenders positive")
	case c.Rounds > 20 || c.Window > 30*time.Minute:
		return errors.New("--rounds at most 20, --window at most 30m")
	}
	return nil
}

// LossyCell is one contender's figures in one round.
type LossyCell struct {
	Level     int  // 0: unreplicated
	Baseline  bool // the nodes ran BaselineExe
	Round     int
	Writes    int // acknowledged in the window
	Window    time.Duration
	Elections int
}

// PerSecond is the cell's acknowledged writes per second.
func (c LossyCell) PerSecond() float64 { return float64(c.Writes) / c.Window.Seconds() }

// RunLossy runs the rounds and prints each cell, the ratios and the
// verdicts.
func RunLossy(ctx context.Context, lc LossyConfig, w io.Writer) error {
	if err := Available(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	type contender struct {
		level    int
		baseline bool
	}
	contenders := []contender{{0, false}}
	for _, l := range lc.Levels {
		contenders = append(contenders, contender{l, false})
		if lc.BaselineExe != "" {
			contenders = append(contenders, contender{l, true})
		}
	}
	fmt.Fprintf(w, "lossy links: %s on every node's egress; 2 client processes x %d appenders; %d round(s) of %v per contender\n",
		lc.Link, lc.Appenders, lc.Rounds, lc.Window)
	fmt.Fprintf(w, "goals (fixed before the run): <= %.1f elections/minute; writes >= %.2fx one unreplicated node through the same links\n",
		lc.ElectionsPerMinute, lc.ThroughputGoal)
	var cells []LossyCell
	for r := range lc.Rounds {
		for i := range contenders {
			ct := contenders[(i+r)%len(contenders)]
			level, name := ct.level, contenderName(ct.level)
			if ct.baseline {
				name += " baseline nodes"
			}
			dir, err := os.MkdirTemp("", "neptune-lossy-")
			if err != nil {
				return err
			}
			cfg := Config{Exe: exe, Dir: dir, Seed: lc.Seed + uint64(r), Lease: lc.Lease, Level: max(level, 2), Unreplicated: level == 0,
				Quiet: lc.Window, Lossy: lc.Link, WritesOnly: true, Appenders: lc.Appenders, Log: indent{w}}
			if ct.baseline {
				cfg.NodeExe = lc.BaselineExe
			}
			fmt.Fprintf(w, "round %d/%d %s:\n", r+1, lc.Rounds, name)
			res, err := Run(ctx, cfg)
			if lc.Keep || err != nil {
				fmt.Fprintf(w, "  kept %s\n", dir)
			} else {
				os.RemoveAll(dir)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, name, err)
			}
			c := LossyCell{Level: level, Baseline: ct.baseline, Round: r, Writes: res.Throughput.Appends, Window: res.Throughput.To.Sub(res.Throughput.From), Elections: res.Elections}
			cells = append(cells, c)
			fmt.Fprintf(w, "  %s: %.1f writes/s (%d in %v), %d elections; lost %d, duplicated %d\n", name, c.PerSecond(), c.Writes,
				c.Window.Round(time.Second), c.Elections, res.List.Counts[0], res.List.Counts[1])
		}
	}
	fmt.Fprintln(w)
	for _, c := range LossyVerdicts(lc, cells) {
		fmt.Fprintln(w, c)
	}
	if lc.BaselineExe != "" {
		fmt.Fprintf(w, "the same goals for the nodes of %s:\n", lc.BaselineExe)
		var base []LossyCell
		for _, c := range cells {
			if c.Level == 0 || c.Baseline {
				c.Baseline = false
				base = append(base, c)
			}
		}
		for _, c := range LossyVerdicts(lc, base) {
			fmt.Fprintln(w, "  "+c.String())
		}
	}
	return nil
}

func contenderName(level int) string {
	if level == 0 {
		return "unreplicated (1 node)"
	}
	return fmt.Sprintf("level %d (3 nodes)", level)
}

// LossyVerdicts judges the cells: per replicated level, elections per
// minute (all rounds' elections over all rounds' windows; a cluster that
// acknowledged fewer than MinWrites a round cannot pass it) and writes per
// second as a ratio of the unreplicated node's in the same round (the
// mean of the rounds), each round having to agree (report.Rounds). A
// cell with fewer than MinWrites acknowledged writes is starved: its
// goals are INCONCLUSIVE, as is an elections goal met in less than a
// minute of windows (one short window cannot show a rate per minute).
func LossyVerdicts(lc LossyConfig, cells []LossyCell) []*report.Check {
	base := map[int]LossyCell{}
	for _, c := range cells {
		if c.Level == 0 {
			base[c.Round] = c
		}
	}
	var out []*report.Check
	for _, level := range lc.Levels {
		var elections, writes int
		var window time.Duration
		var ratios []float64
		var perRound, ratioRounds []bool
		starved := []string{}
		for _, c := range cells {
			if c.Level != level || c.Baseline {
				continue
			}
			elections += c.Elections
			writes += c.Writes
			window += c.Window
			perRound = append(perRound, float64(c.Elections)/c.Window.Minutes() <= lc.ElectionsPerMinute)
			b, ok := base[c.Round]
			if !ok || b.Writes < lc.MinWrites {
				starved = append(starved, fmt.Sprintf("round %d's unreplicated cell acknowledged %d writes (< %d)", c.Round+1, b.Writes, lc.MinWrites))
				continue
			}
			r := c.PerSecond() / b.PerSecond()
			ratios = append(ratios, r)
			ratioRounds = append(ratioRounds, r >= lc.ThroughputGoal)
		}
		rate := float64(elections) / window.Minutes()
		ec := report.AtMost(fmt.Sprintf("level %d: elections <= %.1f/minute", level, lc.ElectionsPerMinute), rate, lc.ElectionsPerMinute,
			fmt.Sprintf("%.2f/minute (%d in %v)", rate, elections, window.Round(time.Second)))
		ec.Doubt(window < time.Minute && ec.Met, "only %v measured: less than a minute cannot show a rate per minute", window.Round(time.Second))
		ec.Doubt(ec.Met && writes < lc.MinWrites*len(perRound), "the level-%d cells acknowledged %d writes (< %d a round): a cluster that serves nothing elects nobody", level, writes, lc.MinWrites)
		if len(perRound) > 1 {
			ec = report.Rounds(ec, perRound)
		}
		out = append(out, ec)
		var mean float64
		for _, r := range ratios {
			mean += r
		}
		mean /= float64(len(ratios))
		tc := report.AtLeast(fmt.Sprintf("level %d: writes >= %.2fx one unreplicated node", level, lc.ThroughputGoal), mean, lc.ThroughputGoal,
			fmt.Sprintf("%.3fx (mean of %d rounds)", mean, len(ratios)))
		for _, s := range starved {
			tc.Doubt(true, "%s", s)
		}
		out = append(out, report.Rounds(tc, ratioRounds))
	}
	return out
}

// indent prefixes a run's log lines (they are progress under a cell).
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	if _, err := fmt.Fprintf(i.w, "  %s", p); err != nil {
		return 0, err
	}
	return len(p), nil
}
