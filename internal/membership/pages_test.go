package membership

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func ann(node string, inc int64, seq uint64, parts ...int32) *pb.Announcement {
	return &pb.Announcement{NodeId: node, Incarnation: inc, Seq: seq, RpcAddr: node + ":1",
		Services: []*pb.HostedService{{Name: "kv", Partitions: parts, Methods: []*pb.MethodInfo{{Name: "get", Mode: pb.Mode_MODE_READ}}}}}
}

func nodes(l Lookup) []string {
	var out []string
	for _, r := range l.Replicas {
		out = append(out, r.Node)
	}
	return out
}

func TestPagesExpireAfterTTLUnlessRefreshed(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	p.Apply(t0, ann("b", 1, 1, 0))
	p.Apply(t0.Add(4*time.Second), ann("a", 1, 2, 0)) // a refreshes, b does not
	if got := nodes(p.Replicas(t0.Add(5*time.Second), "kv", 0)); len(got) != 2 {
		t.Fatalf("at exactly the TTL both should live, got %v", got)
	}
	l := p.Replicas(t0.Add(5*time.Second+time.Millisecond), "kv", 0)
	if got := nodes(l); len(got) != 1 || got[0] != "a" {
		t.Fatalf("after b's TTL: %v, want [a]", got)
	}
	if gone := p.Expire(t0.Add(6 * time.Second)); len(gone) != 1 || gone[0] != "b" {
		t.Fatalf("Expire = %v, want [b]", gone)
	}
	l = p.Replicas(t0.Add(20*time.Second), "kv", 0)
	if len(l.Replicas) != 0 || !l.PartitionKnown || !l.ServiceKnown {
		t.Fatalf("all expired: %+v, want no replicas but a known partition", l)
	}
	if l := p.Replicas(t0, "kv", 9); l.PartitionKnown || !l.ServiceKnown {
		t.Fatalf("partition 9 was never announced: %+v", l)
	}
	if l := p.Replicas(t0, "nope", 0); l.ServiceKnown {
		t.Fatalf("service nope was never announced: %+v", l)
	}
}

func TestPagesIgnoreStaleAnnouncements(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 2, 5, 0, 1))
	if p.Apply(t0.Add(time.Second), ann("a", 2, 4, 7)) {
		t.Fatal("lower seq from the same incarnation applied")
	}
	if p.Apply(t0.Add(time.Second), ann("a", 1, 99, 7)) {
		t.Fatal("older incarnation applied")
	}
	if got := nodes(p.Replicas(t0.Add(time.Second), "kv", 1)); len(got) != 1 {
		t.Fatalf("the current announcement was overwritten: %v", got)
	}
	// A restarted node (new incarnation) replaces the old entry at once.
	if !p.Apply(t0.Add(2*time.Second), ann("a", 3, 1, 7)) {
		t.Fatal("restart not applied")
	}
	if got := nodes(p.Replicas(t0.Add(2*time.Second), "kv", 7)); len(got) != 1 {
		t.Fatalf("restarted node's partitions not visible: %v", got)
	}
}

func TestPagesExcludeUntilAnnouncedAgain(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	p.Apply(t0, ann("b", 1, 1, 0))
	p.Exclude("a")
	if got := nodes(p.Replicas(t0, "kv", 0)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("excluded a still offered: %v", got)
	}
	p.Apply(t0.Add(time.Second), ann("a", 1, 1, 0)) // a duplicate does not count
	if !p.Excluded("a") {
		t.Fatal("a duplicate announcement lifted the exclusion")
	}
	p.Apply(t0.Add(time.Second), ann("a", 1, 2, 0))
	if got := nodes(p.Replicas(t0.Add(time.Second), "kv", 0)); len(got) != 2 {
		t.Fatalf("a fresh announcement should re-include a: %v", got)
	}
}

func TestPagesRemoveAndMethod(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	if m, ok := p.Method(t0, "kv", "get"); !ok || m.Mode != pb.Mode_MODE_READ {
		t.Fatalf("Method(kv.get) = %v, %v", m, ok)
	}
	if _, ok := p.Method(t0, "kv", "put"); ok {
		t.Fatal("undeclared method found")
	}
	p.Remove(t0, "a", WhyGone)
	if len(p.Snapshot(t0)) != 0 {
		t.Fatal("removed node still in snapshot")
	}
}

func TestLookupAnswersReplicasAndMethodAtOnce(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPages(time.Second)
	p.Apply(now, &pb.Announcement{NodeId: "a", Seq: 1, Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0},
		Methods: []*pb.MethodInfo{{Name: "put", Mode: pb.Mode_MODE_WRITE}}}}})
	p.Apply(now, &pb.Announcement{NodeId: "b", Seq: 1, Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{1},
		Methods: []*pb.MethodInfo{{Name: "put", Mode: pb.Mode_MODE_WRITE}}}}})
	l := p.Lookup(now, "kv", 1, "put")
	if len(l.Replicas) != 1 || l.Replicas[0].Node != "b" || l.Method == nil || l.Method.Mode != pb.Mode_MODE_WRITE {
		t.Fatalf("Lookup(kv, 1, put) = %+v", l)
	}
	// The method table comes from any live node of the service, even one
	// that hosts other partitions.
	if l := p.Lookup(now, "kv", 7, "put"); l.Method == nil || len(l.Replicas) != 0 || !l.ServiceKnown || l.PartitionKnown {
		t.Fatalf("Lookup(kv, 7, put) = %+v", l)
	}
	if l := p.Lookup(now, "kv", 0, "get"); l.Method != nil {
		t.Fatalf("undeclared method found: %+v", l.Method)
	}
	if l := p.Lookup(now.Add(2*time.Second), "kv", 0, "put"); l.Method != nil || len(l.Replicas) != 0 {
		t.Fatalf("expired entries answered: %+v", l)
	}
}

// TestPagesANewerAnnouncementKeepsALiveEntrysLife: an announcement that
// arrives aged (from a peer's state, seen long before) with newer content
// takes the entry's place but not its life: the node was vouched for
// until the entry's expiry. It used to expire the entry within a tick,
// a live member removed from the pages under packet loss.
func TestPagesANewerAnnouncementKeepsALiveEntrysLife(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	p.Keep(t0.Add(4*time.Second), func(string) bool { return true }) // lives to t0+9s
	if !p.Apply(t0.Add(time.Second), ann("a", 2, 1, 0, 1)) {
		t.Fatal("a newer incarnation was not applied")
	}
	at := t0.Add(8 * time.Second)
	if got := nodes(p.Replicas(at, "kv", 1)); len(got) != 1 {
		t.Fatalf("at t0+8s a's new announcement should live (its entry was kept to t0+9s): %v", got)
	}
	if gone := p.Expire(at); len(gone) != 0 {
		t.Fatalf("Expire(t0+8s) = %v, want none", gone)
	}
}

// TestPagesKeepVouchesForAnEntryPastItsTime: an entry learnt aged, already
// past its expiry when the next tick comes, stays while the failure
// detector holds its node live; one it does not is expired.
func TestPagesKeepVouchesForAnEntryPastItsTime(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := NewPages(5 * time.Second)
	p.Apply(t0, ann("a", 1, 1, 0))
	p.Apply(t0, ann("b", 1, 1, 0))
	now := t0.Add(6 * time.Second)
	p.Keep(now, func(id string) bool { return id == "a" })
	if gone := p.Expire(now); len(gone) != 1 || gone[0] != "b" {
		t.Fatalf("Expire = %v, want [b] (a is live)", gone)
	}
	if got := nodes(p.Replicas(now, "kv", 0)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("replicas = %v, want [a]", got)
	}
}
