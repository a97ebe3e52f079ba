package client

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestStatusTellsLapsedAndSupersededPrimaries: the old primary of a
// failover still in the yellow pages is marked superseded as soon as the
// new one announces itself; a primary whose lease lapsed with no newer
// announcement is marked lapsed; a replica that lost contact says since
// when; a primary that keeps announcing is marked nothing.
func TestStatusTellsLapsedAndSupersededPrimaries(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	old := &pb.ReplicaStatus{Role: 2, Epoch: 2, LeaseMs: 350, LeaseValidMs: 650}
	fresh := &pb.ReplicaStatus{Role: 2, Epoch: 3, LeaseMs: 380, LeaseValidMs: 680}
	cut := &pb.ReplicaStatus{Role: 1, Epoch: 3, Contact: pb.Contact_CONTACT_LOST, ContactLostMs: 1200}

	// s1 (epoch 2) announced 300 ms ago, s2 (epoch 3) just now.
	pi := PartitionInfo{Replicas: []ReplicaInfo{
		readReplica(now, now.Add(-300*time.Millisecond), "s1", old),
		readReplica(now, now, "s2", fresh),
		readReplica(now, now.Add(-100*time.Millisecond), "s3", cut),
	}}
	judge(&pi)
	s1, s2, s3 := pi.Replicas[0], pi.Replicas[1], pi.Replicas[2]
	if !strings.Contains(s1.Stale, "superseded") || !strings.Contains(s1.Stale, "epoch 3") {
		t.Errorf("the old primary: %q, want superseded by epoch 3", s1.Stale)
	}
	if s2.Stale != "" || !s2.LeaseUntil.Equal(now.Add(680*time.Millisecond)) {
		t.Errorf("the new primary: stale %q, lease until %v", s2.Stale, s2.LeaseUntil.Sub(now))
	}
	if s3.Contact != "lost-contact" || !s3.LostSince.Equal(now.Add(-1300*time.Millisecond)) {
		t.Errorf("the cut-off replica: %q since %v", s3.Contact, now.Sub(s3.LostSince))
	}

	// Alone, the old primary's claim holds 650 ms after it arrived, then
	// lapses: a paused primary stops announcing.
	seen := now.Add(-300 * time.Millisecond)
	if r := readReplica(now, seen, "s1", old); r.Stale != "" {
		t.Errorf("within its claim: %q", r.Stale)
	}
	later := seen.Add(650 * time.Millisecond)
	if r := readReplica(later, seen, "s1", old); !strings.Contains(r.Stale, "lease lapsed") {
		t.Errorf("after its claim: %q, want lapsed", r.Stale)
	}
}
