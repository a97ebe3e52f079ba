package replica

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Replica is the state machine of one replica of one partition. It is not
// safe for concurrent use: the shell drives it from one goroutine.
//
// Contract with the shell: after any call, take Ready, process it in the
// order Ready documents, then call Advance(rd) before taking the next Ready.
// Propose, Step, Tick, SetAlive and Checked may be called between Ready and
// Advance; their output goes to the next batch.
type Replica struct {
	cfg   Config
	prio  map[ID]int
	peers []ID // other replicas (members, then leavers), in replica-set order
	alive map[ID]bool

	// The replica set (config.go): committed is the newest committed one,
	// confLog the configuration entries in the log after it; voters and
	// voterPeers (without this replica) are the current set's voters;
	// leaving are peers a primary removed that still get appends for a
	// while. fixedQuorum: Config.MinLive was set, so the set is static.
	committed   ConfState
	confLog     []ConfState
	voters      map[ID]bool
	voterPeers  []ID
	leaving     map[ID]leaver
	inConf      map[ID]bool // the current set's members, as applyConf last saw them
	fixedQuorum bool
	// leaveOnTransfer: the transfer under way removes this primary;
	// removeAfter: the primary that handed over to us so as to leave,
	// which we remove once we may.
	leaveOnTransfer bool
	removeAfter     ID
	probedAt        time.Time // last probeRemoved
	// storageFull: the shell cannot store more (SetStorageFull).
	storageFull bool
	// draining: the node is leaving (SetDraining).
	draining bool

	role    Role
	phase   Phase
	epoch   Epoch
	vote    ID
	primary ID
	inSync  bool // a secondary: the primary counts us in its live set

	log       []Entry // log[i].LSN == first+i
	first     LSN
	prevEpoch Epoch // epoch of entry first-1, when known
	stable    LSN   // highest LSN the shell has persisted
	commit    LSN
	handed    LSN // highest LSN handed to the shell to execute
	applied   LSN // highest LSN the shell executed
	truncated LSN

	now       time.Time
	lastHeard time.Time // last message from a primary (or start)
	// ledUntil is the quorum contact a primary had when it stepped down
	// (Status.Contact).
	ledUntil time.Time
	lastBeat time.Time
	// gaps are the longest gaps between the current primary's appends in
	// the current gapWindow (from gapsFrom) and in the one before it.
	gapsFrom        time.Time
	gapCur, gapPrev time.Duration

	// Primary.
	progress map[ID]*progress
	history  []versionAt
	became   time.Time // when it became primary, or when an aborted transfer was due to end
	ownFrom  LSN       // the no-op that opened its epoch: its lease needs it committed
	forced   bool      // promoted by force: no check-quorum until a quorum answers
	// leaseFloor: answers to sends before it grant no lease (the primary
	// gave its lease up for a transfer at some point before it).
	leaseFloor time.Time
	// Leadership transfer: transferTo is the target while writes are held
	// back; timeoutSent is when TimeoutNow went out (zero: not yet), which
	// gave the lease up; the transfer is abandoned at transferEnd.
	transferTo   ID
	timeoutSent  time.Time
	transferEnd  time.Time
	nextTransfer time.Time

	// Voter grace: contactAt is when this replica last heard from a
	// primary (or started), by its own clock; until contactAt+Lease it
	// helps elect nobody else (that primary may hold a lease). contactSent
	// is the newest lease-granting Sent from the primary of contactEpoch
	// (math.MaxInt64 after a restart: unknown).
	contactAt    time.Time
	contactEpoch Epoch
	contactSent  int64
	contactFrom  ID
	unknownUntil time.Time // contactSent is unknown (restart) until then

	// Pre-vote.
	preVoting   bool
	preDeadline time.Time
	preEpoch    Epoch // the prospective epoch preGrants are for
	preGrants   map[ID]Message
	preAt       map[ID]time.Time // when each pre-vote grant arrived

	// promoteUntil: an operator Promote without force is pending until
	// then (an election that ignores priority but needs a majority).
	promoteUntil time.Time

	// diverged: this replica's log differs from its primary's at or below
	// its commit point (only after a forced promote); it serves and
	// acknowledges nothing until repaired (issue 17: snapshot transfer).
	diverged bool

	// Candidate.
	electing      bool
	electDeadline time.Time
	grants        map[ID]Message

	// empty records, per peer, whether it last showed itself without any
	// data (no log, no commit point: a brand-new or wiped replica) or with
	// some; absent means not known yet. See dataless.
	empty map[ID]bool
	// behind records the peers whose last (pre-)vote request showed a log
	// less recent than ours: they cannot win our vote, so a higher
	// priority among them holds us back from no election (shouldElect).
	behind map[ID]bool

	// Clients.
	pending map[uint64]bool // ReqIDs of writes this replica logged
	waiting []waiter

	// Phase 1.
	checks   []Entry
	checkRes map[LSN]bool

	// Level 1.
	seq    uint64
	vv     map[ID]uint64
	synced map[ID]bool
	// peerVV is each peer's version vector from its last digest; base is
	// the version vector of the truncated log prefix.
	peerVV map[ID]map[ID]uint64
	base   map[ID]uint64

	// Stamps: Message.Sent values are this replica's clock as a duration
	// since stampBase (its first input), so that they keep the monotonic
	// reading when they come back (a wall-clock step moves no lease).
	stampBase time.Time

	// Secondary freshness (Message.Echo): ackTimes notes when this
	// replica answered each recent append of primary ackFrom in epoch
	// ackEpoch, by its Sent; freshPending holds (answer time, primary's
	// commit) proofs not yet executed, freshAt the newest executed one.
	ackTimes     []stampAt
	ackFrom      ID
	ackEpoch     Epoch
	freshPending []versionAt
	freshAt      time.Time
	// restarted: built from stored state and not yet matched a primary's
	// log since (see Message.Restarted).
	restarted bool

	rd      Ready
	hsDirty bool
	started bool
}

