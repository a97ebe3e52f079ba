package membership

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// How the yellow pages spread, so that what a member spends on them stays
// flat as the cluster grows (the dissertation's scheme, every member
// announcing to every other each second, costs each member N messages a
// second):
//
//   - A change that matters (services, partitions, methods, addresses,
//     a replica's role, epoch, primary, level, members, lease held or not,
//     contact) spreads at once, epidemically: piggybacked on memberlist's
//     failure-detector traffic and relayed by every member that learns it
//     (changeSpread), so it reaches everyone in O(log N) gossip rounds at
//     O(log N) messages per member.
//   - Liveness comes from memberlist's SWIM/Lifeguard failure detector
//     once fewer than two refreshes fit in a TTL: a live member's entry
//     does not expire (Pages.Keep), a dead one's goes when memberlist
//     declares it dead. In smaller clusters the paper's soft state holds
//     as it was: an entry not refreshed for a TTL expires.
//   - What changes all the time (versions, commit points, the lease time
//     left) is refreshed to every member, but each member refreshes only
//     every RefreshInterval(N), which grows with N so that each member sends
//     and receives about RefreshPeers refreshes per AnnounceInterval
//     whatever N is. A refresh that carries nothing new re-sends the
//     signed announcement the others hold, which they recognize without
//     checking its signature again.
//   - Anti-entropy (a full push/pull of memberlist's member states and
//     the yellow pages with one random member) runs every
//     antiEntropyInterval(N), which also grows with N: its size is N
//     entries, so its cost per member stays flat. memberlist's own
//     periodic push/pull, whose interval grows only as log N, is off.
const (
	// RefreshPeers is how many refreshes a member sends, and receives,
	// per AnnounceInterval once the cluster has more members than that.
	RefreshPeers = 8
	// MaxRefreshInterval caps RefreshInterval; a signed announcement must
	// stay younger than the receivers' MaxAnnouncementAge.
	MaxRefreshInterval = 2 * time.Minute
	// Anti-entropy runs every antiEntropyPerMember·N, at least every
	// minAntiEntropy.
	antiEntropyPerMember = 2 * time.Second
	minAntiEntropy       = 30 * time.Second
	// resignAfter: an unchanged announcement is signed anew once this
	// old (or half the receivers' MaxAnnouncementAge if less), so that
	// members of the releases before, which accept a minute, keep it
	// during a rolling upgrade. It costs each member at most N/30 s
	// signature checks a second, below RefreshPeers per interval until N
	// reaches 240, where RefreshInterval passes it.
	resignAfter = 30 * time.Second
)

// RefreshInterval is how often a member of a cluster of members refreshes
// its announcement to every other member: base (the AnnounceInterval) up
// to RefreshPeers members, then proportionally longer.
func RefreshInterval(base time.Duration, members int) time.Duration {
	d := base
	if members > RefreshPeers {
		d = base * time.Duration(members) / RefreshPeers
	}
	return min(d, MaxRefreshInterval)
}

// antiEntropyInterval is how often a member of a cluster of members
// exchanges its whole state with one random member.
func antiEntropyInterval(members int) time.Duration {
	return max(minAntiEntropy, antiEntropyPerMember*time.Duration(members))
}

// announceAction is what a member sends at one tick of its announcement
// loop.
type announceAction int

const (
	sendNothing announceAction = iota
	// sendChange: a change that matters; a new announcement, spread
	// epidemically now.
	sendChange
	// sendRefresh: only volatile fields changed, and a refresh is due; a
	// new announcement, sent to every member.
	sendRefresh
	// sendResend: nothing changed and a refresh is due; the announcement
	// the others hold, sent to every member again.
	sendResend
)

// announceState is what planAnnouncement needs to know of the member's
// last announcement and the one it would make now.
type announceState struct {
	// changed: the announcement differs from the last in a field that
	// matters (changeKey); volatile: only in fields that change all the
	// time (volatileKey).
	changed, volatile bool
	// sinceSent is the time since the member last sent its announcement
	// to everyone, signedAge the age of its signature, refresh the
	// RefreshInterval and resignAfter the age at which a refresh is signed
	// anew although nothing changed.
	sinceSent, signedAge, refresh, resignAfter time.Duration
}

