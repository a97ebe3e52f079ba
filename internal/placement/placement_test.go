package placement

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cluster carries out the planner's changes on a manual clock, as the
// replica-set machinery would: an added replica joins and serves after
// catchUp; a removal and a hand-off take effect at once. Every step
// checks the planner's promises.
type cluster struct {
	t         *testing.T
	now       time.Time
	cfg       Config
	catchUp   time.Duration
	nodes     map[string]*Node
	parts     []*Partition
	joinedAt  map[*Partition]map[string]time.Time
	lastStart time.Time
	applied   []Change
	starts    []time.Time // when each rebalancing step started
}

func newCluster(t *testing.T, cfg Config, zones map[string]string) *cluster {
	c := &cluster{t: t, now: t0, cfg: cfg, catchUp: 20 * time.Second, nodes: map[string]*Node{}, joinedAt: map[*Partition]map[string]time.Time{}}
	for id, z := range zones {
		c.nodes[id] = &Node{ID: id, Zone: z, Alive: true}
	}
	return c
}

// place adds n partitions of degree d, partition i on nodes[i..i+d)
// (cyclically), primary the first.
func (c *cluster) place(n, d int, nodes ...string) {
	for i := range n {
		p := &Partition{Service: "kv", Partition: int32(len(c.parts)), Degree: d}
		for j := range d {
			p.Replicas = append(p.Replicas, nodes[(i+j)%len(nodes)])
		}
		p.Primary = p.Replicas[0]
		c.parts = append(c.parts, p)
	}
}

func (c *cluster) state() State {
	st := State{LastStart: c.lastStart}
	for _, n := range c.nodes {
		st.Nodes = append(st.Nodes, *n)
	}
	for _, p := range c.parts {
		cp := *p
		cp.Replicas, cp.Joining = slices.Clone(p.Replicas), slices.Clone(p.Joining)
		st.Partitions = append(st.Partitions, cp)
	}
	return st
}

func (c *cluster) kill(id string) {
	n := c.nodes[id]
	n.Alive, n.DownSince = false, c.now
	for _, p := range c.parts {
		if p.Primary == id {
			p.Primary = ""
			for _, r := range p.Replicas {
				if c.serving(p, r) {
					p.Primary = r
					break
				}
			}
		}
	}
}

func (c *cluster) serving(p *Partition, r string) bool {
	return c.nodes[r].Alive && !slices.Contains(p.Joining, r)
}

func (c *cluster) part(svc string, i int32) *Partition {
	for _, p := range c.parts {
		if p.Service == svc && p.Partition == i {
			return p
		}
	}
	c.t.Fatalf("no partition %s/%d", svc, i)
	return nil
}

// step advances the clock by d, lets joining replicas that caught up
// serve, plans and carries out the changes.
func (c *cluster) step(d time.Duration) []Change {
	t := c.t
	t.Helper()
	c.now = c.now.Add(d)
	for p, js := range c.joinedAt {
		for r, at := range js {
			if !c.now.Before(at.Add(c.catchUp)) {
				p.Joining = slices.DeleteFunc(p.Joining, func(x string) bool { return x == r })
				delete(js, r)
			}
		}
	}
	cs := Plan(c.now, c.state(), c.cfg)
	seen := map[*Partition]bool{}
	for _, ch := range cs {
		p := c.part(ch.Service, ch.Partition)
		if seen[p] {
			t.Fatalf("%v: two changes to one partition in one plan: %v", c.now.Sub(t0), cs)
		}
		seen[p] = true
		switch ch.Kind {
		case Add:
			if slices.Contains(p.Replicas, ch.Node) || !c.nodes[ch.Node].Alive {
				t.Fatalf("%v: %v: node holds the partition already or is down", c.now.Sub(t0), ch)
			}
			p.Replicas = append(p.Replicas, ch.Node)
			p.Joining = append(p.Joining, ch.Node)
			if c.joinedAt[p] == nil {
				c.joinedAt[p] = map[string]time.Time{}
			}
			c.joinedAt[p][ch.Node] = c.now
		case Remove:
			left := 0
			for _, r := range p.Replicas {
				if r != ch.Node && c.serving(p, r) {
					left++
				}
			}
			if left < p.Degree {
				t.Fatalf("%v: %v leaves %d serving replicas, degree %d: %+v", c.now.Sub(t0), ch, left, p.Degree, *p)
			}
			p.Replicas = slices.DeleteFunc(p.Replicas, func(x string) bool { return x == ch.Node })
			p.Joining = slices.DeleteFunc(p.Joining, func(x string) bool { return x == ch.Node })
			if p.Primary == ch.Node {
				p.Primary = ""
				for _, r := range p.Replicas {
					if c.serving(p, r) {
						p.Primary = r
						break
					}
				}
			}
		case Lead:
			if !c.serving(p, ch.Node) || !slices.Contains(p.Replicas, ch.Node) {
				t.Fatalf("%v: %v: not a serving replica", c.now.Sub(t0), ch)
			}
			p.Primary = ch.Node
		}
		c.applied = append(c.applied, ch)
	}
	if slices.ContainsFunc(cs, func(ch Change) bool { return ch.Rebalance }) {
		if len(c.starts) > 0 && c.now.Sub(c.starts[len(c.starts)-1]) < c.cfg.withDefaults().Interval {
			t.Fatalf("%v: rebalancing step %v only %v after the last", c.now.Sub(t0), cs, c.now.Sub(c.starts[len(c.starts)-1]))
		}
		c.starts = append(c.starts, c.now)
		c.lastStart = c.now
	}
	if n := c.underWay(); n > c.cfg.withDefaults().MaxInFlight {
		t.Fatalf("%v: %d moves under way, MaxInFlight %d", c.now.Sub(t0), n, c.cfg.withDefaults().MaxInFlight)
	}
	return cs
}

