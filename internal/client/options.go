package client

import (
	"time"

	"github.com/neptune-cluster/neptune/internal/service"
)

// Option adjusts one call.
type Option func(*options)

type options struct {
	session *Session
	class   string
	timeout time.Duration
	usage   *service.CallUsage
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

// WithTimeout bounds the call, retries included, to d (on top of ctx's
// own deadline).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithUsage asks the node for what the call used (Gage accounting) and
// stores it in u; u.Node stays empty if the node measured nothing (no
// subscriber named, or a node that does not measure). The node measures
// only calls whose context names a subscriber (transport.WithSubscriber).
func WithUsage(u *service.CallUsage) Option { return func(o *options) { o.usage = u } }
