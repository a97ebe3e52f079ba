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

// TestACutOffSecondaryAnnouncesLostContact: a secondary that hears its
// primary once and then nothing (it can still send: a one-way cut)
// announces itself in touch until AckTimeout of silence, then lost
// contact since the heartbeat, on the runtime's clock.
func TestACutOffSecondaryAnnouncesLostContact(t *testing.T) {
	rt, p, clk := startPart(t, "b", "a", "b", "c")
	heartbeat := &pb.ReplicaBatch{From: "a", Messages: []*pb.ReplicaMessage{
		toPBMessage(partKey{"kv", 0}, replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1, InSync: true})}}
	advance(t, p, clk, tickEvery)
	rt.Replicate(heartbeat)
	settle(t, p)
	heard := clk.Now()
	announced := func() *pb.ReplicaStatus { return rt.Status("kv", []int32{0})[0] }
	advance(t, p, clk, 490*time.Millisecond)
	if st := announced(); st.Contact != pb.Contact_CONTACT_OK || st.Primary != "a" {
		t.Fatalf("%v after the heartbeat: %v, primary %q, want in touch with a", clk.Since(heard), st.Contact, st.Primary)
	}
	advance(t, p, clk, 30*time.Millisecond)
	st := announced()
	if st.Contact != pb.Contact_CONTACT_LOST || time.Duration(st.ContactLostMs)*time.Millisecond != clk.Since(heard).Round(time.Millisecond) {
		t.Fatalf("%v after the heartbeat: %v for %d ms, want lost contact since the heartbeat", clk.Since(heard), st.Contact, st.ContactLostMs)
	}
}
