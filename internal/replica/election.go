package replica

// Elections: when to stand (silence limits), pre-votes, votes and who may lead.

import (
	"cmp"
	"time"
)

// shouldElect reports whether this replica should try to become primary:
// no live primary, its own grace over, and (unless an operator's Promote
// is pending) no live higher-priority peer that could lead instead.
// Priority never deposes a live primary: that is a leadership transfer.
func (r *Replica) shouldElect(now time.Time) bool {
	if r.electing || r.preVoting || r.diverged || r.storageFull || r.draining || !r.isVoter(r.cfg.ID) {
		return false
	}
	if r.primaryLive(now) || r.inGrace(now) {
		return false
	}
	promoting := now.Before(r.promoteUntil)
	if !promoting && r.primary == "" && now.Sub(r.lastHeard) < r.cfg.ElectionTimeout {
		return false // give a running primary time to reach us first
	}
	self := r.prio[r.cfg.ID]
	dataless := r.dataless()
	for _, q := range r.voterPeers {
		if !r.alive[q] {
			continue
		}
		empty, known := r.empty[q]
		if dataless && known && !empty {
			// A replica without data never leads a partition that has
			// data elsewhere: it waits for that peer's primary.
			return false
		}
		if !promoting && r.prio[q] > self && !(known && empty && !dataless) && !r.behind[q] {
			// A higher-priority peer without data, or with a less recent
			// log, cannot win against us (we refuse it our vote), so it
			// does not hold us back; once it has caught up under the
			// primary we elect, a leadership transfer hands it the role.
			return false
		}
	}
	return true
}

// dataless reports whether this replica holds no data at all: no log
// entry, no commit point, nothing executed. That is a brand-new replica,
// or one whose data directory was lost. Such a replica may only be elected
// by, and only vote for, replicas without data either: on a fresh
// partition all of them are, so one is still elected, but once a partition
// has data a replica that lost it neither leads (it would serve empty
// state and overwrite acknowledged writes) nor counts as a voter (a vote
// promises the voter holds every write it acknowledged, §5.2.2's
// intersection argument).
func (r *Replica) dataless() bool {
	return r.last() == 0 && r.commit == 0 && r.applied == 0
}

// noteData records what a message shows of its sender's data.
func (r *Replica) noteData(m Message) {
	switch m.Type {
	case MsgAppend:
		r.empty[m.From] = false
	case MsgAppendResp:
		if m.LSN > 0 && !m.Reject {
			r.empty[m.From] = false
		}
	case MsgVote, MsgPreVote:
		r.empty[m.From] = m.LSN == 0 && m.Commit == 0
	case MsgVoteResp, MsgPreVoteResp:
		if !m.Granted && (m.LSN > 0 || m.Commit > 0) {
			r.empty[m.From] = false
		}
	}
}

// primaryLive reports whether a primary is known, alive per membership and,
// if it is another replica, heard from within AckTimeout. The silence test
// catches a primary that stepped down without membership noticing.
func (r *Replica) primaryLive(now time.Time) bool {
	p := r.primary
	return p != "" && r.alive[p] && (p == r.cfg.ID || now.Sub(r.lastHeard) < r.SilenceLimit(now))
}

// gapWindow is how long a gap between a primary's appends is remembered
// (between one and two windows).
const gapWindow = 10 * time.Second

// noteGap records a gap between two appends of the current primary.
func (r *Replica) noteGap(now time.Time, gap time.Duration) {
	if since := now.Sub(r.gapsFrom); since >= gapWindow {
		r.gapPrev = r.gapCur
		if since >= 2*gapWindow {
			r.gapPrev = 0
		}
		r.gapCur, r.gapsFrom = 0, now
	}
	r.gapCur = max(r.gapCur, gap)
}

