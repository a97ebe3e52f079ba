package replica

// Replica-set changes while serving (issue 17): Raft's single-server
// membership changes, in the replicated log.
//
// The replica set is a list of Peers (voters and learners). A change is a
// configuration entry in the log (Method ConfigMethod, Body the whole new
// list), which each replica uses as soon as it is in its log, committed or
// not; if a new primary's log overwrites it, the replica set reverts with
// it. A primary logs a change only when the last one committed and an
// entry of its own epoch committed (Raft's fix for single-server changes
// after a leader change), so any two sets in use at once differ by one
// replica and their majorities intersect: the commit, election, lease and
// grace arguments of replica.go hold across the change. Only voters count
// for MinLive (commits, live set, votes, leases, check-quorum); a new
// replica joins as a learner that receives the log (or a snapshot) but
// counts for nothing and serves nothing, and the primary promotes it by a
// second entry once it holds the log up to the commit point. A removed
// replica is dropped at once from every count; the primary still sends it
// appends until the removal commits and a little longer, so that it learns
// it was removed (Status.Removed) and its node stops hosting it. The
// primary itself is removed by a leadership transfer first: its TimeoutNow
// asks the target to remove it once elected.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ConfigMethod is the Method of a configuration entry. The shell executes
// no handler for it (like a no-op); services cannot declare it (the NUL).
const ConfigMethod = "\x00neptune.members"

// IsConfig reports whether e is a configuration entry.
func (e Entry) IsConfig() bool { return e.Method == ConfigMethod }

// ConfState is a replica set and the LSN of the configuration entry that
// set it (0: the static Config.Replicas).
type ConfState struct {
	LSN     LSN
	Members []Peer
}

// Change is an operator's replica-set change: add Add (as a learner,
// promoted once caught up) with Priority, or remove Remove. With
// SetPriority, Add names a member whose priority becomes Priority (the
// primary hands its role to a live in-sync member of higher priority
// than its own, so this moves the primary role for good).
//
// Expect, if set, is the replica set (ids, any order) the change was
// planned against: an automatic planner acting on a view that may be
// stale (or two of them acting at once) changes nothing unless the set
// is still the one it saw.
type Change struct {
	Add      ID
	Priority int
	Remove   ID
	Expect   []ID
	// SetPriority: change Add's priority instead of adding it.
	SetPriority bool
}

var (
	// ErrChangeInFlight: another change (or a leadership transfer, or the
	// new primary's first commit) is under way; nothing was logged, and
	// the same change may be asked for again shortly.
	ErrChangeInFlight = errors.New("replica: a replica-set change is in flight")
	// ErrChangeRefused: the change cannot be made as asked; nothing was
	// logged.
	ErrChangeRefused = errors.New("replica: replica-set change refused")
)

// EncodeMembers is the Body of a configuration entry.
func EncodeMembers(ms []Peer) []byte {
	b, _ := json.Marshal(ms) // (a []Peer always encodes)
	return b
}

// DecodeMembers reads a configuration entry's Body.
func DecodeMembers(b []byte) ([]Peer, error) {
	var ms []Peer
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("replica: configuration entry: %w", err)
	}
	return ms, nil
}

// EncodeConfState is cs as the write log stores it.
func EncodeConfState(cs ConfState) []byte {
	b, _ := json.Marshal(cs) // (always encodes)
	return b
}

// DecodeConfState reads what EncodeConfState wrote.
func DecodeConfState(b []byte) (ConfState, error) {
	var cs ConfState
	err := json.Unmarshal(b, &cs)
	return cs, err
}

func hasMember(ms []Peer, id ID) bool {
	return slices.ContainsFunc(ms, func(p Peer) bool { return p.ID == id })
}

func isVoterIn(ms []Peer, id ID) bool {
	return slices.ContainsFunc(ms, func(p Peer) bool { return p.ID == id && !p.Learner })
}

// leaver is a peer removed from the replica set that still gets appends
// (until: zero while its removal is not committed).
type leaver struct {
	prio  int
	until time.Time
}

// members is the current replica set: the newest configuration entry in
// the log, or the committed set.
func (r *Replica) members() ConfState {
	if n := len(r.confLog); n > 0 {
		return r.confLog[n-1]
	}
	return r.committed
}

