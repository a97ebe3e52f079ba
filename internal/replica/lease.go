package replica

// Leases: the primary's lease from its followers' echoed stamps, the proof of freshness a level-3 read needs, and the grace after a change.

import (
	"cmp"
	"slices"
	"time"
)

// stamp is now as a Message.Sent (never 0, which means none).
func (r *Replica) stamp(now time.Time) int64 { return int64(now.Sub(r.stampBase)) + 1 }

// unstamp is the time a Sent of this replica's stamps.
func (r *Replica) unstamp(sent int64) time.Time { return r.stampBase.Add(time.Duration(sent - 1)) }

// answer sends resp as the answer to the primary's append m, echoing its
// Sent, and notes when (for Message.Echo): the first answer to a Sent,
// the earliest, is the safe one to note.
func (r *Replica) answer(now time.Time, m Message, resp Message) {
	resp.Type, resp.To, resp.Sent = MsgAppendResp, m.From, m.Sent
	switch {
	case resp.Reject && r.restarted:
		resp.Restarted, resp.Commit, resp.Trunc = true, min(r.commit, r.last()), r.last()
	case !resp.Reject && resp.LSN > 0:
		r.restarted = false
	}
	r.send(resp)
	if m.Sent == 0 {
		return
	}
	if m.From != r.ackFrom || m.Epoch != r.ackEpoch {
		r.ackFrom, r.ackEpoch, r.ackTimes = m.From, m.Epoch, r.ackTimes[:0]
	}
	if n := len(r.ackTimes); n > 0 && r.ackTimes[n-1].sent >= m.Sent {
		return // answered before (stamps only grow)
	}
	if len(r.ackTimes) == maxAckTimes { // drop the older half: O(1) per answer
		r.ackTimes = append(r.ackTimes[:0], r.ackTimes[maxAckTimes/2:]...)
	}
	r.ackTimes = append(r.ackTimes, stampAt{sent: m.Sent, at: now})
}

// noteEcho takes a freshness proof from the primary's append m: when the
// primary sent m it held its lease, so no other primary had acknowledged
// anything, and it had received our answer to its append Echo, so every
// write acknowledged before we sent that answer was committed, at or
// below m.Commit. Once we execute m.Commit we are fresh as of then.
func (r *Replica) noteEcho(m Message) {
	if m.Echo == 0 || m.From != r.ackFrom || m.Epoch != r.ackEpoch {
		return
	}
	i, ok := slices.BinarySearchFunc(r.ackTimes, m.Echo, func(a stampAt, s int64) int { return cmp.Compare(a.sent, s) })
	if !ok {
		return
	}
	at := r.ackTimes[i].at
	if n := len(r.freshPending); (n > 0 && !at.After(r.freshPending[n-1].at)) || !at.After(r.freshAt) {
		return
	}
	if len(r.freshPending) == maxAckTimes {
		r.freshPending = r.freshPending[1:]
	}
	r.freshPending = append(r.freshPending, versionAt{at: at, lsn: m.Commit})
}

// freshUntil is Status.FreshUntil: the newest proof this replica has
// executed, plus the staleness bound (shortened by the clock drift, as
// leases are).
func (r *Replica) freshUntil() time.Time {
	if r.role != Secondary || r.diverged || r.freshAt.IsZero() {
		return time.Time{}
	}
	return r.freshAt.Add(leaseFor(r.cfg.Staleness))
}

// leaseBase is the Sent of the newest append that MinLive replicas, this
// one included, have answered (zero: not that many answered since
// leaseFloor). Each of them received it after it was sent and refuses to
// help elect another primary for Lease after that, by its own clock.
func (r *Replica) leaseBase() time.Time {
	need := r.minLive() - 1
	if r.role != Primary {
		return time.Time{}
	}
	if need <= 0 {
		return r.now // alone (the paper's mode): nobody else to ask
	}
	// (On the stack for the usual replica counts: every append asks, via
	// leaseUntil, whether to echo.)
	ts := make([]time.Time, 0, 8)
	for _, p := range r.voterPeers {
		if t := r.progress[p].ackSent; !t.IsZero() && !t.Before(r.leaseFloor) {
			ts = append(ts, t)
		}
	}
	if len(ts) < need {
		return time.Time{}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
	return ts[need-1]
}

// leaseUntil is Status.LeaseUntil: zero unless this replica is a primary
// that has committed an entry of its own epoch (before that its commit
// point may lag what its predecessor acknowledged) and is not handing over.
func (r *Replica) leaseUntil() time.Time {
	if r.role != Primary || !r.timeoutSent.IsZero() || r.commit < r.ownFrom {
		return time.Time{}
	}
	b := r.leaseBase()
	if b.IsZero() {
		return b
	}
	return b.Add(leaseFor(r.cfg.Lease))
}

// quorumLost reports check-quorum's verdict: MinLive replicas, itself
// included, have not all been heard from within Lease (counted from when
// it became primary if not yet). Its lease lapsed before that (an answer
// arrives after the send it echoes, and the lease is 10% shorter), so a
// cut-off primary steps down at most Lease·ClockDrift plus a round trip
// after LeaseUntil: a majority may be electing another. Receive times,
// not Sent, are what counts here, so a primary whose loop was busy (it
// sent nothing new for a while) keeps the role though it lost the lease
// until its next heartbeat is answered. A forced primary is exempt until a
// quorum first answers it (it was promoted because fewer than MinLive
// replicas survive), and so is one handing over, whose transfer ends
// within ElectionTimeout.
func (r *Replica) quorumLost(now time.Time) bool {
	base := r.quorumContact()
	return !base.IsZero() && !now.Before(base.Add(r.cfg.Lease))
}

// quorumContact is what check-quorum counts a primary's Lease from: the
// newest time MinLive replicas, itself included, had all answered (or
// when it became primary, if later); zero when it is exempt (not
// primary, forced, handing over, or needing no one).
func (r *Replica) quorumContact() time.Time {
	if r.role != Primary || r.forced || !r.timeoutSent.IsZero() {
		return time.Time{}
	}
	need := r.minLive() - 1
	if need <= 0 {
		return time.Time{}
	}
	var ts []time.Time
	for _, p := range r.voterPeers {
		if h := r.progress[p].heard; !h.IsZero() {
			ts = append(ts, h)
		}
	}
	base := r.became
	if len(ts) >= need {
		slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
		base = later(base, ts[need-1])
	}
	return base
}

// inGrace reports whether this replica heard from a primary within Lease:
// that primary may still hold a lease, so it helps elect nobody else.
func (r *Replica) inGrace(now time.Time) bool {
	return !noGrace && now.Before(r.contactAt.Add(r.cfg.Lease))
}

// noGrace turns the voter grace off. Only a test sets it, to show that
// the harness's lease checker then finds two primaries with a lease.
var noGrace bool
