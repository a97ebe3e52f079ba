package gagebench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/gagesim"
	"github.com/neptune-cluster/neptune/lab/report"
)

// fileProfile serves work.file, an answer of as many bytes as the request
// names: a web server's static files, network-bound. The pace section's
// own profile.
var fileProfile = profile{path: "/file", service: "work", method: "file", scale: 1, declared: true,
	body: func(Config) []byte { return work.EncodeBytes(1000) },
	what: func(Config) string { return "work.file answering SPECweb99-like file sizes" }}

// bytesPerGRU is a generic request's network bytes: the files are
// network-bound, so a reservation in GRPS is so many bytes a second.
var bytesPerGRU = gage.DefaultUnit[gage.Net]

// backlogWait is the gateways' max_wait in the pace and deviation
// sections: a request waits for its turn however long (within the request
// timeout) instead of being refused, so that every subscriber always has
// work waiting, as in the simulation.
const backlogWait = 5 * time.Second

// paceBin is the width of the bins the received bytes are counted in.
const paceBin = 10 * time.Millisecond

// pace is Fig 6 on real processes: four subscribers (300:200:150:100 GRPS
// at scale 0.2, the simulation's) fetch files of the trace mix, each
// asking 1.5x its reservation, from a gateway whose declared capacity is
// exactly the reservations. The bytes each receives are counted as they
// arrive; the deviation from its reservation's network rate (reservation x
// 2,000 B/s) is averaged over subscribers and windows, for the credit
// scheduler sending whole responses and the same with pace_responses.
func (e *env) pace(ctx context.Context) ([]*report.Check, error) {
	// As in the simulation, a request waits for its turn however long
	// (within the request timeout) instead of being refused after
	// max_wait: the figure is of subscribers that always have work
	// waiting, and a 500 ms bound empties a small subscriber's queue after
	// each of its large files (one is half a second of a 100 GRPS
	// reservation), leaving its reservation unused.
	saved, savedWait := e.prof, e.cfg.MaxWait
	e.prof, e.cfg.MaxWait = fileProfile, backlogWait
	defer func() { e.prof, e.cfg.MaxWait = saved, savedWait }()
	k := e.cfg.Scale * 5
	subs := []subscriberSpec{{"s1", 300 * k}, {"s2", 200 * k}, {"s3", 150 * k}, {"s4", 100 * k}}
	capacity := 0.0
	for _, s := range subs {
		capacity += s.res
	}
	var cs []contender
	var procs []*proc
	defer func() { stopAll(procs, 5*time.Second) }()
	for _, c := range []struct{ name, extra string }{{"whole", ""}, {"paced", "pace_responses: true\n"}} {
		p, err := startGateway(ctx, e.exe, e.dir, "pace-"+c.name, e.gatewayConfig("credit", capacity, subs, c.extra), e.cl.SecurityArgs(""), e.cfg.Procs)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := e.waitReady(ctx, p.http, subs); err != nil {
			return nil, err
		}
		cs = append(cs, contender{name: c.name, target: p, gateway: p})
	}
	if bench.Sleep(ctx, settle); ctx.Err() != nil {
		return nil, ctx.Err()
	}
	cell := 2 * e.cfg.Cell
	wins := []time.Duration{time.Second, 4 * time.Second}
	devs := make([][][]float64, len(cs)) // [contender][window] |deviation| samples
	pooled := make([]*cellResult, len(cs))
	transfers := make([][]time.Duration, len(cs)) // of answers over 10 KB
	for r := range e.cfg.Rounds {
		for i, c := range cs {
			fmt.Fprintf(e.w, "  [pace round %d/%d: %s]\n", r+1, e.cfg.Rounds, c.name)
			nb := int((e.cfg.Warmup + cell + 2*time.Second) / paceBin)
			bins := make([][]atomic.Int64, len(subs))
			t0 := time.Now()
			var flows []flow
			for j, s := range subs {
				bins[j] = make([]atomic.Int64, nb)
				flows = append(flows, flow{sub: s.name, host: host(s.name), rate: 1.5 * s.res * bytesPerGRU / gagesim.TraceMeanFileSize,
					body: func(r *rand.Rand) []byte { return work.EncodeBytes(int(gagesim.TraceFileSize(r))) },
					received: func(at time.Time, n int) {
						if b := int(at.Sub(t0) / paceBin); b >= 0 && b < nb {
							bins[j][b].Add(int64(n))
						}
					}})
			}
			cr, err := e.runCell(ctx, c, flows, cell, e.cfg.Seed+uint64(r))
			if err != nil {
				return nil, err
			}
			if pooled[i] == nil {
				pooled[i] = &cellResult{}
			}
			pooled[i].add(cr)
			from := (cr.from.Sub(t0) + paceBin - 1) / paceBin * paceBin
			if devs[i] == nil {
				devs[i] = make([][]float64, len(wins))
			}
			for j, s := range subs {
				d := binned(bins[j], paceBin)
				for w, win := range wins {
					devs[i][w] = append(devs[i][w], d.deviations(from, from+cell, win, s.res*bytesPerGRU)...)
				}
			}
			for _, o := range cr.outs {
				if o.code == 200 && o.transfer > 0 && !o.due.Before(cr.from) {
					transfers[i] = append(transfers[i], o.transfer)
				}
			}
		}
	}
	fmt.Fprintf(e.w, "Fig 6 on real processes: four subscribers (%s GRPS) fetch SPECweb99-like files through a credit gateway, each asking 1.5x;\n", joinRes(subs))
	fmt.Fprintf(e.w, "declared capacity %.0f GRPS = the reservations. Deviation: mean over subscribers and windows of |bytes received / (reservation x 2000 B/s) - 1|,\n", capacity)
	fmt.Fprintf(e.w, "%d x %v per contender. Transfer: an answer's first bytes to its last, at the client.\n", e.cfg.Rounds, cell)
	t := report.NewTable("contender", "1 s", "4 s", "GRPS served", "transfer p50", "p99", "max")
	for i, c := range cs {
		ts := slices.Sorted(slices.Values(transfers[i]))
		total := 0.0
		for _, s := range subs {
			total += pooled[i].servedGRPS(s.name)
		}
		p50, p99, top := report.Percentile(ts, 50), report.Percentile(ts, 99), time.Duration(0)
		if len(ts) > 0 {
			top = ts[len(ts)-1]
		}
		t.Add(c.name, pct(report.Mean(devs[i][0])), pct(report.Mean(devs[i][1])), fmt.Sprintf("%.1f", total),
			p50.Round(time.Millisecond).String(), p99.Round(time.Millisecond).String(), top.Round(time.Millisecond).String())
	}
	t.Print(e.w)
	fmt.Fprintln(e.w)
	d1, d4 := report.Mean(devs[1][0]), report.Mean(devs[1][1])
	ch := paceVerdict(d1, d4, report.Mean(devs[0][0]))
	return []*report.Check{starvedDoubts(ch, pooled[1], "the paced gateway's cells")}, nil
}

