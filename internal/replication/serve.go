package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// forwardedKey marks a call forwarded to the primary, so it is not
// forwarded again.
const forwardedKey = "neptune-forwarded"

// Serve runs a call on a replicated partition: a write goes through the
// replica (forwarded to the primary if this is not it); a read is served
// here by local if this replica may serve it, else by the primary.
func (rt *Runtime) Serve(ctx context.Context, in *pb.CallRequest, local func(context.Context) (*service.Response, error)) (*service.Response, error) {
	p, err := rt.part(in.Service, in.Partition)
	if err != nil {
		return nil, err
	}
	if service.Mode(in.Mode) == service.Write {
		res, err := p.write(ctx, in)
		var np *replica.NotPrimaryError
		if errors.As(err, &np) {
			return rt.forward(ctx, string(np.Primary), in)
		}
		return res, err
	}
	st := p.status.Load()
	if st.Role == replica.Recovering || (p.cfg.Level == replica.Level3 && uint64(st.Applied) < in.MinVersion) {
		if string(st.Primary) != rt.cfg.Self {
			return rt.forward(ctx, string(st.Primary), in)
		}
		// This is the primary, but a new one may still be applying the
		// writes it committed: a session's read must not see less than it
		// already saw (read-your-writes, monotonic reads).
		if st, err = p.awaitApplied(ctx, in.MinVersion); err != nil {
			return nil, err
		}
	}
	resp, err := local(ctx)
	if err != nil {
		return nil, err
	}
	if resp.Version == 0 {
		resp.Version = uint64(st.Applied) // what the read reflects at least
	}
	return resp, nil
}

// awaitApplied waits until this replica has applied version v, for at most
// maxApplyWait; after that the read fails with the retryable ErrNoPrimary.
func (p *part) awaitApplied(ctx context.Context, v uint64) (*replica.Status, error) {
	expired := p.rt.clock.After(maxApplyWait)
	for {
		changed := p.statusChanged()
		st := p.status.Load()
		if uint64(st.Applied) >= v {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.done:
			return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
		case <-expired:
			return nil, fmt.Errorf("%w: %s partition %d has applied %d, the session has seen %d", nerr.ErrNoPrimary, p.key.service, p.key.partition, st.Applied, v)
		case <-changed:
		}
	}
}

func (p *part) write(ctx context.Context, in *pb.CallRequest) (*service.Response, error) {
	reply := make(chan Result, 1)
	select {
	case p.props <- proposal{method: in.Method, body: in.Body, id: WriteID(in), reply: reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
	}
	select {
	case r := <-reply:
		return r.Resp, outcome(in, r.Err)
	case <-ctx.Done():
		// The write is in the replica's hands: it may still run.
		return nil, nerr.UnknownOutcome(WriteID(in) != "", fmt.Errorf("%w: %w", nerr.ErrDeadline, ctx.Err()))
	}
}

// forward sends a call on to the primary, once: a forwarded call that
// still finds no primary fails with the retryable ErrNoPrimary.
func (rt *Runtime) forward(ctx context.Context, primary string, in *pb.CallRequest) (*service.Response, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if primary == "" || primary == rt.cfg.Self || len(md.Get(forwardedKey)) > 0 {
		return nil, fmt.Errorf("%w for %s partition %d at node %s", nerr.ErrNoPrimary, in.Service, in.Partition, rt.cfg.Self)
	}
	addr := rt.cfg.Directory.RPCAddr(primary)
	if addr == "" {
		return nil, fmt.Errorf("%w: primary %q of %s partition %d is not in the yellow pages", nerr.ErrNoPrimary, primary, in.Service, in.Partition)
	}
	out, err := rt.cfg.Sender.Forward(metadata.AppendToOutgoingContext(ctx, forwardedKey, rt.cfg.Self), primary, addr, in)
	if err != nil {
		err = transport.FromStatus(primary, err)
		if transport.IsTransport(err) {
			// Suspect at once, not after suspectAfter failures: each write
			// forwarded to a dead primary fails with an unknown outcome
			// (the primary may have logged it before it died), so the next
			// ones must find the partition between primaries (never
			// executed) instead.
			rt.det.unreachable(primary)
			err = fmt.Errorf("%w: primary %q unreachable: %w", nerr.ErrNoPrimary, primary, err)
			if service.Mode(in.Mode) == service.Write {
				return nil, nerr.UnknownOutcome(WriteID(in) != "", err)
			}
			return nil, err
		}
		return nil, err
	}
	return &service.Response{Body: out.Body, Version: out.Version}, nil
}

// Replicate takes a batch of replication messages from another node.
// Messages for partitions not hosted here are dropped, as are messages a
// full inbox cannot take (the protocol retransmits).
func (rt *Runtime) Replicate(in *pb.ReplicaBatch) {
	rt.det.heardFrom(in.From)
	for _, pm := range in.Messages {
		p, ok := rt.parts[partKey{pm.Service, pm.Partition}]
		if !ok {
			continue
		}
		select {
		case p.inbox <- fromPBMessage(pm):
		default:
		}
	}
}

// Promote makes this node's replica of the partition its primary without
// an election (the operator's `neptune partition promote`) and returns its
// status after.
func (rt *Runtime) Promote(ctx context.Context, service string, partition int32) (*pb.ReplicaStatus, error) {
	p, err := rt.part(service, partition)
	if err != nil {
		return nil, err
	}
	done := make(chan replica.Status, 1)
	op := func(now time.Time) {
		p.core.Promote(now, true)
		done <- p.core.Status()
	}
	select {
	case p.ops <- op:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case st := <-done:
		return toPBStatus(partition, p.cfg.Level, st), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, nerr.ErrClosed
	}
}

// Status is the announced status of service's replicas here, one per
// partition.
func (rt *Runtime) Status(service string, partitions []int32) []*pb.ReplicaStatus {
	var out []*pb.ReplicaStatus
	for _, part := range partitions {
		if p, ok := rt.parts[partKey{service, part}]; ok {
			out = append(out, toPBStatus(part, p.cfg.Level, *p.status.Load()))
		}
	}
	return out
}

// PollVersion answers the replication part of a load poll.
func (rt *Runtime) PollVersion(service string, partition int32) transport.Version {
	p, ok := rt.parts[partKey{service, partition}]
	if !ok {
		return transport.Version{}
	}
	st := p.status.Load()
	return transport.Version{Replicated: true, Version: uint64(st.Applied), VersionAgo: uint64(st.VersionAgo),
		Serving: st.Role != replica.Recovering, Primary: st.Role == replica.Primary}
}
