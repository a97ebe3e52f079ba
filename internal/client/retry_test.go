package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// TestRetryOfKeepsTheIdentityWhateverTheError is issue 28's double write:
// a retry of a write of unknown outcome that then finds no replica (or
// any other refusal before sending) must not say "never ran", or a loop
// re-passing its last error drops the identity and writes twice.
func TestRetryOfKeepsTheIdentityWhateverTheError(t *testing.T) {
	first := &nerr.UnknownOutcomeError{Identified: true, WriteID: nerr.WriteID{ClientID: "c1", Seq: 7}, Cause: errors.New("connection reset")}
	for _, cause := range []error{
		fmt.Errorf("%w for list partition 0", nerr.ErrNoReplica),
		fmt.Errorf("%w %q", nerr.ErrUnknownService, "list"), // the yellow pages forgot a crashed cluster
		fmt.Errorf("%w 0 of service %q", nerr.ErrUnknownPartition, "list"),
		nerr.ErrNoPrimary,
		nerr.ErrOverloaded,
		nerr.ErrTooLarge,
	} {
		r := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(first)}))
		err := r.outcome(cause)
		var u *nerr.UnknownOutcomeError
		if !errors.As(err, &u) || !u.Identified || u.WriteID != (nerr.WriteID{ClientID: "c1", Seq: 7}) || !nerr.Retryable(err) {
			t.Fatalf("retry failing with %v returned %v, want an identified unknown outcome carrying c1/7", cause, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%v: the cause is lost", err)
		}
		// The loop passes it on: the next retry carries the same identity.
		next := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(err)}))
		if next.in.ClientId != "c1" || next.in.Seq != 7 || !next.maybeRan {
			t.Fatalf("retry of %v carries %q/%d", err, next.in.ClientId, next.in.Seq)
		}
	}
	// The handler's own answer is definite: the write ran.
	r := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(first)}))
	remote := &transport.RemoteError{Node: "n1", Message: "full"}
	if err := r.outcome(remote); err != remote {
		t.Fatalf("handler error became %v", err)
	}
	// A first call refused before sending truthfully never ran.
	fresh := newRequest("list", 0, "append", []byte("x"), collect(nil))
	if err := fresh.outcome(nerr.ErrNoReplica); err != nerr.ErrNoReplica {
		t.Fatalf("unsent write: %v", err)
	}
	// An idempotency key and WithRetryOf: the key is the identity, and the
	// write may still have run.
	keyed := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithIdempotencyKey("k"), WithRetryOf(first)}))
	if err := keyed.outcome(nerr.ErrNoReplica); !errors.Is(err, nerr.ErrUnknownOutcome) || keyed.in.IdempotencyKey != "k" || keyed.in.ClientId != "" {
		t.Fatalf("keyed retry: %v, identity %q/%q", err, keyed.in.IdempotencyKey, keyed.in.ClientId)
	}
}

// TestRetryPauses: pauses double from Backoff to MaxBackoff, each in the
// upper half of its step, never past the budget; off when Budget < 0.
func TestRetryPauses(t *testing.T) {
	p := config.DefaultRetryPolicy
	for _, tc := range []struct {
		n       int
		elapsed time.Duration
		u       float64
		want    time.Duration
		ok      bool
	}{
		{0, 0, 0, 25 * time.Millisecond, true},
		{0, 0, 0.999999, 50 * time.Millisecond, true},
		{2, 0, 0, 100 * time.Millisecond, true},
		{10, 0, 0, 500 * time.Millisecond, true},
		{63, 0, 0.5, 750 * time.Millisecond, true},
		{10, 9900 * time.Millisecond, 0, 100 * time.Millisecond, true},
		{0, 10 * time.Second, 0, 0, false},
	} {
		d, ok := pause(p, tc.n, tc.elapsed, tc.u)
		if ok != tc.ok || tc.ok && (d-tc.want).Abs() > time.Microsecond {
			t.Errorf("pause(%d, %v, %v) = %v %v, want %v %v", tc.n, tc.elapsed, tc.u, d, ok, tc.want, tc.ok)
		}
	}
	if _, ok := pause(config.NoRetry, 0, 0, 0); ok {
		t.Error("NoRetry retries")
	}
	if err := (config.RetryPolicy{Backoff: 2 * time.Second, MaxBackoff: time.Second}).Validate("ClientConfig.Retry"); err == nil {
		t.Error("Backoff above MaxBackoff accepted")
	}
}

