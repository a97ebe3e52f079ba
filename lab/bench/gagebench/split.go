package gagebench

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

// statusPoll is how often the split section reads the surviving
// gateway's share after the kill: the resolution of the measured time.
const statusPoll = 20 * time.Millisecond

// split runs two gateway processes gossiping demand. A (reserved
// 200×scale) asks 2× its reservation, 90% through gw0 and 10% through
// gw1; B (the same reservation) asks 2× through gw0; the capacity is the
// two reservations, so A gets what the split of its reservation gives
// it. Then gw1 is SIGKILLed and its clients move to gw0.
func (e *env) split(ctx context.Context) ([]*report.Check, error) {
	res := 200 * e.cfg.Scale
	subs := []subscriberSpec{{"A", res}, {"B", res}}
	capacity := 2 * res
	extra := func(name, peers string) string {
		s := fmt.Sprintf("name: %s\ngossip: 127.0.0.1:0\npeer_ttl: %v\ngossip_period: %v\n", name, e.cfg.PeerTTL, e.cfg.GossipPeriod)
		if peers != "" {
			s += "peers: [" + peers + "]\n"
		}
		return s
	}
	sec := e.cl.SecurityArgs("")
	g0, err := startGateway(ctx, e.exe, e.dir, "split-gw0", e.gatewayConfig("credit", capacity, subs, extra("gw0", "")), sec, e.cfg.Procs)
	if err != nil {
		return nil, err
	}
	defer g0.kill()
	g1, err := startGateway(ctx, e.exe, e.dir, "split-gw1", e.gatewayConfig("credit", capacity, subs, extra("gw1", g0.gossip)), sec, e.cfg.Procs)
	if err != nil {
		return nil, err
	}
	defer g1.kill()
	for _, g := range []*proc{g0, g1} {
		if err := e.waitReady(ctx, g.http, subs); err != nil {
			return nil, err
		}
	}
	for _, g := range []*proc{g0, g1} {
		g := g
		if err := waitFor(ctx, 10*time.Second, func() bool {
			st, err := g.status(e.hc)
			return err == nil && len(st.Gateways) == 2
		}); err != nil {
			return nil, fmt.Errorf("%s never heard its peer: %w", g.name, err)
		}
	}

	bound := e.cfg.PeerTTL + e.cfg.GossipPeriod
	fmt.Fprintf(e.w, "  [split: gw0 and gw1, %v then gw1 SIGKILLed]\n", e.cfg.Warmup+e.cfg.Cell)
	var moved atomic.Bool
	flows := []flow{
		{sub: "A", host: host("A"), rate: 2 * res, targets: []string{g0.http, g1.http}, weights: []float64{0.9, 0.1}, moved: &moved},
		{sub: "B", host: host("B"), rate: 2 * res, targets: []string{g0.http}, weights: []float64{1}},
	}
	probe := bench.StartLagProbe(5 * time.Millisecond)
	start := time.Now()
	from, kill := start.Add(e.cfg.Warmup), start.Add(e.cfg.Warmup+e.cfg.Cell)
	after := kill.Add(bound + e.cfg.MaxWait) // queued across the bound: their wait is over
	end := after.Add(e.cfg.Cell)
	dctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	done := make(chan []outcome, 1)
	go func() { done <- drive(dctx, e.hc, flows, e.prof.path, e.prof.body(e.cfg), e.cfg.Seed) }()

	time.Sleep(time.Until(kill))
	before, _ := g0.status(e.hc)
	g1.kill()
	killed := time.Now()
	moved.Store(true)
	var back time.Duration
	for back == 0 && time.Since(killed) < 5*bound && ctx.Err() == nil {
		time.Sleep(statusPoll)
		if st, err := g0.status(e.hc); err == nil && sub(st, "A").Share >= 0.999 {
			back = time.Since(killed)
		}
	}
	outs := <-done
	st := probe.Stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	last, err := g0.status(e.hc)
	if err != nil {
		return nil, err
	}
	// A request costs what gw0 charged A's on average since the kill.
	cost := 1.0
	if n := sub(last, "A").Served - sub(before, "A").Served; n > 0 {
		cost = (sub(last, "A").ServedGRU - sub(before, "A").ServedGRU) / float64(n)
	}

	// Per whole second: A through each gateway, A's total, B.
	secs := int(end.Sub(from).Seconds())
	tl := report.NewTimeline(time.Second, secs, 3)
	for _, o := range outs {
		if o.code != 200 || o.due.Before(from) {
			continue
		}
		series := 2
		if o.sub == "A" {
			series = o.target
			if killed.Before(o.due) {
				series = 0 // moved to gw0
			}
		}
		tl.Add(o.due.Sub(from), series, cost)
	}
	fmt.Fprintf(e.w, "Two gateways: A (reserved %.1f GRPS) asks 2x, 90%% through gw0 and 10%% through gw1; B (%.1f) asks 2x through gw0.\n", res, res)
	fmt.Fprintf(e.w, "Declared capacity %.0f GRPS (the reservations: no spare). gw1 is SIGKILLed at %.0fs; its clients move to gw0. Cost %.3f GRU/request.\n",
		capacity, kill.Sub(from).Seconds(), cost)
	fmt.Fprintf(e.w, "Stated bound for the share to come back: peer_ttl %v + gossip period %v = %v.\n", e.cfg.PeerTTL, e.cfg.GossipPeriod, bound)
	t := report.NewTable("second", "A via gw0", "A via gw1", "A total", "A/reserved", "B")
	killSec := int(kill.Sub(from).Seconds())
	var worst float64
	for b := range tl.Len() {
		a0, a1, bb := tl.Rate(b, 0), tl.Rate(b, 1), tl.Rate(b, 2)
		mark := ""
		if b == killSec {
			mark = " <- gw1 killed"
		}
		if s := from.Add(time.Duration(b) * time.Second); !s.Before(after) && !s.Add(time.Second).After(end) {
			worst = max(worst, math.Abs((a0+a1)/res-1))
		}
		t.Add(fmt.Sprint(b), fmt.Sprintf("%.1f", a0), fmt.Sprintf("%.1f", a1), fmt.Sprintf("%.1f", a0+a1), pct((a0+a1)/res)+mark, fmt.Sprintf("%.1f", bb))
	}
	t.Print(e.w)
	// A's rate over phase 1 and over the time after the bound.
	rate := func(from, to time.Time) float64 {
		n := 0
		for _, o := range outs {
			if o.sub == "A" && o.code == 200 && !o.due.Before(from) && o.due.Before(to) {
				n++
			}
		}
		return float64(n) * cost / to.Sub(from).Seconds()
	}
	total, afterRate := rate(from, kill), rate(after, end)
	cell := &cellResult{starve: st, late: lateness(outs, from, end)}
	fmt.Fprintf(e.w, "before the kill A got %s of its reservation; gw0 took A's whole reservation %v after the kill; from %v after it, A got %s (worst whole 1 s window %s off).\n\n",
		pct(total/res), back.Round(time.Millisecond), after.Sub(killed).Round(time.Millisecond), pct(afterRate/res), pct(worst))
	c1 := splitVerdict(total, res, e.cfg.GoalSplit)
	c2 := killVerdict(back, bound, afterRate, res, e.cfg.GoalSplit)
	starvedDoubts(c1, cell, "the two-gateway run")
	starvedDoubts(c2, cell, "the two-gateway run")
	return []*report.Check{c1, c2}, nil
}