type stampAt struct {
	sent int64
	at   time.Time
}

// maxAckTimes bounds the answers a secondary remembers for Echo; an echo
// of an older one proves nothing, which is safe.
const maxAckTimes = 64

type progress struct {
	match, next  LSN
	inSync       bool
	waitingSince time.Time // oldest unacknowledged send, zero if none
	lastAck      time.Time
	// ackSent is the Sent of the newest append it answered (lease),
	// heard when its last answer arrived (check-quorum), and applied the
	// highest LSN it reported executed (transfer).
	ackSent time.Time
	heard   time.Time
	applied LSN
	// ackStamp is ackSent as stamped (what Echo returns).
	ackStamp int64
	// resetSent: the peer was found to hold less than it acknowledged
	// (it lost data) when the appends stamped resetSent went out; answers
	// to earlier appends say nothing of its log any more.
	resetSent int64
	// snapUntil: a snapshot to this peer is in flight until then (asked
	// for in a Ready.Snapshots); meanwhile it gets heartbeats only.
	snapUntil time.Time
	// resentAt: when the unacknowledged entries were last sent again
	// (retransmitAfter counts from it too, or every heartbeat would
	// resend them while the first copy is still on its way).
	resentAt time.Time
	// flight: the appends with entries sent and not yet acknowledged,
	// oldest first, and their bytes (Config.MaxInflightBytes).
	flight      []flight
	flightBytes int
}

// flight is one append with entries on its way: its last LSN and bytes.
type flight struct {
	last  LSN
	bytes int
}

// windowOpen reports whether the peer may be sent more entries now.
// Appends at or after next were superseded (the primary went back to
// resend from there, or the peer got a snapshot): they no longer count.
func (pr *progress) windowOpen(limit int) bool {
	for n := len(pr.flight); n > 0 && pr.flight[n-1].last >= pr.next; n-- {
		pr.flightBytes -= pr.flight[n-1].bytes
		pr.flight = pr.flight[:n-1]
	}
	return pr.flightBytes < limit
}

