package dac

import "time"

// StagedDeadlines assigns every participant the time by which it must send
// its partial result (§4.4). The Caller's deadline is end; a node x whose
// parent y has deadline D_y gets D_x = D_y − a·R_x − δ, where R_x ≥ 1 is
// x's rank among its siblings by ascending subtree size. A parent therefore
// still has time to reduce what its children sent and forward it before its
// own deadline, so a node that never answers costs only its own subtree —
// one partition when it is a leaf, as LAT makes slow servers. a is the
// estimated cost of one reduction and δ covers network and queueing
// overheads per hop.
//
// Unlike the paper, which gives the tree's root the call's deadline, the
// root here is staged below the Caller like any other node, so that the
// call itself returns by end.
func StagedDeadlines(t Tree, end time.Time, a, delta time.Duration) []time.Time {
	d := make([]time.Time, t.Len())
	var walk func(y int, dy time.Time)
	walk = func(y int, dy time.Time) {
		for rank, x := range t.Kids(y) {
			d[x] = dy.Add(-time.Duration(rank+1)*a - delta)
			walk(x, d[x])
		}
	}
	walk(Caller, end)
	return d
}

// UniformDeadlines gives every participant the call's deadline, the
// baseline of §4.4: a node that waits for a silent child until end sends too
// late for its own parent, so the loss climbs towards the root.
func UniformDeadlines(t Tree, end time.Time) []time.Time {
	d := make([]time.Time, t.Len())
	for i := range d {
		d[i] = end
	}
	return d
}
