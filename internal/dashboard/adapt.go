package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Adapters from what nodes and gateways already have to the dashboard's
// sources, so their wiring stays one line each.

// FromClientMembers converts a client's member listing (Client.Members).
func FromClientMembers(ms []client.Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		dm := Member{Node: m.Node, RPCAddr: m.RPCAddr, PollAddr: m.PollAddr, MetricsAddr: m.MetricsAddr, Age: m.Age}
		for _, s := range m.Services {
			dm.Services = append(dm.Services, Hosted{Name: s.Name, Partitions: s.Partitions, Load: s.Load})
		}
		out = append(out, dm)
	}
	return out
}

// ToClientMember converts back, for polling its load (Client.PollLoad):
// every load -1 until answered.
func ToClientMember(m Member) client.Member {
	cm := client.Member{Node: m.Node, RPCAddr: m.RPCAddr, PollAddr: m.PollAddr, MetricsAddr: m.MetricsAddr, Age: m.Age}
	for _, s := range m.Services {
		hs := client.HostedService{Name: s.Name, Partitions: s.Partitions, Load: map[int]int{}}
		for _, p := range s.Partitions {
			hs.Load[p] = -1
		}
		cm.Services = append(cm.Services, hs)
	}
	return cm
}

// LoadsOf is a polled member's loads as a LoadSource returns them: late
// polls (-1) left out.
func LoadsOf(m client.Member) map[string]map[int]int {
	out := map[string]map[int]int{}
	for _, s := range m.Services {
		for p, l := range s.Load {
			if l < 0 {
				continue
			}
			if out[s.Name] == nil {
				out[s.Name] = map[int]int{}
			}
			out[s.Name][p] = l
		}
	}
	return out
}

// FromDeparted converts the yellow pages' departed members
// (membership.Gossip.Departed).
func FromDeparted(ds []membership.Departed) []Departed {
	out := make([]Departed, 0, len(ds))
	for _, d := range ds {
		m := Member{Node: d.Node, RPCAddr: d.Ann.GetRpcAddr(), PollAddr: d.Ann.GetPollAddr(), MetricsAddr: d.Ann.GetMetricsAddr()}
		for _, s := range d.Ann.GetServices() {
			h := Hosted{Name: s.GetName()}
			for _, p := range s.GetPartitions() {
				h.Partitions = append(h.Partitions, int(p))
			}
			m.Services = append(m.Services, h)
		}
		out = append(out, Departed{Member: m, LastSeen: d.LastSeen, Why: d.Why})
	}
	return out
}

// FromClientDeparted converts a client's departed members
// (Client.Departed).
func FromClientDeparted(ds []client.Departed) []Departed {
	out := make([]Departed, 0, len(ds))
	for _, d := range ds {
		m := Member{Node: d.Node, RPCAddr: d.RPCAddr, PollAddr: d.PollAddr, MetricsAddr: d.MetricsAddr}
		for _, s := range d.Services {
			m.Services = append(m.Services, Hosted{Name: s.Name, Partitions: s.Partitions})
		}
		out = append(out, Departed{Member: m, LastSeen: d.LastSeen, Why: d.Why})
	}
	return out
}

// FromClientPartitions converts a client's partition listing
// (Client.Partitions): a primary's lease as announced and, at level 3,
// its version of Staleness ago, which marks replicas beyond the bound
// (the bound itself is not announced, so it is not shown).
func FromClientPartitions(ps []client.PartitionInfo) []Partition {
	out := make([]Partition, 0, len(ps))
	for _, p := range ps {
		dp := Partition{Service: p.Service, Partition: p.Partition, Level: p.Level}
		for _, r := range p.Replicas {
			dp.Replicas = append(dp.Replicas, Replica{Node: r.Node, Role: r.Role, Epoch: r.Epoch, Primary: r.Primary, Version: r.Version, Commit: r.Commit,
				VersionAgo: r.VersionAgo, Lease: r.Lease, HasLease: r.Lease != 0, LeaseUntil: r.LeaseUntil, Contact: r.Contact, LostSince: r.LostSince})
		}
		out = append(out, dp)
	}
	return out
}

// FromPages builds the partitions from the yellow pages' announcements,
// which carry what the client's listing drops: a level-3 primary's version
// of Staleness ago and, when the status has one, the primary's lease.
// staleness gives a service's bound if known here (nil: unknown).
func FromPages(now time.Time, entries []membership.Entry, staleness func(service string) time.Duration) []Partition {
	type key struct {
		svc  string
		part int32
	}
	byKey := map[key]*Partition{}
	for _, e := range entries {
		age := now.Sub(e.Seen)
		for _, s := range e.Ann.GetServices() {
			for _, r := range s.GetReplicas() {
				k := key{s.GetName(), r.GetPartition()}
				p := byKey[k]
				if p == nil {
					p = &Partition{Service: k.svc, Partition: int(k.part), Level: int(r.GetLevel())}
					if staleness != nil {
						p.Staleness = staleness(k.svc)
					}
					byKey[k] = p
				}
				lease, has := LeaseOf(r)
				if has {
					lease = max(lease-age, 0) // announced age ago
				}
				claim := membership.ReadClaim(e.Seen, r)
				p.Replicas = append(p.Replicas, Replica{Node: e.Ann.GetNodeId(), Role: replica.Role(r.GetRole()).String(), Epoch: r.GetEpoch(),
					Primary: r.GetPrimary(), Version: r.GetVersion(), Commit: r.GetCommit(), VersionAgo: r.GetVersionAgo(), Lease: lease, HasLease: has,
					LeaseUntil: claim.LeaseUntil, Contact: claim.Contact, LostSince: claim.LostSince})
			}
		}
	}
	out := make([]Partition, 0, len(byKey))
	for _, p := range byKey {
		slices.SortFunc(p.Replicas, func(a, b Replica) int { return strings.Compare(a.Node, b.Node) })
		out = append(out, *p)
	}
	return out
}