// acked drops the appends the peer acknowledged (up to match).
func (pr *progress) acked() {
	i := 0
	for i < len(pr.flight) && pr.flight[i].last <= pr.match {
		pr.flightBytes -= pr.flight[i].bytes
		i++
	}
	pr.flight = pr.flight[i:]
	if len(pr.flight) == 0 {
		pr.flight = nil // (let a long catch-up's backing array go)
	}
}

// snapshotting reports whether a snapshot to this peer is in flight.
func (pr *progress) snapshotting(now time.Time) bool { return now.Before(pr.snapUntil) }

type waiter struct {
	w        Write
	deadline time.Time
}

type versionAt struct {
	at  time.Time
	lsn LSN
}

// New returns a replica that starts recovering from rs (the zero Restore for
// a brand-new replica). With a non-empty CHECK range it starts in phase 1.
func New(cfg Config, rs Restore) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fixed := cfg.MinLive != 0
	cfg = cfg.withDefaults()
	r := &Replica{
		cfg:       cfg,
		prio:      map[ID]int{},
		alive:     map[ID]bool{},
		role:      Recovering,
		phase:     PhaseCatchUp,
		epoch:     rs.HardState.Epoch,
		vote:      rs.HardState.Vote,
		commit:    rs.HardState.Commit,
		applied:   rs.Applied,
		handed:    rs.Applied,
		log:       slices.Clone(rs.Entries),
		restarted: len(rs.Entries) > 0 || rs.HardState.Commit > 0 || rs.Applied > 0,
		pending:   map[uint64]bool{},
		progress:  map[ID]*progress{},
		empty:     map[ID]bool{},
		behind:    map[ID]bool{},
		vv:        maps.Clone(rs.Base),
		synced:    map[ID]bool{},
		peerVV:    map[ID]map[ID]uint64{},
		base:      maps.Clone(rs.Base),
		// After a restart we do not know whose lease we helped grant, or
		// until when: the grace runs from the start (see observe).
		contactEpoch: rs.HardState.Epoch,
		contactSent:  math.MaxInt64,
		fixedQuorum:  fixed,
		leaving:      map[ID]leaver{},
		committed:    ConfState{Members: slices.Clone(cfg.Replicas)},
	}
	if rs.ConfState != nil {
		r.committed = ConfState{LSN: rs.ConfState.LSN, Members: slices.Clone(rs.ConfState.Members)}
	}
	if r.vv == nil {
		r.vv, r.base = map[ID]uint64{}, map[ID]uint64{}
	}
	r.first = max(r.applied, r.commit) + 1
	if len(r.log) > 0 {
		r.first = r.log[0].LSN
		for i, e := range r.log {
			if e.LSN != r.first+LSN(i) {
				return nil, fmt.Errorf("replica: restored log not dense at LSN %d", e.LSN)
			}
		}
	}
	if r.applied+1 < r.first {
		return nil, fmt.Errorf("replica: restored log starts at LSN %d after applied LSN %d", r.first, r.applied)
	}
	r.stable = r.last()
	r.truncated = r.first - 1
	r.noteConfEntries(r.log)
	r.noteCommitted()
	r.applyConf()
	checkTo := min(r.commit, r.last())
	if cfg.Level == Level1 {
		for _, e := range r.log {
			if e.Seq == r.vv[e.Origin]+1 {
				r.vv[e.Origin] = e.Seq
			}
		}
		r.seq = r.vv[cfg.ID]
		checkTo = r.last()
		r.commit = r.last()
	}
	if checkTo > r.applied {
		r.phase = PhaseCheck
		r.checks = slices.Clone(r.log[r.applied+1-r.first : checkTo+1-r.first])
		r.checkRes = map[LSN]bool{}
		r.rd.Check = slices.Clone(r.checks)
	}
	return r, nil
}

