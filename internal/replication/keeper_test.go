package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// TestBusyFollowerAcknowledgesContact: while a follower's loop is busy
// (persisting and executing a large batch), its node answers its
// primary's heartbeats with a contact-only acknowledgement (no LSN, no
// Sent: no lease), so the primary's check-quorum does not step it down;
// never for an idle or stuck loop, another primary or epoch, or an append
// with entries.
func TestBusyFollowerAcknowledgesContact(t *testing.T) {
	const interval = 50 * time.Millisecond
	var k beatKeeper
	st := &replica.Status{Role: replica.Secondary, Epoch: 4, Primary: "a", Applied: 9}
	beat := replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 4, Sent: 77}
	if _, ok := k.contact(t0, interval, st, "b", beat); ok {
		t.Fatal("idle loop: answered for it")
	}
	k.busy(t0)
	withEntries := beat
	withEntries.Entries = []replica.Entry{{LSN: 10, Epoch: 4}}
	other, older := beat, beat
	other.From = "c"
	older.Epoch = 3
	for _, c := range []struct {
		name string
		at   time.Duration
		st   *replica.Status
		m    replica.Message
		want bool
	}{
		{"busy less than a heartbeat", interval / 2, st, beat, false},
		{"busy a heartbeat", interval, st, beat, true},
		{"busy long", keepBeatsFor, st, beat, true},
		{"stuck", keepBeatsFor + interval, st, beat, false},
		{"entries", interval, st, withEntries, false},
		{"not its primary", interval, st, other, false},
		{"an older epoch", interval, st, older, false},
		{"a primary", interval, &replica.Status{Role: replica.Primary, Epoch: 4, Primary: "a"}, beat, false},
	} {
		got, ok := k.contact(t0.Add(c.at), interval, c.st, "b", c.m)
		if ok != c.want {
			t.Errorf("%s: answered %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok && (got.Type != replica.MsgAppendResp || got.To != "a" || got.From != "b" || got.Epoch != 4 || got.LSN != 0 || got.Sent != 0 || got.Reject || got.Hint != 9) {
			t.Errorf("%s: answer %+v, want a contact-only ack to a at epoch 4", c.name, got)
		}
	}
}

// TestTimedOutCallKeepsDeliveries: only a control call that failed by its
// deadline (a busy peer) is told apart from one the peer refused (it may
// have restarted, so what it was sent must go again).
func TestTimedOutCallKeepsDeliveries(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("replicate to b: %w", context.DeadlineExceeded), true},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{errors.New("node b is not in the yellow pages"), false},
	} {
		if got := timedOut(c.err); got != c.want {
			t.Errorf("timedOut(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
