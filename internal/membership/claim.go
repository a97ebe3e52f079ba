package membership

import (
	"time"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Claim is what a reader of the yellow pages makes of one replica's
// announced status: until when a primary's claim and lease hold, and
// whether the replica said it lost touch. Times are the reader's own: an
// announcement's durations are counted from when it was received (Entry.Seen,
// which for a relayed entry already deducts the relay's age), so the
// clocks of two machines are never compared; the error is the
// announcement's transit time.
type Claim struct {
	// LeaseUntil (a primary that announced a lease) is when its claim and
	// lease lapse unless a newer announcement renews them; zero without a
	// lease.
	LeaseUntil time.Time
	// Contact is "lost-contact" (not primary, its primary silent),
	// "no-quorum" (a primary whose majority is silent) or "" (in touch);
	// LostSince is when it last heard from them.
	Contact   string
	LostSince time.Time
}

// legacyLeaseValid stands in for an author's announce interval when its
// status carries a lease but no lease_valid_ms (an older node).
const legacyLeaseValid = DefaultAnnounceInterval * 3 / 2

// ReadClaim reads st as announced in an announcement received at seen.
func ReadClaim(seen time.Time, st *pb.ReplicaStatus) Claim {
	var c Claim
	if ms := st.GetLeaseMs(); ms > 0 {
		valid := time.Duration(st.GetLeaseValidMs()) * time.Millisecond
		if valid == 0 {
			valid = time.Duration(ms)*time.Millisecond + legacyLeaseValid
		}
		c.LeaseUntil = seen.Add(valid)
	}
	switch st.GetContact() {
	case pb.Contact_CONTACT_LOST:
		c.Contact = "lost-contact"
	case pb.Contact_CONTACT_NO_QUORUM:
		c.Contact = "no-quorum"
	}
	if c.Contact != "" {
		c.LostSince = seen.Add(-time.Duration(st.GetContactLostMs()) * time.Millisecond)
	}
	return c
}

// Lapsed reports whether a primary's announced lease had lapsed at now
// without a newer announcement (false for a claim without a lease).
func (c Claim) Lapsed(now time.Time) bool {
	return !c.LeaseUntil.IsZero() && !now.Before(c.LeaseUntil)
}
