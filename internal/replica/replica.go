package replica

import (
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

// leadingNoOps is the no-ops es begins with (Entry.Method empty).
func leadingNoOps(es []Entry) []Entry {
	for i, e := range es {
		if e.Method != "" {
			return es[:i]
		}
	}
	return es
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
		// truncation, but no writes (as if they were lost on the way).
		// A new primary's no-ops, a few bytes each, are taken: without
		// them a replica that holds every write would fall out of the
		// live set and stop serving reads at the first handover.
		m.Entries = leadingNoOps(m.Entries)
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