// SilenceLimit is how long a follower hears nothing from its primary
// before it counts the primary as gone (and the shell's failure detector
// suspects it): AckTimeout, or, where the primary's appends have lately
// come irregularly, three times the longest recent gap between them, at
// most 2·AckTimeout (gaps longer than that are outages and not counted). On a steady link (appends every Heartbeat) it stays
// AckTimeout, so a paused or cut-off primary is found as fast as before;
// on a lossy one, where a lost TCP segment or a stalled process delays a
// few heartbeats, a silence like those already seen is not taken for a
// dead primary (issue 28: an election timeout that adapts to the observed
// inter-arrival times, bounded, as a phi-accrual detector's would).
func (r *Replica) SilenceLimit(now time.Time) time.Duration {
	g := r.gapCur
	if now.Sub(r.gapsFrom) < 2*gapWindow {
		g = max(g, r.gapPrev)
	}
	return min(max(r.cfg.AckTimeout, 3*g), 2*r.cfg.AckTimeout)
}

// startPreVote asks the live peers whether they would vote for us at
// epoch+1, changing nothing anywhere: a replica that cannot reach MinLive
// of them (cut off, or a healthy primary holds them) never raises its
// epoch, so it cannot depose anyone when it returns.
func (r *Replica) startPreVote(now time.Time) {
	r.preVoting = true
	r.preDeadline = now.Add(r.cfg.ElectionTimeout)
	if r.preEpoch != r.epoch+1 {
		r.preEpoch, r.preGrants, r.preAt = r.epoch+1, map[ID]Message{}, map[ID]time.Time{}
	}
	// Grants for the same epoch are kept across rounds (on a slow network
	// they arrive after a round's deadline), but only for ElectionTimeout:
	// a replica cut off since must not run on grants from before the cut.
	for id, at := range r.preAt {
		if now.Sub(at) >= r.cfg.ElectionTimeout {
			delete(r.preGrants, id)
			delete(r.preAt, id)
		}
	}
	if r.mayLead(r.preGrants) {
		r.startElection(now, 0)
		return
	}
	for _, p := range r.voterPeers {
		if r.alive[p] {
			r.sendAt(r.epoch+1, Message{Type: MsgPreVote, To: p, Commit: r.commit, LSN: r.last(), LastEpoch: r.term(r.last())})
		}
	}
}

func (r *Replica) handlePreVoteResp(now time.Time, m Message) {
	if !m.Granted || m.Epoch != r.epoch+1 || m.Epoch != r.preEpoch || r.role == Primary {
		return
	}
	r.preGrants[m.From], r.preAt[m.From] = m, now
	if r.mayLead(r.preGrants) && (r.preVoting || r.shouldElect(now)) {
		r.startElection(now, 0)
	}
}

// startElection raises the epoch and asks for votes. transfer is the
// TimeoutNow's Sent in a leadership transfer (0 otherwise).
func (r *Replica) startElection(now time.Time, transfer int64) {
	r.stepDown()
	r.epoch++
	r.vote = r.cfg.ID
	r.hsDirty = true
	r.electing = true
	r.electDeadline = now.Add(r.cfg.ElectionTimeout)
	r.grants = map[ID]Message{}
	for _, p := range r.voterPeers {
		if r.alive[p] {
			r.send(Message{Type: MsgVote, To: p, Commit: r.commit, LSN: r.last(), LastEpoch: r.term(r.last()),
				Transfer: transfer != 0, Sent: transfer})
		}
	}
	if r.mayLead(r.grants) {
		r.becomePrimary(now)
	}
}

// mayLead reports whether the candidate has the (pre-)votes it needs:
// MinLive of them, its own included; and a candidate without data also
// needs a grant from every live peer (all of them without data too, see
// dataless), so that it never leads over a peer holding data that it
// simply has not heard from yet. Alone in its partition it needs nothing
// more.
func (r *Replica) mayLead(grants map[ID]Message) bool {
	n := 1
	for _, p := range r.voterPeers { // (only the current set's voters count)
		if _, ok := grants[p]; ok {
			n++
		}
	}
	if n < r.minLive() {
		return false
	}
	if !r.dataless() {
		return true
	}
	heard := 0
	for _, p := range r.voterPeers {
		if _, ok := grants[p]; ok {
			heard++
		} else if r.alive[p] {
			return false
		}
	}
	return heard > 0 || len(r.voterPeers) == 0
}

