package gagebench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

// startContenders starts one gateway process per scheduler and, with
// withNginx, nginx limiting each subscriber to its reservation in front
// of a FIFO gateway of its own; stop ends them all (stopAll).
func (e *env) startContenders(ctx context.Context, section string, schedulers []string, withNginx bool, capacity float64, subs []subscriberSpec) (cs []contender, stop func(), err error) {
	var procs []*proc
	stop = func() { stopAll(procs, 5*time.Second) }
	defer func() {
		if err != nil {
			stop()
		}
	}()
	for _, s := range schedulers {
		name := map[string]string{"credit": "gage", "tag": "mclock", "fifo": "fifo"}[s]
		p, err := startGateway(ctx, e.exe, e.dir, section+"-"+name, e.gatewayConfig(s, capacity, subs, ""), e.cl.SecurityArgs(""), e.cfg.Procs)
		if err != nil {
			return nil, stop, err
		}
		procs = append(procs, p)
		if err := e.waitReady(ctx, p.http, subs); err != nil {
			return nil, stop, err
		}
		cs = append(cs, contender{name: name, target: p, gateway: p})
	}
	if !withNginx {
		return cs, stop, nil
	}
	if e.nginx == "" {
		return append(cs, contender{name: "nginx", missing: fmt.Sprintf("nginx not found (%q): install it or pass --nginx", e.cfg.Nginx)}), stop, nil
	}
	up, err := startGateway(ctx, e.exe, e.dir, section+"-nginx-upstream", e.gatewayConfig("fifo", capacity, subs, ""), e.cl.SecurityArgs(""), e.cfg.Procs)
	if err != nil {
		return nil, stop, err
	}
	procs = append(procs, up)
	var limits []nginxLimit
	for _, s := range subs {
		// A request costs about one GRU: the reservation in requests.
		limits = append(limits, nginxLimit{name: s.name, host: host(s.name), perMinute: int(math.Round(s.res * 60)),
			burst: max(1, int(math.Ceil(s.res*e.cfg.MaxWait.Seconds())))})
	}
	ng, err := startNginx(ctx, e.nginx, e.dir, section+"-nginx", up.http, limits)
	if err != nil {
		return nil, stop, err
	}
	procs = append(procs, ng)
	if err := e.waitReady(ctx, ng.http, subs); err != nil {
		return nil, stop, err
	}
	return append(cs, contender{name: "nginx", target: ng, gateway: up}), stop, nil
}

// printCosts prints what a request cost as each contender's gateway
// measured it.
func (e *env) printCosts(cs []contender, res []*cellResult, sub string) {
	fmt.Fprintf(e.w, "GRU per request of %s (the nodes' measure):", sub)
	for j, c := range cs {
		if res[j] != nil {
			fmt.Fprintf(e.w, " %s %.3f;", c.name, res[j].costOf(sub))
		}
	}
	fmt.Fprintln(e.w)
	// Every cell's machine, not only a starved one's: how far the run was
	// from the bound (bench.OtherWork) that would leave it undecided.
	fmt.Fprintf(e.w, "The machine, worst cell (INCONCLUSIVE above %.2f cores of other work):", bench.OtherWork)
	for j, c := range cs {
		if res[j] != nil {
			fmt.Fprintf(e.w, " %s: %s;", c.name, res[j].starve)
		}
	}
	fmt.Fprintln(e.w)
}

// settle is the pause between starting a section's contenders and its
// first cell.
const settle = time.Second

// rounds runs every contender's cell in each round, the same arrivals
// (seed) for all of a round, and pools the rounds.
func (e *env) rounds(ctx context.Context, section string, cs []contender, mkFlows func() []flow) ([]*cellResult, error) {
	// The contenders just joined the membership; their joins are gossiped
	// to every member before the first cell measures the machine.
	if bench.Sleep(ctx, settle); ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res := make([]*cellResult, len(cs))
	for r := range e.cfg.Rounds {
		for i, c := range cs {
			if c.target == nil {
				continue
			}
			fmt.Fprintf(e.w, "  [%s round %d/%d: %s]\n", section, r+1, e.cfg.Rounds, c.name)
			cr, err := e.runCell(ctx, c, mkFlows(), e.cfg.Cell, e.cfg.Seed+uint64(r))
			if err != nil {
				return nil, err
			}
			if res[i] == nil {
				res[i] = &cellResult{}
			}
			res[i].add(cr)
		}
	}
	return res, nil
}

