package membership

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestRefreshCostIsFlatInClusterSize: up to RefreshPeers members a member
// refreshes every interval; beyond, each member sends (and receives)
// RefreshPeers refreshes per interval, until the cap.
func TestRefreshCostIsFlatInClusterSize(t *testing.T) {
	base := time.Second
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, base}, {RefreshPeers, base}, {16, 2 * base}, {100, 12500 * time.Millisecond}, {1000, MaxRefreshInterval}} {
		if got := RefreshInterval(base, c.n); got != c.want {
			t.Errorf("RefreshInterval(%v, %d) = %v, want %v", base, c.n, got, c.want)
		}
	}
	for _, n := range []int{16, 64, 256, 960} {
		if perMember := float64(n) * float64(base) / float64(RefreshInterval(base, n)); perMember != RefreshPeers {
			t.Errorf("%d members: each receives %.1f refreshes per interval, want %d", n, perMember, RefreshPeers)
		}
	}
	if got := antiEntropyInterval(3); got != minAntiEntropy {
		t.Errorf("anti-entropy in a small cluster every %v, want %v", got, minAntiEntropy)
	}
	if a, b := antiEntropyInterval(100), antiEntropyInterval(1000); b != 10*a {
		t.Errorf("anti-entropy interval %v at 100 members, %v at 1000: want it proportional to N", a, b)
	}
	if DefaultMaxAnnouncementAge < 2*MaxRefreshInterval {
		t.Errorf("a refresh every %v is older than receivers accept (%v) when relayed", MaxRefreshInterval, DefaultMaxAnnouncementAge)
	}
}

func TestPlanAnnouncement(t *testing.T) {
	const refresh, resign = 2 * time.Second, 30 * time.Second
	for _, c := range []struct {
		name string
		s    announceState
		want announceAction
	}{
		{"a change goes out at once", announceState{changed: true, volatile: true, sinceSent: 0}, sendChange},
		{"nothing before the refresh is due", announceState{volatile: true, sinceSent: time.Second}, sendNothing},
		{"volatile fields at the refresh", announceState{volatile: true, sinceSent: refresh}, sendRefresh},
		{"nothing new: re-send what the others hold", announceState{sinceSent: refresh, signedAge: 10 * time.Second}, sendResend},
		{"re-signed when old", announceState{sinceSent: refresh, signedAge: resign}, sendRefresh},
	} {
		c.s.refresh, c.s.resignAfter = refresh, resign
		if got := planAnnouncement(c.s); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestChangesThatMatter: roles, epochs, partitions and whether a lease is
// held are changes; versions, commit points, the lease time left and
// how long contact has been lost are volatile.
func TestChangesThatMatter(t *testing.T) {
	base := func() *pb.Announcement {
		return &pb.Announcement{NodeId: "n1", Seq: 3, RpcAddr: "10.0.0.1:7000", Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0},
			Replicas: []*pb.ReplicaStatus{{Partition: 0, Role: 2, Epoch: 4, Version: 10, Commit: 9, LeaseMs: 300, LeaseValidMs: 900}}}}}
	}
	k0, v0 := announcementKeys(base())
	for _, c := range []struct {
		name             string
		edit             func(*pb.Announcement)
		change, volatile bool
	}{
		{"sequence number", func(a *pb.Announcement) { a.Seq++ }, false, false},
		{"lease time left", func(a *pb.Announcement) { a.Services[0].Replicas[0].LeaseMs = 120 }, false, false},
		{"version", func(a *pb.Announcement) { a.Services[0].Replicas[0].Version = 11 }, false, true},
		{"contact lost for longer", func(a *pb.Announcement) { a.Services[0].Replicas[0].ContactLostMs = 700 }, false, true},
		{"lease lost", func(a *pb.Announcement) { a.Services[0].Replicas[0].LeaseMs = 0 }, true, true},
		{"epoch", func(a *pb.Announcement) { a.Services[0].Replicas[0].Epoch = 5 }, true, true},
		{"role", func(a *pb.Announcement) { a.Services[0].Replicas[0].Role = 1 }, true, true},
		{"partitions", func(a *pb.Announcement) { a.Services[0].Partitions = []int32{0, 1} }, true, true},
		{"address", func(a *pb.Announcement) { a.RpcAddr = "10.0.0.2:7000" }, true, true},
	} {
		a := base()
		c.edit(a)
		k, v := announcementKeys(a)
		if (k != k0) != c.change || (v != v0) != c.volatile {
			t.Errorf("%s: change %v volatile %v, want %v %v", c.name, k != k0, v != v0, c.change, c.volatile)
		}
	}
}

// TestLeaseClaimCoversTheNextRefresh: a primary's claim is valid for its
// lease left plus one and a half refresh intervals, so a primary that
// keeps refreshing never looks lapsed between two refreshes (one lost).
func TestLeaseClaimCoversTheNextRefresh(t *testing.T) {
	if got := leaseValid(0, time.Second); got != 0 {
		t.Fatalf("no lease: valid %d ms", got)
	}
	if got := leaseValid(380, 200*time.Millisecond); got != 680 {
		t.Fatalf("380 ms of lease, 200 ms refresh: valid %d ms, want 680", got)
	}
	if got := leaseValid(1, 12500*time.Millisecond); got != 18751 {
		t.Fatalf("1 ms of lease, 12.5 s refresh: valid %d ms, want 18751", got)
	}
}

