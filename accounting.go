package neptune

import (
	"context"
	"time"
)

// run runs call holding one of the service's worker slots and charges the
// request's class its resource use as the service's Accounting says.
func (h *hosted) run(ctx context.Context, class string, call func(context.Context) *Response) error {
	switch h.svc.Accounting {
	case ThreadCPU:
		return h.pool.DoCharged(ctx, class, func(ctx context.Context) time.Duration {
			return threadCPU(func() { call(ctx) })
		})
	case Reported:
		return h.pool.DoCharged(ctx, class, func(ctx context.Context) time.Duration {
			start := time.Now()
			if resp := call(ctx); resp != nil && resp.Cost > 0 {
				return resp.Cost
			}
			return time.Since(start)
		})
	}
	return h.pool.Do(ctx, class, func(ctx context.Context) { call(ctx) })
}