// table1 is isolation: three subscribers in the paper's 250:150:50
// proportion; the two within their reservations ask 90% of it, the small
// one 8× its reservation.
func (e *env) table1(ctx context.Context) ([]*report.Check, error) {
	s := e.cfg.Scale * e.prof.scale
	subs := []subscriberSpec{{"site1", 250 * s}, {"site2", 150 * s}, {"site3", 50 * s}}
	capacity := 600 * s
	asks := []float64{0.9 * subs[0].res, 0.9 * subs[1].res, 8 * subs[2].res}
	cs, stop, err := e.startContenders(ctx, "t1", []string{"credit", "tag", "fifo"}, true, capacity, subs)
	if err != nil {
		return nil, err
	}
	defer stop()
	flows := func() []flow {
		var fs []flow
		for i, sb := range subs {
			fs = append(fs, flow{sub: sb.name, host: host(sb.name), rate: asks[i]})
		}
		return fs
	}
	res, err := e.rounds(ctx, "table1", cs, flows)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(e.w, "Table 1: isolation. Declared capacity %.0f GRPS; site3 asks 8x its reservation (asks/s: the Poisson rate; asked/s: what came in the window). GRPS served by the gateway's count over %d x %v; got%% = answered 200 of what was asked in it.\n",
		capacity, e.cfg.Rounds, e.cfg.Cell)
	fmt.Fprintf(e.w, "nginx: limit_req per Host at the reservation (1 request ~ 1 GRU), burst = reservation x max_wait, in front of a FIFO gateway.\n")
	header := []string{"subscriber", "reserved", "asks/s"}
	for _, c := range cs {
		header = append(header, c.name+" asked/s", "GRPS", "drop/s", "got%")
	}
	t := report.NewTable(header...)
	for i, sb := range subs {
		row := []string{sb.name, fmt.Sprintf("%.1f", sb.res), fmt.Sprintf("%.1f", asks[i])}
		for j := range cs {
			r := res[j]
			if r == nil {
				row = append(row, "-", "-", "-", "-")
				continue
			}
			tl := r.counts[sb.name]
			if tl == nil {
				tl = &tally{}
			}
			row = append(row, fmt.Sprintf("%.1f", float64(tl.asked)/r.secs), fmt.Sprintf("%.1f", r.servedGRPS(sb.name)), fmt.Sprintf("%.1f", float64(tl.dropped)/r.secs), pct(ratio(float64(tl.ok), float64(tl.asked))))
		}
		t.Add(row...)
	}
	t.Print(e.w)
	e.printCosts(cs, res, "site1")
	var main *report.Check
	for j, c := range cs {
		ch := isolationVerdict(c.name, []string{"site1", "site2"}, "site3", res[j], e.cfg.GoalGot)
		if c.missing != "" {
			ch.Doubt(true, "%s", c.missing)
		}
		if j == 0 {
			main = ch
			continue
		}
		fmt.Fprintf(e.w, "(%s on the same goal: %s)\n", c.name, ch)
	}
	fmt.Fprintln(e.w)
	return []*report.Check{main}, nil
}

// isolationVerdict judges Table 1's goal on one contender's pooled cells:
// each of within got at least goal of what it asked, none dropped or
// failed; flood was dropped.
func isolationVerdict(name string, within []string, flood string, r *cellResult, goal float64) *report.Check {
	c := &report.Check{Goal: fmt.Sprintf("Table 1 isolation through %s: the subscribers within reservation get >= %.0f%% of what they ask, none dropped; only the flood is dropped", name, 100*goal)}
	if r == nil {
		return c.Doubt(true, "no cell ran")
	}
	met := true
	var parts []string
	for _, s := range within {
		t := r.counts[s]
		if t == nil || t.asked == 0 {
			c.Doubt(true, "%s asked nothing", s)
			continue
		}
		got := float64(t.ok) / float64(t.asked)
		met = met && got >= goal && t.dropped == 0 && t.other == 0
		parts = append(parts, fmt.Sprintf("%s got %s, %d dropped, %d failed", s, pct(got), t.dropped, t.other))
	}
	ft := r.counts[flood]
	if ft == nil {
		ft = &tally{}
	}
	met = met && ft.dropped > 0
	parts = append(parts, fmt.Sprintf("%s %d dropped", flood, ft.dropped))
	c.Met, c.Measured = met, strings.Join(parts, "; ")
	return starvedDoubts(c, r, name+"'s cells")
}