// mayGrant reports whether this replica would vote for m's candidate (a
// pre-vote is answered by the same rules, so it predicts the election).
func (r *Replica) mayGrant(m Message) bool {
	// Data and no data do not vote for each other (see dataless), except
	// that a replica without data may vote for one that knows of no
	// committed write: on a fresh partition whose first primary logged
	// entries nobody else received, refusing would leave it with no
	// primary for good.
	if candEmpty, empty := m.LSN == 0 && m.Commit == 0, r.dataless(); candEmpty != empty && !(empty && m.Commit == 0) {
		return false
	}
	if !r.isVoter(r.cfg.ID) || !r.isVoter(m.From) {
		return false // learners and removed replicas neither vote nor lead
	}
	if r.logNewer(m) {
		return false
	}
	if r.diverged || m.Epoch < r.epoch || (m.Epoch == r.epoch && r.vote != "" && r.vote != m.From) {
		return false
	}
	transfer := m.Type == MsgVote && m.Transfer
	if r.role == Primary {
		// Only the target of our own handover, after we gave the lease up.
		return transfer && m.From == r.transferTo && !r.timeoutSent.IsZero() && m.Epoch == r.epoch+1
	}
	// A transfer vote needs no grace if the primary we last heard from
	// gave its lease up before its last lease-granting append to us: it
	// is the one that handed over (its TimeoutNow's Sent is m.Sent), or
	// older than that one.
	if transfer && (r.contactEpoch+1 < m.Epoch || (r.contactEpoch+1 == m.Epoch && r.contactSent <= m.Sent)) {
		return true
	}
	if r.contactFrom == m.From {
		// The primary we last heard from is the candidate itself: it
		// campaigns, so it no longer acts as primary and its lease is over
		// (leases of earlier primaries expired before it was elected).
		return true
	}
	if p := r.primary; p != m.From && r.primaryLive(r.now) {
		return false // a live primary exists
	}
	return !r.inGrace(r.now)
}

// logNewer reports whether this replica's log is more recent than that of
// the candidate of vote request m, as in Raft (§5.4.1): a later last
// epoch, or the same one and more entries. Refusing such a candidate means
// whoever wins a vote holds every committed write already, so a grant
// carries no log tail: elections never wait for bulk data (a tail of large
// writes could take longer to arrive than an election lasts, and every
// election would start over). A candidate shorter than our commit point
// lacks committed writes whatever its last epoch says (our last entry's
// epoch is unknown after a snapshot).
func (r *Replica) logNewer(m Message) bool {
	if m.LSN < r.commit {
		return true
	}
	return cmp.Or(cmp.Compare(r.term(r.last()), m.LastEpoch), cmp.Compare(r.last(), m.LSN)) > 0
}

func (r *Replica) handleVote(m Message) {
	if m.Reject {
		return // announceEmpty's probe: noteData took what it says
	}
	r.behind[m.From] = r.logNewer(m)
	if m.Type == MsgPreVote {
		if r.mayGrant(m) {
			r.sendAt(m.Epoch, Message{Type: MsgPreVoteResp, To: m.From, Granted: true, LSN: r.last(), Commit: r.commit})
		} else {
			r.send(Message{Type: MsgPreVoteResp, To: m.From, LSN: r.last(), Commit: r.commit})
		}
		return
	}
	if !r.mayGrant(m) {
		r.send(Message{Type: MsgVoteResp, To: m.From, LSN: r.last(), Commit: r.commit})
		return
	}
	r.stepDown()
	r.epoch, r.vote, r.hsDirty = m.Epoch, m.From, true
	r.lastHeard = r.now
	r.send(Message{Type: MsgVoteResp, To: m.From, Granted: true, LSN: r.last(), LastEpoch: r.term(r.last())})
}

func (r *Replica) handleVoteResp(now time.Time, m Message) {
	if !r.electing || m.Epoch != r.epoch || !m.Granted {
		return
	}
	r.grants[m.From] = m
	if r.mayLead(r.grants) {
		r.becomePrimary(now)
	}
}
