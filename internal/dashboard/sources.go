package dashboard

import (
	"context"
	"time"
)

// The dashboard reads everything it shows through the small interfaces
// below, one per kind of data, so a node, a gateway and a test each plug
// in what they have. A nil source hides its view's data and says so.

// MemberSource lists the live members of the yellow pages as the process
// serving the dashboard sees them (every entry younger than the TTL). It
// should answer from memory: loads, which take the network, come from a
// LoadSource, one member at a time.
type MemberSource interface {
	Members(ctx context.Context) ([]Member, error)
}

// LoadSource polls one member's load index for every partition it hosts:
// service → partition → load; a partition left out counts as late. The
// dashboard polls members concurrently, each under its own deadline in
// ctx, which Load must honour.
type LoadSource interface {
	Load(ctx context.Context, m Member) map[string]map[int]int
}

// DepartedSource lists the members that left the yellow pages recently
// (membership's bounded memory of them), so a dashboard opened after a
// node died still shows that node, greyed.
type DepartedSource interface {
	Departed(ctx context.Context) ([]Departed, error)
}

// Departed is a member that left the yellow pages: its last announced
// addresses and services, when its last announcement arrived and why it
// left (membership.WhyGone or WhyExpired).
type Departed struct {
	Member
	LastSeen time.Time
	Why      string
}

// PartitionSource lists the replicated partitions with their replicas'
// announced status.
type PartitionSource interface {
	Partitions(ctx context.Context) ([]Partition, error)
}

// SubscriberSource is a gateway's per-subscriber state (its
// /api/subscribers data).
type SubscriberSource interface {
	Subscribers(ctx context.Context) (Subscribers, error)
}

// RSSSource reports a member's resident memory in bytes (0 if unknown);
// PeerRSS fetches it from the member's own dashboard.
type RSSSource interface {
	RSS(ctx context.Context, m Member) int64
}

// Member is one node in the yellow pages.
type Member struct {
	Node        string        `json:"node"`
	RPCAddr     string        `json:"rpc_addr"`
	PollAddr    string        `json:"-"`
	MetricsAddr string        `json:"metrics_addr,omitempty"`
	Age         time.Duration `json:"-"` // since its last announcement
	Services    []Hosted      `json:"services"`
}

// Hosted is a service a member hosts.
type Hosted struct {
	Name       string `json:"name"`
	Partitions []int  `json:"partitions"`
	// Load is the polled load index per partition; -1 if the poll was late.
	Load map[int]int `json:"load,omitempty"`
}

// Partition is a replicated partition and its replicas.
type Partition struct {
	Service   string `json:"service"`
	Partition int    `json:"partition"`
	Level     int    `json:"level"`
	// Staleness is the service's bound x (level 3), 0 if unknown here.
	Staleness time.Duration `json:"-"`
	Replicas  []Replica     `json:"replicas"`
}

// Replica is one replica's announced status.
type Replica struct {
	Node    string `json:"node"`
	Role    string `json:"role"` // primary, secondary, recovering
	Epoch   uint64 `json:"epoch"`
	Primary string `json:"primary"` // the primary this replica knows of
	Version uint64 `json:"version"`
	Commit  uint64 `json:"commit"`
	// VersionAgo is a level-3 primary's committed version Staleness ago:
	// a replica below it is beyond the staleness bound.
	VersionAgo uint64 `json:"version_ago,omitempty"`
	// Lease is the primary's remaining lease, if the status carries one
	// (HasLease).
	Lease    time.Duration `json:"-"`
	HasLease bool          `json:"-"`
	// LeaseUntil (a primary that announced a lease) is when its claim
	// lapses without a newer announcement, by this process's clock
	// (membership.Claim).
	LeaseUntil time.Time `json:"-"`
	// Contact is "lost-contact", "no-quorum" or "" (membership.Claim);
	// LostSince since when, by this process's clock.
	Contact   string    `json:"-"`
	LostSince time.Time `json:"-"`
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