// minLive is MinLive for the current replica set.
func (r *Replica) minLive() int {
	if r.fixedQuorum {
		return r.cfg.MinLive
	}
	return len(r.voters)/2 + 1
}

// isVoter reports whether id votes in the current replica set.
func (r *Replica) isVoter(id ID) bool { return r.voters[id] }

// Peers lists the other replicas this one exchanges messages with (the
// current set's and, at a primary, replicas removed a moment ago), for
// the shell's liveness feed. The caller must not modify it.
func (r *Replica) Peers() []ID { return r.peers }

// Committed is the committed replica set; a snapshot carries it.
func (r *Replica) Committed() ConfState { return r.committed }

// noteConfEntries records the configuration entries of es, just appended
// after any replaced suffix from es[0].LSN on, and reports whether the
// current replica set may have changed.
func (r *Replica) noteConfEntries(es []Entry) bool {
	changed := false
	if n := len(r.confLog); n > 0 && len(es) > 0 && r.confLog[n-1].LSN >= es[0].LSN {
		r.confLog = slices.DeleteFunc(r.confLog, func(c ConfState) bool { return c.LSN >= es[0].LSN })
		changed = true
	}
	for _, e := range es {
		if !e.IsConfig() || e.LSN <= r.committed.LSN {
			continue
		}
		ms, err := DecodeMembers(e.Body)
		if err != nil {
			continue // (never written so: only EncodeMembers writes them)
		}
		r.confLog = append(r.confLog, ConfState{LSN: e.LSN, Members: ms})
		changed = true
	}
	return changed
}

// noteCommitted moves configuration entries the commit point now covers
// into the committed set, which the next Ready persists.
func (r *Replica) noteCommitted() {
	moved := false
	for len(r.confLog) > 0 && r.confLog[0].LSN <= r.commit {
		r.committed = r.confLog[0]
		r.confLog = r.confLog[1:]
		moved = true
	}
	if moved {
		r.rd.ConfState = &ConfState{LSN: r.committed.LSN, Members: r.committed.Members}
		r.applyConf()
	}
}

