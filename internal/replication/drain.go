package replication

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// Drain tells every hosted replica that the node is leaving
// (replica.SetDraining: a primary hands its role to an in-sync replica,
// none runs for primary again) and waits until none of them is primary,
// or ctx ends. It returns the partitions still led here then (those
// with no in-sync replica to take over: they are elected elsewhere once
// the node is gone). The replicas keep serving meanwhile.
func (rt *Runtime) Drain(ctx context.Context) []string {
	parts := rt.tellAll(ctx, func(p *part, now time.Time) { p.core.SetDraining(now, true) })
	for _, p := range parts {
		for {
			changed := p.statusChanged()
			if p.status.Load().Role != replica.Primary {
				break
			}
			select {
			case <-changed:
				continue
			case <-p.done:
			case <-ctx.Done():
				return leading(parts)
			}
			break
		}
	}
	return leading(parts)
}

// leading names the partitions of parts whose replica here is primary.
func leading(parts []*part) []string {
	var out []string
	for _, p := range parts {
		if p.status.Load().Role == replica.Primary {
			out = append(out, fmt.Sprintf("%s/%d", p.key.service, p.key.partition))
		}
	}
	sort.Strings(out)
	return out
}
