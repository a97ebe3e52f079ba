package replica

// The secondary: matching and applying the primary's appends, and asking for a snapshot when it cannot.

import (
	"math"
	"time"
)

// matches reports whether our log holds the primary's entry (l, ep), and
// whether it shows that our log differs at or below our commit point.
func (r *Replica) matches(l LSN, ep Epoch) (ok, diverged bool) {
	switch {
	case l == 0:
		return true, false
	case l <= r.commit:
		// Committed entries are the same everywhere, unless a forced
		// promote made them differ: check what we still know of ours.
		if t := r.term(l); ep != 0 && t != 0 && t != ep {
			return false, true
		}
		return true, false
	case l < r.first:
		return true, false
	case l > r.last():
		return false, false
	case ep == 0:
		return true, false // the primary truncated it, so it is committed
	}
	return r.term(l) == ep, false
}

// diverge marks this replica's log as differing from its primary's below
// its commit point: it stops serving and acknowledging entries, and asks
// its primary for a snapshot, which repairs it (InstallSnapshot).
func (r *Replica) diverge() {
	r.diverged = true
	r.role, r.phase, r.inSync = Recovering, PhaseCatchUp, false
}

// askSnapshot answers the primary's append m with a request for a
// snapshot (see Message.Snapshot).
func (r *Replica) askSnapshot(now time.Time, m Message) {
	hint := LSN(0)
	if r.diverged {
		hint = max(r.commit, 1)
	}
	r.answer(now, m, Message{Reject: true, Snapshot: true, LSN: m.PrevLSN, Hint: hint})
}

func (r *Replica) handleAppend(now time.Time, m Message) {
	if m.Epoch < r.epoch {
		r.send(Message{Type: MsgAppendResp, To: m.From, Reject: true, Hint: r.commit})
		return
	}
	if r.role == Primary {
		// Two primaries in one epoch happen only with MinLive*2 <= n (the
		// paper's no-partition mode); the higher priority keeps the role.
		if r.prio[m.From] < r.prio[r.cfg.ID] {
			return
		}
		r.stepDown()
	}
	r.electing, r.preVoting = false, false
	if gap := now.Sub(r.lastHeard); r.primary == m.From && gap <= 2*r.cfg.AckTimeout {
		// (A longer gap was an outage, a cut or a pause, not jitter: it
		// must not slow the detection of the next one.)
		r.noteGap(now, gap)
	}
	r.lastHeard = now
	// Voter grace: this primary may count on us for its lease from m.Sent.
	r.contactAt, r.contactFrom = now, m.From
	if m.Epoch != r.contactEpoch {
		r.contactEpoch, r.contactSent = m.Epoch, 0
	}
	if r.contactSent == math.MaxInt64 && !now.Before(r.unknownUntil) {
		r.contactSent = 0
	}
	if !m.Transfer {
		r.contactSent = max(r.contactSent, m.Sent)
	}
	if r.primary != m.From {
		r.primary = m.From
		// A new primary's partition runs on data: what peers said of
		// theirs before is stale (a replica without data says so again).
		clear(r.empty)
		r.empty[m.From] = false
		clear(r.behind)
		for _, w := range r.waiting {
			r.rd.Replies = append(r.rd.Replies, Reply{ReqID: w.w.ReqID, Err: &NotPrimaryError{Primary: m.From}})
		}
		r.waiting = nil
	}
	r.noteEcho(m)
	if r.diverged || (r.dataless() && m.PrevLSN > 0) {
		// Nothing of ours can be acknowledged (diverged), or we hold
		// nothing while the primary holds data: void what it knows of us.
		// A heartbeat that overtook a fresh partition's first entries
		// lands here too; the primary then resends them from 1.
		r.askSnapshot(now, m)
		return
	}
	if len(m.Entries) == 0 && m.PrevLSN > r.last() {
		// A heartbeat that overtook the entries before it (they travel in
		// another lane, and a large batch takes a while): it proves the
		// primary live, which is all it is for. A reject would make the
		// primary send those entries again behind the ones in flight; if
		// they were lost, its retransmission after retransmitAfter without
		// progress repairs the gap. The answer (LSN 0) renews its lease.
		r.answer(now, m, Message{Hint: r.applied})
		return
	}
	// The epoch of the primary's commit point, where we hold that entry
	// committed too, must be ours.
	if m.Commit <= r.commit && m.LastEpoch != 0 {
		if t := r.term(m.Commit); t != 0 && t != m.LastEpoch {
			r.diverge()
			r.askSnapshot(now, m)
			return
		}
	}
	ok, diverged := r.matches(m.PrevLSN, m.PrevEpoch)
	if diverged {
		r.diverge()
		r.askSnapshot(now, m)
		return
	}
	if !ok {
		hint := r.commit
		if m.PrevLSN > r.last() {
			hint = r.last()
		}
		r.answer(now, m, Message{Reject: true, LSN: m.PrevLSN, Hint: hint})
		return
	}
	var es []Entry
	for _, e := range m.Entries {
		if len(es) == 0 && e.LSN <= r.commit {
			if t := r.term(e.LSN); t != 0 && t != e.Epoch {
				r.diverge() // a committed entry of ours differs
				r.askSnapshot(now, m)
				return
			}
			continue // already held
		}
		if len(es) == 0 && (e.LSN < r.first || (e.LSN <= r.last() && r.entry(e.LSN).Epoch == e.Epoch)) {
			continue // already held
		}
		es = append(es, e)
	}
	r.logAppend(es)
	matched := m.PrevLSN + LSN(len(m.Entries))
	if c := min(m.Commit, matched); c > r.commit {
		r.commit = c
		r.hsDirty = true
		r.noteCommitted()
	}
	if t := min(m.Trunc, r.applied); t > r.truncated {
		r.truncateTo(t)
	}
	r.inSync = m.InSync
	if r.inSync {
		r.role, r.phase = Secondary, PhaseServing
	} else {
		r.role, r.phase = Recovering, PhaseCatchUp
	}
	r.answer(now, m, Message{LSN: matched, Hint: r.applied})
}
