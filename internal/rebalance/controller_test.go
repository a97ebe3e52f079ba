package rebalance

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/placement"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fake is a cluster of replica sets as the yellow pages would show it.
// Changes take effect at once (an added replica has caught up), are
// refused unless they name the current set, as a primary does, and the
// primary role goes to the highest-priority live member.
type fake struct {
	mu       sync.Mutex
	alive    map[string]bool
	diedAt   map[string]time.Time
	parts    map[int32][]*pb.ReplicaPeer
	primary  map[int32]string
	calls    int
	refused  int
	maxExtra int // most members beyond the degree any partition had
	degree   int
	hidden   map[string]bool // live nodes a view leaves out (a lagging view)
	service  string          // the one service it hosts (kv unless set)
	off      map[string]bool // nodes announcing placement off
}

func newFake(nodes []string, parts, degree int) *fake {
	f := &fake{alive: map[string]bool{}, diedAt: map[string]time.Time{}, parts: map[int32][]*pb.ReplicaPeer{},
		primary: map[int32]string{}, degree: degree, hidden: map[string]bool{}}
	for _, n := range nodes {
		f.alive[n] = true
	}
	for p := range parts {
		for i := range degree {
			f.parts[int32(p)] = append(f.parts[int32(p)], &pb.ReplicaPeer{Id: nodes[(p+i)%len(nodes)], Priority: int32(degree - i)})
		}
		f.elect(int32(p))
	}
	return f
}

func (f *fake) elect(p int32) {
	best := ""
	var prio int32 = -1
	for _, m := range f.parts[p] {
		if f.alive[m.Id] && m.Priority > prio {
			best, prio = m.Id, m.Priority
		}
	}
	f.primary[p] = best
}

func (f *fake) kill(n string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alive[n], f.diedAt[n] = false, at
	for p := range f.parts {
		f.elect(p)
	}
}

func (f *fake) ann(n string) *pb.Announcement {
	hs := &pb.HostedService{Name: cmp.Or(f.service, "kv")}
	for p, ms := range f.parts {
		if slices.ContainsFunc(ms, func(m *pb.ReplicaPeer) bool { return m.Id == n }) {
			role := int32(1)
			if f.primary[p] == n {
				role = 2
			}
			cp := make([]*pb.ReplicaPeer, len(ms))
			for i, m := range ms {
				cp[i] = &pb.ReplicaPeer{Id: m.Id, Priority: m.Priority, Learner: m.Learner}
			}
			hs.Replicas = append(hs.Replicas, &pb.ReplicaStatus{Partition: p, Role: role, Epoch: 1, Members: cp})
		}
	}
	return &pb.Announcement{NodeId: n, Services: []*pb.HostedService{hs}, PlacementOff: f.off[n]}
}

func (f *fake) View() View {
	f.mu.Lock()
	defer f.mu.Unlock()
	var v View
	for n, ok := range f.alive {
		switch {
		case ok && !f.hidden[n]:
			v.Live = append(v.Live, f.ann(n))
		case !ok:
			v.Departed = append(v.Departed, membership.Departure{Node: n, Ann: f.ann(n), LastSeen: f.diedAt[n]})
		}
	}
	return v
}

func (f *fake) ChangeReplicas(_ context.Context, node string, req *pb.ChangeReplicasRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	p := req.Partition
	ms := f.parts[p]
	if f.primary[p] != node {
		return fmt.Errorf("%s is not the primary of %d", node, p)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.Id)
	}
	if len(ids) != len(req.Expect) || slices.ContainsFunc(req.Expect, func(id string) bool { return !slices.Contains(ids, id) }) {
		f.refused++
		return fmt.Errorf("refused: set %v, expected %v", ids, req.Expect)
	}
	switch {
	case req.SetPriority:
		ms[slices.IndexFunc(ms, func(m *pb.ReplicaPeer) bool { return m.Id == req.Add })].Priority = req.Priority
	case req.Add != "":
		ms = append(ms, &pb.ReplicaPeer{Id: req.Add, Priority: req.Priority})
	default:
		ms = slices.DeleteFunc(ms, func(m *pb.ReplicaPeer) bool { return m.Id == req.Remove })
	}
	f.parts[p] = ms
	f.maxExtra = max(f.maxExtra, len(ms)-f.degree)
	f.elect(p)
	return nil
}

