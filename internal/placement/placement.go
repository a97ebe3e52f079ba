// Package placement decides where a replicated service's replicas live
// (issue 17): a node dead for longer than a grace period has its replicas
// re-created elsewhere, and when nodes join, replicas and primaries are
// evened out across nodes at a bounded rate. Replicas are spread across
// failure domains (a node's zone label) first, then onto the nodes with
// the fewest.
//
// It is a pure planner: no I/O, no clock, no goroutine. The caller (the
// replica-set change machinery) gives it the cluster as it is now (nodes
// with liveness, partitions with their replica sets) and the time, and
// carries out the changes it returns; calling it again with the new state
// yields the next ones. It keeps no state between calls, so a restarted
// or newly elected caller plans the same; equal inputs give equal plans
// (whatever the order of the slices).
//
// Moves are add-then-remove: a partition gets its new replica first, and
// a replica is removed only once the partition has its full degree of
// serving replicas without it. So a partition is never below its degree
// because of placement, only because of failures.
package placement

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Node is a cluster member as placement sees it.
type Node struct {
	ID   string
	Zone string // failure domain; "" is a zone of its own like any other
	// Alive: announced and not declared dead by membership.
	Alive bool
	// DownSince is when a node that is not alive was last seen alive.
	DownSince time.Time
	// Services, if set, are the only services the node can host a
	// replica of (nil: any).
	Services []string
}

// Partition is one partition of a replicated service.
type Partition struct {
	Service   string
	Partition int32
	// Degree is how many serving replicas it should have (the service's
	// replication degree); 0 means len(Replicas).
	Degree int
	// Replicas is the current replica set (the configuration), including
	// Joining ones.
	Replicas []string
	// Joining are replicas added to the set that have not caught up yet:
	// they do not count as serving.
	Joining []string
	// Primary is the replica that is primary now ("" if none).
	Primary string
}

// Kind is what a change does.
type Kind int

const (
	// Add a replica on Node (it joins, catches up, then serves).
	Add Kind = iota + 1
	// Remove the replica on Node.
	Remove
	// Lead hands the primary role to the replica on Node.
	Lead
)

