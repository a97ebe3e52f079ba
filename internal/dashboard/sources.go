package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
)

// The dashboard reads everything it shows through the small interfaces
// below, one per kind of data, so a node, a gateway and a test each plug
// in what they have. A nil source hides its view's data and says so.
// They carry the client's own types (client.Member, client.PartitionInfo,
// client.Departed): a node and a gateway hand over what their client
// lists, unconverted.

// MemberSource lists the live members of the yellow pages as the process
// serving the dashboard sees them (every entry younger than the TTL). It
// should answer from memory: loads, which take the network, come from a
// LoadSource, one member at a time.
type MemberSource interface {
	Members(ctx context.Context) ([]client.Member, error)
}

// LoadSource polls one member's load index for every partition it hosts
// into m's Load maps (service → partition → load), which are the
// dashboard's own copy with every load -1: a partition left at -1 counts
// as late. The dashboard polls members concurrently, each under its own
// deadline in ctx, which PollLoad must honour (client.Client.PollLoad
// does).
type LoadSource interface {
	PollLoad(ctx context.Context, m client.Member)
}

// DepartedSource lists the members that left the yellow pages recently
// (membership's bounded memory of them, as client.Client.Departed reads
// it), so a dashboard opened after a node died still shows that node,
// greyed, and its replicas as gone.
type DepartedSource interface {
	Departed(ctx context.Context) ([]client.Departed, error)
}

// PartitionSource lists the replicated partitions with their replicas'
// announced status (client.Client.Partitions).
type PartitionSource interface {
	Partitions(ctx context.Context) ([]client.PartitionInfo, error)
}

// SubscriberSource is a gateway's per-subscriber state (its
// /api/subscribers data).
type SubscriberSource interface {
	Subscribers(ctx context.Context) (Subscribers, error)
}

// RSSSource reports a member's resident memory in bytes (0 if unknown);
// PeerRSS fetches it from the member's own dashboard.
type RSSSource interface {
	RSS(ctx context.Context, m client.Member) int64
}

// Subscribers is a gateway's view of its subscribers.
type Subscribers struct {
	Gateway     string       `json:"gateway"`
	Gateways    []string     `json:"gateways"`
	CapacityGRU float64      `json:"capacity_grps"`
	Subscribers []Subscriber `json:"subscribers"`
}

// Subscriber is one subscriber at a gateway (gateway.SubscriberStatus).
type Subscriber struct {
	Name       string  `json:"name"`
	Reserved   float64 `json:"reserved_grps"`
	Limit      float64 `json:"limit_grps,omitempty"`
	Share      float64 `json:"share"`
	DemandGRPS float64 `json:"demand_grps"`
	Demanded   int64   `json:"demanded"`
	Served     int64   `json:"served"`
	Dropped    int64   `json:"dropped"`
}

// Funcs adapts plain functions to the sources.
type (
	MembersFunc     func(ctx context.Context) ([]client.Member, error)
	PartitionsFunc  func(ctx context.Context) ([]client.PartitionInfo, error)
	SubscribersFunc func(ctx context.Context) (Subscribers, error)
	LoadFunc        func(ctx context.Context, m client.Member)
	DepartedFunc    func(ctx context.Context) ([]client.Departed, error)
)

// PollLoad calls f.
func (f LoadFunc) PollLoad(ctx context.Context, m client.Member) { f(ctx, m) }

// Departed calls f.
func (f DepartedFunc) Departed(ctx context.Context) ([]client.Departed, error) { return f(ctx) }

// Members calls f.
func (f MembersFunc) Members(ctx context.Context) ([]client.Member, error) { return f(ctx) }

// Partitions calls f.
func (f PartitionsFunc) Partitions(ctx context.Context) ([]client.PartitionInfo, error) {
	return f(ctx)
}

// Subscribers calls f.
func (f SubscribersFunc) Subscribers(ctx context.Context) (Subscribers, error) { return f(ctx) }

// withDeparted adds to ps, as role "gone" with their last announced
// status, the replicas of members that left the yellow pages: a
// dashboard opened after a node died still shows which replica the
// failover lost. A partition none of whose replicas is left is added.
func withDeparted(ps []client.PartitionInfo, ds []client.Departed) []client.PartitionInfo {
	type key struct {
		svc  string
		part int
	}
	ps = slices.Clone(ps) // the source's listing stays as it was
	at := map[key]int{}
	for i, p := range ps {
		at[key{p.Service, p.Partition}] = i
	}
	for _, d := range ds {
		for _, p := range d.Partitions {
			k := key{p.Service, p.Partition}
			i, ok := at[k]
			if !ok {
				i = len(ps)
				at[k] = i
				ps = append(ps, client.PartitionInfo{Service: p.Service, Partition: p.Partition, Level: p.Level, Linearizable: p.Linearizable})
			}
			for _, r := range p.Replicas {
				ps[i].Replicas = append(slices.Clip(ps[i].Replicas), client.ReplicaInfo{Node: r.Node, Role: RoleGone, Epoch: r.Epoch, Primary: r.Primary, Version: r.Version, Commit: r.Commit})
			}
		}
	}
	return ps
}

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
func (p PeerRSS) RSS(ctx context.Context, m client.Member) int64 {
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