// TestRetryingBoundsCallsWhileNoReplicaIsKnown: while the yellow pages
// know no replica every try fails at once; the policy spaces them, so an
// operation makes a bounded number of calls in its budget (the README loop
// made 40,000-100,000), and stops at the budget with the last error.
// Runs on a manual clock, with the shortest pauses the jitter allows.
func TestRetryingBoundsCallsWhileNoReplicaIsKnown(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	start := clk.Now()
	tries, retries := 0, 0
	var last time.Time
	noReplica := &nerr.UnknownOutcomeError{Identified: true, WriteID: nerr.WriteID{ClientID: "c", Seq: 1}, Cause: nerr.ErrNoReplica}
	done := make(chan error, 1)
	go func() {
		_, err := retrying(context.Background(), clk, config.DefaultRetryPolicy, func() float64 { return 0 }, func() { retries++ },
			func() (struct{}, error) {
				tries++
				last = clk.Now()
				return struct{}{}, noReplica
			})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		default:
		}
		bctx, bcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		blocked := clk.BlockUntilContext(bctx, 1) == nil
		bcancel()
		if ctx.Err() != nil {
			t.Fatal("retrying did not end")
		}
		if blocked {
			clk.Advance(5 * time.Millisecond)
		}
	}
	if err != noReplica {
		t.Fatalf("ended with %v, want the last try's error", err)
	}
	// 25+50+100+200+400 ms, then 500 ms each: 24 tries in 10 s.
	if tries < 10 || tries > 25 || retries != tries-1 {
		t.Fatalf("%d tries (%d retries) in the 10 s budget, want 10-25", tries, retries)
	}
	if last.Sub(start) > config.DefaultRetryPolicy.Budget {
		t.Fatalf("a try started %v after the first, past the budget", last.Sub(start))
	}
	// A call that fails for good is not retried.
	n := 0
	_, err = retrying(context.Background(), clk, config.DefaultRetryPolicy, func() float64 { return 0 }, func() {},
		func() (struct{}, error) { n++; return struct{}{}, nerr.ErrUnknownService })
	if n != 1 || !errors.Is(err, nerr.ErrUnknownService) {
		t.Fatalf("a non-retryable error was tried %d times", n)
	}
	// A proxy's policy answers an overload at once but still retries a
	// failover.
	proxy := config.RetryPolicy{FailFastOnOverload: true}.WithDefaults()
	for _, tc := range []struct {
		err   error
		tries int
	}{{nerr.ErrOverloaded, 1}, {nerr.ErrNoPrimary, 2}} {
		n = 0
		_, err = retrying(context.Background(), clock.Real(), proxy, func() float64 { return 0 }, func() {},
			func() (struct{}, error) {
				if n++; n == 1 {
					return struct{}{}, tc.err
				}
				return struct{}{}, nil
			})
		if n != tc.tries {
			t.Errorf("FailFastOnOverload: %v tried %d times, want %d", tc.err, n, tc.tries)
		}
	}
	// A deadline the node reports (a hung handler) is not tried again,
	// though Retryable allows it; a write sent and cut off by one is.
	if retried(fmt.Errorf("%w: killed after 300ms", nerr.ErrDeadline)) {
		t.Error("the policy retries a handler's deadline")
	}
	if !retried(&nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrDeadline}) || !retried(nerr.ErrOverloaded) || !retried(nerr.ErrClosed) {
		t.Error("the policy gives up on a retryable error")
	}
}

