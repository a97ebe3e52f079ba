// Package replica is the pure state machine that replicates one partition's
// writes (dissertation ch. 5: operation replication with a REDO write log).
//
// The core follows go.etcd.io/raft's shape: the node shell feeds it client
// writes (Propose), peer messages (Step), membership changes (SetAlive) and
// clock ticks (Tick), all with an explicit time; it collects a Ready batch of
// entries to persist, messages to send, CHECK calls to make, writes to execute
// and client replies, does that I/O, and calls Advance. The core has no
// goroutines, no I/O and never reads the wall clock, so the node and the
// deterministic tests and simulator run the same code.
//
// Levels 2 and 3 use one primary per epoch. The primary orders writes by LSN
// and executes a write only after every replica in its live set (which must
// keep at least MinLive members) has acknowledged durable receipt; secondaries
// execute committed writes in LSN order. Failover elects, among the live
// replicas whose log is the most recent of MinLive voters (a voter refuses
// a candidate with a less recent log, as in Raft), the one with the
// highest priority, so it holds every committed write and a vote carries
// no log; a follower far behind is caught up in bounded windows
// (MaxInflightBytes). A primary acts alone
// (serves reads) only within a lease a majority renews, voters wait out any
// lease before electing another, a pre-vote keeps a cut-off replica from
// raising its epoch, and priority is applied by leadership transfer. Level 1
// replicates commutative writes from any replica by gossip.
package replica

import (
	"errors"
	"fmt"
	"time"
)

// LSN is a log sequence number. At levels 2 and 3 it is the partition's
// version: committed LSNs are dense, start at 1 and are the same on every
// replica. At level 1 it is only a position in the local log.
type LSN uint64

// Epoch numbers a primary's term. Every entry and message carries one, and a
// replica refuses messages from a lower epoch, which fences a deposed primary.
type Epoch uint64

// ID names a replica (the node that hosts it).
type ID string

// Level is a partition's consistency level.
type Level int

const (
	// Level1 is write-anywhere with asynchronous propagation, for commutative
	// writes; replicas converge.
	Level1 Level = 1
	// Level2 is primary-ordered writes applied in LSN order everywhere.
	Level2 Level = 2
	// Level3 is Level2 plus staleness control (VersionAgo, Session).
	Level3 Level = 3
)

// Role is what a replica currently does for its partition.
type Role int

const (
	// Recovering replicas are catching up and serve no client requests.
	Recovering Role = iota
	// Secondary replicas apply the primary's writes and serve reads. At
	// level 1 every serving replica is a Secondary and accepts writes.
	Secondary
	// Primary orders and commits writes.
	Primary
)

