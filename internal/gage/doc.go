// Package gage holds the pure cores of Neptune's Gage front door: per
// subscriber guaranteed request rates through replicated HTTP gateways
// (issue 12, after Li, Peng, Gopalan and Chiueh, "Performance Guarantee for
// Cluster-Based Internet Services", 2003, called "the paper" below).
//
// Everything here is a deterministic state machine: the caller passes the
// current time and the inputs (arrivals, usage reports, gossip, capacity
// reports) and reads decisions back (which request to dispatch, this
// gateway's share of a reservation, the cluster's capacity). No goroutine,
// no I/O, no clock: the HTTP gateway and the simulator (lab/gagesim) run the
// same code, one on the wall clock and one on virtual time, and the tests
// step a manual time.
//
// The pieces:
//
//   - Vector and Unit: multi-resource usage and the generic request unit
//     (GRU, §3.1), and a request's cost in GRU.
//   - Config, Subscriber, Classifier: who pays for a request (§3.3 picks the
//     Host; the API key and path prefix are Neptune's additions).
//   - Scheduler with three implementations: the paper's credit-based
//     weighted scheduler (NewCredit, §3.4–3.5), an mClock-style tag
//     scheduler as a contender (NewTag) and a single FIFO, the
//     "reservations off" mode (NewFIFO). All three pace dispatches to the
//     capacity per resource the same way (pacer).
//   - Splitter: each gateway's part of a reservation and of the capacity
//     when several gateways run, from gossiped demand (beyond the paper,
//     which had one primary front end).
//   - CapacityEstimator and Admit: the cluster's capacity per resource and
//     in GRPS from measured usage, and reservations checked against it.
//   - Meter: an exponentially decaying rate, the demand each gateway
//     gossips.
//   - Shaper: each reserved subscriber's response bytes paced at its rate
//     on the way out, so that its network usage is smooth over short
//     windows (the gateway's pace_responses; beyond the paper).
//
// None of these types is safe for concurrent use: a shell owns each one
// behind its own lock or goroutine.
package gage
