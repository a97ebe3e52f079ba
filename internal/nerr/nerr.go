// Package nerr defines Neptune's error values once so that internal packages
// and the public API (which re-exports them) agree on identity.
package nerr

import "errors"

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