// full reports whether every partition has degree live members and none
// on a dead node.
func (f *fake) full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ms := range f.parts {
		if len(ms) != f.degree || slices.ContainsFunc(ms, func(m *pb.ReplicaPeer) bool { return !f.alive[m.Id] }) {
			return false
		}
	}
	return true
}

func kvService(parts int) []Service {
	s := Service{Name: "kv", Degree: func(int32) int { return 3 }}
	for p := range parts {
		s.Partitions = append(s.Partitions, int32(p))
	}
	return []Service{s}
}

// rounds runs c's rounds every second from *now for d, waiting for each
// round's changes, and returns how many started per round at most.
func rounds(c *Controller, now *time.Time, d time.Duration, done func() bool) (most int) {
	for end := now.Add(d); now.Before(end) && !done(); *now = now.Add(time.Second) {
		adds := 0
		for _, ch := range c.Round(*now) {
			if ch.Kind == placement.Add {
				adds++
			}
		}
		most = max(most, adds)
		c.wg.Wait()
	}
	return most
}

// TestDeadNodeReplacedAfterGrace: the actor leaves a dead node's
// replicas alone within the grace, then re-creates them elsewhere one
// partition at a time, each new replica with the priority of the one it
// replaces, and removes the dead ones; the other nodes never act.
func TestDeadNodeReplacedAfterGrace(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	f := newFake(nodes, 5, 3)
	cfg := placement.Config{Grace: time.Minute}
	ctrl := New(cfg, "a", kvService(5), f, f, nil, nil)
	other := New(cfg, "b", kvService(5), f, f, nil, nil)
	now := t0
	f.kill("e", now)
	prioOfE := map[int32]int32{}
	for p, ms := range f.parts {
		for _, m := range ms {
			if m.Id == "e" {
				prioOfE[p] = m.Priority
			}
		}
	}
	rounds(ctrl, &now, 59*time.Second, f.full)
	if other.Round(now) != nil || f.calls > 0 {
		t.Fatalf("%d changes within the grace (or by a node that is not the actor)", f.calls)
	}
	most := rounds(ctrl, &now, 2*time.Minute, f.full)
	if !f.full() {
		t.Fatalf("not back to full degree: %v", f.parts)
	}
	if most > 1 || f.maxExtra > 1 {
		t.Fatalf("%d adds started in one round, %d replicas above degree at once; MaxInFlight is 1", most, f.maxExtra)
	}
	for p, want := range prioOfE {
		prios := map[int32]int{}
		for _, m := range f.parts[p] {
			prios[m.Priority]++
		}
		if prios[want] != 1 {
			t.Errorf("partition %d: priorities %v, want one replica with e's %d", p, prios, want)
		}
	}
	if other.Round(now) != nil {
		t.Fatal("b acted while a is live")
	}
}

// TestGrowthSpreadsReplicasAndPrimaries: two nodes join a 4-node
// cluster; the actor moves replicas and primaries until every node holds
// within one of every other, a step per Interval.
func TestGrowthSpreadsReplicasAndPrimaries(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 8, 3)
	ctrl := New(placement.Config{Interval: 10 * time.Second}, "a", kvService(8), f, f, nil, nil)
	now := t0
	f.mu.Lock()
	f.alive["e"], f.alive["f"] = true, true
	f.mu.Unlock()
	even := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		reps, prims := map[string]int{}, map[string]int{}
		for p, ms := range f.parts {
			for _, m := range ms {
				reps[m.Id]++
			}
			prims[f.primary[p]]++
		}
		return spread(reps, f.alive) <= 1 && spread(prims, f.alive) <= 1
	}
	start := now
	rounds(ctrl, &now, 10*time.Minute, even)
	if !even() {
		t.Fatalf("not even after 10 min: %v primaries %v", f.parts, f.primary)
	}
	if f.maxExtra > 1 {
		t.Fatalf("%d replicas above degree at once", f.maxExtra)
	}
	if moves := f.calls; now.Sub(start) < time.Duration(moves/2-1)*10*time.Second {
		t.Fatalf("%d changes in %v: faster than one step per Interval", moves, now.Sub(start))
	}
}

func spread(count map[string]int, nodes map[string]bool) int {
	lo, hi := 1<<30, 0
	for n := range nodes {
		lo, hi = min(lo, count[n]), max(hi, count[n])
	}
	return hi - lo
}

