package lbbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/faults"
	"github.com/neptune-cluster/neptune/lab/report"
)

// The slowpolls section is Table 3.2 where polls can be slow: on loopback
// no poll takes 10 ms, so there is nothing to discard. It runs the nodes
// and clients in a network namespace of their own (faults.Loopback) in
// which a share of every node's poll answers is held for a delay drawn
// from SlowDelay ± SlowJitter (faults.HoldReplies), then replays poll-3
// without and with the 10 ms discard.

// SlowPollsVerb is the hidden `neptune bench` verb that runs the slowpolls
// section inside its namespace; it reads the Config as JSON from stdin.
const SlowPollsVerb = "lb-slow-polls"

// slowProbes is how many single polls check the held share before the
// cells run.
const slowProbes = 1600

// slowPollsInNamespace makes the namespace, re-executes this binary in it
// with SlowPollsVerb and removes it; the section is skipped, saying why,
// where namespaces cannot be made.
func slowPollsInNamespace(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := faults.Available(); err != nil {
		fmt.Fprintf(stdout, "\nslowpolls skipped: %v\n", err)
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ns, err := faults.NewLoopback()
	if err != nil {
		return err
	}
	defer ns.Close()
	job, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cmd := ns.Command(exe, "bench", SlowPollsVerb)
	cmd.Stdin = strings.NewReader(string(job))
	cmd.Stdout = stdout
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench lb: slowpolls in %s: %w: %s", ns.NS, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// SlowPolls runs the slowpolls section; it must run inside the namespace
// slowPollsInNamespace makes, whose loopback it slows.
func SlowPolls(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var cfg Config
	if err := json.NewDecoder(stdin).Decode(&cfg); err != nil {
		return fmt.Errorf("lbbench: read the config: %w", err)
	}
	exe, _, srv, stopCluster, err := scratchCluster(ctx, "neptune-bench-lb-slow-", cfg.Nodes)
	if err != nil {
		return err
	}
	defer stopCluster()
	ports := make([]int, len(srv))
	for i, s := range srv {
		_, p, err := net.SplitHostPort(s.Poll)
		if err != nil {
			return fmt.Errorf("bench lb: poll address %q: %w", s.Poll, err)
		}
		if ports[i], err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("bench lb: poll address %q: %w", s.Poll, err)
		}
	}
	held := faults.Impairment{Delay: cfg.SlowDelay, Jitter: cfg.SlowJitter}
	stopHold, err := faults.HoldReplies(ctx, exe, ports, cfg.SlowShare, held, cfg.Seed)
	if err != nil {
		return fmt.Errorf("bench lb: slowpolls: %w", err)
	}
	defer stopHold()

	fmt.Fprintf(stdout, "\nTable 3.2 with slow polls — %d nodes in a namespace of their own; each poll answer held with probability %.3f for %v ± %v (the dissertation's profile: 8.1%% of polls over 10 ms, 5.6%% over 20 ms)\n",
		len(srv), cfg.SlowShare, cfg.SlowDelay, cfg.SlowJitter)
	over10, over20, err := probeSlowPolls(ctx, srv)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  %d single polls before the cells: %.1f%% took over 10 ms, %.1f%% over 20 ms\n", slowProbes, 100*over10, 100*over20)
	checks := []*report.Check{heldCheck(cfg.SlowShare, over10, over20, slowProbes)}

	base := baseCell(cfg, len(srv))
	fmt.Fprintf(stdout, "%s\n", rowHead)
	for _, w := range cfg.Workloads {
		var st [3]lbStats
		var machine [3]bench.Starvation
		for i, c := range []lbCell{
			{Label: balance.NameOracle, Policy: balance.NameOracle},
			{Label: "poll-3 no discard", Policy: balance.NamePolling, PollSize: 3, Discard: -1},
			{Label: "poll-3 10ms discard", Policy: balance.NamePolling, PollSize: 3, Discard: 10 * time.Millisecond},
		} {
			c = mergeCell(base, c, w, 0.9, cfg.Duration)
			if c.Policy == balance.NameOracle {
				c.Clients, c.Procs = 1, 1
			}
			res, err := runLBCell(ctx, exe, srv, c)
			if err != nil {
				return fmt.Errorf("bench lb: %s: %w", c.Label, err)
			}
			st[i], machine[i] = res.stats(), res.Machine
			machine[i].Lag = st[i].lag
			if st[i].n == 0 {
				return fmt.Errorf("bench lb: %s measured no request (first error: %s)", c.Label, res.FirstErr)
			}
			printRow(stdout, c, st[i], st[0])
		}
		ch := discardCheck(cfg.SlowGoal, w, st[1], st[2], machine[1], machine[2])
		checks = append(checks, ch)
	}
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintf(stdout, "slowpolls verdicts: %s\n", report.Tally(checks...))
	return nil
}

// heldCheck judges the injection itself: the share of single polls that
// took over 10 ms is within two points of the share asked.
func heldCheck(share, over10, over20 float64, probes int) *report.Check {
	return &report.Check{
		Goal:     fmt.Sprintf("the held share is what was asked: polls over 10 ms within 2 points of %.1f%%", 100*share),
		Met:      math.Abs(over10-share) <= 0.02,
		Measured: fmt.Sprintf("%.1f%% over 10 ms, %.1f%% over 20 ms of %d", 100*over10, 100*over20, probes),
	}
}

// paperDiscard is Table 3.2's gain from the 10 ms discard, per workload.
var paperDiscard = map[string]string{"exp": "−3.2%", "fine": "−8.3%"}

// discardCheck judges Table 3.2 on workload w: poll-3 with the 10 ms
// discard at most goal × the mean of poll-3 waiting for every answer,
// undecided if either row's client or machine was starved.
func discardCheck(goal float64, w string, wait, discard lbStats, mWait, mDiscard bench.Starvation) *report.Check {
	r := float64(discard.mean) / float64(wait.mean)
	ch := report.AtMost(fmt.Sprintf("%s: the 10 ms discard's mean ≤ %g× waiting for every answer", w, goal), r, goal,
		fmt.Sprintf("%.3f× (%.1f vs %.1f ms; %+.1f%%, the paper %s; poll %.2f vs %.2f ms)", r, report.Ms(discard.mean), report.Ms(wait.mean),
			100*(r-1), paperDiscard[w], report.Ms(discard.poll), report.Ms(wait.poll)))
	mWait.Doubt(ch, "the no-discard row")
	return mDiscard.Doubt(ch, "the discard row")
}

// probeSlowPolls polls the nodes one at a time, slowProbes times in all,
// and returns the shares of answers that took over 10 and over 20 ms
// (an answer that never came counts as both).
func probeSlowPolls(ctx context.Context, srv []lbServer) (over10, over20 float64, err error) {
	p, err := transport.NewPoller(slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, 0, err
	}
	defer p.Close()
	var n10, n20 int
	for i := range slowProbes {
		s := srv[i%len(srv)]
		t0 := time.Now()
		ans := p.Poll(ctx, []transport.PollTarget{{Replica: s.ID, Addr: s.Poll}}, "work", 0, "", 200*time.Millisecond)
		took := time.Since(t0)
		if len(ans) == 0 || took > 10*time.Millisecond {
			n10++
		}
		if len(ans) == 0 || took > 20*time.Millisecond {
			n20++
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
	}
	return float64(n10) / slowProbes, float64(n20) / slowProbes, nil
}