// Status returns what this replica publishes.
func (r *Replica) Status() Status {
	s := Status{ID: r.cfg.ID, Role: r.role, Phase: r.phase, Epoch: r.epoch, Primary: r.primary,
		Applied: r.applied, Commit: r.commit, Last: r.last()}
	ms := r.members()
	s.Members, s.MembersPending = ms.Members, len(r.confLog) > 0
	s.Removed = !hasMember(ms.Members, r.cfg.ID) && !hasMember(r.committed.Members, r.cfg.ID)
	if r.role == Primary {
		s.Live = []ID{r.cfg.ID}
		for _, p := range r.voterPeers {
			if r.progress[p].inSync {
				s.Live = append(s.Live, p)
			}
		}
		s.LeaseUntil = r.leaseUntil()
		for _, p := range r.peers {
			if pr := r.progress[p]; pr != nil {
				s.Followers = append(s.Followers, FollowerLag{ID: p, Match: pr.match, InflightBytes: pr.flightBytes,
					WaitingSince: pr.waitingSince, Learner: !r.isVoter(p)})
			}
		}
		if r.cfg.Level == Level3 && r.now.Before(s.LeaseUntil) {
			s.VersionAgo = r.versionAgo(r.now)
		}
	}
	s.Diverged = r.diverged
	s.FreshUntil = r.freshUntil()
	if r.cfg.Level != Level1 {
		if r.role == Primary {
			s.Contact = r.quorumContact()
		} else {
			s.Contact = later(r.lastHeard, r.ledUntil)
		}
	}
	return s
}

// SetAlive records membership's view of a replica. A dead primary triggers
// an election at the next Tick; a dead live secondary leaves the live set.
func (r *Replica) SetAlive(id ID, alive bool) {
	if _, ok := r.alive[id]; ok && id != r.cfg.ID {
		r.alive[id] = alive
	}
}

// Checked reports the service's CHECK answer for an entry of Ready.Check:
// whether the service already completed it. Once every entry is answered,
// incomplete ones are reissued (in Ready.Apply, in LSN order) and recovery
// moves to phase 2.
func (r *Replica) Checked(lsn LSN, completed bool) {
	if r.phase != PhaseCheck {
		return
	}
	r.checkRes[lsn] = completed
	if len(r.checkRes) < len(r.checks) {
		return
	}
	for _, e := range r.checks {
		if !r.checkRes[e.LSN] {
			r.rd.Apply = append(r.rd.Apply, e)
		}
	}
	r.handed = r.checks[len(r.checks)-1].LSN
	r.checks, r.checkRes = nil, nil
	r.phase = PhaseCatchUp
}

// Promote is the operator's `neptune partition promote`. Without force it
// starts an election at this replica that ignores priority but is otherwise
// an ordinary one: it needs MinLive votes, and voters (this one included)
// still wait out any live primary's lease, so it fails while a healthy
// primary runs or fewer than MinLive replicas answer.
//
// With force this replica becomes primary at once, without votes: for the
// catastrophic case where fewer than MinLive replicas survive. Writes
// acknowledged above its Status().Last may be lost, and replicas that
// committed them find their logs differ below their commit point: they
// report Status.Diverged and serve nothing until repaired (issue 17).
func (r *Replica) Promote(now time.Time, force bool) {
	r.observe(now)
	if r.phase == PhaseCheck || r.cfg.Level == Level1 || r.role == Primary {
		return
	}
	if !force {
		r.promoteUntil = now.Add(r.cfg.Lease + 2*r.cfg.ElectionTimeout)
		if r.shouldElect(now) {
			r.startPreVote(now)
		}
		return
	}
	r.stepDown()
	r.epoch++
	r.vote = r.cfg.ID
	r.hsDirty = true
	r.grants = map[ID]Message{}
	r.promoteUntil = now.Add(time.Nanosecond) // (no transfer away: see becomePrimary)
	r.becomePrimary(now)
	r.forced = r.role == Primary
}