// TestStaleActorIsRefused: a node whose view lacks the actor believes it
// acts too; both plan the same replacement, and the second, planned
// against a set that changed, is refused: the partition never has two
// replicas above its degree.
func TestStaleActorIsRefused(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d", "e"}, 5, 3)
	cfg := placement.Config{Grace: time.Second}
	a := New(cfg, "a", kvService(5), f, f, nil, nil)
	now := t0
	f.kill("e", now)
	now = now.Add(time.Minute)
	f.mu.Lock()
	f.hidden["a"] = true // b's view: a gone (and a's, but a is the actor regardless below)
	f.mu.Unlock()
	vb := f.View()
	f.mu.Lock()
	f.hidden["a"] = false
	f.mu.Unlock()
	if Actor(vb, kvService(5)[0]) != "b" {
		t.Fatal("b's view does not make it the actor")
	}
	// a plans and acts; b planned from the same sets before a's change.
	stB, partsB := Observe(now, vb, kvService(5), Memory{})
	planB := placement.Plan(now, stB, cfg)
	if len(a.Round(now)) != 1 || len(planB) != 1 {
		t.Fatalf("want one replacement from each, got %v from b", planB)
	}
	a.wg.Wait()
	k := Key{planB[0].Service, planB[0].Partition}
	primary := stB.Partitions[slices.IndexFunc(stB.Partitions, func(p placement.Partition) bool { return p.Partition == k.Partition })].Primary
	if err := f.ChangeReplicas(context.Background(), primary, request(planB[0], partsB[k].Members)); err == nil {
		t.Fatal("b's change against the old set was accepted")
	}
	if f.maxExtra > 1 || f.refused != 1 {
		t.Fatalf("max %d above degree, %d refused", f.maxExtra, f.refused)
	}
}

// TestOffNeverActs: a controller turned off does nothing, dead nodes or
// not, and the next node acts instead of one announcing it is off.
func TestOffNeverActs(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 4, 3)
	c := New(placement.Config{Off: true, Grace: time.Second}, "a", kvService(4), f, f, nil, nil)
	now := t0
	f.kill("d", now)
	rounds(c, &now, time.Minute, f.full)
	if f.calls != 0 {
		t.Fatalf("%d changes from a controller that is off", f.calls)
	}
	// a announces it is off: b, the next lowest, acts instead.
	f.off = map[string]bool{"a": true}
	b := New(placement.Config{Grace: time.Second}, "b", kvService(4), f, f, nil, nil)
	rounds(b, &now, time.Minute, f.full)
	if !f.full() {
		t.Fatalf("b never acted while a, the lowest, announced placement off: %v", f.parts)
	}
}

// TestForgottenNodeStillReplaced: a dead node the yellow pages no longer
// remember (departures are kept for a while) is still replaced after the
// grace, counted from when the actor last knew it down.
func TestForgottenNodeStillReplaced(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 4, 3)
	src := &forgetful{fake: f}
	c := New(placement.Config{Grace: time.Minute}, "a", kvService(4), src, f, nil, nil)
	now := t0
	f.kill("d", now)
	rounds(c, &now, 10*time.Second, f.full)
	src.forget = true
	rounds(c, &now, 45*time.Second, f.full)
	if f.calls != 0 {
		t.Fatal("replaced within the grace")
	}
	rounds(c, &now, 2*time.Minute, f.full)
	if !f.full() {
		t.Fatalf("a forgotten dead node's replicas were never replaced: %v", f.parts)
	}
}

type forgetful struct {
	*fake
	forget bool
}

func (s *forgetful) View() View {
	v := s.fake.View()
	if s.forget {
		v.Departed = nil
	}
	return v
}

// TestOnlyNodesHostingTheServiceGetReplicas: a live node that does not
// run the service (it could never host the replica) is never chosen.
func TestOnlyNodesHostingTheServiceGetReplicas(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 4, 3)
	src := &withOther{fake: f}
	c := New(placement.Config{Grace: time.Second}, "a", kvService(4), src, f, nil, nil)
	now := t0
	f.kill("d", now)
	rounds(c, &now, time.Minute, f.full)
	for p, ms := range f.parts {
		if slices.ContainsFunc(ms, func(m *pb.ReplicaPeer) bool { return m.Id == "0web" }) {
			t.Fatalf("partition %d placed on a node without the service: %v", p, ms)
		}
	}
}

// withOther adds a live node "0web" (the lowest id: it must not be the
// actor either) hosting another service only.
type withOther struct{ *fake }

func (s *withOther) View() View {
	v := s.fake.View()
	v.Live = append(v.Live, &pb.Announcement{NodeId: "0web", Services: []*pb.HostedService{{Name: "web"}}})
	return v
}

