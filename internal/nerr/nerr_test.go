package nerr

import (
	"errors"
	"fmt"
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