func (c *cluster) underWay() int {
	n := 0
	for _, p := range c.parts {
		gone := 0
		for _, r := range p.Replicas {
			if nd := c.nodes[r]; !nd.Alive && c.now.Sub(nd.DownSince) >= c.cfg.withDefaults().Grace {
				gone++
			}
		}
		if len(p.Joining) > 0 || len(p.Replicas)-gone > p.Degree {
			n++
		}
	}
	return n
}

// run steps every 5 s until a plan is empty for quiet (converged), or
// fails after limit.
func (c *cluster) run(limit, quiet time.Duration) time.Duration {
	c.t.Helper()
	start, calm := c.now, time.Duration(0)
	for c.now.Sub(start) < limit {
		if len(c.step(5*time.Second)) == 0 && c.underWay() == 0 {
			calm += 5 * time.Second
			if calm >= quiet {
				return c.now.Sub(start) - calm
			}
		} else {
			calm = 0
		}
	}
	c.t.Fatalf("no convergence in %v; last changes %v", limit, c.applied[max(0, len(c.applied)-5):])
	return 0
}

// spread is max-min of replicas and of primaries over live nodes.
func (c *cluster) spread() (replicas, primaries int) {
	load, prim := map[string]int{}, map[string]int{}
	for id, n := range c.nodes {
		if n.Alive {
			load[id], prim[id] = 0, 0
		}
	}
	for _, p := range c.parts {
		for _, r := range p.Replicas {
			load[r]++
		}
		prim[p.Primary]++
	}
	mm := func(m map[string]int) int {
		lo, hi := 1<<30, 0
		for _, v := range m {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi - lo
	}
	return mm(load), mm(prim)
}

// checkFull fails unless every partition has its degree of serving
// replicas, none on a node that is not alive.
func (c *cluster) checkFull() {
	c.t.Helper()
	for _, p := range c.parts {
		n := 0
		for _, r := range p.Replicas {
			if !c.nodes[r].Alive {
				c.t.Fatalf("partition %d still has a replica on down node %s: %v", p.Partition, r, p.Replicas)
			}
			if c.serving(p, r) {
				n++
			}
		}
		if n != p.Degree || len(p.Replicas) != p.Degree {
			c.t.Fatalf("partition %d: %d serving of %v, degree %d", p.Partition, n, p.Replicas, p.Degree)
		}
	}
}

func names(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("n%d", i+1)] = ""
	}
	return m
}

// A node down for less than the grace is waited for: nothing moves, even
// if it stays down just under it and comes back (then it may get
// primaries back, but no replica moves).
func TestANodeDownLessThanTheGraceIsWaitedFor(t *testing.T) {
	c := newCluster(t, Config{Grace: 5 * time.Minute}, names(5))
	c.place(10, 3, "n1", "n2", "n3", "n4", "n5")
	c.kill("n2")
	for c.now.Sub(t0) < 5*time.Minute-5*time.Second {
		if cs := c.step(5 * time.Second); len(cs) > 0 {
			t.Fatalf("%v after n2 went down (grace 5m): %v", c.now.Sub(t0), cs)
		}
	}
	c.nodes["n2"].Alive = true
	c.run(time.Hour, 10*time.Minute)
	for _, ch := range c.applied {
		if ch.Kind != Lead {
			t.Fatalf("replica moves after n2 came back: %v", c.applied)
		}
	}
	if _, p := c.spread(); p > 1 {
		t.Fatalf("primaries per node differ by %d", p)
	}
}