// TestAfterFailure: the attempt loop's whole decision after a failed
// attempt, for every error kind, as a read, an identified write and a
// write without an identity, and for each state of its budgets: fresh,
// with maxAttempts spent, with the wait budget nearly spent, and spent.
// The wait budget is longer for an identified write (8 s, not 2 s).
func TestAfterFailure(t *testing.T) {
	unreachable := transport.FromStatus("n1", status.Error(codes.Unavailable, "connection refused"))
	p := primaryRetryPause
	// How an error kind is handled, as the rows of the table below say.
	type handling int
	const (
		give         handling = iota // the error is the answer
		next                         // another replica at once; after maxAttempts, give up
		nextThenWait                 // another replica at once; after maxAttempts, pause within the wait budget
		wait                         // pause before every try, within the wait budget
	)
	type kind struct {
		name                 string
		err                  error
		read, idWrite, write handling
		exclude              [3]bool // read, identified write, write
	}
	none, all := [3]bool{}, [3]bool{true, true, true}
	for _, k := range []kind{
		{"primary moved", errPrimaryMoved, nextThenWait, nextThenWait, nextThenWait, none},
		{"node unreachable", unreachable, next, nextThenWait, give, all},
		{"node stopping", fmt.Errorf("%w: node draining", nerr.ErrClosed), next, next, next, all},
		{"stopping after the write was sent", &nerr.UnknownOutcomeError{Cause: nerr.ErrClosed}, wait, wait, give, none},
		{"forward to a dying primary", &nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrNoReplica}, wait, wait, give, none},
		{"no primary", nerr.ErrNoPrimary, wait, wait, wait, none},
		{"no replica", nerr.ErrNoReplica, wait, give, give, none},
		{"overloaded", nerr.ErrOverloaded, give, give, give, none},
		{"handler's deadline", fmt.Errorf("%w: killed after 300ms", nerr.ErrDeadline), give, give, give, none},
		{"unknown service", nerr.ErrUnknownService, give, give, give, none},
		{"unknown partition", nerr.ErrUnknownPartition, give, give, give, none},
		{"unknown method", nerr.ErrUnknownMethod, give, give, give, none},
		{"wrong mode", nerr.ErrWrongMode, give, give, give, none},
		{"not a member", nerr.ErrNotMember, give, give, give, none},
		{"bad request", nerr.ErrBadRequest, give, give, give, none},
		{"not found", nerr.ErrNotFound, give, give, give, none},
		{"too large", nerr.ErrTooLarge, give, give, give, none},
	} {
		for i, id := range []struct {
			name              string
			write, identified bool
			h                 handling
			budget            time.Duration
		}{
			{"read", false, false, k.read, 2 * time.Second},
			{"identified write", true, true, k.idWrite, 8 * time.Second},
			{"write", true, false, k.write, 2 * time.Second},
		} {
			ex := k.exclude[i]
			giveUp := step{giveUp: true, exclude: ex}
			atOnce := step{exclude: ex}
			for _, b := range []struct {
				name  string
				spent attempts
				want  map[handling]step
			}{
				{"fresh", attempts{}, map[handling]step{give: giveUp, next: atOnce, nextThenWait: atOnce, wait: {exclude: ex, pause: p}}},
				{"attempts spent", attempts{failed: maxAttempts - 1}, map[handling]step{give: giveUp, next: giveUp,
					nextThenWait: {exclude: ex, pause: 8 * p}, wait: {exclude: ex, pause: 4 * p}}}, // waits do not count attempts
				{"wait budget nearly spent", attempts{waited: id.budget - 10*time.Millisecond}, map[handling]step{give: giveUp, next: atOnce,
					nextThenWait: atOnce, wait: {exclude: ex, pause: 10 * time.Millisecond}}},
				{"wait budget spent", attempts{waited: id.budget}, map[handling]step{give: giveUp, next: atOnce, nextThenWait: atOnce, wait: giveUp}},
				{"both spent", attempts{failed: maxAttempts - 1, waited: id.budget}, map[handling]step{give: giveUp, next: giveUp, nextThenWait: giveUp, wait: giveUp}},
			} {
				got, after := afterFailure(k.err, id.write, id.identified, b.spent)
				if want := b.want[id.h]; got != want {
					t.Errorf("%s, %s, %s: %+v, want %+v", k.name, id.name, b.name, got, want)
				}
				if !got.giveUp && after.waited != b.spent.waited+got.pause {
					t.Errorf("%s, %s, %s: waited %v after a pause of %v from %v", k.name, id.name, b.name, after.waited, got.pause, b.spent.waited)
				}
			}
		}
	}
	// The identified write's longer budget: 2 s of pauses end a read's
	// wait, not the identified write's.
	if st, _ := afterFailure(nerr.ErrNoPrimary, false, false, attempts{waited: 2 * time.Second}); !st.giveUp {
		t.Errorf("a read waits past 2 s: %+v", st)
	}
	if st, _ := afterFailure(nerr.ErrNoPrimary, true, true, attempts{waited: 2 * time.Second}); st.giveUp || st.pause != 8*p {
		t.Errorf("an identified write stops at 2 s: %+v", st)
	}
}

