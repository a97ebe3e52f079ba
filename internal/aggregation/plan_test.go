package aggregation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// loadPoller answers polls with each node's load in loads (pending per
// worker, 1 worker); a node not in loads does not answer. It records who
// was polled.
type loadPoller struct {
	mu     sync.Mutex
	loads  map[string]time.Duration
	polled []string
}

func (p *loadPoller) Poll(_ context.Context, ts []transport.PollTarget, _ string, _ int32, _ string, _ time.Duration) []transport.PollAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []transport.PollAnswer
	for _, t := range ts {
		p.polled = append(p.polled, t.Replica)
		if l, ok := p.loads[t.Replica]; ok {
			out = append(out, transport.PollAnswer{Replica: t.Replica, Work: transport.Work{Pending: l, Capacity: 1}})
		}
	}
	return out
}

func (p *loadPoller) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.polled
	p.polled = nil
	slices.Sort(out)
	return out
}

// spread is n partitions, partition i on node "n<i>" alone.
func spread(n int) (pages, Aggregation) {
	dir := pages{}
	a := Aggregation{Service: "svc", Local: "l", Reduce: "r", Deadline: time.Second}
	for i := range n {
		id := fmt.Sprintf("n%03d", i)
		dir[int32(i)] = []membership.Replica{{Node: id, RPCAddr: "rpc-" + id, PollAddr: "poll-" + id}}
		a.Partitions = append(a.Partitions, i)
	}
	return dir, a
}

// TestPlanPollsAtMostK: a call over 900 nodes polls k of them, those never
// heard from first, so the first ⌈n/k⌉ calls poll every node once.
func TestPlanPollsAtMostK(t *testing.T) {
	const n, k = 900, 8
	dir, a := spread(n)
	p := &loadPoller{loads: map[string]time.Duration{}}
	for i := range n {
		p.loads[fmt.Sprintf("n%03d", i)] = time.Duration(i) * time.Millisecond
	}
	clk := clock.NewManual(time.Unix(1000, 0))
	c := NewCaller(Config{Directory: dir, Poller: p, Clock: clk, Polls: k, Rand: rand.New(rand.NewPCG(1, 2))})
	seen := map[string]int{}
	for call := range n / k {
		if _, _, err := c.plan(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		got := p.take()
		if len(got) != k {
			t.Fatalf("call %d polled %d nodes, want %d", call, len(got), k)
		}
		for _, id := range got {
			if seen[id]++; seen[id] > 1 {
				t.Fatalf("call %d polled %s again while nodes were never polled", call, id)
			}
		}
		clk.Advance(10 * time.Millisecond)
	}
	// The next call polls the n mod k nodes never polled, and others.
	if _, _, err := c.plan(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	got := p.take()
	for _, id := range got {
		seen[id]++
	}
	if len(got) != k || len(seen) != n {
		t.Fatalf("call %d polled %d nodes; %d of %d polled so far; want %d and all", n/k, len(got), len(seen), n, k)
	}
	// A small call polls every node, as before.
	small := a
	small.Partitions = a.Partitions[:5]
	if _, _, err := c.plan(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	if got := p.take(); len(got) != 5 {
		t.Fatalf("a call over 5 nodes polled %v, want all 5", got)
	}
	// A call may ask for more polls, up to every node.
	all := a
	all.Polls = n
	if _, _, err := c.plan(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	if got := p.take(); len(got) != n {
		t.Fatalf("Aggregation.Polls = %d polled %d nodes", n, len(got))
	}
	all.Polls = -1
	if err := all.Validate(); err == nil || !strings.Contains(err.Error(), "Polls") {
		t.Fatalf("Validate of Polls -1 = %v, want an error naming Polls", err)
	}
}

// TestPlanUsesKnownLoadsOfNodesItDoesNotPoll: a node not polled in this
// call is ranked by what its last answer said: a partition's replica that
// answered light earlier is chosen over one that answered heavy, and a
// node whose last poll went unanswered ranks behind both until it answers.
func TestPlanUsesKnownLoadsOfNodesItDoesNotPoll(t *testing.T) {
	dir := pages{0: {{Node: "heavy"}, {Node: "light"}, {Node: "mute"}}}
	for i := range 40 {
		id := fmt.Sprintf("x%02d", i)
		dir[int32(i+1)] = []membership.Replica{{Node: id}}
	}
	a := Aggregation{Service: "svc", Local: "l", Reduce: "r", Deadline: time.Second}
	for part := range dir {
		a.Partitions = append(a.Partitions, int(part))
	}
	slices.Sort(a.Partitions)
	p := &loadPoller{loads: map[string]time.Duration{"heavy": 900 * time.Millisecond, "light": 0}}
	for i := range 40 {
		p.loads[fmt.Sprintf("x%02d", i)] = 100 * time.Millisecond
	}
	clk := clock.NewManual(time.Unix(1000, 0))
	// LoadHorizon is long, so the estimates are near the answers.
	c := NewCaller(Config{Directory: dir, Poller: p, Clock: clk, Polls: 43, LoadHorizon: time.Hour, Rand: rand.New(rand.NewPCG(3, 4))})
	if _, _, err := c.plan(context.Background(), a); err != nil { // polls all 43
		t.Fatal(err)
	}
	p.take()
	c.cfg.Polls = 2
	for call := range 20 {
		clk.Advance(time.Second)
		plans, _, err := c.plan(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		polled := p.take()
		if len(polled) != 2 {
			t.Fatalf("call %d polled %v, want 2 nodes", call, polled)
		}
		if slices.Contains(polled, "light") || slices.Contains(polled, "heavy") || slices.Contains(polled, "mute") {
			continue // this call knew them fresh
		}
		var order []string
		for _, r := range plans[0].replicas {
			order = append(order, r.Node)
		}
		if !slices.Equal(order, []string{"light", "heavy", "mute"}) {
			t.Fatalf("call %d ranked partition 0's replicas %v from known loads; want light, heavy, then the silent mute", call, order)
		}
		if got := plans[0].server.Load; got > 50*time.Millisecond {
			t.Fatalf("call %d: light's estimated load %v, want near its known 0", call, got)
		}
	}
}