func (k Kind) String() string {
	switch k {
	case Add:
		return "add"
	case Remove:
		return "remove"
	case Lead:
		return "lead"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Change is one step for the caller to carry out.
type Change struct {
	Service   string
	Partition int32
	Kind      Kind
	Node      string
	// From is, for an Add, the replica it replaces or moves ("" if
	// none): the new one takes its place, priority included.
	From string
	// Why, for logs and operators: "replace n3 (down 6m0s)", ...
	Why string
	// Rebalance marks a rebalancing step: when the caller starts it, it
	// records the time as State.LastStart.
	Rebalance bool
	// Surplus marks the removal of a serving replica beyond the degree
	// (the end of a move; or undoing an operator's add).
	Surplus bool
}

func (c Change) String() string {
	return fmt.Sprintf("%s/%d %s %s (%s)", c.Service, c.Partition, c.Kind, c.Node, c.Why)
}

// Config tunes automatic replica placement (issue 17): the planner's
// bounds and whether this node acts at all. It is the one definition:
// the public API aliases it (neptune.Placement) and the controller
// (internal/rebalance) and the node take it as it is. The zero value
// takes the defaults. Set it alike on every node.
type Config struct {
	// Off: this node never acts for automatic placement (it announces
	// so; another node hosting the service acts instead). Set it on
	// every node to turn automatic placement off. The planner itself
	// ignores it: the controller does not run it.
	Off bool
	// Grace is how long a node may be down before its replicas are
	// re-created elsewhere (default 5 minutes): a restart or a short
	// network partition should not ship a whole partition's state.
	Grace time.Duration
	// Interval is the least time between starting two rebalancing steps
	// (a move or a primary hand-off; default 30 s), so a growing cluster
	// evens out at a bounded rate. Replacing replicas of a dead node is
	// bound by MaxInFlight only.
	Interval time.Duration
	// MaxInFlight bounds the partitions with a move under way (a replica
	// joining, or one replica more than the degree) at once, across the
	// cluster (default 1): each move ships a partition's state.
	MaxInFlight int
}

// Validate refuses negative settings (0 takes the default).
func (c Config) Validate() error {
	if c.Grace < 0 || c.Interval < 0 || c.MaxInFlight < 0 {
		return fmt.Errorf("Grace (%v), Interval (%v) and MaxInFlight (%d) must be >= 0 (0: the default)", c.Grace, c.Interval, c.MaxInFlight)
	}
	return nil
}

// Defaults.
const (
	DefaultGrace       = 5 * time.Minute
	DefaultMaxInFlight = 1
	DefaultInterval    = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	return c
}

// State is the cluster as it is now.
type State struct {
	Nodes      []Node
	Partitions []Partition
	// LastStart is when the last rebalancing step (Change.Rebalance) was
	// started; zero: never.
	LastStart time.Time
}

// health of a replica's node.
type health int

const (
	up      health = iota // alive
	waiting               // down for less than the grace: it may come back
	gone                  // down for the grace or longer: replace it
)

// Plan returns the next changes, at most one per partition, in this
// order: removals that finish a move (always), replacements of replicas
// on gone nodes (up to MaxInFlight moves under way), then at most one
// rebalancing step, if no replacement is due, nothing is under way, no
// replica's node is down within the grace, and Interval has passed since
// LastStart: a replica moved from the node with the most to one with at
// least two fewer (its add; the removal follows once it serves), or else
// primaries handed from the node with the most to one with at least two
// fewer (a chain of hand-offs, see movePrimary).
//
// A node that hosts a replica but is missing from Nodes is taken as down
// for an unknown time: waited for, never replaced.
func Plan(now time.Time, st State, cfg Config) []Change {
	cfg = cfg.withDefaults()
	p := newPlanner(now, st, cfg)
	var out []Change
	busy := map[int]bool{} // partitions (index in p.parts) with a change planned
	inFlight := 0
	for i, pt := range p.parts {
		if pt.underWay() {
			inFlight++
		}
		if c, ok := p.finish(pt); ok {
			out = append(out, c)
			busy[i] = true
		}
	}
	// Replacements, the longest-down first.
	type need struct {
		i     int
		since time.Time
	}
	var needs []need
	for i, pt := range p.parts {
		if !busy[i] && !pt.underWay() && pt.short() > 0 {
			needs = append(needs, need{i, pt.downSince(p)})
		}
	}
	slices.SortStableFunc(needs, func(a, b need) int { return a.since.Compare(b.since) })
	for _, n := range needs {
		if inFlight >= cfg.MaxInFlight {
			break
		}
		pt := p.parts[n.i]
		target, ok := p.target(pt, "", nil)
		if !ok {
			continue
		}
		why, from := "restore degree", ""
		if g := pt.ofHealth(gone); len(g) > 0 {
			why, from = fmt.Sprintf("replace %s (down %v)", g[0], now.Sub(p.nodes[g[0]].DownSince).Round(time.Second)), g[0]
		}
		c := p.add(pt, target, why)
		c.From = from
		out = append(out, c)
		busy[n.i] = true
		inFlight++
	}
	if len(out) > 0 || len(needs) > 0 || inFlight > 0 || p.waiting() || !st.LastStart.IsZero() && now.Sub(st.LastStart) < cfg.Interval {
		return out
	}
	if c, ok := p.moveReplica(); ok {
		return append(out, c)
	}
	if cs, ok := p.movePrimary(); ok {
		return append(out, cs...)
	}
	return out
}

type planner struct {
	now      time.Time
	cfg      Config
	nodes    map[string]Node
	up       []string // alive nodes, sorted
	parts    []*part
	load     map[string]int // replicas per node
	primary  map[string]int // primaries per node
	hostedBy map[string][]*part
}

// part is a Partition with its replicas' health.
type part struct {
	Partition
	health  map[string]health
	joining map[string]bool
}

func newPlanner(now time.Time, st State, cfg Config) *planner {
	p := &planner{now: now, cfg: cfg, nodes: map[string]Node{}, load: map[string]int{}, primary: map[string]int{}, hostedBy: map[string][]*part{}}
	for _, n := range st.Nodes {
		p.nodes[n.ID] = n
		if n.Alive {
			p.up = append(p.up, n.ID)
		}
	}
	slices.Sort(p.up)
	for _, sp := range st.Partitions {
		pt := &part{Partition: sp, health: map[string]health{}, joining: map[string]bool{}}
		pt.Replicas = slices.Sorted(slices.Values(sp.Replicas))
		if pt.Degree <= 0 {
			pt.Degree = len(pt.Replicas)
		}
		for _, j := range sp.Joining {
			pt.joining[j] = true
		}
		p.parts = append(p.parts, pt)
	}
	slices.SortFunc(p.parts, func(a, b *part) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Partition.Partition, b.Partition.Partition))
	})
	for _, pt := range p.parts {
		for _, r := range pt.Replicas {
			n, known := p.nodes[r]
			switch {
			case known && n.Alive:
				pt.health[r] = up
			case known && !n.DownSince.IsZero() && now.Sub(n.DownSince) >= cfg.Grace:
				pt.health[r] = gone
			default:
				pt.health[r] = waiting
			}
			p.load[r]++
			p.hostedBy[r] = append(p.hostedBy[r], pt)
		}
		if pt.Primary != "" {
			p.primary[pt.Primary]++
		}
	}
	return p
}

