package replica

import (
	"math"
	"slices"
	"time"
)

// The primary: appending, sending, committing, and what it learns from its followers.

func (r *Replica) appendLocal(now time.Time, w Write) {
	e := Entry{Epoch: r.epoch, LSN: r.last() + 1, Method: w.Method, Body: w.Body, Origin: r.cfg.ID, ReqID: w.ReqID,
		WriteID: w.WriteID, Time: now.UnixNano()}
	if w.ReqID != 0 {
		r.pending[w.ReqID] = true
	}
	r.logAppend([]Entry{e})
	for _, p := range r.peers {
		if pr := r.progress[p]; r.alive[p] && pr.next == e.LSN && pr.windowOpen(r.cfg.MaxInflightBytes) {
			r.sendAppend(now, p)
		}
	}
}

func (r *Replica) becomePrimary(now time.Time) {
	// Every voter's log is at most as recent as ours (mayGrant), so ours
	// holds every committed write: nothing to adopt.
	r.electing, r.preVoting = false, false
	clear(r.empty) // stale once we lead (see handleAppend)
	clear(r.behind)
	r.role, r.phase, r.primary, r.inSync = Primary, PhaseServing, r.cfg.ID, true
	r.progress = map[ID]*progress{}
	for _, p := range r.peers {
		_, granted := r.grants[p]
		r.progress[p] = &progress{next: r.last() + 1, inSync: granted && r.isVoter(p), lastAck: now}
	}
	clear(r.grants)
	// Honest freshness: our log holds every committed write, so
	// its last LSN, not our commit point (which may lag what the old
	// primary acknowledged), is the version clients may already have seen.
	r.history = []versionAt{{at: now, lsn: r.last()}}
	r.became, r.leaseFloor = now, time.Time{}
	r.transferTo, r.timeoutSent = "", time.Time{}
	r.nextTransfer = now.Add(r.cfg.ElectionTimeout)
	if now.Before(r.promoteUntil) {
		// The operator's choice (Promote) stands over priority for this
		// term: no transfer to a preferred replica.
		r.nextTransfer = time.Unix(1<<62, 0)
	}
	r.promoteUntil = time.Time{}
	r.contactEpoch, r.contactSent, r.contactFrom = r.epoch, math.MaxInt64, r.cfg.ID
	r.ownFrom = r.last() + 1
	r.appendLocal(now, Write{}) // the no-op that commits predecessors' entries
	for _, p := range r.peers {
		if r.alive[p] && r.progress[p].next <= r.last() {
			r.sendAppend(now, p)
		}
	}
	ws := r.waiting
	r.waiting = nil
	for _, w := range ws {
		r.appendLocal(now, w.w)
	}
	r.maybeCommit(now)
}

// sendAppend sends peer the next entries it lacks (or a heartbeat while
// its window is full or a snapshot is on its way).
func (r *Replica) sendAppend(now time.Time, to ID) { r.appendTo(now, to, true) }

// heartbeat sends peer to an append without entries: it proves this
// primary live, renews its lease and carries the commit point. It never
// waits behind entries (the shell sends it in its control lane), and it
// leaves the peer's progress as it is.
func (r *Replica) heartbeat(now time.Time, to ID) { r.appendTo(now, to, false) }