// planAnnouncement decides a tick: a change goes out at once; otherwise a
// refresh every refresh interval, re-signed when something volatile
// changed or its signature is resignAfter old.
func planAnnouncement(s announceState) announceAction {
	switch {
	case s.changed:
		return sendChange
	case s.sinceSent < s.refresh:
		return sendNothing
	case s.volatile || s.signedAge >= s.resignAfter:
		return sendRefresh
	default:
		return sendResend
	}
}

// announcementKeys returns a's identity for the two kinds of change:
// volatileKey differs when anything but the lease time left does;
// changeKey only when a field that matters does (not versions, commit
// points, version x ago, lease time left, or how long contact has been
// lost). Sequence number and incarnation are not part of either.
func announcementKeys(a *pb.Announcement) (changeKey, volatileKey string) {
	c := proto.Clone(a).(*pb.Announcement)
	c.Seq, c.Incarnation = 0, 0
	for _, s := range c.Services {
		for _, r := range s.Replicas {
			r.LeaseMs = min(r.LeaseMs, 1) // held or not
			r.LeaseValidMs = 0
		}
	}
	opts := proto.MarshalOptions{Deterministic: true}
	v, _ := opts.Marshal(c)
	for _, s := range c.Services {
		for _, r := range s.Replicas {
			r.Version, r.Commit, r.Last, r.VersionAgo, r.ContactLostMs = 0, 0, 0, 0, 0
		}
	}
	k, _ := opts.Marshal(c)
	return string(k), string(v)
}

// leaseValid is how long after receiving a status whose primary had
// leaseMs of its lease left a reader takes the claim as current
// (pb.ReplicaStatus.lease_valid_ms): the lease left plus one and a half
// refresh intervals, within which the author refreshes or re-sends it
// while it runs and still holds a lease (losing it is a change, sent at
// once); one lost refresh is tolerated. 0 without a lease.
func leaseValid(leaseMs uint32, refresh time.Duration) uint32 {
	if leaseMs == 0 {
		return 0
	}
	return leaseMs + uint32(min((refresh*3/2).Milliseconds(), 1<<31))
}

// Asking for a missing entry. A member memberlist holds live whose entry
// this member lacks (it joined while this one did, it was declared dead
// and came back, its certificate is unknown here) is asked directly for
// its announcement (msgWant) instead of waiting for its next refresh, a
// RefreshInterval(N) away, or for anti-entropy: the first ask after
// askGrace (its announcement usually arrives by itself before), then with
// backoff up to maxAskBackoff, since members that announce nothing (a
// client) never answer. At most askBatch asks per tick.
const (
	askGrace      = time.Second
	maxAskBackoff = time.Minute
	askBatch      = 4
	// wantAnswerGap: a member answers one asker at most once per gap;
	// unknownAskerGap: it exchanges state with an asker it did not know
	// of at most once per gap.
	wantAnswerGap   = 500 * time.Millisecond
	unknownAskerGap = 10 * time.Second
)

// asking is the asking state of one missing member.
type asking struct {
	next  time.Time
	tries int
}

// planAsks decides which of the missing members to ask at now and
// advances their backoff; state holds the asking state of every member
// missing before and is pruned to those still missing. missing comes in
// the order asks are preferred (the shell shuffles it).
func planAsks(now time.Time, missing []string, state map[string]*asking) []string {
	still := make(map[string]bool, len(missing))
	var ask []string
	for _, id := range missing {
		still[id] = true
		a := state[id]
		if a == nil {
			state[id] = &asking{next: now.Add(askGrace)}
			continue
		}
		if now.Before(a.next) || len(ask) == askBatch {
			continue
		}
		a.tries++
		a.next = now.Add(min(askGrace<<min(a.tries, 16), maxAskBackoff))
		ask = append(ask, id)
	}
	for id := range state {
		if !still[id] {
			delete(state, id)
		}
	}
	return ask
}
