package replication

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// TestAnnouncedStatusSaysWhenContactWasLost: the announced status carries
// the core's contact verdict under the partition's AckTimeout and Lease
// (defaults when unset), with how long ago contact was last had.
func TestAnnouncedStatusSaysWhenContactWasLost(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	cfg := replica.Config{Level: replica.Level2}
	for name, tc := range map[string]struct {
		st      replica.Status
		contact pb.Contact
		lostMs  uint32
	}{
		"secondary in touch":      {replica.Status{Role: replica.Secondary, Contact: now.Add(-100 * time.Millisecond)}, pb.Contact_CONTACT_OK, 0},
		"secondary cut off":       {replica.Status{Role: replica.Secondary, Contact: now.Add(-700 * time.Millisecond)}, pb.Contact_CONTACT_LOST, 700},
		"primary with its quorum": {replica.Status{Role: replica.Primary, Contact: now.Add(-100 * time.Millisecond)}, pb.Contact_CONTACT_OK, 0},
		"primary without":         {replica.Status{Role: replica.Primary, Contact: now.Add(-250 * time.Millisecond)}, pb.Contact_CONTACT_NO_QUORUM, 250},
		"level 1":                 {replica.Status{Role: replica.Secondary}, pb.Contact_CONTACT_OK, 0},
	} {
		got := toPBStatus(0, cfg, false, tc.st, now)
		if got.Contact != tc.contact || got.ContactLostMs != tc.lostMs {
			t.Errorf("%s: %v for %d ms, want %v for %d ms", name, got.Contact, got.ContactLostMs, tc.contact, tc.lostMs)
		}
	}
}
