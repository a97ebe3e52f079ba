package dacsim

import (
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
)

// A caller's view of the nodes' loads between reports (announcements and
// its own poll answers), for the loads section's contenders that try to
// undo the flocking of stale loads without a message: every call between
// two reports builds its tree from the same loads and piles reductions on
// the nodes that were light, but the caller knows the work its own trees
// committed since. None met the goal (docs/experiments/dac.md).
type loadView interface {
	report(i int, load time.Duration, at time.Time)
	// commit records work a call's tree gave node i at now; done records
	// the call built at committed ended (own work no longer owed).
	commit(i int, work time.Duration, now time.Time)
	done(i int, work time.Duration, committed time.Time)
	// known is every node's load as the caller reckons it at now.
	known(now time.Time) []dac.Known
}

// View is how a caller brings reports up to date (LoadsStale).
type View int

const (
	// ViewShared: loads as reported, one view for every caller, and
	// dac.Estimate's random correction (the paper's §4.5 (2)).
	ViewShared View = iota
	// ViewOwn: each report less this caller's work in flight when it
	// came, plus its work in flight now (ownView).
	ViewOwn
	// ViewFluid: each report drained at one second per second since,
	// plus this caller's work committed since (fluidView).
	ViewFluid
	// ViewSince: the last report plus this caller's work committed after
	// it and still in flight (sinceView).
	ViewSince
)

func (v View) String() string {
	switch v {
	case ViewShared:
		return "shared"
	case ViewOwn:
		return "own"
	case ViewFluid:
		return "fluid"
	case ViewSince:
		return "since"
	}
	return "View(?)"
}

func newView(v View, n int) loadView {
	switch v {
	case ViewOwn:
		return &ownView{base: make([]time.Duration, n), at: make([]time.Time, n), own: make([]time.Duration, n)}
	case ViewFluid:
		return &fluidView{est: make([]time.Duration, n), last: make([]time.Time, n), at: make([]time.Time, n)}
	case ViewSince:
		return &sinceView{base: make([]time.Duration, n), at: make([]time.Time, n), own: make([][]ownWork, n)}
	}
	return nil
}

// ownView: the last report less the caller's work in flight then, plus its
// work in flight now; stale only in what other callers sent.
type ownView struct {
	base []time.Duration
	at   []time.Time
	own  []time.Duration
}

func (o *ownView) report(i int, load time.Duration, at time.Time) {
	if !at.Before(o.at[i]) {
		o.base[i], o.at[i] = load-o.own[i], at
	}
}

func (o *ownView) commit(i int, work time.Duration, _ time.Time) { o.own[i] += work }
func (o *ownView) done(i int, work time.Duration, _ time.Time) {
	o.own[i] = max(o.own[i]-work, 0)
}

func (o *ownView) known(time.Time) []dac.Known {
	out := make([]dac.Known, len(o.base))
	for i := range out {
		if !o.at[i].IsZero() {
			out[i] = dac.Known{Load: max(o.base[i]+o.own[i], 0), At: o.at[i]}
		}
	}
	return out
}

// fluidView: the last report drained at one second per second (the load
// index is time per processor), plus the caller's work committed since.
type fluidView struct {
	est      []time.Duration
	last, at []time.Time
}

func (f *fluidView) drain(i int, now time.Time) {
	if now.After(f.last[i]) {
		f.est[i] = max(f.est[i]-now.Sub(f.last[i]), 0)
		f.last[i] = now
	}
}

func (f *fluidView) report(i int, load time.Duration, at time.Time) {
	if !at.Before(f.at[i]) {
		f.est[i], f.last[i], f.at[i] = load, at, at
	}
}

func (f *fluidView) commit(i int, work time.Duration, now time.Time) {
	f.drain(i, now)
	f.est[i] += work
}

func (f *fluidView) done(int, time.Duration, time.Time) {}

func (f *fluidView) known(now time.Time) []dac.Known {
	out := make([]dac.Known, len(f.est))
	for i := range out {
		if !f.at[i].IsZero() {
			f.drain(i, now)
			out[i] = dac.Known{Load: f.est[i], At: f.at[i]}
		}
	}
	return out
}

// sinceView: the last report plus the caller's work committed after it
// and not yet returned. Work committed before a report is in it; unlike
// ownView, a report that arrives late (carried back with a call's
// results) is not mistaken for one taken when it arrives.
type sinceView struct {
	base []time.Duration
	at   []time.Time
	own  [][]ownWork
}

type ownWork struct {
	at   time.Time
	work time.Duration
}

func (v *sinceView) report(i int, load time.Duration, at time.Time) {
	if at.Before(v.at[i]) {
		return
	}
	v.base[i], v.at[i] = load, at
	v.own[i] = slices.DeleteFunc(v.own[i], func(w ownWork) bool { return !w.at.After(at) })
}

func (v *sinceView) commit(i int, work time.Duration, now time.Time) {
	if !now.Before(v.at[i]) {
		v.own[i] = append(v.own[i], ownWork{now, work})
	}
}

func (v *sinceView) done(i int, work time.Duration, committed time.Time) {
	if k := slices.Index(v.own[i], ownWork{committed, work}); k >= 0 {
		v.own[i] = slices.Delete(v.own[i], k, k+1)
	}
}

func (v *sinceView) known(time.Time) []dac.Known {
	out := make([]dac.Known, len(v.base))
	for i := range out {
		if v.at[i].IsZero() {
			continue
		}
		l := v.base[i]
		for _, w := range v.own[i] {
			l += w.work
		}
		out[i] = dac.Known{Load: l, At: v.at[i]}
	}
	return out
}

// reckoned is the loads a caller builds from: its view's, a node never
// reported read as the mean of those reported.
func reckoned(known []dac.Known) []time.Duration {
	var sum time.Duration
	n := 0
	for _, kn := range known {
		if kn.Seen() {
			sum, n = sum+kn.Load, n+1
		}
	}
	var mean time.Duration
	if n > 0 {
		mean = sum / time.Duration(n)
	}
	out := make([]time.Duration, len(known))
	for i, kn := range known {
		out[i] = kn.Load
		if !kn.Seen() {
			out[i] = mean
		}
	}
	return out
}
