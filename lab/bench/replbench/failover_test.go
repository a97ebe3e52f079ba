package replbench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// acksEvery acknowledges a write on partition p every step ms in [from, to),
// each sent 1 ms before.
func acksEvery(p, from, to, step int) []writeAck {
	var out []writeAck
	for m := from; m < to; m += step {
		out = append(out, writeAck{sent: at(m - 1), at: at(m), p: p})
	}
	return out
}

func TestMeasureKill(t *testing.T) {
	kc := killCycle{killed: at(1000), restarted: at(3000), settled: at(6000)}
	var acks []writeAck
	acks = append(acks, acksEvery(0, 0, 1000, 10)...)
	// In flight at the kill, acknowledged after it: not a failover.
	acks = append(acks, writeAck{sent: at(995), at: at(1002), p: 0})
	acks = append(acks, acksEvery(0, 1600, 3500, 10)...) // failover 600 ms
	acks = append(acks, acksEvery(0, 4700, 6000, 10)...) // return pause 1.2 s
	acks = append(acks, acksEvery(1, 0, 6000, 10)...)    // the other partition never stops
	in0 := func(a writeAck) bool { return a.p == 0 }
	sortAcks(acks)
	r := measureKill(acks, in0, kc)
	if !r.resumed || r.failover != 600*time.Millisecond {
		t.Errorf("failover %v (resumed %v), want 600ms", r.failover, r.resumed)
	}
	if r.pause != 1210*time.Millisecond {
		t.Errorf("return pause %v, want 1.21s", r.pause)
	}
	// Writes never resumed: the whole cycle, flagged.
	r = measureKill(acksEvery(0, 0, 1000, 10), in0, kc)
	if r.resumed || r.failover != 5*time.Second {
		t.Errorf("never resumed: %+v", r)
	}
}

func sortAcks(a []writeAck) {
	slices.SortFunc(a, func(x, y writeAck) int { return x.at.Compare(y.at) })
}

func TestFailoverVerdicts(t *testing.T) {
	rc := DefaultConfig()
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	quiet := bench.Starvation{Lag: ms(0), Pressure: 0.05}
	cycles := func(n int, lag time.Duration) []killCycle {
		ks := make([]killCycle, n)
		for i := range ks {
			ks[i].starved = bench.Starvation{Lag: lag, Pressure: 0.5, Others: 0.05}
		}
		return ks
	}
	results := func(fos []int, pause int) []failoverResult {
		var rs []failoverResult
		for _, f := range fos {
			rs = append(rs, failoverResult{failover: ms(f), resumed: true, pause: ms(pause)})
		}
		return rs
	}
	good := results([]int{420, 450, 480, 430, 460, 900}, 300)
	if o := report.Outcomes(failoverVerdicts(rc, good, cycles(6, ms(0)), quiet)); o[0] != report.Pass || o[1] != report.Pass || o[2] != report.Pass {
		t.Errorf("good run: %v", failoverVerdicts(rc, good, cycles(6, ms(0)), quiet))
	}
	// The runs: a pause of 1.0-1.25 s while the old primary
	// returns, and a slow failover tail.
	bad := results([]int{600, 650, 700, 420, 2000, 550}, 1250)
	if o := report.Outcomes(failoverVerdicts(rc, bad, cycles(6, ms(0)), quiet)); o[0] != report.Fail || o[1] != report.Fail || o[2] != report.Fail {
		t.Errorf("bad run: %v", failoverVerdicts(rc, bad, cycles(6, ms(0)), quiet))
	}
	// A starved client, or a machine busy before the run: INCONCLUSIVE.
	for _, cs := range [][]*report.Check{
		failoverVerdicts(rc, good, cycles(6, ms(5)), quiet),
		failoverVerdicts(rc, bad, cycles(6, ms(0)), bench.Starvation{Pressure: 0.9, Others: 0.9}),
	} {
		for _, c := range cs {
			if c.Outcome() != report.Inconclusive || !strings.Contains(c.String(), "starved") && !strings.Contains(c.String(), "other work") {
				t.Errorf("starved: %s", c)
			}
		}
	}
	// Writes that never resumed count as their cycle: a FAIL, not a gap.
	never := append(results([]int{420, 430}, 100), failoverResult{failover: 5 * time.Second})
	if c := failoverVerdicts(rc, never, cycles(3, 0), quiet)[1]; c.Outcome() != report.Fail {
		t.Errorf("never resumed: %s", c)
	}
}