// appendTo sends peer an append: with entries, the next ones it lacks (as
// many as the batch and its in-flight window allow), recorded in its
// progress; without, a heartbeat at the log's end.
func (r *Replica) appendTo(now time.Time, to ID, entries bool) {
	pr := r.progress[to]
	// While a snapshot is on its way the peer gets heartbeats only (they
	// keep it following us and renew our lease): the entries it needs
	// come after the snapshot.
	beat := !entries || pr.snapshotting(now)
	next := r.last() + 1 // a heartbeat: PrevLSN at the log's end
	if entries {
		next = max(pr.next, r.first)
		pr.next = next
	}
	if beat {
		next = r.last() + 1
	}
	end := min(r.last(), next+LSN(r.cfg.MaxBatch)-1)
	if !beat && !pr.windowOpen(r.cfg.MaxInflightBytes) {
		// Paced: as many bytes as the window holds are on their way; this
		// is a heartbeat (PrevLSN at or past the peer's log end is taken
		// as one) until acknowledgements open the window again.
		end = next - 1
	}
	var es []Entry
	if next <= end {
		es = slices.Clone(r.log[next-r.first : end+1-r.first])
		es = es[:r.batchLen(es)]
		end = next + LSN(len(es)) - 1
	}
	var echo int64
	if now.Before(r.leaseUntil()) {
		echo = pr.ackStamp
	}
	m := Message{Type: MsgAppend, To: to, PrevLSN: next - 1, PrevEpoch: r.term(next - 1), Entries: es,
		Commit: r.commit, LastEpoch: r.term(r.commit), Trunc: r.truncPoint(), InSync: pr.inSync,
		Sent: r.stamp(now), Echo: echo, Transfer: !r.timeoutSent.IsZero()}
	if !pr.inSync && hasMember(r.committed.Members, to) {
		// It may not host the partition (a replica just added, or added
		// back while its node dropped the removed one): this tells its
		// node to create it, with the set that names it.
		m.Members, m.MembersAt = r.committed.Members, r.committed.LSN
	}
	r.send(m)
	if beat {
		return
	}
	pr.next = max(next, end+1)
	if len(es) > 0 {
		size := 0
		for _, e := range es {
			size += e.size()
		}
		pr.flight = append(pr.flight, flight{last: end, bytes: size})
		pr.flightBytes += size
		if pr.waitingSince.IsZero() {
			pr.waitingSince = now
		}
	}
}

// batchLen is how many of es, from the first, fit MaxBatchBytes (at least
// one: a single large entry still goes alone).
func (r *Replica) batchLen(es []Entry) int {
	size := 0
	for i, e := range es {
		size += e.size()
		if i > 0 && size > r.cfg.MaxBatchBytes {
			return i
		}
	}
	return len(es)
}