// Propose submits a client write accepted at this replica. Its outcome
// arrives as a Reply in a later Ready.
func (r *Replica) Propose(now time.Time, w Write) {
	r.observe(now)
	if r.cfg.Level == Level1 {
		r.proposeL1(now, w)
		return
	}
	switch {
	case r.role == Primary && r.transferTo == "":
		r.appendLocal(now, w)
	case r.role == Primary: // handing over: held back briefly
		r.waiting = append(r.waiting, waiter{w: w, deadline: now.Add(r.cfg.WriteWait)})
	case r.primaryLive(now) && !r.electing && r.phase != PhaseCheck:
		r.rd.Replies = append(r.rd.Replies, Reply{ReqID: w.ReqID, Err: &NotPrimaryError{Primary: r.primary}})
	default:
		r.waiting = append(r.waiting, waiter{w: w, deadline: now.Add(r.cfg.WriteWait)})
	}
}

// Tick advances time: heartbeats, acknowledgement timeouts, elections and
// the bounded wait of writes with no primary.
func (r *Replica) Tick(now time.Time) {
	r.observe(now)
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if !now.Before(w.deadline) {
			r.rd.Replies = append(r.rd.Replies, Reply{ReqID: w.w.ReqID, Err: ErrNoPrimary})
		} else {
			kept = append(kept, w)
		}
	}
	r.waiting = kept
	if r.phase == PhaseCheck {
		return
	}
	beat := now.Sub(r.lastBeat) >= r.cfg.Heartbeat
	if beat {
		r.lastBeat = now
	}
	if r.cfg.Level == Level1 {
		if beat {
			r.tickL1()
		}
		return
	}
	if r.role == Primary {
		r.tickPrimary(now, beat)
		return
	}
	if r.electing && !now.Before(r.electDeadline) {
		r.electing = false
	}
	if r.preVoting && !now.Before(r.preDeadline) {
		r.preVoting = false
	}
	if r.shouldElect(now) {
		r.startPreVote(now)
	} else if beat && !r.primaryLive(now) && now.Sub(r.lastHeard) >= r.cfg.ElectionTimeout {
		// (after the same wait as an election: a running primary usually
		// reaches a new replica first)
		if r.dataless() {
			r.announceEmpty()
		} else if !r.electing && !r.preVoting && now.Sub(r.probedAt) >= r.cfg.AckTimeout {
			r.probedAt = now
			r.probeRemoved()
		}
	}
}

// announceEmpty tells the live peers that this replica has no data, so the
// highest-priority replica with data stops deferring to it (shouldElect).
// It is a vote request marked Reject (a probe: no vote is asked for), so
// it changes no epoch, vote or timer anywhere.
func (r *Replica) announceEmpty() {
	for _, p := range r.peers {
		if r.alive[p] {
			r.send(Message{Type: MsgVote, To: p, Reject: true})
		}
	}
}

// Step processes a message from a peer.
func (r *Replica) Step(now time.Time, m Message) {
	r.observe(now)
	if r.phase == PhaseCheck || m.To != r.cfg.ID {
		return
	}
	if r.storageFull && len(m.Entries) > 0 {
		if m.Type != MsgAppend {
			return // (level-1 gossip: lost, sent again later)
		}
		// Take the append as a heartbeat: contact, commit point and
		// truncation, but no entries (as if they were lost on the way).
		m.Entries = nil
	}
	if _, ok := r.prio[m.From]; !ok {
		r.noticeRemoved(m)
		return
	}
	if r.cfg.Level == Level1 {
		r.stepL1(m)
		return
	}
	if len(m.Members) > 0 && !hasMember(m.Members, r.cfg.ID) {
		r.learnRemoved(m)
		return
	}
	// A vote request raises our epoch only if we grant it, so a candidate
	// refused because a live primary exists does not depose that primary.
	// Pre-votes and their grants carry a prospective epoch and change
	// nothing; a refusal carries the voter's real epoch.
	if m.Epoch > r.epoch && m.Type != MsgVote && m.Type != MsgPreVote && !(m.Type == MsgPreVoteResp && m.Granted) {
		r.epoch, r.vote, r.hsDirty = m.Epoch, "", true
		r.stepDown()
	}
	r.noteData(m)
	switch m.Type {
	case MsgAppend:
		r.handleAppend(now, m)
	case MsgAppendResp:
		r.handleAppendResp(now, m)
	case MsgVote, MsgPreVote:
		r.handleVote(m)
	case MsgVoteResp:
		r.handleVoteResp(now, m)
	case MsgPreVoteResp:
		r.handlePreVoteResp(now, m)
	case MsgTimeoutNow:
		r.handleTimeoutNow(now, m)
	}
}