// WithDeparted adds to ps, as role "gone" with their last announced
// status, the replicas of members that left the yellow pages
// (membership.Gossip.Departed): a dashboard opened after a node died
// still shows which replica the failover lost.
func WithDeparted(ps []Partition, ds []membership.Departed) []Partition {
	var gone []goneReplica
	for _, d := range ds {
		for _, s := range d.Ann.GetServices() {
			for _, r := range s.GetReplicas() {
				gone = append(gone, goneReplica{service: s.GetName(), partition: int(r.GetPartition()), level: int(r.GetLevel()),
					r: Replica{Node: d.Node, Role: RoleGone, Epoch: r.GetEpoch(), Primary: r.GetPrimary(), Version: r.GetVersion(), Commit: r.GetCommit()}})
			}
		}
	}
	return addGone(ps, gone)
}

// WithClientDeparted is WithDeparted for a client's departed members
// (Client.Departed), which is all a gateway has.
func WithClientDeparted(ps []Partition, ds []client.Departed) []Partition {
	var gone []goneReplica
	for _, d := range ds {
		for _, p := range d.Partitions {
			for _, r := range p.Replicas {
				gone = append(gone, goneReplica{service: p.Service, partition: p.Partition, level: p.Level,
					r: Replica{Node: r.Node, Role: RoleGone, Epoch: r.Epoch, Primary: r.Primary, Version: r.Version, Commit: r.Commit}})
			}
		}
	}
	return addGone(ps, gone)
}

// goneReplica is a departed member's replica of a partition.
type goneReplica struct {
	service          string
	partition, level int
	r                Replica
}

// addGone adds the gone replicas to their partitions in ps, creating a
// partition none of whose replicas is left.
func addGone(ps []Partition, gone []goneReplica) []Partition {
	type key struct {
		svc  string
		part int
	}
	at := map[key]int{}
	for i, p := range ps {
		at[key{p.Service, p.Partition}] = i
	}
	for _, g := range gone {
		k := key{g.service, g.partition}
		i, ok := at[k]
		if !ok {
			i = len(ps)
			at[k] = i
			ps = append(ps, Partition{Service: k.svc, Partition: k.part, Level: g.level})
		}
		ps[i].Replicas = append(ps[i].Replicas, g.r)
	}
	return ps
}

// LeaseOf reads a replica status's remaining lease (lease_ms, as it was
// announced); false when it holds none.
func LeaseOf(r *pb.ReplicaStatus) (time.Duration, bool) {
	ms := r.GetLeaseMs()
	return time.Duration(ms) * time.Millisecond, ms != 0
}

// Funcs adapts plain functions to the sources.
type (
	MembersFunc     func(ctx context.Context) ([]Member, error)
	PartitionsFunc  func(ctx context.Context) ([]Partition, error)
	SubscribersFunc func(ctx context.Context) (Subscribers, error)
	LoadFunc        func(ctx context.Context, m Member) map[string]map[int]int
	DepartedFunc    func(ctx context.Context) ([]Departed, error)
)

// Load calls f.
func (f LoadFunc) Load(ctx context.Context, m Member) map[string]map[int]int { return f(ctx, m) }

// Departed calls f.
func (f DepartedFunc) Departed(ctx context.Context) ([]Departed, error) { return f(ctx) }

// Members calls f.
func (f MembersFunc) Members(ctx context.Context) ([]Member, error) { return f(ctx) }

// Partitions calls f.
func (f PartitionsFunc) Partitions(ctx context.Context) ([]Partition, error) { return f(ctx) }

// Subscribers calls f.
func (f SubscribersFunc) Subscribers(ctx context.Context) (Subscribers, error) { return f(ctx) }

// peerClient keeps idle connections to peers only briefly, so that a
// dashboard nobody watches holds no connection goroutines for long.
var peerClient = &http.Client{Transport: &http.Transport{IdleConnTimeout: 5 * time.Second, MaxIdleConnsPerHost: 1}}

// PeerRSS reads other members' resident memory from their own dashboards
// (/api/dashboard/self on their metrics address), each within Timeout.
type PeerRSS struct {
	// Client defaults to one without TLS; on a secured cluster it
	// presents the member's certificate (peers' dashboards admit nodes
	// on /api/dashboard/self) and Scheme is "https".
	Client *http.Client
	Scheme string // default "http"

	Timeout time.Duration // default 300 ms
}

// RSS fetches m's resident memory; 0 if it has no metrics address or does
// not answer in time.
func (p PeerRSS) RSS(ctx context.Context, m Member) int64 {
	if m.MetricsAddr == "" {
		return 0
	}
	to := p.Timeout
	if to <= 0 {
		to = 300 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%sself", cmp.Or(p.Scheme, "http"), m.MetricsAddr, APIPrefix), nil)
	if err != nil {
		return 0
	}
	hc := p.Client
	if hc == nil {
		hc = peerClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st SelfStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	return st.RSSBytes
}
