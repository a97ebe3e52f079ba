package dacsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/lab/report"
)

// The goals of the loads section (issue 30, part 4), fixed before any
// run: at LoadsNodes nodes, a contender that learns loads from
// announcements and k polls answers within LoadsLatencyGoal of LAT with
// exact loads and sends at least LoadsMessageGoal times fewer control
// messages per call than polling every node.
const (
	LoadsNodes       = 900
	LoadsDemand      = 0.7
	LoadsLatencyGoal = 1.10
	LoadsMessageGoal = 50.0
)

// loadContender is one way of learning loads in the loads section.
type loadContender struct {
	name     string
	scheme   dac.Scheme
	loads    LoadSource
	announce time.Duration
	polls    int
	// pollsOnly: no announcements, only what the caller's polls said.
	pollsOnly bool
	// view and callers: SimConfig's.
	view    View
	callers int
	// piggyback and candidates: SimConfig's.
	piggyback  bool
	candidates float64
}

func (l loadContender) String() string { return l.name }

// loadContenders are exact, poll-all, announcements every o.Announce
// with each k of o.Polls, announcements ten times as often with the
// default k (how fresh they would have to be), the product (no
// announcements, the default k polls remembered and corrected with the
// product's 1 s horizon), and for reference a binomial tree, which needs
// no loads at all.
func loadContenders(o Options) []loadContender {
	cs := []loadContender{{name: "exact", loads: LoadsExact}, {name: "poll-all", loads: LoadsPollAll}}
	for _, k := range o.Polls {
		cs = append(cs, loadContender{name: fmt.Sprintf("ann %v k=%d", o.Announce, k), loads: LoadsStale, announce: o.Announce, polls: k})
	}
	// Callers that bring stale loads up to date with their own work:
	// one caller, which knows all the work sent, and eight, each of
	// which knows its eighth.
	for _, v := range []View{ViewOwn, ViewFluid} {
		for _, callers := range []int{1, 8} {
			cs = append(cs, loadContender{name: fmt.Sprintf("ann %v k=%d %v ×%d", o.Announce, dac.SimPolls, v, callers),
				loads: LoadsStale, announce: o.Announce, polls: dac.SimPolls, view: v, callers: callers})
		}
	}
	cs = append(cs, loadContender{name: fmt.Sprintf("polls k=%d own ×8", dac.SimPolls), loads: LoadsStale, announce: time.Second,
		polls: dac.SimPolls, pollsOnly: true, view: ViewOwn, callers: 8})
	// Randomised placement against herding (power of d choices with old
	// information): each call lets only a random fraction of the nodes
	// take reductions.
	for _, f := range []float64{0.5, 0.25} {
		cs = append(cs, loadContender{name: fmt.Sprintf("ann %v k=%d cand %.2g", o.Announce, dac.SimPolls, f),
			loads: LoadsStale, announce: o.Announce, polls: dac.SimPolls, candidates: f})
	}
	// Loads carried back with every result (no message of their own),
	// brought up to date with the caller's work committed since; one
	// caller, eight, and eight with random candidates.
	for _, p := range []struct {
		callers int
		cand    float64
	}{{1, 0}, {8, 0}, {8, 0.5}} {
		name := fmt.Sprintf("polls k=%d piggy ×%d", dac.SimPolls, p.callers)
		if p.cand > 0 {
			name += fmt.Sprintf(" cand %.2g", p.cand)
		}
		cs = append(cs, loadContender{name: name, loads: LoadsStale, announce: time.Second, polls: dac.SimPolls, pollsOnly: true,
			view: ViewSince, callers: p.callers, piggyback: true, candidates: p.cand})
	}
	fast := o.Announce / 10
	return append(cs, loadContender{name: fmt.Sprintf("ann %v k=%d", fast, dac.SimPolls), loads: LoadsStale, announce: fast, polls: dac.SimPolls},
		loadContender{name: fmt.Sprintf("polls k=%d", dac.SimPolls), loads: LoadsStale, announce: time.Second, polls: dac.SimPolls, pollsOnly: true},
		loadContender{name: "binomial", scheme: dac.Binomial, loads: LoadsExact})
}

// messages is a run's control messages per call: polls and their answers,
// and the load announcements every node sends, spread over the calls.
func messages(r SimResult) float64 { return r.Control + r.Announcements }

