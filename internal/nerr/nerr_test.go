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