// Ready returns the work accumulated since the last call.
func (r *Replica) Ready() Ready {
	rd := r.rd
	r.rd = Ready{}
	if r.hsDirty {
		rd.HardState = &HardState{Epoch: r.epoch, Vote: r.vote, Commit: r.commit}
		r.hsDirty = false
	}
	if r.phase != PhaseCheck {
		for l := r.handed + 1; l <= r.commit; l++ {
			e := r.entry(l)
			rd.Apply = append(rd.Apply, e)
			if e.Origin == r.cfg.ID && e.ReqID != 0 && r.pending[e.ReqID] {
				delete(r.pending, e.ReqID)
				rd.Replies = append(rd.Replies, Reply{ReqID: e.ReqID, LSN: e.LSN})
			}
		}
		r.handed = max(r.handed, r.commit)
	}
	rd.appliedTo = r.handed
	return rd
}

// Advance tells the replica the shell processed rd: entries persisted,
// writes executed, messages sent.
func (r *Replica) Advance(rd Ready) {
	if n := len(rd.Entries); n > 0 {
		e := rd.Entries[n-1]
		if e.LSN <= r.last() && e.LSN >= r.first && r.entry(e.LSN).Epoch == e.Epoch {
			r.stable = max(r.stable, e.LSN)
		}
	}
	r.applied = max(r.applied, rd.appliedTo)
	for len(r.freshPending) > 0 && r.freshPending[0].lsn <= r.applied {
		r.freshAt = r.freshPending[0].at // executed: the proof holds here now
		r.freshPending = r.freshPending[1:]
	}
	if r.role == Primary {
		r.maybeCommit(r.now)
	}
}

func (r *Replica) observe(now time.Time) {
	r.now = now
	if !r.started {
		r.started = true
		r.stampBase = now
		r.lastHeard = now
		if r.epoch > 0 || !r.dataless() {
			// Restarted: it may have helped grant a lease just before.
			// (A brand-new replica has granted none, so it needs no grace.)
			r.contactAt = now
		}
		r.unknownUntil = now.Add(r.cfg.Lease)
	}
}

func (r *Replica) last() LSN { return r.first + LSN(len(r.log)) - 1 }

func (r *Replica) entry(l LSN) Entry { return r.log[l-r.first] }

// Term is the epoch of the log entry at l, or 0 if this replica no
// longer knows it: a snapshot that covers l carries it (InstallSnapshot).
func (r *Replica) Term(l LSN) Epoch { return r.term(l) }

// term is the epoch of the entry at l (0 if unknown).
func (r *Replica) term(l LSN) Epoch {
	switch {
	case l == 0 || l > r.last():
		return 0
	case l < r.first:
		if l == r.first-1 {
			return r.prevEpoch
		}
		return 0
	}
	return r.entry(l).Epoch
}

// logAppend appends es, replacing any log suffix from es[0].LSN. Replaced
// entries were never committed, so none was executed; writes this replica
// accepted among them are reported dropped.
func (r *Replica) logAppend(es []Entry) {
	if len(es) == 0 {
		return
	}
	at := es[0].LSN
	if at < r.first || at <= r.handed {
		panic(fmt.Sprintf("replica %s: replacing executed or truncated LSN %d", r.cfg.ID, at))
	}
	if at <= r.last() {
		for _, old := range r.log[at-r.first:] {
			if old.Origin == r.cfg.ID && r.pending[old.ReqID] {
				delete(r.pending, old.ReqID)
				r.rd.Replies = append(r.rd.Replies, Reply{ReqID: old.ReqID, Err: ErrDropped})
			}
		}
		r.log = r.log[:at-r.first]
		r.stable = min(r.stable, at-1)
		keep := r.rd.Entries[:0]
		for _, e := range r.rd.Entries {
			if e.LSN < at {
				keep = append(keep, e)
			}
		}
		r.rd.Entries = keep
	}
	r.log = append(r.log, es...)
	r.rd.Entries = append(r.rd.Entries, es...)
	if r.noteConfEntries(es) {
		r.applyConf()
	}
}

