package localcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune"
)

// Wait calls ready every 50 ms until it returns nil, and returns nil then.
// Past limit (if limit > 0) it returns ready's last error, which should say
// what is missing; if ctx ends first, ctx's error with that last error.
func Wait(ctx context.Context, limit time.Duration, ready func(context.Context) error) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w (after %v)", err, limit)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Directory is what the waits read of a client: its yellow pages.
type Directory interface {
	Members(ctx context.Context, wait time.Duration) []neptune.Member
	Partitions() []neptune.PartitionInfo
}

// WaitMembers waits until c's yellow pages list at least n nodes.
func WaitMembers(ctx context.Context, c Directory, n int, limit time.Duration) error {
	return Wait(ctx, limit, func(ctx context.Context) error {
		if got := len(c.Members(ctx, 0)); got < n {
			return fmt.Errorf("only %d of %d nodes announced", got, n)
		}
		return nil
	})
}

// WaitServing waits until each of partitions partitions of the replicated
// service announces degree replicas, none of them recovering, one of them
// the primary.
func WaitServing(ctx context.Context, c Directory, service string, partitions, degree int, limit time.Duration) error {
	return Wait(ctx, limit, func(context.Context) error {
		ready := 0
		for _, pi := range c.Partitions() {
			if pi.Service == service && len(pi.Replicas) == degree && !slices.ContainsFunc(pi.Replicas, func(r neptune.ReplicaInfo) bool { return r.Role == "recovering" }) &&
				slices.ContainsFunc(pi.Replicas, func(r neptune.ReplicaInfo) bool { return r.Role == "primary" }) {
				ready++
			}
		}
		if ready < partitions {
			return fmt.Errorf("only %d of %d %s partitions serving on all replicas", ready, partitions, service)
		}
		return nil
	})
}

// WaitWritable waits until write (a write to the partition) succeeds on
// each of partitions 0..partitions-1: a fresh cluster elects its primaries
// in the first few hundred milliseconds. Each try gets a second.
func WaitWritable(ctx context.Context, partitions int, limit time.Duration, write func(ctx context.Context, partition int) error) error {
	next := 0 // the partitions before it took the write
	return Wait(ctx, limit, func(ctx context.Context) error {
		for ; next < partitions; next++ {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			err := write(cctx, next)
			cancel()
			if err != nil {
				return fmt.Errorf("partition %d not writable: %w", next, err)
			}
		}
		return nil
	})
}

// WaitTCP waits until addr accepts TCP connections.
func WaitTCP(ctx context.Context, addr string, limit time.Duration) error {
	return Wait(ctx, limit, func(context.Context) error {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// Primary waits until partition of service announces a primary and
// returns its node id.
func Primary(ctx context.Context, c Directory, service string, partition int, limit time.Duration) (string, error) {
	var primary string
	err := Wait(ctx, limit, func(context.Context) error {
		for _, p := range c.Partitions() {
			for _, r := range p.Replicas {
				if p.Service == service && p.Partition == partition && r.Role == "primary" {
					primary = r.Node
					return nil
				}
			}
		}
		return fmt.Errorf("no primary for %s partition %d", service, partition)
	})
	return primary, err
}
