package client

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// TestFailoverDecisions: what a call does after a failed attempt, for
// every error kind, as a read, an identified write and a write without an
// identity. The outer policy's view (retried) is checked in the same rows:
// whatever the attempt loop gives up on, the policy retries only what is
// safe.
func TestFailoverDecisions(t *testing.T) {
	unreachable := transport.FromStatus("n1", status.Error(codes.Unavailable, "connection refused"))
	if !transport.IsTransport(unreachable) {
		t.Fatal("the test's transport error is not one")
	}
	give := decision{giveUp: true}
	another := decision{exclude: true, count: true}
	wait := decision{wait: waitAlways}
	for _, tc := range []struct {
		name                 string
		err                  error
		read, idWrite, write decision // write: without an identity
		retried              bool     // by the outer policy, as the attempt loop returns it
	}{
		{"primary moved", errPrimaryMoved, decision{count: true, wait: waitAfterMax}, decision{count: true, wait: waitAfterMax}, decision{count: true, wait: waitAfterMax}, false},
		{"node unreachable", unreachable, another, decision{exclude: true, count: true, wait: waitAfterMax}, decision{giveUp: true, exclude: true}, true},
		{"node stopping", fmt.Errorf("%w: node draining", nerr.ErrClosed), another, another, another, true},
		{"stopping after the write was sent", &nerr.UnknownOutcomeError{Cause: nerr.ErrClosed}, wait, wait, give, false},
		{"forward to a dying primary", &nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrNoReplica}, wait, wait, give, true},
		{"no primary", nerr.ErrNoPrimary, wait, wait, wait, true},
		{"no replica", nerr.ErrNoReplica, wait, give, give, true},
		{"overloaded", nerr.ErrOverloaded, give, give, give, true},
		{"handler's deadline", fmt.Errorf("%w: killed after 300ms", nerr.ErrDeadline), give, give, give, false},
		{"unknown service", nerr.ErrUnknownService, give, give, give, false},
		{"unknown partition", nerr.ErrUnknownPartition, give, give, give, false},
		{"unknown method", nerr.ErrUnknownMethod, give, give, give, false},
		{"wrong mode", nerr.ErrWrongMode, give, give, give, false},
		{"not a member", nerr.ErrNotMember, give, give, give, false},
		{"bad request", nerr.ErrBadRequest, give, give, give, false},
		{"not found", nerr.ErrNotFound, give, give, give, false},
		{"too large", nerr.ErrTooLarge, give, give, give, false},
	} {
		for _, k := range []struct {
			kind              string
			write, identified bool
			want              decision
		}{{"read", false, false, tc.read}, {"identified write", true, true, tc.idWrite}, {"write", true, false, tc.write}} {
			if got := failover(tc.err, k.write, k.identified); got != k.want {
				t.Errorf("%s, %s: %+v, want %+v", tc.name, k.kind, got, k.want)
			}
		}
		if got := retried(tc.err); got != tc.retried {
			t.Errorf("%s: the retry policy retries it: %v, want %v", tc.name, got, tc.retried)
		}
	}
}

// TestFailoverPause: pauses double from primaryRetryPause up to 8 times
// it, are cut to the budget, and stop once it is spent.
func TestFailoverPause(t *testing.T) {
	p := primaryRetryPause
	for _, tc := range []struct {
		failed       int
		waited, left time.Duration
		want         time.Duration
		ok           bool
	}{
		{0, 0, time.Second, p, true},
		{1, 0, time.Second, 2 * p, true},
		{9, 0, time.Second, 8 * p, true},
		{0, 4 * p, time.Second, 8 * p, true},
		{0, 0, p / 2, p / 2, true},
		{0, time.Second, 0, 0, false},
	} {
		d, ok := failoverPause(tc.failed, tc.waited, tc.waited+tc.left)
		if d != tc.want || ok != tc.ok {
			t.Errorf("failed %d, waited %v, %v left: %v %v, want %v %v", tc.failed, tc.waited, tc.left, d, ok, tc.want, tc.ok)
		}
	}
}
