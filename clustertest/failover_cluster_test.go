package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestWriteToAStoppedPrimaryMovesToItsSuccessor: a write sent to a primary
// that is stopped (SIGSTOP keeps its sockets open, so the call neither
// fails nor answers) is sent again to the new primary as soon as the
// yellow pages name it, and acknowledged while the old one is still
// stopped, instead of waiting out its deadline. The write carries an
// identity, so the second attempt cannot apply it twice: the key ends with
// exactly the one value.
func TestWriteToAStoppedPrimaryMovesToItsSuccessor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, nodes, c := replProcs(t, ctx, 2)
	old := waitPrimary(t, c, 0)
	var victim *localcluster.Node
	for _, n := range nodes {
		if n.Spec.ID == old {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("primary %q of partition 0 is none of the nodes", old)
	}
	if _, err := c.Call(ctx, "kv", 0, "put", []byte("warm=1")); err != nil {
		t.Fatal(err)
	}
	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	stale := watchStale(c, 0, old, paused)
	// The old primary stays stopped for hold: long enough that a call
	// waiting for it (its deadline is longer still) ends after the resume.
	const hold = 8 * time.Second
	resumed := make(chan time.Time, 1)
	go func() {
		time.Sleep(hold)
		_ = victim.Resume()
		resumed <- time.Now()
	}()
	callCtx, cancelCall := context.WithTimeout(ctx, 3*hold)
	_, err := c.Call(callCtx, "kv", 0, "put", []byte("moved=yes"))
	acked := time.Now()
	cancelCall()
	if err != nil {
		t.Fatalf("write while the primary was stopped: %v", err)
	}
	at := <-resumed
	if !acked.Before(at) {
		t.Errorf("the write was acknowledged %v after the old primary resumed: it waited for the stopped primary", acked.Sub(at))
	}
	resp, err := c.Call(ctx, "kv", 0, "get", []byte("moved"), neptune.WithTimeout(5*time.Second))
	if err != nil || string(resp.Body) != "yes" {
		t.Fatalf("read back: %q, %v", respBody(resp), err)
	}
	// The yellow pages told the truth within a second: while the stopped
	// primary was still listed, its claim was marked stale (its announced
	// lease lapsed, or the new primary's epoch superseded it).
	s := <-stale
	if s.after < 0 {
		t.Fatalf("the stopped primary %s was never marked stale while it was listed as primary", old)
	}
	t.Logf("the stopped primary %s was marked stale %v after SIGSTOP: %s", old, s.after.Round(time.Millisecond), s.why)
	if s.after > time.Second {
		t.Errorf("the stopped primary was marked stale only %v after SIGSTOP, want within a second", s.after)
	}
}

// staleMark is when (after the stop) and why a stopped primary's claim
// was first marked stale; after < 0: never while it was listed.
type staleMark struct {
	after time.Duration
	why   string
}
