package nerr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestUnknownOutcomeRetryableOnlyWithIdentity: a write of unknown outcome
// is retryable only if it carried an identity, whatever failure caused it
// (even a retryable one), and it is never mistaken for "never executed".
func TestUnknownOutcomeRetryableOnlyWithIdentity(t *testing.T) {
	cause := fmt.Errorf("%w: connection reset", ErrNoReplica)
	anon := UnknownOutcome(false, cause)
	ident := fmt.Errorf("call: %w", UnknownOutcome(true, cause))
	if Retryable(anon) || !Retryable(ident) {
		t.Fatalf("Retryable: anonymous %v, identified %v", Retryable(anon), Retryable(ident))
	}
	if !errors.Is(anon, ErrUnknownOutcome) || !errors.Is(ident, ErrUnknownOutcome) || Label(anon) != "unknown_outcome" {
		t.Fatal("not recognisable as an unknown outcome")
	}
	if UnknownOutcome(true, anon) != anon {
		t.Fatal("re-wrapping changed the verdict")
	}
	if !Retryable(ErrNoPrimary) || !Retryable(ErrClosed) || Retryable(errors.New("handler")) {
		t.Fatal("other errors changed")
	}
}

// TestNotAMemberIsNotRetryable: an error saying the member is not one of
// the cluster's is not retryable, even when it wraps a failure that
// otherwise is (a handshake failure is a transport failure): a retry
// fails the same way.
func TestNotAMemberIsNotRetryable(t *testing.T) {
	err := fmt.Errorf("%w: node s1's certificate is of another CA (%w)", ErrNotMember, ErrNoReplica)
	if Retryable(err) || !errors.Is(err, ErrNoReplica) {
		t.Fatalf("Retryable(%v) = %v", err, Retryable(err))
	}
}

// TestStreamOutcomeSaysWhatRan: a broken write stream's error is an
// unknown outcome only while some message's outcome is open, never
// retryable as it stands (opening it again is a new stream), and names
// the three ranges.
func TestStreamOutcomeSaysWhatRan(t *testing.T) {
	cut := fmt.Errorf("wrapped: %w", &StreamOutcomeError{StreamID: "s", Applied: 3, MaybeApplied: 5, Sent: 9,
		Cause: &UnknownOutcomeError{Identified: true, Cause: ErrNoReplica}})
	if !errors.Is(cut, ErrUnknownOutcome) || Retryable(cut) || Label(cut) != "unknown_outcome" {
		t.Fatalf("cut stream: Is unknown %v, Retryable %v", errors.Is(cut, ErrUnknownOutcome), Retryable(cut))
	}
	for _, want := range []string{"1..3 applied", "4..5 outcome unknown", "6..9 never applied"} {
		if !strings.Contains(cut.Error(), want) {
			t.Errorf("%q does not say %q", cut, want)
		}
	}
	refused := &StreamOutcomeError{StreamID: "s", Applied: 3, MaybeApplied: 3, Sent: 4, Cause: ErrNoPrimary}
	failed := &StreamOutcomeError{StreamID: "s", Applied: 3, MaybeApplied: 4, Sent: 4, HandlerFailed: true, Cause: errors.New("handler")}
	for _, e := range []error{refused, failed} {
		if errors.Is(e, ErrUnknownOutcome) || Retryable(e) {
			t.Errorf("%v: taken for an unknown outcome or retryable", e)
		}
	}
	if !strings.Contains(failed.Error(), "4 ran and failed") {
		t.Errorf("%q does not say message 4 ran", failed)
	}
}