// TestTouchRenewsOnlyTheHeldAnnouncement: an unchanged announcement sent
// again renews its entry and lifts an exclusion; an older one does not.
func TestTouchRenewsOnlyTheHeldAnnouncement(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPages(5 * time.Second)
	a := &pb.Announcement{NodeId: "n1", Seq: 7, Incarnation: 1, Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}}
	p.Apply(t0, a)
	p.Exclude("n1")
	if p.Touch(t0.Add(time.Second), &pb.Announcement{NodeId: "n1", Seq: 6, Incarnation: 1}, t0.Add(time.Second), true) {
		t.Fatal("an older announcement renewed the entry")
	}
	if !p.Touch(t0.Add(4*time.Second), a, t0.Add(4*time.Second), true) || p.Excluded("n1") {
		t.Fatal("the held announcement sent again did not renew the entry or lift the exclusion")
	}
	if got := p.entries["n1"].Expires; !got.Equal(t0.Add(9 * time.Second)) {
		t.Fatalf("expires %v, want a TTL after the touch", got)
	}
	p.Keep(t0.Add(8*time.Second), func(string) bool { return true })
	if len(p.Expire(t0.Add(12*time.Second))) != 0 {
		t.Fatal("an entry the failure detector vouches for expired")
	}
	if gone := p.Expire(t0.Add(14 * time.Second)); len(gone) != 1 {
		t.Fatalf("an entry neither touched nor kept did not expire: %v", gone)
	}
}

// TestStrangersAreHeldEntriesOfMembersMemberlistDoesNotHold: an entry the
// pages hold whose member memberlist does not hold live means this member
// missed its alive message; this member's own entry, live members' and
// expired ones are no sign of that.
func TestStrangersAreHeldEntriesOfMembersMemberlistDoesNotHold(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	p := NewPages(5 * time.Second)
	for _, id := range []string{"self", "live", "stale"} {
		p.Apply(t0, &pb.Announcement{NodeId: id, Seq: 1})
	}
	now := t0.Add(6 * time.Second) // past the TTL of t0's entries
	for _, id := range []string{"stranger", "live", "self"} {
		p.Apply(now, &pb.Announcement{NodeId: id, Seq: 2})
	}
	live := map[string]bool{"self": true, "live": true}
	if got := strangers(now, p, "self", live); !slices.Equal(got, []string{"stranger"}) {
		t.Fatalf("strangers = %v, want [stranger]", got)
	}
	delete(live, "self")
	if got := strangers(now, p, "self", live); !slices.Equal(got, []string{"stranger"}) {
		t.Fatalf("this member is never a stranger to itself: %v", got)
	}
	if got := strangers(now.Add(6*time.Second), p, "self", live); len(got) != 0 {
		t.Fatalf("strangers = %v once their entries expired, want none", got)
	}
}

// TestStrangerBringsExchangeForwardAfterGrace: a joiner's entry arrives
// before its alive message, so a stranger brings anti-entropy forward only
// once the pages have held its entry for strangerGrace, and then at most
// once per unknownAskerGap; one that turns live in the grace never does.
func TestStrangerBringsExchangeForwardAfterGrace(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	never := t0.Add(time.Hour)
	g := &Gossip{cfg: Config{NodeID: "self"}, pages: NewPages(5 * time.Second), log: slog.New(slog.DiscardHandler), antiEntropyDue: never}
	live := map[string]bool{"self": true}
	g.pages.Apply(t0, &pb.Announcement{NodeId: "joiner", Seq: 1})
	g.pages.Apply(t0, &pb.Announcement{NodeId: "missed", Seq: 1})
	g.exchangeSoonOnStranger(t0, live)
	live["joiner"] = true // its alive message arrived
	g.exchangeSoonOnStranger(t0.Add(time.Second), live)
	if !g.antiEntropyDue.Equal(never) {
		t.Fatalf("anti-entropy due %v within the grace, want unchanged", g.antiEntropyDue)
	}
	at := t0.Add(strangerGrace)
	g.pages.Apply(at, &pb.Announcement{NodeId: "missed", Seq: 2}) // refreshed: still held
	g.exchangeSoonOnStranger(at, live)
	if !g.antiEntropyDue.Equal(at) {
		t.Fatalf("anti-entropy due %v after the grace, want %v", g.antiEntropyDue, at)
	}
	g.antiEntropyDue = never
	g.exchangeSoonOnStranger(at.Add(time.Second), live)
	if !g.antiEntropyDue.Equal(never) {
		t.Fatalf("anti-entropy brought forward again %v after the last, want once per %v", time.Second, unknownAskerGap)
	}
}