// serving are the replicas on live nodes that caught up.
func (pt *part) serving() []string {
	var out []string
	for _, r := range pt.Replicas {
		if pt.health[r] == up && !pt.joining[r] {
			out = append(out, r)
		}
	}
	return out
}

func (pt *part) ofHealth(h health) []string {
	var out []string
	for _, r := range pt.Replicas {
		if pt.health[r] == h {
			out = append(out, r)
		}
	}
	return out
}

// settled: at its degree on live nodes, nothing under way: a move or a
// hand-off may start.
func (pt *part) settled() bool {
	return !pt.underWay() && pt.short() <= 0 && len(pt.ofHealth(waiting)) == 0 && len(pt.ofHealth(gone)) == 0
}

// underWay: a move is in progress (a replica joining on a node not
// gone, or one more than the degree waiting to be removed).
func (pt *part) underWay() bool {
	return slices.ContainsFunc(pt.Joining, func(j string) bool { return pt.health[j] != gone }) ||
		len(pt.Replicas)-len(pt.ofHealth(gone)) > pt.Degree
}

// short is how many replicas it lacks, counting those on nodes that may
// come back and those joining.
func (pt *part) short() int {
	return pt.Degree - (len(pt.Replicas) - len(pt.ofHealth(gone)))
}

func (pt *part) downSince(p *planner) time.Time {
	t := p.now
	for _, r := range pt.ofHealth(gone) {
		if d := p.nodes[r].DownSince; d.Before(t) {
			t = d
		}
	}
	return t
}

// waiting: some replica is on a node down for less than the grace; the
// cluster is not rebalanced meanwhile (it may come back, or be replaced).
func (p *planner) waiting() bool {
	for _, pt := range p.parts {
		if len(pt.ofHealth(waiting)) > 0 {
			return true
		}
	}
	return false
}

