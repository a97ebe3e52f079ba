package membership

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func departed(p *Pages, now time.Time) map[string]Departure {
	out := map[string]Departure{}
	for _, d := range p.Departures(now) {
		out[d.Node] = d
	}
	return out
}

// A member that leaves the pages is remembered with its last
// announcement, when it was last seen and why it went: expired when its
// TTL runs out (already before Expire drops it), gone when memberlist
// drops it (which also refines an expiry); it is forgotten
// when it announces itself again, or DepartedRetention after it left.
func TestDepartedMembersAreRememberedForAWhile(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	p.Apply(t0, ann("b", 1, 1, 0))
	p.Apply(t0, ann("c", 1, 1, 0))
	p.Apply(t0.Add(2*time.Second), ann("a", 1, 2, 0))
	p.Apply(t0.Add(2*time.Second), ann("c", 1, 2, 0))
	if d := p.Departures(t0.Add(2 * time.Second)); len(d) != 0 {
		t.Fatalf("departed before anyone left: %v", d)
	}

	// b's TTL runs out at t0+5s: departed at once, before Expire runs.
	at := t0.Add(5*time.Second + time.Millisecond)
	d := departed(p, at)
	if b, ok := d["b"]; !ok || b.Why != WhyExpired || !b.LastSeen.Equal(t0) || !b.Left.Equal(t0.Add(5*time.Second)) || b.Ann.RpcAddr != "b:1" {
		t.Fatalf("b after its TTL: %+v (present %v), want expired, last seen t0, left at its expiry, with its address", b, ok)
	}
	p.Expire(t0.Add(6 * time.Second))
	if b := departed(p, t0.Add(6*time.Second))["b"]; b.Why != WhyExpired || !b.Left.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("b after Expire: %+v", b)
	}
	// memberlist then drops b: the reason is refined, the time kept.
	p.Remove(t0.Add(7*time.Second), "b", WhyGone)
	// memberlist drops c while its entry is still live.
	p.Remove(t0.Add(3*time.Second), "c", WhyGone)
	d = departed(p, t0.Add(7*time.Second))
	if d["b"].Why != WhyGone || !d["b"].Left.Equal(t0.Add(5*time.Second)) {
		t.Errorf("b: %+v, want gone, left at its expiry", d["b"])
	}
	if c := d["c"]; c.Why != WhyGone || !c.Left.Equal(t0.Add(3*time.Second)) || !c.LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Errorf("c: %+v, want gone at t0+3s, last seen t0+2s", c)
	}
	if _, ok := d["a"]; ok || len(d) != 2 {
		t.Errorf("departed %v, want b and c only", d)
	}

	// c comes back: forgotten.
	p.Apply(t0.Add(8*time.Second), ann("c", 2, 1, 0))
	if _, ok := departed(p, t0.Add(8*time.Second))["c"]; ok {
		t.Error("c is still departed after announcing itself again")
	}
	// b is forgotten DepartedRetention after it left, not before.
	if _, ok := departed(p, t0.Add(5*time.Second+DepartedRetention))["b"]; !ok {
		t.Error("b forgotten before DepartedRetention")
	}
	if _, ok := departed(p, t0.Add(5*time.Second+DepartedRetention+time.Millisecond))["b"]; ok {
		t.Error("b remembered after DepartedRetention")
	}
	// Removing a node never announced remembers nothing.
	p.Remove(t0.Add(9*time.Second), "z", WhyGone)
	if _, ok := departed(p, t0.Add(9*time.Second))["z"]; ok {
		t.Error("a member never in the pages became departed")
	}
}

// However many members leave, at most DepartedMax are remembered: the
// oldest departures go first.
func TestDepartedMemoryIsBounded(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(time.Second)
	n := DepartedMax + 10
	for i := range n {
		id := fmt.Sprintf("n%04d", i)
		p.Apply(t0, ann(id, 1, 1, 0))
		p.Remove(t0.Add(time.Duration(i)*time.Millisecond), id, WhyGone)
	}
	d := departed(p, t0.Add(time.Minute))
	if len(d) != DepartedMax {
		t.Fatalf("%d departed remembered, want %d", len(d), DepartedMax)
	}
	if _, ok := d["n0009"]; ok {
		t.Error("one of the 10 oldest departures is still remembered")
	}
	if _, ok := d[fmt.Sprintf("n%04d", n-1)]; !ok {
		t.Error("the latest departure is not remembered")
	}
}

// Through memberlist: a member that closes its membership is departed as
// gone at the others, with its last announcement.
func TestGossipRemembersAMemberThatLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func(id string, join ...string) *Gossip {
		g, err := Start(ctx, Config{NodeID: id, BindAddr: "127.0.0.1", Join: join, AnnounceInterval: 50 * time.Millisecond, TTL: 5 * time.Second,
			Announce: func() *pb.Announcement {
				return &pb.Announcement{RpcAddr: id + ":1", Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := start("a")
	defer a.Close()
	b := start("b", a.Addr())
	if !eventually(ctx, 10*time.Second, func() bool { return len(a.Snapshot()) == 2 }) {
		t.Fatal("a never heard b's announcement")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var d []Departure
	if !eventually(ctx, 10*time.Second, func() bool { d = a.Departures(); return len(d) == 1 }) {
		t.Fatalf("departed at a: %v, want b", d)
	}
	if d[0].Node != "b" || d[0].Why != WhyGone || d[0].Ann.GetRpcAddr() != "b:1" || len(a.Snapshot()) != 1 {
		t.Errorf("departed %+v, live %d; want b, gone, at b:1, and a alone live", d[0], len(a.Snapshot()))
	}
}
