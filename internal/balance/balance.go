// Package balance holds the load-balancing policies that pick a replica for
// each call. Policies are pure: they take the time and a random source as
// inputs and do no I/O, so the node (which sends the UDP polls) and the
// discrete-event simulator (which models them) drive the same code.
package balance

import (
	"time"
)

// Load is what a replica reported about itself, either in answer to a poll or
// pushed by the replica (broadcast).
type Load struct {
	Replica string
	// Queue is the load index: active plus queued requests.
	Queue int
	// RTT is how long the poll took to answer; zero for pushed loads.
	RTT time.Duration
}

// Plan says what the caller must do before Choose: poll the listed replicas
// and wait at most Wait for their answers, or only until Enough of them are
// in (0 means all). An empty Poll means no polling. Answers that arrive after
// the choice go to Report.
//
// Probe lists replicas to poll asynchronously: the caller sends those polls
// and chooses at once, without waiting for them; every answer goes to
// Report, for later calls. It is how the async policy keeps polling off the
// call path.
//
// Subscribe lists replicas whose load the caller keeps subscribed to: the
// replicas push it whenever it changes, for a lease the caller renews
// while calls are made, and each push goes to Report. Nothing waits for a
// push; it is how the push policy learns loads with no poll at all.
type Plan struct {
	Poll      []string
	Wait      time.Duration
	Enough    int
	Probe     []string
	Subscribe []string
}

// Policy chooses a replica for one call.
//
// A Policy is not safe for concurrent use; the caller serialises access.
// Replicas are identified by opaque strings (node IDs in a cluster, indices
// in the simulator); candidates are never empty.
type Policy interface {
	// Plan returns the polls to send before choosing.
	Plan(now time.Time, candidates []string) Plan
	// Choose picks the replica given the poll answers that arrived before
	// the plan's deadline (possibly none).
	Choose(now time.Time, candidates []string, answers []Load) string
	// Sent records that a request went to replica.
	Sent(now time.Time, replica string)
	// Done records that a request to replica finished after latency.
	Done(now time.Time, replica string, latency time.Duration)
	// Report records a load the replica pushed (broadcast) or that another
	// part of the client learned out of band.
	Report(now time.Time, l Load)
}