// loadChecks judges one contender against the exact and poll-all runs.
func loadChecks(name string, exact, pollAll, r SimResult) []*report.Check {
	ratio := float64(r.Mean) / float64(exact.Mean)
	lat := &report.Check{
		Goal: fmt.Sprintf("%s: mean ≤ %.2f× exact, as many calls met", name, LoadsLatencyGoal),
		Met:  ratio <= LoadsLatencyGoal && r.Succeeded >= exact.Succeeded,
		Measured: fmt.Sprintf("%.1f ms = %.2f× exact's %.1f ms; %d of %d calls met ρ (exact %d)",
			report.Ms(r.Mean), ratio, report.Ms(exact.Mean), r.Succeeded, r.Calls, exact.Succeeded),
	}
	starved := func(c *report.Check) *report.Check {
		c.Doubt(exact.Calls < 100, "only %d measured calls: run longer", exact.Calls)
		return c.Doubt(exact.Succeeded*20 < exact.Calls*19, "exact loads met ρ in %d of %d calls: the baseline is overloaded at this rate", exact.Succeeded, exact.Calls)
	}
	m, all := messages(r), messages(pollAll)
	msg := report.AtMost(fmt.Sprintf("%s: ≥ %.0f× fewer control messages per call than poll-all", name, LoadsMessageGoal),
		m, all/LoadsMessageGoal, fmt.Sprintf("%.1f (polls %.1f + announcements %.1f) vs %.1f: %s fewer", m, r.Control, r.Announcements, all, times(all, m)))
	msg.Doubt(all == 0, "poll-all sent no control messages")
	return []*report.Check{starved(lat), starved(msg)}
}

func times(a, b float64) string {
	if b == 0 {
		return "∞×"
	}
	return strconv.FormatFloat(a/b, 'f', 0, 64) + "×"
}

// loadsExp is issue 30's DAC at scale: LAT at LoadsNodes nodes with the
// loads it is built from learned three ways (and a binomial tree for
// reference), side by side, each way that does not poll every node judged
// against the goals above.
func loadsExp(ctx context.Context, base SimConfig, o Options, window time.Duration, w io.Writer) ([]*report.Check, error) {
	c := base
	c.Nodes = LoadsNodes
	c.Rate = LoadsDemand * c.IdealThroughput()
	c.Warmup = min(2*time.Second, window/5)
	c.Duration = c.Warmup + window
	fmt.Fprintf(w, "\n== DAC at scale (issue 30): LAT on %d nodes at %.0f%% of the ideal throughput (%.1f calls/s), %v measured; loads exact, polled from every node, or announced every interval with k fresh polls\n",
		c.Nodes, LoadsDemand*100, c.Rate, window)
	fmt.Fprintf(w, "goals (fixed): mean ≤ %.2f× exact loads with as many calls meeting ρ, and ≥ %.0f× fewer control messages per call than poll-all (polls, answers and amortised announcements counted)\n",
		LoadsLatencyGoal, LoadsMessageGoal)
	cs := loadContenders(o)
	res := make([]SimResult, len(cs))
	for i, lc := range cs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "  [%d/%d] %s …\n", i+1, len(cs), lc)
		t0 := time.Now()
		cc := c
		cc.Scheme, cc.Loads, cc.Announce, cc.Polls, cc.PollsOnly = lc.scheme, lc.loads, lc.announce, lc.polls, lc.pollsOnly
		cc.View, cc.Callers, cc.Piggyback, cc.Candidates = lc.view, lc.callers, lc.piggyback, lc.candidates
		r, err := Simulate(cc)
		if err != nil {
			return nil, err
		}
		res[i] = r
		fmt.Fprintf(w, "        mean %s ms, %.0f messages/call (%.1fs)\n", fms(r.Mean), messages(r), time.Since(t0).Seconds())
	}
	exact, pollAll := res[0], res[1]
	rows := report.NewTable("contender", "announce", "k", "calls", "met", "mean_ms", "p99_ms", "coverage", "polls_per_call", "announcements_per_call", "messages_per_call", "mean_vs_exact", "messages_vs_poll_all")
	for i, lc := range cs {
		r := res[i]
		ann := "-"
		if lc.loads == LoadsStale && !lc.pollsOnly {
			ann = lc.announce.String()
		}
		rows.Add(lc.name, ann, strconv.Itoa(lc.polls), strconv.Itoa(r.Calls), strconv.Itoa(r.Succeeded), fms(r.Mean), fms(r.P99), ff(r.Coverage),
			ff(r.Control), ff(r.Announcements), ff(messages(r)),
			strconv.FormatFloat(float64(r.Mean)/float64(exact.Mean), 'f', 3, 64), times(messages(pollAll), messages(r)))
	}
	fmt.Fprintln(w)
	rows.WithHeader("contender", "announce", "k", "calls", "met ρ", "mean ms", "p99 ms", "coverage", "polls/call", "ann/call", "msgs/call", "mean/exact", "msgs: poll-all/this").Print(w)
	var checks []*report.Check
	for i, lc := range cs {
		if lc.loads == LoadsStale {
			checks = append(checks, loadChecks(lc.name, exact, pollAll, res[i])...)
		}
	}
	for _, ch := range checks {
		fmt.Fprintln(w, ch)
	}
	fmt.Fprintf(w, "verdicts: %s\n", report.Tally(checks...))
	if err := loadMemory(c, w); err != nil {
		return nil, err
	}
	names := make([]string, len(cs))
	lat := report.Series{Name: "mean response (ms)"}
	goal := report.Series{Name: fmt.Sprintf("%.2f× exact (goal)", LoadsLatencyGoal)}
	msgs := report.Series{Name: "control messages per call"}
	for i, lc := range cs {
		names[i] = lc.name
		lat.Add(float64(i), report.Ms(res[i].Mean))
		goal.Add(float64(i), LoadsLatencyGoal*report.Ms(exact.Mean))
		msgs.Add(float64(i), messages(res[i]))
	}
	ch := report.Chart{Title: fmt.Sprintf("DAC on %d nodes: mean response by how loads are learned", c.Nodes), XLabel: "contender", YLabel: "mean response (ms)", XTicks: names, Series: []report.Series{lat, goal}}
	if err := ch.Save(filepath.Join(o.Out, "dac_loads_response.svg")); err != nil {
		return nil, err
	}
	mc := report.Chart{Title: fmt.Sprintf("DAC on %d nodes: control messages per call", c.Nodes), XLabel: "contender", YLabel: "messages per call", XTicks: names, Series: []report.Series{msgs}}
	if err := mc.Save(filepath.Join(o.Out, "dac_loads_messages.svg")); err != nil {
		return nil, err
	}
	return checks, rows.Save(filepath.Join(o.Out, "dac_loads.csv"))
}