// TestRetryAfter: the retry policy's decision once the attempt loop gave
// up, for every error kind the loop returns, as a read, an identified
// write and a write without an identity (whose open outcome reaches the
// policy as an unidentified UnknownOutcomeError), and for each state of
// the budget and the call's deadline.
func TestRetryAfter(t *testing.T) {
	def := config.DefaultRetryPolicy
	failFast := def
	failFast.FailFastOnOverload = true
	first := 25 * time.Millisecond // the first pause at u = 0: the upper half of 50 ms
	type when struct {
		name        string
		p           config.RetryPolicy
		n           int
		elapsed     time.Duration
		left        time.Duration
		hasDeadline bool
		pause       time.Duration // if retried
		ok          bool          // retried, for an error the policy retries
	}
	budgets := []when{
		{"fresh", def, 0, 0, 0, false, first, true},
		{"third retry", def, 2, 0, 0, false, 4 * first, true},
		{"budget nearly spent", def, 5, def.Budget - 10*time.Millisecond, 0, false, 10 * time.Millisecond, true},
		{"budget spent", def, 0, def.Budget, 0, false, 0, false},
		{"retries off", config.NoRetry, 0, 0, 0, false, 0, false},
		{"deadline after the pause", def, 0, 0, time.Second, true, first, true},
		{"deadline before the pause ends", def, 0, 0, first, true, 0, false},
	}
	for _, tc := range []struct {
		name     string
		identity string
		err      error
		retried  bool
	}{
		{"no replica", "read", nerr.ErrNoReplica, true},
		{"no replica", "identified write", &nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrNoReplica}, true},
		{"no replica", "unsent write", nerr.ErrNoReplica, true},
		{"no primary", "read", nerr.ErrNoPrimary, true},
		{"no primary", "identified write", &nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrNoPrimary}, true},
		{"no primary", "unsent write", nerr.ErrNoPrimary, true},
		{"connection lost", "read", transport.FromStatus("n1", status.Error(codes.Unavailable, "reset")), true},
		{"connection lost", "identified write", &nerr.UnknownOutcomeError{Identified: true, Cause: errors.New("reset")}, true},
		{"connection lost", "write", &nerr.UnknownOutcomeError{Cause: errors.New("reset")}, false},
		{"node stopping", "read", nerr.ErrClosed, true},
		{"node stopping", "write", &nerr.UnknownOutcomeError{Cause: nerr.ErrClosed}, false},
		{"overloaded", "read", nerr.ErrOverloaded, true},
		{"handler's deadline", "read", fmt.Errorf("%w: killed after 300ms", nerr.ErrDeadline), false},
		{"handler's deadline", "identified write", &nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrDeadline}, true},
		{"unknown service", "read", nerr.ErrUnknownService, false},
		{"not a member", "read", nerr.ErrNotMember, false},
		{"too large", "write", nerr.ErrTooLarge, false},
		{"stream broken", "read", &nerr.StreamOutcomeError{Cause: errors.New("reset")}, false},
		{"success", "read", nil, false},
	} {
		for _, w := range budgets {
			d, ok := retryAfter(w.p, tc.err, w.n, w.elapsed, w.left, w.hasDeadline, 0)
			want := tc.retried && w.ok
			if ok != want || ok && d != w.pause {
				t.Errorf("%s (%s), %s: %v %v, want %v %v", tc.name, tc.identity, w.name, d, ok, w.pause, want)
			}
		}
	}
	// A proxy passes overload back at once.
	if _, ok := retryAfter(failFast, nerr.ErrOverloaded, 0, 0, 0, false, 0); ok {
		t.Error("FailFastOnOverload retried an overloaded refusal")
	}
	if _, ok := retryAfter(failFast, nerr.ErrNoPrimary, 0, 0, 0, false, 0); !ok {
		t.Error("FailFastOnOverload stopped retrying other errors")
	}
}