// finish plans the removal that completes a move: once the partition
// has its full degree of serving replicas, a replica on a gone node goes
// (its log no longer waits for it), or else, if it has more serving
// replicas than its degree, the one whose removal leaves the best spread.
//
// A joining replica on a gone node never catches up: it is removed
// first (while it stays, the partition counts as under way and would
// hold MaxInFlight for good).
func (p *planner) finish(pt *part) (Change, bool) {
	for _, j := range pt.Joining {
		if pt.health[j] == gone {
			return p.remove(pt, j, fmt.Sprintf("abandon the add: %s down %v", j, p.now.Sub(p.nodes[j].DownSince).Round(time.Second))), true
		}
	}
	serving := pt.serving()
	if len(serving) < pt.Degree || len(pt.Joining) > 0 {
		return Change{}, false
	}
	if g := pt.ofHealth(gone); len(g) > 0 {
		return p.remove(pt, g[0], fmt.Sprintf("replaced (down %v)", p.now.Sub(p.nodes[g[0]].DownSince).Round(time.Second))), true
	}
	if len(serving) <= pt.Degree || len(pt.ofHealth(waiting)) > 0 {
		return Change{}, false
	}
	// Remove the replica whose zone is most crowded in the partition,
	// then the one on the most loaded node, not the primary, highest id.
	victim := slices.MaxFunc(serving, func(a, b string) int {
		return cmp.Or(cmp.Compare(p.zoneCount(pt, a, ""), p.zoneCount(pt, b, "")),
			cmp.Compare(p.load[a], p.load[b]),
			cmp.Compare(boolInt(a != pt.Primary), boolInt(b != pt.Primary)),
			cmp.Compare(a, b))
	})
	c := p.remove(pt, victim, "rebalanced")
	c.Surplus = true
	return c, true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// zoneCount is how many of pt's replicas other than except and not gone
// are in node's zone.
func (p *planner) zoneCount(pt *part, node, except string) int {
	z := p.nodes[node].Zone
	n := 0
	for _, r := range pt.Replicas {
		if r != except && pt.health[r] != gone && p.nodes[r].Zone == z {
			n++
		}
	}
	return n
}

// zones is how many distinct zones pt's replicas (not gone) span, with
// from replaced by to ("" for neither).
func (p *planner) zones(pt *part, from, to string) int {
	seen := map[string]bool{}
	for _, r := range pt.Replicas {
		if r != from && pt.health[r] != gone {
			seen[p.nodes[r].Zone] = true
		}
	}
	if to != "" {
		seen[p.nodes[to].Zone] = true
	}
	return len(seen)
}

// target picks the live node for a new replica of pt (replacing from,
// or "" when adding) among those ok accepts (nil: all): one that holds
// none of pt's replicas, in the zone with the fewest of them, then with
// the fewest replicas, then the fewest primaries, then the lowest id.
func (p *planner) target(pt *part, from string, ok func(string) bool) (string, bool) {
	var cands []string
	for _, n := range p.up {
		if svcs := p.nodes[n].Services; svcs != nil && !slices.Contains(svcs, pt.Service) {
			continue
		}
		if !slices.Contains(pt.Replicas, n) && (ok == nil || ok(n)) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	return slices.MinFunc(cands, func(a, b string) int {
		return cmp.Or(cmp.Compare(p.zoneCount(pt, a, from), p.zoneCount(pt, b, from)),
			cmp.Compare(p.load[a], p.load[b]), cmp.Compare(p.primary[a], p.primary[b]), cmp.Compare(a, b))
	}), true
}

func (p *planner) add(pt *part, node, why string) Change {
	p.load[node]++
	return Change{Service: pt.Service, Partition: pt.Partition.Partition, Kind: Add, Node: node, Why: why}
}

func (p *planner) remove(pt *part, node, why string) Change {
	p.load[node]--
	return Change{Service: pt.Service, Partition: pt.Partition.Partition, Kind: Remove, Node: node, Why: why}
}

// moveReplica plans one replica move from the live node with the most
// replicas to one with at least two fewer, that keeps the partition's
// zone spread: the move's Add (its Remove follows from finish once the
// new replica serves). It prefers moving a secondary over the primary.
func (p *planner) moveReplica() (Change, bool) {
	srcs := slices.Clone(p.up)
	slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(p.load[b], p.load[a]) })
	for _, src := range srcs {
		hosted := slices.Clone(p.hostedBy[src])
		slices.SortStableFunc(hosted, func(a, b *part) int {
			return cmp.Compare(boolInt(a.Primary == src), boolInt(b.Primary == src))
		})
		for _, pt := range hosted {
			if pt.health[src] != up || pt.joining[src] || !pt.settled() {
				continue
			}
			spread := p.zones(pt, "", "")
			to, ok := p.target(pt, src, func(n string) bool {
				return p.load[n] <= p.load[src]-2 && p.zones(pt, src, n) >= spread
			})
			if !ok {
				continue
			}
			c := p.add(pt, to, "rebalance from "+src)
			c.From, c.Rebalance = src, true
			return c, true
		}
	}
	return Change{}, false
}

// movePrimary plans hand-offs that move one primary's worth of work
// from a node to one with at least two fewer primaries (which lowers the
// sum of squares of primaries per node, so it stops). A primary can only
// go to a serving replica of its partition, so when no replica of a
// busy node's partitions is on an idle node, it goes along a chain:
// partition 1's primary to node x, x's partition 2's primary to the idle
// node; x keeps its count. The chain is the shortest from the node with
// the most primaries (then the lowest id), found breadth first in a
// fixed order; its hand-offs are one step.
func (p *planner) movePrimary() ([]Change, bool) {
	srcs := slices.Clone(p.up)
	slices.SortStableFunc(srcs, func(a, b string) int { return cmp.Compare(p.primary[b], p.primary[a]) })
	type hop struct {
		from string
		pt   *part
	}
	for _, src := range srcs {
		via := map[string]hop{src: {}}
		queue := []string{src}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			if p.primary[u] <= p.primary[src]-2 {
				var out []Change
				for n := u; n != src; n = via[n].from {
					h := via[n]
					out = append(out, Change{Service: h.pt.Service, Partition: h.pt.Partition.Partition, Kind: Lead, Node: n,
						Why: "rebalance primaries from " + h.from, Rebalance: true})
				}
				slices.Reverse(out)
				return out, true
			}
			for _, pt := range p.parts {
				if pt.Primary != u || pt.health[u] != up || !pt.settled() {
					continue
				}
				for _, r := range pt.serving() {
					if _, seen := via[r]; !seen {
						via[r] = hop{from: u, pt: pt}
						queue = append(queue, r)
					}
				}
			}
		}
	}
	return nil, false
}