// delivered is what one subscriber was delivered over a cell: total[i]
// by at[i] after the cell's start (at ascending), and, if parts is not
// nil, parts[i] of each resource, of which the amount delivered between
// two samples is that of the bottleneck, the resource most used.
type delivered struct {
	at    []time.Duration
	total []float64
	parts [][gage.NumResources]float64
}

// amount is what was delivered from sample i to sample j.
func (d delivered) amount(i, j int) float64 {
	if d.parts == nil {
		return d.total[j] - d.total[i]
	}
	a := 0.0
	for r := range d.parts[i] {
		a = max(a, d.parts[j][r]-d.parts[i][r])
	}
	return a
}

// rate is the rate delivered from the first sample at or after from to
// the last at or before to, per second; NaN if that is no span.
func (d delivered) rate(from, to time.Duration) float64 {
	i, _ := slices.BinarySearch(d.at, from)
	j, found := slices.BinarySearch(d.at, to)
	if !found {
		j--
	}
	if i >= j || j >= len(d.at) {
		return math.NaN()
	}
	return d.amount(i, j) / (d.at[j] - d.at[i]).Seconds()
}

// binned is the series of amounts counted in bins of width from the
// cell's start.
func binned(bins []atomic.Int64, width time.Duration) delivered {
	d := delivered{at: make([]time.Duration, len(bins)+1), total: make([]float64, len(bins)+1)}
	for b := range bins {
		d.at[b+1], d.total[b+1] = time.Duration(b+1)*width, d.total[b]+float64(bins[b].Load())
	}
	return d
}

// deviations cuts [from, to] into consecutive windows, the first starting
// at the first sample at or after from, each ending at whichever of the
// two samples around win after its start is nearer (none after it: no
// window), and returns |rate / want - 1| of each window that ends by to,
// the rate per second over the window's actual length: a sample read
// early or late (a poll) makes a window a little shorter or longer, not
// its rate wrong, and the error does not add up over windows.
func (d delivered) deviations(from, to, win time.Duration, want float64) []float64 {
	var out []float64
	i, _ := slices.BinarySearch(d.at, from)
	for i < len(d.at) {
		end := d.at[i] + win
		j, _ := slices.BinarySearch(d.at, end)
		if j > i+1 && j < len(d.at) && end-d.at[j-1] < d.at[j]-end {
			j--
		}
		if j == len(d.at) || d.at[j] > to {
			break
		}
		rate := d.amount(i, j) / (d.at[j] - d.at[i]).Seconds()
		out = append(out, math.Abs(rate/want-1))
		i = j
	}
	return out
}

// paceVerdict judges Fig 6's goal on the paced gateway: deviation at most
// 5% at 1 s windows and 2% at 4 s; whole responses' figure is printed
// beside it.
func paceVerdict(d1, d4, whole1 float64) *report.Check {
	c := &report.Check{Goal: "Fig 6 deviation through the gateway with pace_responses: <= 5% at 1 s and <= 2% at 4 s windows",
		Met:      d1 <= 0.05 && d4 <= 0.02,
		Measured: fmt.Sprintf("%s at 1 s, %s at 4 s (whole responses: %s at 1 s)", pct(d1), pct(d4), pct(whole1))}
	return c.Doubt(math.IsNaN(d1) || math.IsNaN(d4), "no window was measured")
}

func joinRes(subs []subscriberSpec) string {
	s := ""
	for i, x := range subs {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%.0f", x.res)
	}
	return s
}