// TestAddToANodeThatDiesIsAbandoned: the node a replica is being added
// to dies before it caught up; the actor stops waiting for the add, and
// once that node is gone the learner is removed and the replica re-created
// elsewhere.
func TestAddToANodeThatDiesIsAbandoned(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d", "e"}, 1, 3) // partition 0 on a, b, c
	h := &hanging{fake: f, node: "d", started: make(chan struct{}, 1)}
	c := New(placement.Config{Grace: 10 * time.Second}, "a", kvService(1), f, h, nil, nil)
	now := t0
	f.kill("c", now)
	now = now.Add(11 * time.Second)
	if cs := c.Round(now); len(cs) != 1 || cs[0].Node != "d" {
		t.Fatalf("started %v, want the add on d", cs)
	}
	<-h.started
	f.kill("d", now)
	now = now.Add(time.Second)
	c.Round(now) // stops waiting for the add to d
	c.wg.Wait()
	rounds(c, &now, time.Minute, f.full)
	if !f.full() {
		t.Fatalf("not back to full degree: %v", f.parts[0])
	}
}

// hanging adds a replica on node as a learner that never catches up: the
// call waits until its context ends.
type hanging struct {
	*fake
	node    string
	started chan struct{}
}

func (h *hanging) ChangeReplicas(ctx context.Context, node string, req *pb.ChangeReplicasRequest) error {
	if req.Add != h.node || req.SetPriority {
		return h.fake.ChangeReplicas(ctx, node, req)
	}
	h.mu.Lock()
	h.parts[req.Partition] = append(h.parts[req.Partition], &pb.ReplicaPeer{Id: req.Add, Priority: req.Priority, Learner: true})
	h.mu.Unlock()
	h.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestRebalancingWaitsForCalm: with new nodes to even out, the actor
// waits until the cluster kept its shape for Interval; while primaries
// keep moving (a failover and its hand-back) it does not rebalance.
func TestRebalancingWaitsForCalm(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 8, 3)
	c := New(placement.Config{Interval: 10 * time.Second}, "a", kvService(8), f, f, nil, nil)
	f.mu.Lock()
	f.alive["e"] = true
	f.mu.Unlock()
	now := t0
	for i := range 60 {
		if i%5 == 0 { // a primary moves every 5 s
			f.mu.Lock()
			ms := f.parts[1]
			f.primary[1] = ms[i/5%len(ms)].Id
			f.mu.Unlock()
		}
		if cs := c.Round(now); len(cs) > 0 {
			t.Fatalf("%v: rebalanced while primaries move: %v", now.Sub(t0), cs)
		}
		now = now.Add(time.Second)
	}
	f.mu.Lock()
	f.elect(1)
	f.mu.Unlock()
	calm := now
	for c.Round(now) == nil {
		if now.Sub(calm) > time.Minute {
			t.Fatal("never rebalanced once calm")
		}
		now = now.Add(time.Second)
	}
	c.wg.Wait()
	if waited := now.Sub(calm); waited < 10*time.Second {
		t.Fatalf("rebalanced %v after the cluster calmed, Interval 10s", waited)
	}
}

// TestOperatorMoveIsLeftAlone: an operator's `partition move` adds a
// replica, then removes the old one; the actor, seeing a replica beyond
// the degree it did not add, leaves it to the operator instead of
// removing one itself (which with the operator's removal would leave the
// partition a replica short).
func TestOperatorMoveIsLeftAlone(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 4, 3)
	c := New(placement.Config{Interval: 10 * time.Second}, "a", kvService(4), f, f, nil, nil)
	now := t0
	rounds(c, &now, 30*time.Second, func() bool { return false })
	calls := f.calls
	ms := f.parts[0]
	from, to := ms[len(ms)-1].Id, "d"
	if slices.ContainsFunc(ms, func(m *pb.ReplicaPeer) bool { return m.Id == to }) {
		t.Fatalf("partition 0 already on d: %v", ms)
	}
	expect := func() []string {
		var ids []string
		for _, m := range f.parts[0] {
			ids = append(ids, m.Id)
		}
		return ids
	}
	if err := f.ChangeReplicas(context.Background(), f.primary[0], &pb.ChangeReplicasRequest{Partition: 0, Add: to, Priority: 1, Expect: expect()}); err != nil {
		t.Fatal(err)
	}
	rounds(c, &now, 3*time.Second, func() bool { return false })
	if f.calls != calls+1 {
		t.Fatalf("the actor changed something during the operator's move: %v", f.parts[0])
	}
	if err := f.ChangeReplicas(context.Background(), f.primary[0], &pb.ChangeReplicasRequest{Partition: 0, Remove: from, Expect: expect()}); err != nil {
		t.Fatalf("the operator's removal: %v", err)
	}
	if len(f.parts[0]) != 3 {
		t.Fatalf("partition 0 has %d replicas after the move", len(f.parts[0]))
	}
	// An add left behind (beyond the degree) is undone once calm.
	if err := f.ChangeReplicas(context.Background(), f.primary[0], &pb.ChangeReplicasRequest{Partition: 0, Add: from, Priority: 1, Expect: expect()}); err != nil {
		t.Fatal(err)
	}
	rounds(c, &now, time.Minute, func() bool { return len(f.parts[0]) == 3 })
	if len(f.parts[0]) != 3 {
		t.Fatalf("a surplus replica stayed: %v", f.parts[0])
	}
}

