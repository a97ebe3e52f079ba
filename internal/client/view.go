package client

import (
	"context"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// This file is replication's say in where a call goes: every rule about
// replicated partitions that the pick applies lives here.

// replicaView is what the yellow pages say about one replicated
// partition: each replica's announced role, epoch and version. The client
// keeps one per partition, updated as announcements arrive (viewWatcher);
// a view is never modified once published, so a pick reads it without a
// lock.
type replicaView struct {
	level int
	// linearizable: the service's reads go to the primary (see route).
	linearizable bool
	nodes        []string // sorted
	by           map[string]announced
}

// announced is one replica's status as its node last announced it.
type announced struct {
	role  replica.Role
	epoch uint64
	// diverged: the replica serves nothing until repaired.
	diverged bool
}

// with returns a copy of v with node's status set (or removed if st is
// nil), and the partition's level and linearizability as node announced
// them.
func (v *replicaView) with(node string, level int, linearizable bool, st *announced) *replicaView {
	out := &replicaView{level: level, linearizable: linearizable, by: map[string]announced{}}
	if v != nil {
		for id, a := range v.by {
			out.by[id] = a
		}
		if st == nil {
			out.level, out.linearizable = v.level, v.linearizable
		}
	}
	if st == nil {
		delete(out.by, node)
	} else {
		out.by[node] = *st
	}
	for id := range out.by {
		out.nodes = append(out.nodes, id)
	}
	slices.Sort(out.nodes)
	return out
}

// route is what replication decides for one pick, before the policy.
type route struct {
	// direct, if set, is where the call goes without polling: a level-2/3
	// write, and any read of a linearizable service, goes to the primary
	// (a secondary would forward it).
	direct string
	// candidates are the replicas the policy may choose from: recovering
	// ones are left out unless none is left.
	candidates []string
	level      int
	primary    string // the announced primary of the highest epoch
	read       bool
	minVersion uint64
}

// route applies replication's rules to a call of req among the live
// replicas ids (the lookup's). A nil view (the partition is not
// replicated) leaves every replica a candidate.
func (v *replicaView) route(now time.Time, req *pb.CallRequest, ids []string) route {
	r := route{candidates: ids, read: service.Mode(req.Mode) == service.Read, minVersion: req.MinVersion}
	if v == nil {
		return r
	}
	var epoch uint64
	var recovering []string
	for _, id := range v.nodes {
		a := v.by[id]
		if a.role == replica.Recovering || a.diverged {
			recovering = append(recovering, id)
		}
		if a.role == replica.Primary && a.epoch >= epoch {
			epoch, r.primary = a.epoch, id
		}
	}
	if len(v.nodes) == 0 {
		return route{candidates: ids, read: r.read, minVersion: r.minVersion}
	}
	r.level = v.level
	if r.level >= 2 && (!r.read || v.linearizable) && slices.Contains(ids, r.primary) {
		r.direct = r.primary
		return r
	}
	if kept := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(recovering, id) }); len(kept) > 0 {
		r.candidates = kept
	}
	return r
}

// mustPoll is who a read must poll besides the policy's choice, among
// the replicas ids left after poll health: at level 3 the primary, whose
// reply carries its current version of x seconds ago.
func (r route) mustPoll(ids []string) string {
	if r.level == 3 && r.read && slices.Contains(ids, r.primary) {
		return r.primary
	}
	return ""
}

