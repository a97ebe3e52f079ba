package replica

// Leadership transfer: handing the primary role to an in-sync replica (a drain, a full disk, a preferred replica) with TimeoutNow.

import "time"

// tickTransfer hands the primary role to a higher-priority replica once
// it is in sync and has executed everything committed (priority is a
// preference, never a takeover on stale state), and gives up a transfer
// that did not complete within ElectionTimeout.
func (r *Replica) tickTransfer(now time.Time) {
	if r.transferTo != "" {
		if !now.Before(r.transferEnd) {
			r.abortTransfer(now)
		} else if r.timeoutSent.IsZero() {
			r.maybeSendTimeoutNow(now)
		}
		return
	}
	if r.storageFull || r.draining {
		r.handOver(now)
		return
	}
	if now.Before(r.nextTransfer) || r.commit < r.ownFrom {
		return
	}
	target := ID("")
	for _, p := range r.voterPeers {
		if p != r.removeAfter && r.alive[p] && r.prio[p] > r.prio[r.cfg.ID] && (target == "" || r.prio[p] > r.prio[target]) {
			target = p
		}
	}
	if target == "" {
		return
	}
	// Start holding writes back only when the target is nearly there, so
	// a replica that is far behind costs no write stall.
	slack := LSN(r.cfg.MaxBatch)
	if pr := r.progress[target]; pr.inSync && pr.match+slack >= r.last() && pr.applied+slack >= r.commit {
		r.transferTo = target
		r.transferEnd = now.Add(r.cfg.ElectionTimeout)
		r.maybeSendTimeoutNow(now)
	}
}

// SetStorageFull tells the replica whether the shell can store more (its
// disk is below the reserve, or its store failed). While full, a
// replica takes no writes (appends count as heartbeats and a new
// primary's no-ops are taken, so it stays in the live set, serving reads,
// until the first write it cannot take; the primary then drops it, as
// it would after lost messages), no
// snapshot and no election, and refuses a leadership transfer to it; a
// primary hands its role to an in-sync replica as soon as one is caught
// up (it keeps it if none is: no other replica could take over without
// losing acknowledged writes). The shell refuses client writes meanwhile.
func (r *Replica) SetStorageFull(now time.Time, full bool) { r.setLeaving(now, &r.storageFull, full) }

// SetDraining tells the replica its node is leaving (SIGTERM, a rolling
// restart): a primary hands its role to the in-sync live voter of highest
// priority as soon as one is caught up, and the replica stands for no
// election and refuses a transfer to it, so the role does not come back
// before the node is gone. It keeps taking entries meanwhile. A primary
// with no in-sync peer keeps its role (handing it over would lose
// acknowledged writes); the partition elects once the node is gone.
func (r *Replica) SetDraining(now time.Time, on bool) { r.setLeaving(now, &r.draining, on) }

// setLeaving sets one of the conditions under which a replica gives up
// its primary role (storageFull, draining); a primary that newly meets one
// hands its role over.
func (r *Replica) setLeaving(now time.Time, flag *bool, on bool) {
	r.observe(now)
	if *flag == on {
		return
	}
	*flag = on
	if on && r.role == Primary && r.transferTo == "" {
		r.handOver(now)
	}
}

// handOver starts a leadership transfer from a primary that cannot store
// more, or is leaving, to the in-sync live voter of highest priority, if
// any.
func (r *Replica) handOver(now time.Time) {
	target := ID("")
	for _, p := range r.voterPeers {
		if p != r.removeAfter && r.alive[p] && r.progress[p].inSync && (target == "" || r.prio[p] > r.prio[target]) {
			target = p
		}
	}
	if target == "" {
		return
	}
	r.transferTo = target
	r.transferEnd = now.Add(r.cfg.ElectionTimeout)
	r.maybeSendTimeoutNow(now)
}

// maybeSendTimeoutNow sends the target TimeoutNow once it holds our whole
// log, all of it committed, and has executed it. Sending gives the lease
// up: from then on LeaseUntil is zero and appends are marked Transfer.
func (r *Replica) maybeSendTimeoutNow(now time.Time) {
	pr := r.progress[r.transferTo]
	if !r.timeoutSent.IsZero() || r.commit != r.last() || pr.match != r.last() || pr.applied < r.commit {
		return
	}
	r.timeoutSent = now
	r.transferEnd = now.Add(r.cfg.ElectionTimeout)
	r.send(Message{Type: MsgTimeoutNow, To: r.transferTo, Sent: r.stamp(now), Leave: r.leaveOnTransfer})
}

// abortTransfer resumes after a transfer that did not complete. Answers
// to sends from before now grant no lease: voters that received only
// Transfer-marked appends since TimeoutNow may help the target win.
func (r *Replica) abortTransfer(now time.Time) {
	if !r.timeoutSent.IsZero() {
		// Check-quorum counts from when the transfer was due to end, not
		// from now: a primary stopped (SIGSTOP) mid-transfer and woken long
		// after must step down at once, not claim its role for a lease more.
		r.leaseFloor, r.became = now, r.transferEnd
	}
	r.transferTo, r.timeoutSent, r.leaveOnTransfer = "", time.Time{}, false
	r.nextTransfer = now.Add(4 * r.cfg.ElectionTimeout)
	ws := r.waiting
	r.waiting = nil
	for _, w := range ws {
		r.appendLocal(now, w.w)
	}
}

func (r *Replica) handleTimeoutNow(now time.Time, m Message) {
	if r.storageFull || r.draining || m.Epoch != r.epoch || m.From != r.primary || r.role != Secondary || r.diverged || m.Sent == 0 || !r.isVoter(r.cfg.ID) {
		return
	}
	if m.Leave {
		r.removeAfter = m.From
	}
	r.startElection(now, m.Sent)
}
