package client

import (
	"errors"
	"time"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
)

// Option adjusts one call.
type Option func(*options)

type options struct {
	session *Session
	class   string
	timeout time.Duration
	usage   *service.CallUsage
	key     string
	retryOf *nerr.UnknownOutcomeError
	retry   *config.RetryPolicy
	resume  *nerr.StreamOutcomeError
	affine  string
}

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithSession makes the call part of sess: a read of a level-3 partition
// sees at least the versions sess has seen, and the call's answer raises
// them.
func WithSession(sess *Session) Option { return func(o *options) { o.session = sess } }

// WithClass sets the service class of the call.
func WithClass(class string) Option { return func(o *options) { o.class = class } }

// WithAffinity gives the call an affinity key: under a policy that routes
// by one (balance.Affine, the "affinity" policy) calls with the same key
// go to the same replica while its load allows, so what it caches for
// the key is reused. Other policies ignore it, as does a call that must
// go to the primary.
func WithAffinity(key string) Option { return func(o *options) { o.affine = key } }

// WithTimeout bounds the call, retries included, to d (on top of ctx's
// own deadline).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithUsage asks the node for what the call used (Gage accounting) and
// stores it in u; u.Node stays empty if the node measured nothing (no
// subscriber named, or a node that does not measure). The node measures
// only calls whose context names a subscriber (transport.WithSubscriber).
func WithUsage(u *service.CallUsage) Option { return func(o *options) { o.usage = u } }

// WithIdempotencyKey gives a write the caller's identity key instead of
// the client's id and sequence number: every call with the same key to
// the same partition executes at most once (while the partition remembers
// it, see docs/architecture/replica.md), and each gets the first one's
// result. Reads ignore it.
func WithIdempotencyKey(key string) Option { return func(o *options) { o.key = key } }

// WithRetryOf makes the call a retry of the write that failed with err:
// if err is an UnknownOutcomeError of an identified write, the call
// carries the same identity, so the write executes at most once in all
// and the retry returns the original result. Any other err (nil
// included) changes nothing, so a retry loop can pass its last error.
func WithRetryOf(err error) Option {
	return func(o *options) {
		var u *nerr.UnknownOutcomeError
		if errors.As(err, &u) && u.Identified {
			o.retryOf = u
		}
	}
}

// WithRetry makes this call follow p instead of the client's retry
// policy (zero fields take the defaults; a negative Budget makes one try).
func WithRetry(p config.RetryPolicy) Option { return func(o *options) { o.retry = &p } }

// WithResume makes OpenStream of a write stream resume the one that
// failed with err (a *nerr.StreamOutcomeError): the new stream keeps its
// identity and numbers its messages from err's Applied+1, so the caller
// resends the messages from there and each is applied at most once in
// all (one already applied is answered with its first result). Any other
// err changes nothing.
func WithResume(err error) Option {
	return func(o *options) {
		var e *nerr.StreamOutcomeError
		if errors.As(err, &e) && e.StreamID != "" {
			o.resume = e
		}
	}
}