// memoryLags are the ages at which loadMemory compares the load index.
var memoryLags = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second}

// loadMemory prints how much a node's load index at one moment says of
// its load index a lag later: the correlation across the nodes, averaged
// over the window, in the exact run's setting. Loads older than the lag
// where it nears 0 rank the nodes no better than chance, which is why
// stale loads cannot build LAT's tree however they are corrected.
func loadMemory(c SimConfig, w io.Writer) error {
	const every = 10 * time.Millisecond
	var samples [][]float64
	c.Scheme, c.Loads, c.SampleEvery = dac.LAT, LoadsExact, every
	c.OnLoads = func(loads []time.Duration) {
		v := make([]float64, len(loads))
		for i, l := range loads {
			v[i] = l.Seconds()
		}
		samples = append(samples, v)
	}
	if _, err := Simulate(c); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nload memory (exact loads, every node sampled every %v): correlation across the nodes of the load index with itself a lag later\n", every)
	for _, lag := range memoryLags {
		fmt.Fprintf(w, "  %6v  %.3f\n", lag, lagCorrelation(samples, int(lag/every)))
	}
	return nil
}

// lagCorrelation is the mean over the samples of the Pearson correlation
// between a sample and the one lag samples later.
func lagCorrelation(samples [][]float64, lag int) float64 {
	var sum float64
	n := 0
	for i := 0; i+lag < len(samples); i++ {
		if r, ok := pearson(samples[i], samples[i+lag]); ok {
			sum, n = sum+r, n+1
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// pearson is the correlation of a and b, false if either is constant.
func pearson(a, b []float64) (float64, bool) {
	var ma, mb float64
	for i := range a {
		ma, mb = ma+a[i], mb+b[i]
	}
	ma, mb = ma/float64(len(a)), mb/float64(len(b))
	var sab, saa, sbb float64
	for i := range a {
		da, db := a[i]-ma, b[i]-mb
		sab, saa, sbb = sab+da*db, saa+da*da, sbb+db*db
	}
	if saa == 0 || sbb == 0 {
		return 0, false
	}
	return sab / math.Sqrt(saa*sbb), true
}
