package replication

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// TestKeeperResendsBeatsOnlyForABusyNotAStuckLoop: the keeper resends a
// primary's last heartbeats of its epoch while its loop has been busy a
// heartbeat interval, and stops once it has been busy keepBeatsFor: a
// stuck primary must not look alive to its followers for good.
func TestKeeperResendsBeatsOnlyForABusyNotAStuckLoop(t *testing.T) {
	const interval = 50 * time.Millisecond
	var k beatKeeper
	k.note(replica.Message{Type: replica.MsgAppend, To: "b", Epoch: 4})
	k.note(replica.Message{Type: replica.MsgAppend, To: "c", Epoch: 3})                                               // an older term's
	k.note(replica.Message{Type: replica.MsgAppend, To: "c", Epoch: 4, Entries: []replica.Entry{{LSN: 1, Epoch: 4}}}) // not a heartbeat
	primary := &replica.Status{Role: replica.Primary, Epoch: 4}
	if got := k.due(t0, interval, primary); len(got) != 0 {
		t.Fatalf("idle loop: resent %v", got)
	}
	k.busy(t0)
	for _, c := range []struct {
		name string
		at   time.Duration
		st   *replica.Status
		want int
	}{
		{"busy less than a heartbeat", interval / 2, primary, 0},
		{"busy a heartbeat", interval, primary, 1},
		{"busy long", keepBeatsFor, primary, 1},
		{"not a primary", interval, &replica.Status{Role: replica.Secondary, Epoch: 4}, 0},
		{"stuck", keepBeatsFor + interval, primary, 0},
	} {
		got := k.due(t0.Add(c.at), interval, c.st)
		if len(got) != c.want || c.want == 1 && (got[0].To != "b" || got[0].Epoch != 4) {
			t.Errorf("%s: resent %+v, want %d heartbeat(s) to b at epoch 4", c.name, got, c.want)
		}
	}
}