func (r Role) String() string {
	switch r {
	case Recovering:
		return "recovering"
	case Secondary:
		return "secondary"
	case Primary:
		return "primary"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Phase is the step of the three-phase recovery a replica is in.
type Phase int

const (
	// PhaseCheck is phase 1: the log is synchronised with the service via
	// CHECK; writes the service did not complete are reissued.
	PhaseCheck Phase = 1
	// PhaseCatchUp is phase 2: missing writes are fetched from the primary
	// (or, with no primary, the replica takes part in an election).
	PhaseCatchUp Phase = 2
	// PhaseServing is phase 3: the replica is in the live set and publishes.
	PhaseServing Phase = 3
)

// Errors returned to clients through Reply. All say whether a retry helps.
var (
	// ErrNoPrimary: no primary was known within Config.WriteWait. The write
	// was not logged; retrying later is safe.
	ErrNoPrimary = errors.New("replica: no primary")
	// ErrNotPrimary: this replica is not the primary; retry at the primary
	// named by NotPrimaryError. The write was not logged.
	ErrNotPrimary = errors.New("replica: not the primary")
	// ErrDropped: the write was logged but overwritten by a new primary's
	// log before it committed, so it was never executed; retrying is safe.
	ErrDropped = errors.New("replica: write dropped by failover")
)

// NotPrimaryError redirects a write to the current primary.
type NotPrimaryError struct{ Primary ID }

func (e *NotPrimaryError) Error() string {
	return fmt.Sprintf("replica: not the primary (primary is %q)", e.Primary)
}

// Unwrap makes errors.Is(err, ErrNotPrimary) hold.
func (e *NotPrimaryError) Unwrap() error { return ErrNotPrimary }

// Retryable reports whether err means the same write may be retried.
func Retryable(err error) bool {
	return errors.Is(err, ErrNoPrimary) || errors.Is(err, ErrNotPrimary) || errors.Is(err, ErrDropped)
}

// Entry is one write in the REDO log.
type Entry struct {
	Epoch Epoch
	LSN   LSN
	// Method is the service method; empty marks the no-op a new primary logs
	// to commit its predecessors' entries (the shell does not execute it).
	Method string
	Body   []byte
	// Origin is the replica that accepted the client's write and ReqID its
	// request number there; Origin replies to the client once it executes it.
	Origin ID
	ReqID  uint64
	// Seq numbers Origin's writes at level 1 (per-origin FIFO); 0 otherwise.
	Seq uint64
	// WriteID is the client-scoped identity of the write (empty: none).
	// The shell executes an identity at most once per partition and
	// answers a repeat with the first one's result (see DedupTable).
	WriteID string
	// Time is when the primary (level 1: the origin) logged the entry, in
	// Unix nanoseconds of the time Propose was given. The dedup table
	// expires identities by it, so expiry is a function of the log alone.
	Time int64
}

// size is what an entry counts against Config.MaxBatchBytes.
func (e Entry) size() int { return len(e.Method) + len(e.Body) + len(e.WriteID) }

// Write is a client write handed to Propose.
type Write struct {
	ReqID  uint64
	Method string
	Body   []byte
	// WriteID is the write's identity (nerr.WriteID's String; empty:
	// none).
	WriteID string
}

// Reply is a client write's outcome. A nil Err means the write was executed
// at this replica as part of the same Ready's Apply; the shell replies with
// the handler's result and LSN (the version the client must record).
type Reply struct {
	ReqID uint64
	LSN   LSN
	Err   error
}

// HardState must be persisted (synced) before the Ready's messages are sent.
type HardState struct {
	Epoch Epoch
	// Vote is whom this replica voted for in Epoch.
	Vote ID
	// Commit is the highest LSN known committed cluster-wide; after a crash,
	// entries in (applied, Commit] are the ones CHECK must resolve.
	Commit LSN
}

// MsgType is a Message's kind.
type MsgType int

const (
	// MsgAppend carries entries and the commit point from the primary; an
	// empty one is a heartbeat.
	MsgAppend MsgType = iota + 1
	// MsgAppendResp acknowledges durable receipt up to LSN, or rejects.
	MsgAppendResp
	// MsgVote asks for a vote in an election at Epoch.
	MsgVote
	// MsgVoteResp grants or refuses a vote (never carrying entries: an
	// election must not wait for bulk data).
	MsgVoteResp
	// MsgDigest (level 1) carries the sender's version vector.
	MsgDigest
	// MsgGossip (level 1) carries entries the recipient lacks.
	MsgGossip
	// MsgPreVote asks whether the recipient would grant a vote at Epoch
	// (the sender's epoch+1) without changing any state anywhere; only with
	// MinLive grants does the sender raise its epoch and run the election.
	MsgPreVote
	// MsgPreVoteResp answers a MsgPreVote: a grant carries the prospective
	// epoch, a refusal the voter's own epoch.
	MsgPreVoteResp
	// MsgTimeoutNow (leadership transfer) tells an in-sync secondary that
	// has executed everything committed to campaign at once; Sent is when
	// the primary gave up its lease, and the vote carries it back.
	MsgTimeoutNow
)

func (t MsgType) String() string {
	switch t {
	case MsgAppend:
		return "Append"
	case MsgAppendResp:
		return "AppendResp"
	case MsgVote:
		return "Vote"
	case MsgVoteResp:
		return "VoteResp"
	case MsgDigest:
		return "Digest"
	case MsgGossip:
		return "Gossip"
	case MsgPreVote:
		return "PreVote"
	case MsgPreVoteResp:
		return "PreVoteResp"
	case MsgTimeoutNow:
		return "TimeoutNow"
	}
	return fmt.Sprintf("MsgType(%d)", int(t))
}

// Message is exchanged between replicas of one partition. Which fields are
// set depends on Type.
type Message struct {
	Type     MsgType
	From, To ID
	Epoch    Epoch

	// Append: the entry before Entries, the commit point, the truncation
	// point and whether the recipient is in the primary's live set.
	PrevLSN   LSN
	PrevEpoch Epoch
	Entries   []Entry
	Commit    LSN
	Trunc     LSN
	InSync    bool

	// AppendResp: LSN is the highest LSN known to match the primary's log,
	// or on Reject the PrevLSN refused; Hint is then a lower bound of where
	// the logs may agree. Without Reject, Hint is the highest LSN the
	// sender has executed (a leadership transfer needs it), and LSN 0
	// acknowledges contact only (a heartbeat that overtook its entries).
	// Append: LastEpoch is the epoch of the entry at Commit (0: unknown),
	// so a secondary can tell that its own committed entry there differs.
	LSN    LSN
	Reject bool
	Hint   LSN

	// Vote, PreVote: Commit is the candidate's commit point and LSN and
	// LastEpoch its last entry (LSN and Commit 0: it has no data); Reject
	// marks a probe that asks for no vote (see announceEmpty). VoteResp:
	// the voter's last entry (LSN, LastEpoch).
	Granted   bool
	LastEpoch Epoch

	// Digest: the sender's version vector (origin -> contiguous Seq).
	Versions map[ID]uint64

	// Sent (Append, TimeoutNow) is the primary's clock when it sent the
	// message, in Unix nanoseconds; an AppendResp echoes it, so the primary
	// knows which of its sends a majority has answered (its lease runs
	// from there). A Transfer vote carries the TimeoutNow's Sent.
	Sent int64
	// Transfer (Vote) marks an election the primary itself handed over
	// (leadership transfer): voters need not wait out its lease, which it
	// gave up when it sent TimeoutNow. (Append) marks appends a primary
	// sends while handing over: they grant it no lease.
	Transfer bool
	// Echo (Append) is the Sent of the newest answer the primary has
	// received from the recipient, set only while the primary holds its
	// lease. The recipient sent that answer at a time it noted, so every
	// write acknowledged before then is at or below this append's Commit:
	// the secondary's proof of freshness (Status.FreshUntil).
	Echo int64
	// Restarted (AppendResp, a reject) marks a replica that restarted and
	// has not yet matched its primary's log since: it may have lost
	// entries it acknowledged before (a torn log tail): Trunc then says
	// where its log ends and Commit up to where it surely holds the
	// primary's log.
	Restarted bool
	// Snapshot (AppendResp with Reject) says that what the primary knows
	// of the sender's log is void: it holds no data (Hint 0: a wiped or
	// new replica, which may still catch up from a log that starts at 1)
	// or its log diverged below its commit point (Hint: its commit point;
	// only a snapshot repairs it, since its service executed other
	// writes). Snapshots themselves are not Messages: the primary's shell
	// streams one (Ready.Snapshots) and the follower's shell hands it to
	// InstallSnapshot. (AppendResp without Reject) marks the follower's
	// acknowledgement of an installed snapshot: it holds everything up to
	// LSN, and the primary resumes its appends after it.
	Snapshot bool
	// Members (Append) is the primary's committed replica set, from its
	// configuration entry at MembersAt, sent to a peer that has not yet
	// acknowledged anything: a node that hosts no replica of the
	// partition creates one when it is named there (see config.go).
	Members   []Peer
	MembersAt LSN
	// Leave (TimeoutNow) asks the target, once elected, to remove the
	// handing-over primary from the replica set (an operator's removal
	// of the primary).
	Leave bool
}

// Ready is a batch of work for the shell. Process it in this order: persist
// HardState and append Entries to the write log (durably: a follower's ack
// in Messages promises it), drop log entries up to Truncate, make the CHECK
// calls in Check and report them with Checked, execute Apply in order (one at
// a time; skip entries with an empty Method), send Messages, answer Replies,
// then call Advance.
type Ready struct {
	// HardState is nil when unchanged.
	HardState *HardState
	// Entries replace the log from Entries[0].LSN on.
	Entries []Entry
	// Truncate: entries up to this LSN are held by every replica and executed
	// here; the log may drop them (0: nothing new).
	Truncate LSN
	// TruncateBase (level 1) is the version vector of every entry up to
	// Truncate: the shell stores it with the truncation, atomically, and
	// hands it back in Restore.Base, since the dropped entries no longer
	// tell which writes this replica holds.
	TruncateBase map[ID]uint64
	Check        []Entry
	Apply        []Entry
	Messages     []Message
	Replies      []Reply
	// Snapshots (primary) lists peers that need entries this log no
	// longer holds, or whose log diverged: the shell streams each a
	// snapshot of the service (see InstallSnapshot). At most one is in
	// flight per peer; the core asks again after Config.SnapshotTimeout
	// or after SnapshotFailed.
	Snapshots []ID
	// ConfState (non-nil when it changed) is the committed replica set:
	// the shell stores it durably before HardState and Entries (it may
	// run ahead of the stored commit point, never behind), and hands it
	// back in Restore.ConfState.
	ConfState *ConfState
	// Installed (follower) is set when a snapshot was installed: before
	// HardState and Entries, the shell makes the log empty, starting after
	// Installed.LSN, with the executed marker at Installed.LSN, durably
	// (wal.Log.Install), so a restart resumes from the snapshot.
	Installed *Installed

	appliedTo LSN // what Advance marks executed
}

// Installed is the base of a log reset by a snapshot: the snapshot covers
// every write up to LSN, whose entry had epoch Epoch (0: unknown).
type Installed struct {
	LSN   LSN
	Epoch Epoch
}

// Empty reports whether rd has no work.
func (rd *Ready) Empty() bool {
	return rd.HardState == nil && len(rd.Entries) == 0 && rd.Truncate == 0 && len(rd.Check) == 0 &&
		len(rd.Apply) == 0 && len(rd.Messages) == 0 && len(rd.Replies) == 0 && len(rd.Snapshots) == 0 &&
		rd.Installed == nil && rd.ConfState == nil
}

// Status is what a replica publishes (in announcements and poll replies).
type Status struct {
	ID      ID
	Role    Role
	Phase   Phase
	Epoch   Epoch
	Primary ID
	// Applied is the replica's version: the highest LSN it executed.
	Applied LSN
	Commit  LSN
	Last    LSN
	// VersionAgo (primary at level 3) is the primary's committed version
	// Config.Staleness ago; replicas at or above it are fresh enough. A new
	// primary uses its takeover last LSN until Staleness has passed. It is
	// 0 while the primary holds no valid lease (LeaseUntil zero or past):
	// then nobody can be judged fresh by it, the primary included.
	VersionAgo LSN
	// Live (primary) lists the replicas in the live set, itself included.
	Live []ID
	// LeaseUntil (primary) is when its majority lease lapses, by this
	// replica's clock: the Sent of the newest append that MinLive replicas
	// (itself included) have answered, plus Lease·(1−ClockDrift). It is
	// zero when it holds none, has not yet committed an entry of its own
	// epoch, or is handing over (leadership transfer). Only a primary with
	// now < LeaseUntil may serve linearizable or level-3 reads; it steps
	// down once the lease it could renew has lapsed (check-quorum).
	LeaseUntil time.Time
	// Diverged reports that this replica found its log differs from the
	// primary's at or below its own commit point (after a forced promote):
	// it serves nothing until repaired.
	Diverged bool
	// FreshUntil (secondary) is until when, by this replica's clock, it
	// can show itself within the staleness bound: every write acknowledged
	// anywhere more than Config.Staleness before then is executed here
	// (see Message.Echo). Zero when it cannot show it. A level-3
	// secondary serves reads only before it.
	FreshUntil time.Time
	// Members is the current replica set (the newest configuration entry
	// in the log, committed or not); MembersPending that it is not yet
	// committed. Removed: this replica is in neither the current nor the
	// committed set, so its node stops hosting it.
	Members        []Peer
	MembersPending bool
	Removed        bool
	// Followers (primary) is how far each other replica it replicates to
	// is behind it, in replica-set order: what an operator alerts on as
	// replica lag.
	Followers []FollowerLag
	// Contact (levels 2 and 3) is when, by this replica's clock, it last
	// heard from its primary (a replica that is not primary: the primary's
	// last message, its start, or, if it led since, its quorum's last
	// answers when it stepped down) or from its quorum (a primary: the
	// newest time MinLive replicas, itself included, had all answered,
	// which check-quorum counts from). Zero at level 1, and for a primary
	// exempt from check-quorum (forced, handing over, or alone). The
	// shell announces a replica whose contact is older than AckTimeout
	// (a primary: half its Lease) as having lost it (see JudgeContact).
	Contact time.Time
}

// FollowerLag is a primary's view of one replica it sends appends to.
type FollowerLag struct {
	ID ID
	// Match is the highest LSN the replica is known to hold; the primary's
	// Last minus it is its lag in entries.
	Match LSN
	// InflightBytes is the entry bytes sent to it and not acknowledged.
	InflightBytes int
	// WaitingSince is when the oldest unacknowledged append was sent
	// (zero if none): its age is the lag in time.
	WaitingSince time.Time
	// Learner: it does not vote (it catches up before it is promoted).
	Learner bool
}

// ContactState says whether a replica is in touch with whom it depends
// on: its primary, or (a primary) the majority its lease needs.
type ContactState int

const (
	// ContactOK: heard from within the bound (or nothing to hear from).
	ContactOK ContactState = iota
	// ContactLost: a replica that is not primary has not heard from its
	// primary for AckTimeout, when it stops counting on it.
	ContactLost
	// ContactNoQuorum: a primary has not heard from its majority for half
	// its Lease: its lease lapses unless they answer, and it steps down
	// at Lease (check-quorum).
	ContactNoQuorum
)

func (c ContactState) String() string {
	switch c {
	case ContactLost:
		return "lost-contact"
	case ContactNoQuorum:
		return "no-quorum"
	}
	return "ok"
}

// JudgeContact judges st's Contact at now: whether the replica lost touch,
// and since when (zero when it did not). ackTimeout and lease are its
// partition's Config.AckTimeout and Config.Lease.
func JudgeContact(st Status, now time.Time, ackTimeout, lease time.Duration) (ContactState, time.Time) {
	switch {
	case st.Contact.IsZero():
		return ContactOK, time.Time{}
	case st.Role == Primary && now.Sub(st.Contact) >= lease/2:
		return ContactNoQuorum, st.Contact
	case st.Role != Primary && now.Sub(st.Contact) >= ackTimeout:
		return ContactLost, st.Contact
	}
	return ContactOK, time.Time{}
}

// ClockDrift is the clock-rate difference between replicas that leases
// tolerate: a primary's lease runs Lease·(1−ClockDrift) from a send, by its
// clock, while a voter refuses other candidates for a full Lease after
// receiving it, by its own. Leases are safe while any two replicas' clocks
// run at rates within 10% of each other (wall-clock steps excluded).
const ClockDrift = 0.1

// leaseFor is how long a primary's lease lasts after a quorum's answer.
func leaseFor(lease time.Duration) time.Duration {
	return lease - time.Duration(float64(lease)*ClockDrift)
}

// Peer is one replica of the partition with its priority; the highest
// priority is the preferred primary. A Learner receives the log but does
// not vote, count for commits or leases, or serve, until it is promoted
// (see config.go).
type Peer struct {
	ID       ID
	Priority int
	Learner  bool
}

// Config configures one replica. Zero durations take the defaults.
type Config struct {
	ID       ID
	Replicas []Peer // all replicas of the partition, this one included
	Level    Level
	// MinLive is the smallest live set (primary included) that may commit
	// and the number of votes an election needs. Default: a majority of
	// the current replica set's voters, which keeps a partitioned old
	// primary from committing. 1 is the paper's behaviour (it assumes no
	// network partitions). A partition with MinLive set explicitly cannot
	// change its replica set (ChangeMembers).
	MinLive int
	// Heartbeat is how often the primary sends heartbeats (level 1: digests).
	Heartbeat time.Duration
	// AckTimeout: a live replica that has not acknowledged an entry sent
	// this long ago leaves the live set and must catch up to rejoin.
	AckTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes.
	ElectionTimeout time.Duration
	// WriteWait bounds how long a write waits for a primary.
	WriteWait time.Duration
	// Lease is how long a majority's acknowledgement lets a primary act
	// alone (less ClockDrift), and how long a replica that heard from a
	// primary refuses to help elect another (see
	// docs/architecture/replica.md, Leases and elections).
	Lease time.Duration
	// Staleness is level 3's bound x.
	Staleness time.Duration
	// MaxBatch bounds the entries per message, and MaxBatchBytes their
	// method names and bodies (a message still carries one entry of any
	// size), so that a batch of large writes stays within the transport's
	// message limit.
	MaxBatch      int
	MaxBatchBytes int
	// MaxInflightBytes bounds what the primary has sent a follower and
	// not yet heard acknowledged (the bytes MaxBatchBytes counts; one
	// message may pass it, as in go.etcd.io/raft's MaxInflightBytes):
	// a follower far behind is caught up at the pace it acknowledges,
	// not with its whole backlog queued at once in the transport.
	// Default: 4 × MaxBatchBytes.
	MaxInflightBytes int
	// SnapshotTimeout is how long the primary waits for a snapshot it
	// asked for (Ready.Snapshots) to be installed before asking again.
	SnapshotTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.MinLive == 0 {
		c.MinLive = len(c.Replicas)/2 + 1
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 50 * time.Millisecond
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 500 * time.Millisecond
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = 300 * time.Millisecond
	}
	if c.WriteWait == 0 {
		c.WriteWait = time.Second
	}
	if c.Lease == 0 {
		c.Lease = 400 * time.Millisecond
	}
	if c.Staleness == 0 {
		c.Staleness = time.Second
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = 4 * c.MaxBatchBytes
	}
	if c.SnapshotTimeout == 0 {
		c.SnapshotTimeout = time.Minute
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.ID == "" {
		return errors.New("replica: Config.ID is empty")
	}
	if c.Level < Level1 || c.Level > Level3 {
		return fmt.Errorf("replica: Config.Level %d not in 1..3", c.Level)
	}
	seen := map[ID]bool{}
	self := false
	for _, p := range c.Replicas {
		if p.ID == "" {
			return errors.New("replica: Config.Replicas has an empty ID")
		}
		if seen[p.ID] {
			return fmt.Errorf("replica: Config.Replicas lists %q twice", p.ID)
		}
		seen[p.ID] = true
		self = self || p.ID == c.ID
	}
	if !self {
		return fmt.Errorf("replica: Config.Replicas does not include Config.ID %q", c.ID)
	}
	if c.MinLive < 0 || c.MinLive > len(c.Replicas) {
		return fmt.Errorf("replica: Config.MinLive %d not in 0..%d", c.MinLive, len(c.Replicas))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"Heartbeat", c.Heartbeat}, {"AckTimeout", c.AckTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"WriteWait", c.WriteWait}, {"Staleness", c.Staleness}, {"Lease", c.Lease},
		{"SnapshotTimeout", c.SnapshotTimeout}} {
		if d.d < 0 {
			return fmt.Errorf("replica: Config.%s is negative", d.name)
		}
	}
	if c.MaxBatch < 0 || c.MaxBatchBytes < 0 {
		return errors.New("replica: Config.MaxBatch or MaxBatchBytes is negative")
	}
	return nil
}

// Restore is a replica's durable state after a restart: the hard state, the
// log as stored (committed and uncommitted portions) and the highest LSN the
// shell recorded as executed (it may lag the service; CHECK closes the gap).
type Restore struct {
	HardState HardState
	Entries   []Entry
	Applied   LSN
	// Base is the last Ready.TruncateBase stored (level 1).
	Base map[ID]uint64
	// ConfState is the last Ready.ConfState stored (nil: none yet, the
	// replica set is Config.Replicas).
	ConfState *ConfState
}
