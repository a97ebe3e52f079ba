package neptune

import (
	"context"

	"github.com/neptune-cluster/neptune/internal/obs"
)

// WithRequestID returns ctx carrying the request id id for the calls made
// with it: every node that handles them logs it (request_id) and a failed
// call's error names it. Without one a call takes its trace id if traced,
// else a new random id. The gateway sets the id it answers in X-Request-Id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return obs.WithRequestID(ctx, id)
}

// RequestID is ctx's request id: in a handler, the call's; "" if none.
func RequestID(ctx context.Context) string { return obs.RequestID(ctx) }

// RequestIDOf is the request id a failed call's error names, or "".
func RequestIDOf(err error) string { return obs.RequestIDOf(err) }