// A node down for the grace has every replica it held re-created on the
// others, added before the dead one is removed, at most MaxInFlight at a
// time, spread evenly over the survivors.
func TestADeadNodeIsReplacedAfterTheGrace(t *testing.T) {
	for _, inflight := range []int{1, 3} {
		t.Run(fmt.Sprint("in flight ", inflight), func(t *testing.T) {
			c := newCluster(t, Config{Grace: 5 * time.Minute, MaxInFlight: inflight}, names(5))
			c.place(10, 3, "n1", "n2", "n3", "n4", "n5")
			c.kill("n2")
			for c.now.Sub(t0) < 5*time.Minute-5*time.Second {
				if cs := c.step(5 * time.Second); len(cs) > 0 {
					t.Fatalf("%v: changes before the grace: %v", c.now.Sub(t0), cs)
				}
			}
			took := c.run(2*time.Hour, 10*time.Minute)
			c.checkFull()
			adds := 0
			for _, ch := range c.applied {
				if ch.Kind == Add && !ch.Rebalance {
					adds++
				}
			}
			if adds != 6 {
				t.Fatalf("%d replacement adds, want 6 (n2 held 6 replicas): %v", adds, c.applied)
			}
			if r, _ := c.spread(); r > 1 {
				t.Fatalf("replicas per live node differ by %d after the replacement", r)
			}
			t.Logf("full degree %v after the grace, %d changes", took, len(c.applied))
		})
	}
}

// A replacement keeps the partition's replicas in distinct zones, even
// when a node in a zone it already covers holds fewer replicas.
func TestAReplacementRespectsZones(t *testing.T) {
	zones := map[string]string{"a1": "A", "a2": "A", "b1": "B", "c1": "C", "c2": "C"}
	c := newCluster(t, Config{Grace: time.Minute}, zones)
	c.parts = []*Partition{{Service: "kv", Partition: 0, Degree: 3, Replicas: []string{"a1", "b1", "c1"}, Primary: "a1"}}
	for i := range 4 { // load c2 and leave a2 empty
		c.parts = append(c.parts, &Partition{Service: "kv", Partition: int32(i + 1), Degree: 2, Replicas: []string{"b1", "c2"}, Primary: "b1"})
	}
	c.kill("c1")
	c.now = c.now.Add(2 * time.Minute)
	cs := Plan(c.now, c.state(), c.cfg)
	if want := []Change{{Service: "kv", Partition: 0, Kind: Add, Node: "c2", From: "c1", Why: "replace c1 (down 2m0s)"}}; !reflect.DeepEqual(cs, want) {
		t.Fatalf("plan %v, want %v (zone C's other node, though a2 holds fewer)", cs, want)
	}
	// Without zones the emptiest node gets it.
	for _, n := range c.nodes {
		n.Zone = ""
	}
	if cs := Plan(c.now, c.state(), c.cfg); len(cs) != 1 || cs[0].Node != "a2" {
		t.Fatalf("plan without zones %v, want an add on a2", cs)
	}
}

// Nodes joining a cluster get replicas and primaries until both are even
// (max-min ≤ 1 per live node), one step at a time, Interval apart, and
// never with more than MaxInFlight moves under way; every partition keeps
// its three zones throughout. Then the plan stays empty.
func TestGrowingTheClusterRebalancesAtABoundedRate(t *testing.T) {
	zones := map[string]string{"n1": "A", "n2": "B", "n3": "C"}
	cfg := Config{Grace: 5 * time.Minute, MaxInFlight: 1, Interval: 30 * time.Second}
	c := newCluster(t, cfg, zones)
	c.place(12, 3, "n1", "n2", "n3")
	c.step(5 * time.Second)
	if len(c.applied) != 0 {
		t.Fatalf("changes in a balanced cluster: %v", c.applied)
	}
	for _, p := range c.parts {
		p.Primary = "n1" // the highest priority everywhere
	}
	for id, z := range map[string]string{"n4": "A", "n5": "B", "n6": "C"} {
		c.nodes[id] = &Node{ID: id, Zone: z, Alive: true}
	}
	took := c.run(6*time.Hour, 10*time.Minute)
	c.checkFull()
	r, p := c.spread()
	if r > 1 || p > 1 {
		c.dump()
		t.Fatalf("after rebalancing, replicas per node differ by %d, primaries by %d", r, p)
	}
	for _, pt := range c.parts {
		zs := map[string]bool{}
		for _, n := range pt.Replicas {
			zs[c.nodes[n].Zone] = true
		}
		if len(zs) != 3 {
			t.Fatalf("partition %d spans zones %v", pt.Partition, zs)
		}
	}
	if len(c.starts) < 2 {
		t.Fatalf("only %d rebalancing steps", len(c.starts))
	}
	t.Logf("balanced in %v, %d rebalancing steps, %d changes", took, len(c.starts), len(c.applied))
}