// applyConf derives priorities, voters, peers (members and leavers) and,
// at a primary, their progress from the current replica set.
func (r *Replica) applyConf() {
	cur := r.members().Members
	self := r.cfg.ID
	prev := r.inConf
	r.inConf = map[ID]bool{}
	for _, p := range cur {
		r.inConf[p.ID] = true
	}
	if r.role == Primary {
		// Peers that just left the set keep getting appends for a while.
		for id := range prev {
			if !r.inConf[id] && id != self {
				r.leaving[id] = leaver{prio: r.prio[id]}
			}
		}
	}
	r.prio, r.voters, r.peers, r.voterPeers = map[ID]int{}, map[ID]bool{}, nil, nil
	for _, p := range cur {
		r.prio[p.ID] = p.Priority
		delete(r.leaving, p.ID)
		if !p.Learner {
			r.voters[p.ID] = true
		}
		if p.ID == self {
			continue
		}
		r.peers = append(r.peers, p.ID)
		if !p.Learner {
			r.voterPeers = append(r.voterPeers, p.ID)
		}
	}
	if _, ok := r.prio[self]; !ok {
		r.prio[self] = 0
	}
	ids := make([]ID, 0, len(r.leaving))
	for id := range r.leaving {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic
	for _, id := range ids {
		r.prio[id] = r.leaving[id].prio
		r.peers = append(r.peers, id)
	}
	for id := range r.alive {
		if !slices.Contains(r.peers, id) && id != self {
			delete(r.alive, id)
		}
	}
	for _, id := range r.peers {
		if _, ok := r.alive[id]; !ok {
			r.alive[id] = true
		}
	}
	if r.role != Primary {
		return
	}
	for id, pr := range r.progress {
		if !slices.Contains(r.peers, id) {
			delete(r.progress, id)
		} else if !r.voters[id] {
			pr.inSync = false // learners and leavers are never in the live set
		}
	}
	for _, id := range r.peers {
		if r.progress[id] == nil || (prev != nil && !prev[id] && r.inConf[id]) {
			// (A replica added again starts afresh: its node may have
			// dropped it, and must be told to host it again: Members.)
			r.progress[id] = &progress{next: r.last() + 1, lastAck: r.now}
		}
	}
}

// ChangeMembers asks the primary for a replica-set change. It returns nil
// when the change was logged (or is already made: asking again is safe)
// or, to remove the primary itself, when the leadership transfer that
// comes first started; Status.Members shows when it took effect and
// MembersPending when it committed. An added replica joins as a learner
// and is promoted to voter by the primary once it caught up.
func (r *Replica) ChangeMembers(now time.Time, ch Change) error {
	r.observe(now)
	switch {
	case r.cfg.Level == Level1:
		return fmt.Errorf("%w: level 1 has no primary to order changes", ErrChangeRefused)
	case r.fixedQuorum:
		return fmt.Errorf("%w: MinLive is set explicitly (%d); the replica set stays static", ErrChangeRefused, r.cfg.MinLive)
	case (ch.Add == "") == (ch.Remove == ""):
		return fmt.Errorf("%w: name one replica to add or to remove", ErrChangeRefused)
	case r.role != Primary:
		if r.primaryLive(now) {
			return &NotPrimaryError{Primary: r.primary}
		}
		return ErrNoPrimary
	}
	cur := r.members().Members
	if ch.Expect != nil && !sameIDs(cur, ch.Expect) {
		return fmt.Errorf("%w: the replica set is %v, not the expected %v", ErrChangeRefused, peerIDs(cur), ch.Expect)
	}
	if ch.SetPriority {
		i := slices.IndexFunc(cur, func(p Peer) bool { return p.ID == ch.Add })
		switch {
		case ch.Add == "" || ch.Remove != "":
			return fmt.Errorf("%w: a priority change names one member (Add) and nothing to remove", ErrChangeRefused)
		case i < 0:
			return fmt.Errorf("%w: %s is not a member", ErrChangeRefused, ch.Add)
		case cur[i].Priority == ch.Priority:
			return nil
		}
		if err := r.changeReady(); err != nil {
			return err
		}
		next := slices.Clone(cur)
		next[i].Priority = ch.Priority
		r.appendConf(now, next)
		return nil
	}
	if ch.Add != "" {
		if hasMember(cur, ch.Add) {
			return nil
		}
		if err := r.changeReady(); err != nil {
			return err
		}
		r.appendConf(now, append(slices.Clone(cur), Peer{ID: ch.Add, Priority: ch.Priority, Learner: true}))
		return nil
	}
	if !hasMember(cur, ch.Remove) {
		return nil
	}
	if err := r.changeReady(); err != nil {
		return err
	}
	if ch.Remove == r.cfg.ID {
		return r.leave(now)
	}
	next := slices.DeleteFunc(slices.Clone(cur), func(p Peer) bool { return p.ID == ch.Remove })
	if r.voters[ch.Remove] {
		// Refuse a removal that would leave the new set without a live
		// majority: commits would stop until a removed replica is back.
		live, voters := 1, 0
		for _, p := range next {
			if !p.Learner {
				voters++
				if p.ID != r.cfg.ID && r.progress[p.ID].inSync {
					live++
				}
			}
		}
		if live < voters/2+1 {
			return fmt.Errorf("%w: without %s only %d of %d voters are live, fewer than a majority", ErrChangeRefused, ch.Remove, live, voters)
		}
	}
	r.appendConf(now, next)
	return nil
}

// sameIDs reports whether ps are exactly the replicas ids name.
func sameIDs(ps []Peer, ids []ID) bool {
	if len(ps) != len(ids) {
		return false
	}
	for _, id := range ids {
		if !hasMember(ps, id) {
			return false
		}
	}
	return true
}

func peerIDs(ps []Peer) []ID {
	out := make([]ID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// changeReady reports whether the primary may log a change now: the last
// one committed, an entry of its own epoch committed, no transfer.
func (r *Replica) changeReady() error {
	if len(r.confLog) > 0 || r.commit < r.ownFrom || r.transferTo != "" {
		return ErrChangeInFlight
	}
	return nil
}

// appendConf logs a configuration entry with the replica set ms.
func (r *Replica) appendConf(now time.Time, ms []Peer) {
	r.appendLocal(now, Write{Method: ConfigMethod, Body: EncodeMembers(ms)})
	r.maybeCommit(now) // (a primary alone commits at once)
}

// leave starts the leadership transfer that removes this primary: to the
// in-sync voter with the highest priority, whose TimeoutNow asks it to
// remove us once elected.
func (r *Replica) leave(now time.Time) error {
	target := ID("")
	for _, p := range r.voterPeers {
		if r.alive[p] && r.progress[p].inSync && (target == "" || r.prio[p] > r.prio[target]) {
			target = p
		}
	}
	if target == "" {
		return fmt.Errorf("%w: the primary has no in-sync replica to hand over to before it leaves", ErrChangeRefused)
	}
	r.transferTo, r.leaveOnTransfer = target, true
	r.transferEnd = now.Add(r.cfg.ElectionTimeout)
	r.maybeSendTimeoutNow(now)
	return nil
}

// tickConfig is the primary's part of changes on each tick: it removes
// the primary that handed over to it to leave, promotes a learner that
// caught up, and stops sending to replicas removed a while ago.
func (r *Replica) tickConfig(now time.Time) {
	for id, l := range r.leaving {
		switch {
		case hasMember(r.committed.Members, id):
		case l.until.IsZero():
			r.leaving[id] = leaver{prio: l.prio, until: now.Add(r.cfg.AckTimeout)}
		case !now.Before(l.until):
			delete(r.leaving, id)
			r.applyConf()
		}
	}
	if r.changeReady() != nil {
		return
	}
	cur := r.members().Members
	if id := r.removeAfter; id != "" {
		r.removeAfter = ""
		if hasMember(cur, id) && id != r.cfg.ID {
			r.appendConf(now, slices.DeleteFunc(slices.Clone(cur), func(p Peer) bool { return p.ID == id }))
			return
		}
	}
	r.maybePromote(now)
}

// probeRemoved is what a replica with data does while it hears from no
// primary and elects none: it may have been removed without learning it
// (it missed the entry, or its commit), and the primaries of a set that
// lacks it send it nothing. So it asks the voters it knows; a primary
// answers a replica outside its set with its committed set
// (noticeRemoved), and members ignore it. A probe is a vote request
// marked Reject, with the sender's log (see announceEmpty, noteData).
func (r *Replica) probeRemoved() {
	for _, p := range r.voterPeers {
		r.send(Message{Type: MsgVote, To: p, Reject: true, LSN: r.last(), Commit: r.commit})
	}
}

// noticeRemoved answers a message from a replica outside the replica set
// (removed, while it campaigns or probes): a primary tells it the
// committed set, which does not name it.
func (r *Replica) noticeRemoved(m Message) {
	if r.role != Primary || m.Type == MsgAppendResp || r.committed.LSN == 0 || hasMember(r.committed.Members, m.From) {
		return
	}
	r.send(Message{Type: MsgAppend, To: m.From, Members: r.committed.Members, MembersAt: r.committed.LSN})
}

// learnRemoved takes a primary's committed replica set that does not
// name this replica (noticeRemoved): it was removed, for good, unless a
// newer set this replica knows names it again.
func (r *Replica) learnRemoved(m Message) {
	if m.MembersAt <= r.committed.LSN {
		return
	}
	r.stepDown()
	r.committed = ConfState{LSN: m.MembersAt, Members: slices.Clone(m.Members)}
	r.confLog = slices.DeleteFunc(r.confLog, func(c ConfState) bool { return c.LSN <= m.MembersAt })
	r.rd.ConfState = &ConfState{LSN: r.committed.LSN, Members: r.committed.Members}
	r.applyConf()
}

// maybePromote promotes a learner that holds the log up to the commit
// point (the primary asks at each tick and at each of the learner's
// answers: under a stream of writes the commit point moves on between
// ticks, but an answer is the moment the learner is caught up).
func (r *Replica) maybePromote(now time.Time) {
	if r.role != Primary || r.changeReady() != nil {
		return
	}
	cur := r.members().Members
	for i, p := range cur {
		if !p.Learner || p.ID == r.cfg.ID {
			continue
		}
		// It joins the live set at once (it holds everything committed),
		// and only if that keeps the live set a majority of the larger
		// set: a promotion must not stall commits behind a straggler.
		pr := r.progress[p.ID]
		if r.alive[p.ID] && pr.match > 0 && pr.match >= r.commit && !pr.snapshotting(now) && r.liveCount()+1 >= (len(r.voters)+1)/2+1 {
			next := slices.Clone(cur)
			next[i].Learner = false
			r.appendConf(now, next)
			pr.inSync = true
			return
		}
	}
}