// fresh keeps the replicas that may serve a read, judged from current poll
// replies (beyond the paper, which uses announced versions): serving, and
// at level 3 at or above both the primary's version x seconds ago and the
// session's floor. If none qualifies, only the primary remains. A level-3
// primary without its majority lease is not fresh and its version x
// seconds ago means nothing: then no replica can be shown fresh, and only
// the primary remains (it serves once it has its lease, or fails the read
// retryably), as when the primary did not answer: a version x seconds
// ago as announced is stale by up to a refresh interval (which grows
// with the cluster), so it is never taken instead. ok is false when ids should stay as they are (not
// replicated, a write, no answers).
func (r route) fresh(ids []string, answers []transport.PollAnswer) (keep []string, ok bool) {
	if r.level == 0 || !r.read || len(answers) == 0 {
		return nil, false
	}
	var floor uint64
	if r.level == 3 {
		floor = r.minVersion
		var ago uint64
		leased := false
		for _, a := range answers {
			if a.Version.Primary {
				ago, leased = a.Version.VersionAgo, a.Version.Lease > 0
			}
		}
		if !leased && slices.Contains(ids, r.primary) {
			return []string{r.primary}, true
		}
		floor = max(floor, ago)
	}
	for _, a := range answers {
		if a.Version.Serving && a.Version.Version >= floor {
			keep = append(keep, a.Replica)
		}
	}
	if len(keep) == 0 {
		if r.level == 3 && slices.Contains(ids, r.primary) {
			return []string{r.primary}, true
		}
		return nil, false
	}
	return keep, true
}

type partKey struct {
	service   string
	partition int32
}

// views are the client's replica views, by partition; the client's mu
// guards them.
type views struct {
	of map[partKey]*replicaView
	// in lists the partitions each node's last announcement put it in.
	in map[string][]partKey
	// moved is cancelled, and replaced, whenever an announcement changes
	// which node claims to be some partition's primary, or at which
	// epoch (see Client.attempt). A context rather than a channel, so a
	// waiting call registers with context.AfterFunc and costs no goroutine.
	moved       context.Context
	cancelMoved context.CancelFunc
}

func (vs *views) init() {
	vs.of, vs.in = map[partKey]*replicaView{}, map[string][]partKey{}
	vs.moved, vs.cancelMoved = context.WithCancel(context.Background())
}

// primaryClaim is who a view's announcements call primary, at which epoch.
func (v *replicaView) primaryClaim(node string) (primary bool, epoch uint64) {
	if v == nil {
		return false, 0
	}
	a, ok := v.by[node]
	return ok && a.role == replica.Primary, a.epoch
}

// set replaces k's view, and signals moved if a primary claim changed.
func (vs *views) set(k partKey, node string, v *replicaView) {
	wasP, wasE := vs.of[k].primaryClaim(node)
	isP, isE := v.primaryClaim(node)
	if len(v.by) == 0 {
		delete(vs.of, k)
	} else {
		vs.of[k] = v
	}
	if wasP != isP || wasE != isE {
		vs.cancelMoved()
		vs.moved, vs.cancelMoved = context.WithCancel(context.Background())
	}
}

// movedFrom reports whether the yellow pages now name a primary of this
// partition other than node: one that announced a higher epoch, or any
// live one once node stopped claiming the role.
func (v *replicaView) movedFrom(now time.Time, node string) bool {
	if v == nil {
		return false
	}
	own, hasOwn := v.by[node]
	for id, a := range v.by {
		if id == node || a.role != replica.Primary {
			continue
		}
		if !hasOwn || own.role != replica.Primary || a.epoch > own.epoch {
			return true
		}
	}
	return false
}

// viewWatcher keeps the client's views as membership changes
// (membership.Watcher). It runs under the yellow pages' lock and takes the
// client's; the client never calls membership holding its own.
type viewWatcher Client

func (w *viewWatcher) Applied(e membership.Entry) {
	c := (*Client)(w)
	node := e.Ann.NodeId
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := &c.views
	var now []partKey
	for _, s := range e.Ann.Services {
		for _, r := range s.Replicas {
			k := partKey{s.Name, r.Partition}
			now = append(now, k)
			st := announced{role: replica.Role(r.Role), epoch: r.Epoch, diverged: r.Diverged}
			vs.set(k, node, vs.of[k].with(node, int(r.Level), r.Linearizable, &st))
		}
	}
	for _, k := range vs.in[node] {
		if !slices.Contains(now, k) {
			vs.drop(k, node)
		}
	}
	vs.in[node] = now
}

func (w *viewWatcher) Removed(node string) {
	c := (*Client)(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.views.in[node] {
		c.views.drop(k, node)
	}
	delete(c.views.in, node)
}

// drop removes node from k's view, and the view once empty.
func (vs *views) drop(k partKey, node string) {
	vs.set(k, node, vs.of[k].with(node, 0, false, nil))
}