// splitVerdict judges the two-gateway goal: the subscriber's total
// through both within tol of its reservation.
func splitVerdict(total, reserved, tol float64) *report.Check {
	off := math.Abs(total/reserved - 1)
	return report.AtMost(fmt.Sprintf("two gateways, demand 90/10: A's total within %.0f%% of its reservation", 100*tol), off, tol,
		fmt.Sprintf("%s of the reservation (%.1f of %.1f GRPS)", pct(total/reserved), total, reserved))
}

// killVerdict judges the kill: the survivor holds the whole reservation
// within bound (to the status poll's resolution), and from then on the
// subscriber gets its reservation within tol.
func killVerdict(back, bound time.Duration, after, reserved, tol float64) *report.Check {
	off := math.Abs(after/reserved - 1)
	c := &report.Check{
		Goal: fmt.Sprintf("gateway SIGKILLed: the survivor takes A's whole reservation within the stated bound %v (+%v status poll), and A is within %.0f%% of it after", bound, statusPoll, 100*tol),
		Met:  back > 0 && back <= bound+statusPoll && off <= tol,
	}
	when := "never"
	if back > 0 {
		when = "after " + back.Round(time.Millisecond).String()
	}
	c.Measured = fmt.Sprintf("%s; then %s of the reservation", when, pct(after/reserved))
	return c
}

// waitFor polls ok every 50 ms until it holds or limit passes.
func waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
