// Package nerr defines Neptune's error values once so that internal packages
// and the public API (which re-exports them) agree on identity.
package nerr

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

var (
	ErrUnknownService   = errors.New("neptune: unknown service")
	ErrUnknownPartition = errors.New("neptune: unknown partition")
	ErrUnknownMethod    = errors.New("neptune: unknown method")
	ErrWrongMode        = errors.New("neptune: method called with the wrong mode")
	ErrNoReplica        = errors.New("neptune: no live replica")
	ErrNoPrimary        = errors.New("neptune: no primary")
	ErrDeadline         = errors.New("neptune: deadline exceeded")
	ErrOverloaded       = errors.New("neptune: overloaded")
	// ErrClosed: the node is stopping and refused the call, which never
	// ran (a write it had already taken fails with ErrUnknownOutcome).
	ErrClosed = errors.New("neptune: closed")
	// ErrNotMember: the cluster does not take this member for one of its
	// own (its certificate is of another CA, or the nodes' are), so it
	// sees none of the cluster's nodes. Never executed; a retry fails the
	// same way until the member is given the cluster's material.
	ErrNotMember = errors.New("neptune: not a member of this cluster")
	// ErrUnknownOutcome: a write may or may not have been executed (the
	// connection broke after it was sent, a forward to the primary failed,
	// the deadline passed while it was in flight). It is distinct from the
	// errors above, which for a write all mean "never executed". Errors
	// carrying it are *UnknownOutcomeError values.
	ErrUnknownOutcome = errors.New("neptune: write outcome unknown")
	// ErrBadRequest and ErrNotFound are kinds of a handler's own error: a
	// handler wraps one to say the request was malformed, or named
	// something that does not exist. The call ran (the error is its
	// answer, definite like any handler error); the kind crosses the wire
	// with the message, so a caller, and the HTTP gateway (400, 404), can
	// tell it from a failure of the service.
	ErrBadRequest = errors.New("neptune: bad request")
	ErrNotFound   = errors.New("neptune: not found")
)

// WriteID is a write's identity, the key of exactly-once execution: a
// replicated partition executes the writes of one WriteID at most once
// (while its dedup table remembers it, replica.DedupTable) and answers
// every copy with the first one's result. It is defined here alone; the
// client gives one to every write (its id and the next sequence number,
// or the caller's Key), a retry reuses it, and the log and dedup table
// carry its String form (replica.Entry.WriteID). On the wire a call
// carries it as CallRequest.client_id, seq and idempotency_key, a log
// entry as LogEntry.write_id. The zero WriteID is none.
type WriteID struct {
	// Key is the caller's own identity (WithIdempotencyKey); when set,
	// ClientID and Seq are not.
	Key string
	// ClientID is the writing client's id (random per client; a write
	// stream's own id) and Seq numbers its writes (a stream's messages).
	ClientID string
	Seq      uint64
}

// IsZero reports whether w is no identity.
func (w WriteID) IsZero() bool { return w.Key == "" && w.ClientID == "" }

// String is w as the log and the dedup table carry it ("" for none); the
// prefixes keep a Key apart from a client's id and sequence number.
func (w WriteID) String() string {
	switch {
	case w.Key != "":
		return "k" + w.Key
	case w.ClientID != "":
		return "c" + w.ClientID + "/" + strconv.FormatUint(w.Seq, 10)
	}
	return ""
}

// UnknownOutcomeError is a write whose outcome is unknown. errors.Is(err,
// ErrUnknownOutcome) holds for it; Unwrap gives the failure behind it.
type UnknownOutcomeError struct {
	// Identified: the write carried an identity (WriteID). A retry with
	// the same identity is then executed at most once in all, and
	// answered with the original result if the first attempt ran.
	Identified bool
	// WriteID is that identity, for a retry to reuse (zero where the
	// failure was seen without it: on a node).
	WriteID WriteID
	// Cause is the failure that left the outcome open.
	Cause error
}

func (e *UnknownOutcomeError) Error() string {
	id := " (no identity: a retry may execute it twice)"
	if e.Identified {
		id = " (identified: a retry with the same identity is safe)"
	}
	if e.Cause == nil {
		return ErrUnknownOutcome.Error() + id
	}
	return ErrUnknownOutcome.Error() + id + ": " + e.Cause.Error()
}

