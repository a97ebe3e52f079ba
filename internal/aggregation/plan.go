package aggregation

import (
	"math/rand/v2"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// known is a node's last poll answer for a service and when it came.
type known struct {
	answer transport.PollAnswer
	at     time.Time // zero: never answered
}

// view is what a caller knows of one node's load when it plans a call.
type view struct {
	node  string
	known known
	// missed: the node's last poll went unanswered, silent for this long
	// (since its last answer, or since it was first polled).
	missed bool
	silent time.Duration
}

// pickPolls is which nodes a call polls: k of them, those never heard
// from first, the rest at random (dac.PickPolls). A node whose last poll
// went unanswered counts as heard from: it ranks as silent until a random
// poll finds it answering again, rather than costing a poll every call.
func pickPolls(views []view, k int, r *rand.Rand) []string {
	ks := make([]dac.Known, len(views))
	for i, v := range views {
		ks[i] = dac.Known{At: v.known.at}
		if v.missed && ks[i].At.IsZero() {
			ks[i].At = time.Unix(0, 1)
		}
	}
	idx := dac.PickPolls(ks, k, r)
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = views[j].node
	}
	return out
}

// estimate is what the tree builder is told of each node, by id: a silent
// node reads as heavily loaded (probe.server), any other as its last
// answer randomly corrected by its age (dac.Estimate: exact if polled
// now), a node never heard from as the others' mean.
func estimate(now time.Time, views []view, horizon, local, reduce, deadline time.Duration, r *rand.Rand) map[string]dac.Server {
	out := make(map[string]dac.Server, len(views))
	var ks []dac.Known
	var alive []string
	for _, v := range views {
		if v.missed {
			out[v.node] = probe{silent: v.silent}.server(local, reduce, deadline)
			continue
		}
		srv := dac.Server{Local: local, Reduce: reduce}
		kn := dac.Known{}
		if !v.known.at.IsZero() {
			srv = probe{answer: v.known.answer, answered: true}.server(local, reduce, deadline)
			kn = dac.Known{Load: srv.Load, At: v.known.at}
		}
		out[v.node] = srv
		ks = append(ks, kn)
		alive = append(alive, v.node)
	}
	for i, load := range dac.Estimate(ks, now, horizon, r) {
		srv := out[alive[i]]
		srv.Load = load
		out[alive[i]] = srv
	}
	return out
}
