package dashboard

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/clock"
)

// hangingLoads is a LoadSource where the members in hang never answer
// (until their deadline), n00 answers only once n01's poll has started
// too (so polls one after another would time it out), and the others at
// once. It records how many polls ran at once and whether every poll had
// a deadline.
type hangingLoads struct {
	fc       *fakeCluster
	hang     map[string]bool
	n01      chan struct{}
	once     sync.Once
	mu       sync.Mutex
	inFlight int
	max      int
	noLimit  bool
}

func (h *hangingLoads) PollLoad(ctx context.Context, m client.Member) {
	h.mu.Lock()
	h.inFlight++
	h.max = max(h.max, h.inFlight)
	if _, ok := ctx.Deadline(); !ok {
		h.noLimit = true
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	switch {
	case h.hang[m.Node]:
		<-ctx.Done()
		return
	case m.Node == "n01":
		h.once.Do(func() { close(h.n01) })
	case m.Node == "n00":
		select {
		case <-h.n01:
		case <-ctx.Done():
			return
		}
	}
	h.fc.PollLoad(ctx, m)
}

// The Cluster view polls members concurrently, each under its own
// deadline: a member that never answers shows its loads late (and stays
// alive: a late poll is no death) while the others' loads arrive, and no
// more than memberFanout polls run at once.
func TestClusterPollsMembersConcurrentlyWithATimeoutEach(t *testing.T) {
	fc := newFakeCluster(40, 80)
	loads := &hangingLoads{fc: fc, hang: map[string]bool{"n02": true}, n01: make(chan struct{})}
	s, _ := New(Config{Self: "n00", Members: fc, Loads: loads, MemberTimeout: time.Second})
	var cv ClusterView
	mustJSON(t, get(t, s, APIPrefix+"cluster"), &cv)
	for _, m := range cv.Members {
		late := m.Services[0].Late
		switch {
		case m.Node == "n02" && (late != len(m.Services[0].Partitions) || m.State != StateAlive):
			t.Errorf("the member that never answers: %s, %d of %d loads late; want alive, all late", m.State, late, len(m.Services[0].Partitions))
		case m.Node != "n02" && late != 0:
			t.Errorf("%s: %d loads late, want none (n00 answers only while n01 is polled)", m.Node, late)
		}
	}
	if loads.noLimit || loads.max > memberFanout || loads.max < 2 {
		t.Errorf("polls: %d at most at once (want 2..%d), every one with a deadline: %v", loads.max, memberFanout, !loads.noLimit)
	}

	// Every member hung: each costs its timeout, memberFanout at a time,
	// and the view still answers, every load late.
	all := map[string]bool{}
	for _, m := range fc.members {
		all[m.Node] = true
	}
	loads = &hangingLoads{fc: fc, hang: all, n01: make(chan struct{})}
	s, _ = New(Config{Self: "n00", Members: fc, Loads: loads, MemberTimeout: 50 * time.Millisecond})
	mustJSON(t, get(t, s, APIPrefix+"cluster"), &cv)
	for _, m := range cv.Members {
		if m.Services[0].Late != len(m.Services[0].Partitions) {
			t.Fatalf("%s answered though hung: %+v", m.Node, m.Services[0])
		}
	}
	if loads.max > memberFanout {
		t.Errorf("%d polls at once, want at most %d", loads.max, memberFanout)
	}
}

// A member that left the yellow pages before the dashboard was first
// opened comes from the DepartedSource: greyed, with why and when it was
// last seen; one that came back shows alive only.
func TestDepartedMemberShowsOnAFreshDashboard(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e9, 0))
	fc := newFakeCluster(4, 4)
	gone := client.Member{Node: "n09", RPCAddr: "10.0.0.9:7000", Services: []client.HostedService{{Name: "kv", Partitions: []int{1, 2}}}}
	back := fc.members[1]
	s, _ := New(Config{Self: "n00", Members: fc, Partitions: fc, Clock: clk,
		Departed: DepartedFunc(func(context.Context) ([]client.Departed, error) {
			return []client.Departed{{Member: gone, LastSeen: clk.Now().Add(-42 * time.Second), Why: "gone"}, {Member: back, LastSeen: clk.Now().Add(-time.Minute), Why: "expired"}}, nil
		})})
	var cv ClusterView
	mustJSON(t, get(t, s, APIPrefix+"cluster"), &cv)
	rows := map[string]MemberRow{}
	for _, m := range cv.Members {
		rows[m.Node] = m
	}
	if len(rows) != 5 || cv.Dead != 1 || cv.Alive != 4 {
		t.Fatalf("members %v: %d alive, %d dead; want the 4 live ones and n09 dead", rows, cv.Alive, cv.Dead)
	}
	if g := rows["n09"]; g.State != StateDead || g.AgeMs != 42_000 || g.Why != "gone" || g.RPCAddr != "10.0.0.9:7000" || len(g.Services) != 1 || g.Services[0].Late != 0 {
		t.Errorf("n09: %+v; want dead, last seen 42 s ago, gone, at its last address, its services without late loads", g)
	}
	if b := rows[back.Node]; b.State != StateAlive || b.Why != "" {
		t.Errorf("%s, live again: %+v, want alive", back.Node, b)
	}
	page := get(t, s, "/cluster")
	for _, want := range []string{`class="member dead" data-node="n09"`, "last seen 42.0 s ago", `<small class="why">gone</small>`} {
		if !strings.Contains(page, want) {
			t.Errorf("cluster page lacks %q", want)
		}
	}
	if mustJSON(t, get(t, s, APIPrefix+"cluster?node=n09"), &cv); len(cv.Members) != 1 {
		t.Errorf("node filter: %d rows, want n09 only", len(cv.Members))
	}
}