// truncateTo drops entries up to l from memory and tells the shell.
func (r *Replica) truncateTo(l LSN) {
	l = min(l, r.applied, r.last())
	if l < r.first {
		return
	}
	r.prevEpoch = r.entry(l).Epoch
	// Zero the dropped entries: the backing array outlives them until the
	// next append reallocates it, and after a burst of large writes there
	// may be none for a long time; their bodies would stay reachable.
	clear(r.log[:l+1-r.first])
	r.log = r.log[l+1-r.first:]
	r.first = l + 1
	r.truncated = l
	r.rd.Truncate = l
}

func (r *Replica) send(m Message) { r.sendAt(r.epoch, m) }

// sendAt sends m with the given epoch (a pre-vote's prospective one).
func (r *Replica) sendAt(ep Epoch, m Message) {
	m.From = r.cfg.ID
	m.Epoch = ep
	r.rd.Messages = append(r.rd.Messages, m)
}

// stepDown makes a primary or candidate a follower (of no one yet).
func (r *Replica) stepDown() {
	if r.role == Primary {
		// Its contact, once a secondary again, runs from its quorum's
		// last answers, not from the primary it heard before it led.
		r.ledUntil = r.quorumContact()
		if r.ledUntil.IsZero() {
			r.ledUntil = r.now
		}
	}
	r.electing = false
	r.preVoting = false
	r.primary = ""
	r.inSync = false
	r.transferTo, r.timeoutSent = "", time.Time{}
	r.leaveOnTransfer = false
	r.forced = false
	if r.role == Primary {
		clear(r.leaving)
		defer r.applyConf()
		r.role = Recovering
		r.phase = PhaseCatchUp
		r.progress = map[ID]*progress{}
		r.history = nil
	}
	if r.role == Secondary {
		r.role = Recovering
		r.phase = PhaseCatchUp
	}
}

// ---- primary ----