// retransmitAfter is how long a peer may acknowledge nothing new before
// the primary resends its unacknowledged entries: longer than a heartbeat,
// so one large batch still in flight is not sent twice, and well inside
// AckTimeout, so a lost one is repaired before the peer counts as failed.
func (r *Replica) retransmitAfter() time.Duration {
	return max(r.cfg.Heartbeat, r.cfg.AckTimeout/2)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// truncPoint is the highest LSN every replica holds and this one executed.
func (r *Replica) truncPoint() LSN {
	t := r.applied
	for _, p := range r.peers {
		t = min(t, r.progress[p].match)
	}
	return t
}

// straggleAfter is how long an in-sync follower may keep the commit
// point waiting while every other in-sync voter has acknowledged more.
func (r *Replica) straggleAfter() time.Duration { return 3 * r.cfg.Heartbeat }

// straggling reports whether in-sync follower p alone holds the commit
// point back: it has been waiting for p's acknowledgement straggleAfter,
// and every other in-sync voter (and this primary's own log) holds more
// than p acknowledged. Commits wait for every replica of the live set, so
// on a lossy link one follower whose connection stalls (a lost TCP
// segment waits 200 ms and more for its retransmission) would stall
// every write for up to AckTimeout, time after time (issue 28). It
// leaves the live set instead, as a late one does, and rejoins at its
// first acknowledgement of the commit point; the live set never shrinks
// below MinLive (the caller checks).
func (r *Replica) straggling(now time.Time, p ID) bool {
	if !r.isVoter(p) {
		// A learner holds no commit back; dropping it from sync each time
		// it trails by an entry kept a learner under steady writes from
		// ever being promoted (TestGrowthSpreadsReplicasAndPrimaries).
		return false
	}
	pr := r.progress[p]
	if pr.waitingSince.IsZero() || now.Sub(pr.waitingSince) < r.straggleAfter() || r.stable <= pr.match {
		return false
	}
	for _, q := range r.voterPeers {
		if qr := r.progress[q]; q != p && qr.inSync && qr.match <= pr.match {
			return false
		}
	}
	return true
}

func (r *Replica) liveCount() int {
	n := 1
	for _, p := range r.voterPeers {
		if r.progress[p].inSync {
			n++
		}
	}
	return n
}

func (r *Replica) tickPrimary(now time.Time, beat bool) {
	if r.quorumLost(now) {
		// Check-quorum: no MinLive replicas answered within the lease, so
		// a majority may be electing another primary: stop acting as one.
		r.stepDown()
		return
	}
	r.tickTransfer(now)
	r.tickConfig(now)
	for _, p := range r.peers {
		pr := r.progress[p]
		if !pr.snapUntil.IsZero() && !pr.snapshotting(now) {
			pr.snapUntil = time.Time{} // timed out: asked again at the next sign it needs one
		}
		late := !pr.waitingSince.IsZero() && now.Sub(pr.waitingSince) >= r.cfg.AckTimeout
		if pr.inSync && (!r.alive[p] || late || r.straggling(now, p)) && r.liveCount()-1 >= r.minLive() {
			pr.inSync = false // failed: it must catch up before rejoining
		}
	}
	r.maybeCommit(now)
	if !beat {
		return
	}
	if t := r.truncPoint(); t > r.truncated {
		r.truncateTo(t)
	}
	for _, p := range r.peers {
		pr := r.progress[p]
		if !r.alive[p] && r.isVoter(p) {
			// (Learners and leavers get heartbeats anyway: a node hosts
			// a learner only once an append names it, and a leaver must
			// learn it left, so neither may be heard from before.)
			continue
		}
		// Waiting is counted from the last progress or, after a quiet
		// spell, from when entries were sent again: an old lastAck alone
		// would resend a fresh write at the first heartbeat.
		since := later(later(pr.lastAck, pr.waitingSince), pr.resentAt)
		if pr.match < r.last() && pr.next > pr.match+1 && now.Sub(since) >= r.retransmitAfter() {
			pr.next = pr.match + 1 // no progress: resend what is unacknowledged
			pr.resentAt = now
		}
		r.heartbeat(now, p)
		if pr.next <= r.last() && !pr.snapshotting(now) && pr.windowOpen(r.cfg.MaxInflightBytes) {
			r.sendAppend(now, p)
		}
	}
	r.pruneHistory(now)
}

func (r *Replica) maybeCommit(now time.Time) {
	if r.liveCount() < r.minLive() || r.quorumLost(now) {
		return
	}
	n := r.stable
	for _, p := range r.voterPeers {
		if pr := r.progress[p]; pr.inSync {
			n = min(n, pr.match)
		}
	}
	// Only an entry of our own epoch commits by acknowledgement; earlier
	// ones commit with it (as in Raft), so a later election's most recent
	// log always holds them.
	if n <= r.commit || r.term(n) != r.epoch {
		return
	}
	r.commit = n
	r.hsDirty = true
	r.noteCommitted()
	r.history = append(r.history, versionAt{at: now, lsn: n})
	for _, p := range r.peers {
		if r.alive[p] {
			r.sendAppend(now, p) // tell secondaries promptly: it bounds their staleness
		}
	}
}

func (r *Replica) handleAppendResp(now time.Time, m Message) {
	if r.role != Primary || m.Epoch != r.epoch {
		return
	}
	pr := r.progress[m.From]
	pr.heard = now
	if t := r.unstamp(m.Sent); m.Sent != 0 && t.After(pr.ackSent) && !t.Before(r.leaseFloor) && !t.After(now) {
		pr.ackSent, pr.ackStamp = t, m.Sent
		if r.forced && !r.leaseBase().IsZero() {
			r.forced = false // a quorum answers: check-quorum applies again
		}
	}
	if !m.Reject {
		pr.applied = max(pr.applied, m.Hint)
		if m.LSN == 0 {
			return // contact only
		}
	}
	if !m.Reject && !m.Snapshot && m.Sent < pr.resetSent {
		return // answers an append from before it lost data: stale
	}
	if m.Reject && m.Restarted && m.Trunc < pr.match && m.Sent >= pr.resetSent && !pr.snapshotting(now) {
		// It restarted without entries it had acknowledged (its log ends
		// at Trunc: a torn log tail). Only what it holds committed still
		// counts; it gets the rest from its log's end, or from a snapshot
		// if our log no longer reaches back that far (the snapshot is then
		// past its log's end, so installing it drops nothing it holds).
		pr.match, pr.waitingSince, pr.resetSent = min(m.Commit, m.Trunc), time.Time{}, r.stamp(now)+1
		if pr.inSync && r.liveCount()-1 >= r.minLive() {
			pr.inSync = false
		}
		pr.next = m.Trunc + 1
		if pr.next < r.first {
			r.askShellForSnapshot(now, m.From)
			return
		}
		r.sendAppend(now, m.From)
		return
	}
	if m.Reject && pr.snapshotting(now) {
		return // a snapshot is on its way
	}
	if m.Reject && m.Snapshot {
		r.peerVoid(now, m)
		return
	}
	if m.Reject {
		if m.LSN <= pr.match {
			return // about an append sent before we learned more: stale
		}
		// Back off below the rejected probe, never below what is known to
		// match; pipelined appends would otherwise keep undoing each other.
		pr.next = max(pr.match+1, min(m.Hint+1, m.LSN, r.last()+1))
		if pr.next < r.first {
			// It needs entries this log no longer holds: only a snapshot
			// brings it up to our log's start.
			r.askShellForSnapshot(now, m.From)
			return
		}
		r.sendAppend(now, m.From)
		return
	}
	switch {
	case m.Snapshot:
		// The snapshot's install acknowledgement: appends resume after it.
		pr.snapUntil = time.Time{}
		pr.next = max(m.LSN, pr.match) + 1
	case pr.snapshotting(now):
		return // an ack from before it lost its log: it holds none of it now
	}
	if m.LSN > pr.match {
		pr.match = m.LSN
		pr.acked()
		pr.lastAck = now
		pr.waitingSince = time.Time{}
		if pr.match < r.last() {
			pr.waitingSince = now
		}
	}
	pr.next = max(pr.next, pr.match+1)
	if !pr.inSync && r.alive[m.From] && pr.match >= r.commit && r.isVoter(m.From) {
		pr.inSync = true // caught up: rejoins the live set
	}
	if !r.isVoter(m.From) && r.alive[m.From] {
		r.maybePromote(now)
	}
	r.maybeCommit(now)
	if pr.next <= r.last() && pr.windowOpen(r.cfg.MaxInflightBytes) {
		r.sendAppend(now, m.From)
	}
}

// peerVoid handles a follower's request for a snapshot (Message.Snapshot):
// everything we knew of its log is void, so it leaves the live set and
// holds truncation back; it gets the log from 1 if it has no data and our
// log still starts there, and a snapshot otherwise.
func (r *Replica) peerVoid(now time.Time, m Message) {
	pr := r.progress[m.From]
	if m.LSN < pr.match {
		return // stale: sent before the entries it acknowledged since
	}
	if pr.match > 0 || m.Hint != 0 {
		// It lost entries it acknowledged, or its log diverged: it holds
		// none of ours, so it leaves the live set. (A replica that never
		// acknowledged any, such as a voter on a fresh partition whose
		// first entries a heartbeat overtook, keeps its place.)
		pr.inSync = false
	}
	pr.match, pr.waitingSince, pr.applied, pr.resetSent = 0, time.Time{}, 0, r.stamp(now)+1
	if m.Hint == 0 && r.first <= 1 {
		pr.next = 1
		r.sendAppend(now, m.From)
		return
	}
	pr.next = r.first
	r.askShellForSnapshot(now, m.From)
}
