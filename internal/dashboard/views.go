package dashboard

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
)

// Filter narrows every view: by service, partition and node, from the
// query parameters of the same names (empty or -1: no filter).
type Filter struct {
	Service   string `json:"service,omitempty"`
	Partition int    `json:"partition"` // -1: all
	Node      string `json:"node,omitempty"`
}

func parseFilter(q url.Values) Filter {
	f := Filter{Service: strings.TrimSpace(q.Get("service")), Node: strings.TrimSpace(q.Get("node")), Partition: -1}
	if p, err := strconv.Atoi(strings.TrimSpace(q.Get("partition"))); err == nil && p >= 0 {
		f.Partition = p
	}
	return f
}

// Query is the filter as query parameters, for links that keep it.
func (f Filter) Query() string {
	q := url.Values{}
	if f.Service != "" {
		q.Set("service", f.Service)
	}
	if f.Partition >= 0 {
		q.Set("partition", strconv.Itoa(f.Partition))
	}
	if f.Node != "" {
		q.Set("node", f.Node)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func (f Filter) service(s string) bool { return f.Service == "" || f.Service == s }
func (f Filter) node(n string) bool    { return f.Node == "" || f.Node == n }
func (f Filter) partition(p int) bool  { return f.Partition < 0 || f.Partition == p }

// Member states: alive (announced within two intervals), suspect (older,
// but still within the TTL) and dead (gone from the yellow pages: expired
// or declared dead by the failure detector; kept greyed for a while).
const (
	StateAlive   = "alive"
	StateSuspect = "suspect"
	StateDead    = "dead"
)

// RoleGone is the role shown for a replica no longer announced: its node
// died or it moved. Its version is the last one announced.
const RoleGone = "gone"

// ClusterView is the Cluster view and its JSON twin.
type ClusterView struct {
	Self    string      `json:"self"`
	At      time.Time   `json:"at"`
	TTLMs   int64       `json:"ttl_ms"`
	Filter  Filter      `json:"filter"`
	Members []MemberRow `json:"members"`
	// Alive, Suspect and Dead count the members by state (before filtering).
	Alive   int    `json:"alive"`
	Suspect int    `json:"suspect"`
	Dead    int    `json:"dead"`
	Note    string `json:"note,omitempty"`
}

// MemberRow is one member in the Cluster view.
type MemberRow struct {
	Node        string `json:"node"`
	State       string `json:"state"`
	Self        bool   `json:"self"`
	RPCAddr     string `json:"rpc_addr"`
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// AgeMs is the age of its last announcement: for a dead member, how
	// long ago it was last seen.
	AgeMs    int64         `json:"age_ms"`
	RSSBytes int64         `json:"rss_bytes"`
	Services []ServiceLoad `json:"services"`
	// Why a dead member left the yellow pages (membership.WhyGone,
	// WhyExpired), if known.
	Why string `json:"why,omitempty"`
}

// ServiceLoad is a member's load for one service: the sum of the polled
// load indexes of its partitions (late polls left out).
type ServiceLoad struct {
	Name       string `json:"name"`
	Partitions []int  `json:"partitions"`
	Load       int    `json:"load"`
	Late       int    `json:"late"` // partitions whose poll was late
}

// Age is the member's announcement age for display.
func (m MemberRow) Age() string { return fmtMs(m.AgeMs) }

// RSS is the resident memory for display.
func (m MemberRow) RSS() string {
	if m.RSSBytes <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", float64(m.RSSBytes)/(1<<20))
}

// PartitionsView is the Partitions view and its JSON twin.
type PartitionsView struct {
	Self       string         `json:"self"`
	At         time.Time      `json:"at"`
	Filter     Filter         `json:"filter"`
	Partitions []PartitionRow `json:"partitions"`
	// Total, NoPrimary and Stale count partitions, partitions without a
	// primary and replicas beyond the staleness bound (after filtering).
	Total     int    `json:"total"`
	NoPrimary int    `json:"no_primary"`
	Stale     int    `json:"stale"`
	Note      string `json:"note,omitempty"`
}

// PartitionRow is one replicated partition.
type PartitionRow struct {
	Service   string `json:"service"`
	Partition int    `json:"partition"`
	Level     int    `json:"level"`
	Primary   string `json:"primary"` // "" if none is announced
	Epoch     uint64 `json:"epoch"`
	// LeaseMs is the primary's remaining lease; -1 when the status carries
	// none.
	LeaseMs int64 `json:"lease_ms"`
	// PrimaryStale says why the primary's claim no longer holds: its
	// lease lapsed with no newer announcement (it stopped announcing:
	// paused, killed, cut off); "" while it holds.
	PrimaryStale string       `json:"primary_stale,omitempty"`
	StalenessMs  int64        `json:"staleness_ms,omitempty"`
	Replicas     []ReplicaRow `json:"replicas"`
}

// Lease is the remaining lease for display.
func (p PartitionRow) Lease() string {
	if p.LeaseMs < 0 {
		return "—"
	}
	return fmtMs(p.LeaseMs)
}

// ReplicaRow is one replica in a PartitionRow.
type ReplicaRow struct {
	Node    string `json:"node"`
	Role    string `json:"role"`
	Epoch   uint64 `json:"epoch"`
	Version uint64 `json:"version"`
	Commit  uint64 `json:"commit"`
	// Lag is how many versions the replica is behind the primary (0
	// without a primary).
	Lag uint64 `json:"lag"`
	// Stale: beyond the staleness bound (below the level-3 primary's
	// version of Staleness ago) or recovering.
	Stale bool `json:"stale"`
	// Claim (a primary) is "lapsed" (its lease ran out with no newer
	// announcement) or "superseded" (a primary of a higher epoch is
	// announced); "" while its claim holds.
	Claim string `json:"claim,omitempty"`
	// Contact is "lost-contact" or "no-quorum" when the replica announced
	// it lost touch with its primary or majority, LostMs for how long.
	Contact string `json:"contact,omitempty"`
	LostMs  int64  `json:"lost_ms,omitempty"`
}

// ContactText is the replica's contact loss for display ("" if none).
func (r ReplicaRow) ContactText() string {
	if r.Contact == "" {
		return ""
	}
	return r.Contact + " " + fmtMs(r.LostMs)
}

// goneMember is a member no longer in the yellow pages: when it was last
// seen and why it left, if known.
type goneMember struct {
	m    client.Member
	last time.Time
	why  string
}

// buildCluster assembles the Cluster view: the live members and, greyed,
// those gone from the yellow pages.
func buildCluster(self string, now time.Time, ttl, interval time.Duration, f Filter, live []client.Member, gone []goneMember, rss map[string]int64) ClusterView {
	v := ClusterView{Self: self, At: now, TTLMs: ttl.Milliseconds(), Filter: f, Members: []MemberRow{}}
	here := map[string]bool{}
	rows := make([]MemberRow, 0, len(live)+len(gone))
	add := func(m client.Member, state string, age time.Duration, why string) {
		row := MemberRow{Node: m.Node, State: state, Self: m.Node == self, RPCAddr: m.RPCAddr, MetricsAddr: m.MetricsAddr,
			AgeMs: age.Milliseconds(), RSSBytes: rss[m.Node], Services: []ServiceLoad{}, Why: why}
		if state == StateDead {
			row.RSSBytes = 0
		}
		for _, s := range m.Services {
			sl := ServiceLoad{Name: s.Name, Partitions: s.Partitions}
			for _, p := range s.Partitions {
				if l, ok := s.Load[p]; ok && l >= 0 {
					sl.Load += l
				} else if state != StateDead {
					sl.Late++
				}
			}
			row.Services = append(row.Services, sl)
		}
		switch state {
		case StateAlive:
			v.Alive++
		case StateSuspect:
			v.Suspect++
		default:
			v.Dead++
		}
		rows = append(rows, row)
	}
	for _, m := range live {
		here[m.Node] = true
		state := StateAlive
		if m.Age > 2*interval {
			state = StateSuspect
		}
		add(m, state, m.Age, "")
	}
	for _, g := range gone {
		if !here[g.m.Node] {
			here[g.m.Node] = true
			add(g.m, StateDead, now.Sub(g.last), g.why)
		}
	}
	slices.SortFunc(rows, func(a, b MemberRow) int { return strings.Compare(a.Node, b.Node) })
	for _, r := range rows {
		if !f.node(r.Node) || !hostsMatch(r.Services, f) {
			continue
		}
		v.Members = append(v.Members, r)
	}
	return v
}

func hostsMatch(ss []ServiceLoad, f Filter) bool {
	if f.Service == "" && f.Partition < 0 {
		return true
	}
	for _, s := range ss {
		if f.service(s.Name) && (f.Partition < 0 || slices.Contains(s.Partitions, f.Partition)) {
			return true
		}
	}
	return false
}

// buildPartitions assembles the Partitions view.
// staleness gives a service's level-3 bound if known (nil: unknown).
func buildPartitions(self string, now time.Time, f Filter, parts []client.PartitionInfo, staleness func(string) time.Duration) PartitionsView {
	v := PartitionsView{Self: self, At: now, Filter: f, Partitions: []PartitionRow{}}
	for _, p := range parts {
		if !f.service(p.Service) || !f.partition(p.Partition) {
			continue
		}
		if f.Node != "" && !slices.ContainsFunc(p.Replicas, func(r client.ReplicaInfo) bool { return r.Node == f.Node }) {
			continue
		}
		row := PartitionRow{Service: p.Service, Partition: p.Partition, Level: p.Level, LeaseMs: -1,
			Replicas: make([]ReplicaRow, 0, len(p.Replicas))}
		// The primary is the replica announcing itself primary in the
		// highest epoch: during a failover an old primary may still be in
		// the yellow pages for up to a TTL.
		if staleness != nil {
			row.StalenessMs = staleness(p.Service).Milliseconds()
		}
		var prim *client.ReplicaInfo
		for i := range p.Replicas {
			r := &p.Replicas[i]
			if r.Role == RoleGone {
				continue
			}
			row.Epoch = max(row.Epoch, r.Epoch)
			if r.Role == "primary" && (prim == nil || r.Epoch > prim.Epoch) {
				prim = r
			}
		}
		if prim != nil {
			row.Primary = prim.Node
			if prim.Lease != 0 {
				row.LeaseMs = prim.Lease.Milliseconds()
			}
			if lapsed(now, *prim) {
				row.PrimaryStale, row.LeaseMs = fmt.Sprintf("lease lapsed %s ago", fmtMs(now.Sub(prim.LeaseUntil).Milliseconds())), -1
			}
		} else {
			v.NoPrimary++
		}
		for _, r := range p.Replicas {
			rr := ReplicaRow{Node: r.Node, Role: r.Role, Epoch: r.Epoch, Version: r.Version, Commit: r.Commit}
			if r.Role == RoleGone {
				row.Replicas = append(row.Replicas, rr)
				continue
			}
			switch {
			case r.Role == "primary" && prim != nil && r.Epoch < prim.Epoch:
				rr.Claim = "superseded"
			case r.Role == "primary" && lapsed(now, r):
				rr.Claim = "lapsed"
			}
			if r.Contact != "" {
				rr.Contact, rr.LostMs = r.Contact, max(now.Sub(r.LostSince).Milliseconds(), 0)
			}
			if prim != nil && prim.Version > r.Version {
				rr.Lag = prim.Version - r.Version
			}
			rr.Stale = r.Role == "recovering" || (prim != nil && prim.VersionAgo > 0 && r.Version < prim.VersionAgo)
			if rr.Stale {
				v.Stale++
			}
			row.Replicas = append(row.Replicas, rr)
		}
		slices.SortFunc(row.Replicas, func(a, b ReplicaRow) int { return strings.Compare(a.Node, b.Node) })
		v.Partitions = append(v.Partitions, row)
	}
	slices.SortFunc(v.Partitions, func(a, b PartitionRow) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), cmp.Compare(a.Partition, b.Partition))
	})
	v.Total = len(v.Partitions)
	return v
}

// lapsed reports whether r's announced lease had lapsed at now with no
// newer announcement (membership.Claim.Lapsed).
func lapsed(now time.Time, r client.ReplicaInfo) bool {
	return !r.LeaseUntil.IsZero() && !now.Before(r.LeaseUntil)
}

func fmtMs(ms int64) string {
	switch {
	case ms < 0:
		return "—"
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	default:
		return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
	}
}

// num formats a rate or value compactly; NaN as "—".
func num(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "—"
	case x == math.Trunc(x) && math.Abs(x) < 1e6:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case math.Abs(x) >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case math.Abs(x) >= 1:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
}