func (r *Replica) appendLocal(now time.Time, w Write) {
	e := Entry{Epoch: r.epoch, LSN: r.last() + 1, Method: w.Method, Body: w.Body, Origin: r.cfg.ID, ReqID: w.ReqID,
		WriteID: w.ID, Time: now.UnixNano()}
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

// askShellForSnapshot puts a snapshot to peer id in the next Ready, unless
// one is already in flight.
func (r *Replica) askShellForSnapshot(now time.Time, id ID) {
	pr := r.progress[id]
	if pr.snapshotting(now) {
		return
	}
	pr.inSync = false
	pr.snapUntil = now.Add(r.cfg.SnapshotTimeout)
	r.rd.Snapshots = append(r.rd.Snapshots, id)
}

// SnapshotFailed tells the primary that the snapshot it asked for peer id
// was not installed (the transfer failed, or the peer refused it): it asks
// again the next time the peer shows it needs one, not after
// SnapshotTimeout.
func (r *Replica) SnapshotFailed(id ID) {
	if pr := r.progress[id]; pr != nil && r.role == Primary {
		pr.snapUntil = time.Time{}
	}
}

// WantsSnapshot reports whether this replica would install a snapshot
// that covers writes up to lsn, sent by primary from in epoch. The shell
// asks before it restores the service (InstallSnapshot must follow a
// restore): only a follower of that primary in that epoch, out of recovery
// phase 1, whose log diverged or that has not executed lsn yet.
func (r *Replica) WantsSnapshot(from ID, epoch Epoch, lsn LSN) bool {
	return r.cfg.Level != Level1 && r.phase != PhaseCheck && r.role != Primary && !r.electing && !r.storageFull &&
		epoch == r.epoch && from == r.primary && (r.diverged || lsn > r.applied)
}

// InstallSnapshot tells the replica that the shell replaced the service's
// state with a snapshot from its primary (after WantsSnapshot agreed) that
// covers every write up to lsn, whose entry had epoch lsnEpoch (0:
// unknown). The log restarts after lsn: everything before is executed,
// committed and dropped (including a diverged suffix: the service no
// longer reflects it). The next Ready carries Installed, for the wal, and
// the acknowledgement with which the primary resumes its appends at
// lsn+1.
//
// conf is the replica set the snapshot carries (the primary's Committed;
// nil: keep ours): it is committed, possibly at an LSN above lsn, whose
// entry then comes again with the log and changes nothing.
func (r *Replica) InstallSnapshot(now time.Time, lsn LSN, lsnEpoch Epoch, conf *ConfState) {
	r.observe(now)
	clear(r.log)
	r.log = nil
	r.first, r.prevEpoch = lsn+1, lsnEpoch
	r.stable, r.truncated = lsn, lsn
	r.commit, r.applied, r.handed = lsn, lsn, lsn
	r.hsDirty = true
	r.diverged = false
	r.role, r.phase, r.inSync = Recovering, PhaseCatchUp, false
	r.rd.Entries, r.rd.Apply, r.rd.Check, r.rd.Truncate = nil, nil, nil, 0
	r.rd.Installed = &Installed{LSN: lsn, Epoch: lsnEpoch}
	r.confLog = nil
	if conf != nil {
		r.committed = ConfState{LSN: conf.LSN, Members: slices.Clone(conf.Members)}
	}
	r.rd.ConfState = &ConfState{LSN: r.committed.LSN, Members: r.committed.Members}
	r.applyConf()
	if r.primary != "" {
		r.send(Message{Type: MsgAppendResp, To: r.primary, LSN: lsn, Hint: lsn, Snapshot: true})
	}
}

// ---- leases ----

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

// ---- leadership transfer ----

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
// replica takes no entries (appends count as heartbeats: the primary
// drops it from the live set, as it would after lost messages), no
// snapshot and no election, and refuses a leadership transfer to it; a
// primary hands its role to an in-sync replica as soon as one is caught
// up (it keeps it if none is: no other replica could take over without
// losing acknowledged writes). The shell refuses client writes meanwhile.
func (r *Replica) SetStorageFull(now time.Time, full bool) {
	r.observe(now)
	if r.storageFull == full {
		return
	}
	r.storageFull = full
	if full && r.role == Primary && r.transferTo == "" {
		r.handOver(now)
	}
}

// SetDraining tells the replica its node is leaving (SIGTERM, a rolling
// restart): a primary hands its role to the in-sync live voter of highest
// priority as soon as one is caught up, and the replica stands for no
// election and refuses a transfer to it, so the role does not come back
// before the node is gone. It keeps taking entries meanwhile. A primary
// with no in-sync peer keeps its role (handing it over would lose
// acknowledged writes); the partition elects once the node is gone.
func (r *Replica) SetDraining(now time.Time, on bool) {
	r.observe(now)
	if r.draining == on {
		return
	}
	r.draining = on
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

// ---- secondary ----

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

// ---- elections ----

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

// ---- level 3 ----

// versionAgo is the primary's commit point Staleness ago: the newest
// recorded commit at or before now-x, or the oldest known one.
func (r *Replica) versionAgo(now time.Time) LSN {
	cut := now.Add(-r.cfg.Staleness)
	v := LSN(0)
	for i, h := range r.history {
		if i == 0 || !h.at.After(cut) {
			v = h.lsn
		}
	}
	return v
}

func (r *Replica) pruneHistory(now time.Time) {
	cut := now.Add(-r.cfg.Staleness)
	i := 0
	for i+1 < len(r.history) && !r.history[i+1].at.After(cut) {
		i++
	}
	r.history = r.history[i:]
}
