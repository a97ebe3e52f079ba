package replication

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// ReplicaState is what an operator alerts on for one replica hosted
// here, read at scrape time (the node's metrics).
type ReplicaState struct {
	Service   string
	Partition int32
	Role      replica.Role
	Epoch     uint64
	// HasPrimary: the replica knows a primary it is in touch with (a
	// primary: itself, with its majority; see replica.JudgeContact).
	HasPrimary       bool
	Applied, Commit  uint64
	Last             uint64
	LeaseLeft        time.Duration
	Level            int
	Staleness        time.Duration // level 3's bound; 0 at levels 1 and 2
	Elections        uint64        // times it became primary
	StepDowns        uint64        // times it stopped being primary
	Diverged         bool
	Followers        []FollowerState // a primary's: the replicas it feeds
	InboxBytes       int64           // entry bytes received and not yet taken by its loop
	MembersPending   bool
	ContactLostSince time.Duration // 0 while in touch
}

// FollowerState is a primary's view of one follower's lag.
type FollowerState struct {
	Replica string
	Learner bool
	// Entries: the primary's last LSN minus what the follower holds.
	Entries uint64
	// Bytes: entry bytes sent to it and not yet acknowledged.
	Bytes int
	// Age: how long its oldest unacknowledged append has waited (0: none).
	Age time.Duration
}

// transitions counts a partition's role changes on this node; kept by
// the runtime, not the part, so a part reopened after a storage failure
// keeps counting.
type transitions struct {
	elections, stepDowns atomic.Uint64
}

type transitionCounter struct{ m sync.Map } // partKey → *transitions

func (c *transitionCounter) of(k partKey) *transitions {
	t, _ := c.m.LoadOrStore(k, new(transitions))
	return t.(*transitions)
}

// count records the change from prev to st.
func (c *transitionCounter) count(k partKey, prev *replica.Status, st replica.Status) {
	was := prev != nil && prev.Role == replica.Primary
	is := st.Role == replica.Primary
	switch {
	case is && (!was || prev.Epoch != st.Epoch):
		c.of(k).elections.Add(1)
	case was && !is:
		c.of(k).stepDowns.Add(1)
	}
}

// Replicas is the state of every replica hosted here, sorted by service
// and partition.
func (rt *Runtime) Replicas() []ReplicaState {
	rt.pmu.RLock()
	parts := make([]*part, 0, len(rt.parts))
	for _, p := range rt.parts {
		parts = append(parts, p)
	}
	rt.pmu.RUnlock()
	now := rt.clock.Now()
	out := make([]ReplicaState, 0, len(parts))
	for _, p := range parts {
		st := *p.status.Load()
		t := rt.transitions.of(p.key)
		ackTimeout, lease := cmp.Or(p.cfg.AckTimeout, defaultAckTimeout), cmp.Or(p.cfg.Lease, defaultLease)
		contact, since := replica.JudgeContact(st, now, ackTimeout, lease)
		s := ReplicaState{Service: p.key.service, Partition: p.key.partition, Role: st.Role, Epoch: uint64(st.Epoch),
			Applied: uint64(st.Applied), Commit: uint64(st.Commit), Last: uint64(st.Last), LeaseLeft: leaseLeft(st, now),
			Level: int(p.cfg.Level), Elections: t.elections.Load(), StepDowns: t.stepDowns.Load(), Diverged: st.Diverged,
			InboxBytes: p.inboxHeld.Load(), MembersPending: st.MembersPending}
		if contact != replica.ContactOK {
			s.ContactLostSince = now.Sub(since)
		}
		s.HasPrimary = st.Primary != "" && contact == replica.ContactOK &&
			(st.Role != replica.Primary || p.cfg.Level == replica.Level1 || s.LeaseLeft > 0)
		if p.cfg.Level == replica.Level3 {
			s.Staleness = cmp.Or(p.cfg.Staleness, time.Second)
		}
		for _, f := range st.Followers {
			fs := FollowerState{Replica: string(f.ID), Learner: f.Learner, Bytes: f.InflightBytes}
			if st.Last > f.Match {
				fs.Entries = uint64(st.Last - f.Match)
			}
			if !f.WaitingSince.IsZero() {
				fs.Age = max(now.Sub(f.WaitingSince), 0)
			}
			s.Followers = append(s.Followers, fs)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ReplicaState) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