// Is makes errors.Is(err, ErrUnknownOutcome) hold.
func (e *UnknownOutcomeError) Is(target error) bool { return target == ErrUnknownOutcome }

// Unwrap returns the cause.
func (e *UnknownOutcomeError) Unwrap() error { return e.Cause }

// UnknownOutcome wraps cause as a write of unknown outcome; an existing
// UnknownOutcomeError in cause is returned as it is.
func UnknownOutcome(identified bool, cause error) error {
	var u *UnknownOutcomeError
	if errors.As(cause, &u) {
		return cause
	}
	return &UnknownOutcomeError{Identified: identified, Cause: cause}
}

// Retryable reports whether trying the same call again (perhaps elsewhere,
// perhaps later) can succeed without harm. A write of unknown outcome is
// retryable only if it carried an identity (and the retry reuses it).
func Retryable(err error) bool {
	var se *StreamOutcomeError
	if errors.As(err, &se) {
		return false // opening it again is a new stream unless resumed
	}
	var u *UnknownOutcomeError
	if errors.As(err, &u) {
		return u.Identified
	}
	if errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrNotMember) {
		return false
	}
	for _, e := range []error{ErrNoReplica, ErrNoPrimary, ErrOverloaded, ErrDeadline, ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Label is the metrics label of a call's outcome: "ok", "unknown_outcome", "deadline",
// "overloaded", "no_replica", "bad_request", "canceled" or "error". Node
// and client count calls by it.
func Label(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnknownOutcome):
		return "unknown_outcome"
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, ErrOverloaded):
		return "overloaded"
	case errors.Is(err, ErrNoReplica):
		return "no_replica"
	case errors.Is(err, ErrUnknownService), errors.Is(err, ErrUnknownPartition),
		errors.Is(err, ErrUnknownMethod), errors.Is(err, ErrWrongMode):
		return "bad_request"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

// StreamOutcomeError ends a write stream (Client.OpenStream on a Write
// stream method) that failed: it says which of the messages sent were
// applied. Every message of a write stream is a write identified by the
// stream's id and its seq, applied at most once and in seq order:
//
//   - 1..Applied were answered: each applied exactly once;
//   - Applied+1..MaybeApplied may or may not have been (the connection
//     broke or the deadline passed with them sent, or the node's forward
//     to the primary failed); errors.Is(err, ErrUnknownOutcome) holds only
//     when this range is not empty;
//   - MaybeApplied+1..Sent were never applied (the stream had ended
//     before the node read them).
//
// Cause is the failure; with HandlerFailed it is the handler's own
// error, message Applied+1 ran (MaybeApplied is then Applied+1 and the
// outcome known: the error is its answer). Opening a stream again
// WithResume(err) reuses the stream's identity, so messages resent from
// Applied+1 are applied at most once in all.
type StreamOutcomeError struct {
	StreamID     string
	Applied      uint64
	MaybeApplied uint64
	Sent         uint64
	// HandlerFailed: Cause is the handler's answer to message Applied+1.
	HandlerFailed bool
	Cause         error
}

func (e *StreamOutcomeError) Error() string {
	what := fmt.Sprintf("neptune: write stream %s ended: messages 1..%d applied", e.StreamID, e.Applied)
	switch {
	case e.HandlerFailed:
		what += fmt.Sprintf(", %d ran and failed", e.Applied+1)
	case e.MaybeApplied > e.Applied:
		what += fmt.Sprintf(", %d..%d outcome unknown (identified: resume the stream to resend them safely)", e.Applied+1, e.MaybeApplied)
	}
	if e.Sent > e.MaybeApplied {
		what += fmt.Sprintf(", %d..%d never applied", e.MaybeApplied+1, e.Sent)
	}
	if e.Cause == nil {
		return what
	}
	return what + ": " + e.Cause.Error()
}

// Is makes errors.Is(err, ErrUnknownOutcome) hold while some message's
// outcome is unknown.
func (e *StreamOutcomeError) Is(target error) bool {
	return target == ErrUnknownOutcome && e.MaybeApplied > e.Applied && !e.HandlerFailed
}

// Unwrap returns the cause.
func (e *StreamOutcomeError) Unwrap() error { return e.Cause }
