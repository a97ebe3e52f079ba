package membership

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestClaimsLapseByTheReadersClock: a primary's claim holds lease_valid_ms
// after its announcement arrived and lapses then; a relayed one counts
// from when it was first received; lost contact is dated back from the
// receipt.
func TestClaimsLapseByTheReadersClock(t *testing.T) {
	seen := time.Unix(1_000_000, 0)
	c := ReadClaim(seen, &pb.ReplicaStatus{Role: 2, LeaseMs: 380, LeaseValidMs: 680})
	if want := seen.Add(680 * time.Millisecond); !c.LeaseUntil.Equal(want) || c.Contact != "" {
		t.Fatalf("claim %+v, want lease until %v and no contact loss", c, want)
	}
	if c.Lapsed(seen.Add(679*time.Millisecond)) || !c.Lapsed(seen.Add(680*time.Millisecond)) {
		t.Fatal("the claim does not lapse exactly lease_valid_ms after receipt")
	}
	if c := ReadClaim(seen, &pb.ReplicaStatus{Role: 2}); !c.LeaseUntil.IsZero() || c.Lapsed(seen.Add(time.Hour)) {
		t.Fatalf("a primary without a lease: %+v, want no lease to lapse", c)
	}
	// An older author: the lease plus one and a half default intervals.
	if c := ReadClaim(seen, &pb.ReplicaStatus{Role: 2, LeaseMs: 400}); !c.LeaseUntil.Equal(seen.Add(400*time.Millisecond + legacyLeaseValid)) {
		t.Fatalf("legacy claim until %v", c.LeaseUntil)
	}
	c = ReadClaim(seen, &pb.ReplicaStatus{Role: 1, Contact: pb.Contact_CONTACT_LOST, ContactLostMs: 2500})
	if c.Contact != "lost-contact" || !c.LostSince.Equal(seen.Add(-2500*time.Millisecond)) {
		t.Fatalf("lost contact read as %+v", c)
	}
	if c := ReadClaim(seen, &pb.ReplicaStatus{Role: 2, Contact: pb.Contact_CONTACT_NO_QUORUM, ContactLostMs: 210}); c.Contact != "no-quorum" {
		t.Fatalf("no quorum read as %+v", c)
	}
}

// TestRelayedClaimsKeepTheirAge: an entry relayed through push/pull state
// is received with the age its relay gives, so its claim lapses no later
// than had it come directly.
func TestRelayedClaimsKeepTheirAge(t *testing.T) {
	p := NewPages(5 * time.Second)
	now := time.Unix(1_000_000, 0)
	a := &pb.Announcement{NodeId: "n1", Seq: 1, Incarnation: 1, Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0},
		Replicas: []*pb.ReplicaStatus{{Partition: 0, Role: 2, Epoch: 2, LeaseMs: 400, LeaseValidMs: 700}}}}}
	// Relayed 500 ms after its author sent it.
	if !p.Apply(now.Add(-500*time.Millisecond), a) {
		t.Fatal("not applied")
	}
	e := p.Snapshot(now)[0]
	c := ReadClaim(e.Seen, e.Ann.Services[0].Replicas[0])
	if c.Lapsed(now.Add(199*time.Millisecond)) || !c.Lapsed(now.Add(200*time.Millisecond)) {
		t.Fatalf("relayed claim until %v, want 200 ms after it was relayed", c.LeaseUntil.Sub(now))
	}
}