// The same inputs in another order give the same plan.
func TestPlanIsDeterministic(t *testing.T) {
	c := newCluster(t, Config{Grace: time.Minute, MaxInFlight: 3}, map[string]string{"n1": "A", "n2": "A", "n3": "B", "n4": "B", "n5": "C", "n6": "C"})
	c.place(20, 3, "n1", "n3", "n5", "n2", "n4")
	c.kill("n3")
	c.now = c.now.Add(2 * time.Minute)
	st := c.state()
	want := Plan(c.now, st, c.cfg)
	if len(want) != 3 {
		t.Fatalf("plan %v: want 3 replacements (MaxInFlight)", want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(st.Nodes), func(i, j int) { st.Nodes[i], st.Nodes[j] = st.Nodes[j], st.Nodes[i] })
		rng.Shuffle(len(st.Partitions), func(i, j int) { st.Partitions[i], st.Partitions[j] = st.Partitions[j], st.Partitions[i] })
		for _, p := range st.Partitions {
			rng.Shuffle(len(p.Replicas), func(i, j int) { p.Replicas[i], p.Replicas[j] = p.Replicas[j], p.Replicas[i] })
		}
		if got := Plan(c.now, st, c.cfg); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled input: plan %v, want %v", got, want)
		}
	}
}

// Random clusters: some nodes die for good, some join; the plan always
// converges to every partition at full degree on live nodes with no
// promise broken on the way (the harness checks each step), and without
// zones to an even spread of replicas and primaries.
func TestRandomClustersConverge(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			zoned := seed%2 == 0
			nodes := map[string]string{}
			var ids []string
			for i := range 4 + rng.IntN(4) {
				id := fmt.Sprintf("n%d", i)
				nodes[id] = ""
				if zoned {
					nodes[id] = fmt.Sprint("z", rng.IntN(3))
				}
				ids = append(ids, id)
			}
			c := newCluster(t, Config{Grace: time.Minute, MaxInFlight: 1 + rng.IntN(3), Interval: 10 * time.Second}, nodes)
			c.place(5+rng.IntN(20), 2+rng.IntN(2), ids...)
			c.run(24*time.Hour, 5*time.Minute)
			for range min(1+rng.IntN(2), len(ids)-3) { // degree ≤ 3 stays placeable
				c.kill(ids[rng.IntN(len(ids))])
			}
			for i := range rng.IntN(3) {
				id := fmt.Sprintf("m%d", i)
				c.nodes[id] = &Node{ID: id, Zone: nodes[ids[0]], Alive: true}
			}
			c.run(24*time.Hour, 5*time.Minute)
			c.checkFull()
			if r, p := c.spread(); !zoned && (r > 1 || p > 1) {
				c.dump()
				t.Fatalf("replicas per node differ by %d, primaries by %d", r, p)
			}
		})
	}
}

func (c *cluster) dump() {
	for _, p := range c.parts {
		c.t.Logf("%d: %v primary %s", p.Partition, p.Replicas, p.Primary)
	}
}

// A replica added on a node that then dies never catches up: once its
// node is gone it is removed and the partition gets another, and it does
// not hold MaxInFlight meanwhile.
func TestAJoiningReplicaOnADeadNodeIsAbandoned(t *testing.T) {
	c := newCluster(t, Config{Grace: time.Minute}, names(6))
	c.parts = []*Partition{
		{Service: "kv", Partition: 0, Degree: 3, Replicas: []string{"n1", "n2", "n3", "n4"}, Joining: []string{"n4"}, Primary: "n1"},
		{Service: "kv", Partition: 1, Degree: 3, Replicas: []string{"n1", "n2", "n5"}, Primary: "n1"},
	}
	c.kill("n4")
	c.kill("n5")
	c.now = c.now.Add(2 * time.Minute)
	cs := Plan(c.now, c.state(), c.cfg)
	want := []string{"kv/0 remove n4", "kv/1 add"}
	if len(cs) != 2 || !strings.HasPrefix(cs[0].String(), want[0]) || !strings.HasPrefix(cs[1].String(), want[1]) {
		t.Fatalf("plan %v, want the dead learner removed and partition 1's replacement started", cs)
	}
	c.run(time.Hour, 5*time.Minute)
	c.checkFull()
}