// TestEachServiceHasItsOwnActor: node x hosts kv and web; a, lower than
// x, hosts kv only. x is web's actor (and replaces a dead web node's
// replicas), a is kv's, and x never acts for kv.
func TestEachServiceHasItsOwnActor(t *testing.T) {
	kv := newFake([]string{"a", "b", "c", "x"}, 4, 3)
	web := newFake([]string{"x", "y", "z", "zz"}, 4, 3)
	web.service = "web"
	two := twoServices{kv, web}
	webSvc := Service{Name: "web", Partitions: []int32{0, 1, 2, 3}, Degree: func(int32) int { return 3 }}
	x := New(placement.Config{Grace: time.Second}, "x", append(kvService(4), webSvc), two, two, nil, nil)
	now := t0
	kv.kill("c", now)
	web.kill("zz", now)
	rounds(x, &now, time.Minute, web.full)
	if !web.full() {
		t.Fatalf("web's dead replicas were never replaced by its actor x: %v", web.parts)
	}
	if kv.calls != 0 {
		t.Fatalf("x acted for kv (%d changes), whose actor is a", kv.calls)
	}
	a := New(placement.Config{Grace: time.Second}, "a", kvService(4), two, two, nil, nil)
	rounds(a, &now, time.Minute, kv.full)
	if !kv.full() {
		t.Fatalf("kv's dead replicas were never replaced by its actor a: %v", kv.parts)
	}
}

// twoServices is the yellow pages of two fakes, kv and web, whose nodes
// may overlap: a node in both announces both services.
type twoServices struct{ kv, web *fake }

func (s twoServices) View() View {
	v := s.kv.View()
	for _, a := range s.web.View().Live {
		if i := slices.IndexFunc(v.Live, func(b *pb.Announcement) bool { return b.NodeId == a.NodeId }); i >= 0 {
			v.Live[i].Services = append(v.Live[i].Services, a.Services...)
		} else {
			v.Live = append(v.Live, a)
		}
	}
	v.Departed = append(v.Departed, s.web.View().Departed...)
	return v
}

func (s twoServices) ChangeReplicas(ctx context.Context, node string, req *pb.ChangeReplicasRequest) error {
	if req.Service == "web" {
		return s.web.ChangeReplicas(ctx, node, req)
	}
	return s.kv.ChangeReplicas(ctx, node, req)
}

// TestSetConfigTurnsPlacementOnLive: a controller started off begins to
// act once an operator's SIGHUP turns it on (SetConfig), and stops again
// when turned off.
func TestSetConfigTurnsPlacementOnLive(t *testing.T) {
	f := newFake([]string{"a", "b", "c", "d"}, 4, 3)
	c := New(placement.Config{Off: true, Grace: time.Second}, "a", kvService(4), f, f, nil, nil)
	now := t0
	f.kill("d", now)
	rounds(c, &now, 10*time.Second, f.full)
	if f.calls != 0 {
		t.Fatalf("%d changes while off", f.calls)
	}
	c.SetConfig(placement.Config{Grace: time.Second})
	rounds(c, &now, time.Minute, f.full)
	if !f.full() {
		t.Fatalf("turned on, the controller never replaced d's replicas: %v", f.parts)
	}
	c.SetConfig(placement.Config{Off: true})
	if got := c.Round(now); len(got) != 0 {
		t.Fatalf("turned off, it still plans %v", got)
	}
}
