package node

import (
	"testing"
	"time"
)

// TestAnnouncedLeaseValidityCoversTheNextAnnouncement: a primary's claim
// is valid for its lease left plus one and a half announce intervals, so
// a primary that keeps announcing never looks lapsed between two
// announcements (one lost), and one that stops looks lapsed soon after.
func TestAnnouncedLeaseValidityCoversTheNextAnnouncement(t *testing.T) {
	if got := leaseValidMillis(0, time.Second); got != 0 {
		t.Fatalf("no lease: valid %d ms", got)
	}
	if got := leaseValidMillis(380, 200*time.Millisecond); got != 680 {
		t.Fatalf("380 ms of lease, 200 ms interval: valid %d ms, want 680", got)
	}
	if got := leaseValidMillis(1, time.Second); got != 1501 {
		t.Fatalf("1 ms of lease, 1 s interval: valid %d ms, want 1501", got)
	}
}