// table2 is spare sharing: two subscribers over their reservations
// (250:200) of a capacity of 700 (the paper's served total, about 760),
// asking alike (2x and 2.5x their reservations), so a FIFO splits the
// capacity by demand and Gage the spare by reservation.
func (e *env) table2(ctx context.Context) ([]*report.Check, error) {
	s := e.cfg.Scale * e.prof.scale
	subs := []subscriberSpec{{"site1", 250 * s}, {"site2", 200 * s}}
	capacity := 700 * s
	asks := []float64{2 * subs[0].res, 2.5 * subs[1].res}
	cs, stop, err := e.startContenders(ctx, "t2", []string{"credit", "tag", "fifo"}, false, capacity, subs)
	if err != nil {
		return nil, err
	}
	defer stop()
	res, err := e.rounds(ctx, "table2", cs, func() []flow {
		return []flow{{sub: "site1", host: host("site1"), rate: asks[0]}, {sub: "site2", host: host("site2"), rate: asks[1]}}
	})
	if err != nil {
		return nil, err
	}
	want := subs[0].res / subs[1].res
	fmt.Fprintf(e.w, "Table 2: spare sharing. Declared capacity %.0f GRPS; both over their reservations; spare = served - reserved (GRPS). Paper: 1.21 against 1.25.\n", capacity)
	header := []string{"subscriber", "reserved", "asked/s"}
	for _, c := range cs {
		header = append(header, c.name+" GRPS", "spare")
	}
	t := report.NewTable(header...)
	spares := make([][2]float64, len(cs))
	for i, sb := range subs {
		row := []string{sb.name, fmt.Sprintf("%.1f", sb.res), fmt.Sprintf("%.1f", asks[i])}
		for j := range cs {
			g := res[j].servedGRPS(sb.name)
			spares[j][i] = g - sb.res
			row = append(row, fmt.Sprintf("%.1f", g), fmt.Sprintf("%.1f", g-sb.res))
		}
		t.Add(row...)
	}
	row := []string{"spare ratio", fmt.Sprintf("%.2f", want), ""}
	for j := range cs {
		row = append(row, "", fmt.Sprintf("%.3f", ratio(spares[j][0], spares[j][1])))
	}
	t.Add(row...)
	t.Print(e.w)
	e.printCosts(cs, res, "site1")
	var main *report.Check
	for j, c := range cs {
		ch := spareVerdict(c.name, spares[j][0], spares[j][1], want, e.cfg.GoalSpare)
		starvedDoubts(ch, res[j], c.name+"'s cells")
		if j == 0 {
			main = ch
			continue
		}
		fmt.Fprintf(e.w, "(%s on the same goal: %s)\n", c.name, ch)
	}
	fmt.Fprintln(e.w)
	return []*report.Check{main}, nil
}

// spareVerdict judges Table 2's goal: the spare ratio within tol of the
// reservation ratio want. With no spare on either side there is nothing
// to split (the capacity was never reached): the run cannot decide.
func spareVerdict(name string, spare1, spare2, want, tol float64) *report.Check {
	got := ratio(spare1, spare2)
	off := math.Abs(got/want - 1)
	c := report.AtMost(fmt.Sprintf("Table 2 spare sharing through %s: spare split within %.0f%% of the reservation ratio %.2f", name, 100*tol, want),
		off, tol, fmt.Sprintf("%.3f (%+.1f%%)", got, 100*(got/want-1)))
	return c.Doubt(spare1 <= 0 && spare2 <= 0, "neither subscriber got spare (%.1f, %.1f GRPS): nothing to split", spare1, spare2)
}
