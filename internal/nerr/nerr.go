// Package nerr defines Neptune's error values once so that internal packages
// and the public API (which re-exports them) agree on identity.
package nerr

import (
	"context"
	"errors"
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
	ErrClosed           = errors.New("neptune: closed")
)

// Retryable reports whether trying the same call again (perhaps elsewhere,
// perhaps later) can succeed.
func Retryable(err error) bool {
	for _, e := range []error{ErrNoReplica, ErrNoPrimary, ErrOverloaded, ErrDeadline} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Label is the metrics label of a call's outcome: "ok", "deadline",
// "overloaded", "no_replica", "bad_request", "canceled" or "error". Node
// and client count calls by it.
func Label(err error) string {
	switch {
	case err == nil:
		return "ok"
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
