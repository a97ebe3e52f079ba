// Package membership keeps the service yellow pages: which node hosts which
// service partitions, learned from announcements gossiped over
// hashicorp/memberlist and kept as soft state that expires unless refreshed.
package membership

import (
	"cmp"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Entry is what the yellow pages know about one node.
type Entry struct {
	Ann *pb.Announcement
	// Expires is when the entry is forgotten unless refreshed.
	Expires time.Time
	// Seen is when the last announcement arrived.
	Seen time.Time
	// excludedSeq, when non-zero, hides the node until it announces a
	// sequence number above it (a call to it failed).
	excludedSeq uint64
	excluded    bool
}

// Pages is the yellow pages table. It is a pure data structure: time comes
// in as arguments and it is not safe for concurrent use.
type Pages struct {
	ttl     time.Duration
	entries map[string]*Entry
	// ever records every service partition ever announced, so a lookup can
	// tell "no live replica" (retryable) from "no such partition".
	ever map[string]map[int32]bool
	// gone remembers the members that left, for a while (departed.go).
	gone departures
}

// NewPages returns empty yellow pages whose entries live for ttl.
func NewPages(ttl time.Duration) *Pages {
	return &Pages{ttl: ttl, entries: map[string]*Entry{}, ever: map[string]map[int32]bool{}}
}

// Apply records an announcement received at now. Stale announcements (lower
// sequence number from the same incarnation, or an older incarnation) are
// ignored. It reports whether the announcement was new information.
func (p *Pages) Apply(now time.Time, a *pb.Announcement) bool {
	e, ok := p.entries[a.NodeId]
	if ok && !now.After(e.Expires) {
		old := e.Ann
		if notAfter(a, old.Incarnation, old.Seq) {
			return false
		}
	}
	if !ok {
		e = &Entry{}
		p.entries[a.NodeId] = e
	}
	prevInc := int64(0)
	if e.Ann != nil {
		prevInc = e.Ann.Incarnation
	}
	// A newer announcement never shortens a live entry's life: one that
	// arrives aged (in a state exchange, seen long before now) carries
	// newer content, and the node was vouched for until e.Expires.
	exp := now.Add(p.ttl)
	if ok && e.Expires.After(exp) {
		exp = e.Expires
	}
	e.Ann, e.Seen, e.Expires = a, now, exp
	p.gone.returned(a.NodeId)
	for _, s := range a.Services {
		parts := p.ever[s.Name]
		if parts == nil {
			parts = map[int32]bool{}
			p.ever[s.Name] = parts
		}
		for _, part := range s.Partitions {
			parts[part] = true
		}
	}
	if e.excluded && (a.Incarnation != prevInc || a.Seq > e.excludedSeq) {
		e.excluded = false
	}
	return true
}

// notAfter reports whether a is no newer than the announcement
// (inc, seq): an older incarnation, or the same one with a sequence
// number not above seq. It orders a node's announcements everywhere: the
// pages, the skip before a signature check, and the refutation of an
// impostor.
func notAfter(a *pb.Announcement, inc int64, seq uint64) bool {
	return a.Incarnation < inc || a.Incarnation == inc && a.Seq <= seq
}

// Touch records that node's author vouched again, at seen, for the
// announcement the pages hold (same incarnation and sequence number: an
// unchanged announcement sent again, or relayed): the entry counts as
// seen then and lives a TTL from it. fromAuthor (the announcement came
// straight from its node) also lifts an exclusion, as a new announcement
// would. It reports whether the pages hold that announcement, live.
func (p *Pages) Touch(now time.Time, a *pb.Announcement, seen time.Time, fromAuthor bool) bool {
	e, ok := p.entries[a.NodeId]
	if !ok || now.After(e.Expires) || e.Ann.Incarnation != a.Incarnation || e.Ann.Seq != a.Seq {
		return false
	}
	if seen.After(e.Seen) {
		e.Seen = seen
	}
	if exp := seen.Add(p.ttl); exp.After(e.Expires) {
		e.Expires = exp
	}
	if fromAuthor {
		e.excluded = false
	}
	return true
}

// Keep extends the life of the entries of nodes a failure detector
// vouches for (memberlist's live members) to a TTL from now: liveness
// comes from it, so an entry whose author announces rarely does not
// expire while its node is up.
func (p *Pages) Keep(now time.Time, live func(node string) bool) {
	exp := now.Add(p.ttl)
	for id, e := range p.entries {
		// Also an entry past its time (one learnt aged from a state
		// exchange, between two ticks): the detector vouches for it.
		if exp.After(e.Expires) && live(id) {
			e.Expires = exp
		}
	}
}

// Remove forgets node at once (memberlist dropped it: why) and
// remembers it as departed.
func (p *Pages) Remove(now time.Time, node, why string) {
	if e, ok := p.entries[node]; ok {
		p.gone.add(minTime(now, e.Expires), e, why)
		delete(p.entries, node)
		return
	}
	p.gone.reason(node, why)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Exclude hides node from lookups until it announces itself again.
func (p *Pages) Exclude(node string) {
	if e, ok := p.entries[node]; ok {
		e.excluded, e.excludedSeq = true, e.Ann.Seq
	}
}

// Expire drops every entry whose TTL has run out and returns their ids.
func (p *Pages) Expire(now time.Time) []string {
	var gone []string
	for id, e := range p.entries {
		if now.After(e.Expires) {
			gone = append(gone, id)
			p.gone.add(e.Expires, e, WhyExpired)
			delete(p.entries, id)
		}
	}
	slices.Sort(gone)
	return gone
}

// Replica is a node that can serve a service partition.
type Replica struct {
	Node     string
	RPCAddr  string
	PollAddr string
}

// Lookup is the answer to a yellow-pages query.
type Lookup struct {
	// Replicas are the live, non-excluded nodes hosting the partition,
	// sorted by node id.
	Replicas []Replica
	// ServiceKnown and PartitionKnown say whether the service, and this
	// partition of it, were ever announced: with no replicas, they tell an
	// unknown name from a dead one.
	ServiceKnown, PartitionKnown bool
	// Method is how a live node declares the method Lookup asked for, nil
	// if none does (Replicas leaves it nil).
	Method *pb.MethodInfo
}

// Replicas looks up the nodes serving service's partition.
func (p *Pages) Replicas(now time.Time, service string, partition int32) Lookup {
	return p.Lookup(now, service, partition, "")
}

// Lookup is Replicas plus how service declares method, from one pass over
// the entries.
func (p *Pages) Lookup(now time.Time, service string, partition int32, method string) Lookup {
	parts, serviceKnown := p.ever[service]
	var rs []Replica
	var mi *pb.MethodInfo
	for _, e := range p.entries {
		if now.After(e.Expires) {
			continue
		}
		for _, s := range e.Ann.Services {
			if s.Name != service {
				continue
			}
			if mi == nil && method != "" {
				mi = findMethod(s, method)
			}
			if e.excluded || !slices.Contains(s.Partitions, partition) {
				continue
			}
			rs = append(rs, Replica{Node: e.Ann.NodeId, RPCAddr: e.Ann.RpcAddr, PollAddr: e.Ann.PollAddr})
		}
	}
	slices.SortFunc(rs, func(a, b Replica) int { return cmp.Compare(a.Node, b.Node) })
	return Lookup{Replicas: rs, ServiceKnown: serviceKnown, PartitionKnown: parts[partition], Method: mi}
}

func findMethod(s *pb.HostedService, method string) *pb.MethodInfo {
	for _, m := range s.Methods {
		if m.Name == method {
			return m
		}
	}
	return nil
}

// Method returns how service declares method, from any live announcement.
func (p *Pages) Method(now time.Time, service, method string) (*pb.MethodInfo, bool) {
	for _, e := range p.entries {
		if now.After(e.Expires) {
			continue
		}
		for _, s := range e.Ann.Services {
			if s.Name != service {
				continue
			}
			for _, m := range s.Methods {
				if m.Name == method {
					return m, true
				}
			}
		}
	}
	return nil, false
}

// Snapshot returns the live entries sorted by node id.
func (p *Pages) Snapshot(now time.Time) []Entry {
	var out []Entry
	for _, e := range p.entries {
		if !now.After(e.Expires) {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Ann.NodeId, b.Ann.NodeId) })
	return out
}

// Departures returns the members that left the pages within
// DepartedRetention of now, sorted by node id: those removed or expired,
// and those whose TTL ran out but that Expire has not dropped yet, so a
// member is never in neither list.
func (p *Pages) Departures(now time.Time) []Departure {
	out := p.gone.list(now)
	n := len(out)
	for _, e := range p.entries {
		if now.After(e.Expires) {
			out = append(out, Departure{Node: e.Ann.NodeId, Ann: e.Ann, LastSeen: e.Seen, Left: e.Expires, Why: WhyExpired})
		}
	}
	if len(out) > n {
		slices.SortFunc(out, func(a, b Departure) int { return cmp.Compare(a.Node, b.Node) })
	}
	return out
}

// Excluded reports whether node is currently hidden after a failed call.
func (p *Pages) Excluded(node string) bool {
	e, ok := p.entries[node]
	return ok && e.excluded
}