// `neptune top` shows a dead member's reason and, once aggregations were
// made, their section; none without.
func TestTextShowsDepartedAndAggregation(t *testing.T) {
	sc := Screen{Cluster: ClusterView{Members: []MemberRow{{Node: "n09", State: StateDead, Why: "gone", AgeMs: 42_000}}}}
	var b strings.Builder
	if err := WriteText(&b, sc, 0); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "DEAD (gone)") || strings.Contains(out, "AGGREGATION") {
		t.Errorf("without aggregations:\n%s", out)
	}
	sc.Aggregation.Called = []AggregationRow{{Service: "search", Calls: 2, CallRate: nan, Partial: 1, Failed: 1, Coverage: 0.25, Lost: 4, Hedges: 1}}
	b.Reset()
	if err := WriteText(&b, sc, 0); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "AGGREGATION") || !strings.Contains(out, "25%") {
		t.Errorf("with aggregations:\n%s", out)
	}
}

// TestPartitionsTellLapsedSupersededAndCutOffReplicas builds the view from
// a client's partition listing: during a failover the
// old primary's last announcement is marked superseded, a primary that
// stopped announcing is marked lapsed once its claim ran out, and a
// replica that announced it lost contact says so, with for how long.
func TestPartitionsTellLapsedSupersededAndCutOffReplicas(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	lease := 390 * time.Millisecond
	parts := []client.PartitionInfo{
		// Partition 0: s1 (epoch 2) paused 2 s ago (its lease valid for
		// 690 ms from then); s2 took over at epoch 3; s3 cut off one-way
		// for 1.5 s.
		{Service: "kv", Partition: 0, Level: 2, Replicas: []client.ReplicaInfo{
			{Node: "s1", Role: "primary", Epoch: 2, Lease: lease, LeaseUntil: now.Add(-2*time.Second + 690*time.Millisecond)},
			{Node: "s2", Role: "primary", Epoch: 3, Lease: lease, LeaseUntil: now.Add(-100*time.Millisecond + 690*time.Millisecond)},
			{Node: "s3", Role: "secondary", Epoch: 2, Contact: "lost-contact", LostSince: now.Add(-1500 * time.Millisecond)},
		}},
		{Service: "kv", Partition: 1, Level: 2, Replicas: []client.ReplicaInfo{
			{Node: "s1", Role: "primary", Epoch: 4, Lease: lease, LeaseUntil: now.Add(-2*time.Second + 690*time.Millisecond)},
		}},
	}
	v := buildPartitions("s2", now, Filter{Partition: -1}, parts, nil)
	if len(v.Partitions) != 2 {
		t.Fatalf("%d partitions", len(v.Partitions))
	}
	p0, p1 := v.Partitions[0], v.Partitions[1]
	if p0.Primary != "s2" || p0.PrimaryStale != "" || p0.LeaseMs <= 0 {
		t.Errorf("partition 0: primary %q (%q), lease %d ms, want s2 holding its lease", p0.Primary, p0.PrimaryStale, p0.LeaseMs)
	}
	rows := map[string]ReplicaRow{}
	for _, r := range p0.Replicas {
		rows[r.Node] = r
	}
	if rows["s1"].Claim != "superseded" || rows["s2"].Claim != "" {
		t.Errorf("claims: s1 %q, s2 %q, want s1 superseded", rows["s1"].Claim, rows["s2"].Claim)
	}
	if r := rows["s3"]; r.Contact != "lost-contact" || r.LostMs != 1500 || !strings.Contains(r.ContactText(), "1.5 s") {
		t.Errorf("s3: %q for %d ms (%q), want lost-contact for 1500 ms", r.Contact, r.LostMs, r.ContactText())
	}
	// Partition 1: s1 alone, its claim ran out 1.31 s ago.
	if p1.Primary != "s1" || !strings.Contains(p1.PrimaryStale, "lease lapsed 1.3 s ago") || p1.LeaseMs != -1 || p1.Replicas[0].Claim != "lapsed" {
		t.Errorf("partition 1: primary %q (%q), lease %d, claim %q, want s1 lapsed", p1.Primary, p1.PrimaryStale, p1.LeaseMs, p1.Replicas[0].Claim)
	}
}
