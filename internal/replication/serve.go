package replication

import (
	"cmp"
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
	if p.spec.Replication.Linearizable && p.cfg.Level != replica.Level1 {
		return p.readLinearizable(ctx, in, local)
	}
	st := p.status.Load()
	if !mayRead(p.cfg.Level, st, rt.clock.Now(), in.MinVersion) {
		if string(st.Primary) != rt.cfg.Self && st.Role != replica.Primary {
			return rt.forward(ctx, string(st.Primary), in)
		}
		// This is the primary, but it may not have its lease yet (a new
		// primary until it commits an entry of its epoch), or it may still
		// be applying the writes it committed: a session's read must not
		// see less than it already saw (read-your-writes, monotonic reads).
		// If it steps down meanwhile, the read goes to the new primary.
		deposed := func(st *replica.Status) bool {
			return st.Role != replica.Primary && st.Primary != "" && string(st.Primary) != rt.cfg.Self
		}
		if st, err = p.await(ctx, func(st *replica.Status, now time.Time) bool {
			return deposed(st) || mayRead(p.cfg.Level, st, now, in.MinVersion)
		}); err != nil {
			return nil, err
		}
		if deposed(st) {
			return rt.forward(ctx, string(st.Primary), in)
		}
	}
	return p.serveLocal(ctx, st, local)
}

// mayRead reports whether a replica at level, in status st at now, may serve a
// read whose session has seen minVersion: not while it recovers or has
// diverged (it serves nothing); at level 3 only at or above the session's
// version and, on the primary, only while it holds its majority lease (a
// primary without one may be cut off from a newer primary: not fresh) and
// has executed its committed version x ago; on a secondary only while it
// can prove itself within the bound (Status.FreshUntil: it executed the
// commit point a leased primary sent after hearing from it less than x
// ago), whatever the client judged from its polls.
func mayRead(level replica.Level, st *replica.Status, now time.Time, minVersion uint64) bool {
	switch {
	case st.Role == replica.Recovering || st.Diverged:
		return false
	case level != replica.Level3:
		return true
	case st.Role == replica.Primary && (!leased(st, now) || st.Applied < st.VersionAgo):
		// A primary is fresh only with its lease, and like any replica only
		// once it has executed its own committed version x ago (a new
		// primary may still be executing a backlog it adopted).
		return false
	case st.Role == replica.Secondary && !now.Before(st.FreshUntil):
		return false
	}
	return uint64(st.Applied) >= minVersion
}

// leased reports whether st is a primary's holding its lease at now.
func leased(st *replica.Status, now time.Time) bool {
	return st.Role == replica.Primary && now.Before(st.LeaseUntil)
}

func (p *part) serveLocal(ctx context.Context, st *replica.Status, local func(context.Context) (*service.Response, error)) (*service.Response, error) {
	resp, err := local(ctx)
	if err != nil {
		return nil, err
	}
	if resp.Version == 0 {
		// At least what the read reflects: a session that records it never
		// reads older state next (monotonic reads), even though writes
		// executed while the read ran may be in what it saw.
		resp.Version = max(uint64(st.Applied), p.executing.Load())
	}
	return resp, nil
}

// readLinearizable serves a read of a Linearizable service (read-index):
// only the primary serves, only while it holds its majority lease, under
// which no other primary can have committed anything. At the read's
// arrival it takes, from the loop (not the published status, which may
// lag a write already acknowledged), the read index: its last log entry,
// which is at or above its commit point. A new primary's commit point lags
// the log it adopted from a majority until an entry of its own epoch
// commits, but that log holds every write any earlier primary
// acknowledged; so the last entry covers them whatever the core's lease
// rule, at the cost of waiting for the writes in flight to commit. The
// read waits until this replica has executed that far, then runs: every
// write acknowledged before it arrived is in the state read, and that
// state holds only committed writes, so the read is linearizable. A
// replica that is not the primary forwards the read to the one it knows;
// the read fails with the retryable ErrNoPrimary (never executed) when no
// primary with a lease is found, or the index is not executed, within
// readWait.
func (p *part) readLinearizable(ctx context.Context, in *pb.CallRequest, local func(context.Context) (*service.Response, error)) (*service.Response, error) {
	rt := p.rt
	expired := rt.clock.After(p.readWait())
	var index replica.LSN
	for {
		changed := p.statusChanged()
		st, now, err := p.ask(ctx)
		if err != nil {
			return nil, err
		}
		if st.Role != replica.Primary && st.Primary != "" && string(st.Primary) != rt.cfg.Self {
			return rt.forward(ctx, string(st.Primary), in)
		}
		if leased(&st, now) && !st.Diverged {
			index = st.Last // at or above its commit point
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.done:
			return nil, p.stopped()
		case <-expired:
			return nil, fmt.Errorf("%w: %s partition %d: node %s is %s without a majority lease (read not executed; retry safe)",
				nerr.ErrNoPrimary, p.key.service, p.key.partition, rt.cfg.Self, st.Role)
		case <-changed:
		}
	}
	st, err := p.await(ctx, func(st *replica.Status, _ time.Time) bool { return st.Applied >= index && !st.Diverged })
	if err != nil {
		return nil, err
	}
	return p.serveLocal(ctx, st, local)
}

// current is the replica's status now, asked of the loop, and the time
// the loop took it at.
func (p *part) current(ctx context.Context) (replica.Status, time.Time, error) {
	type answer struct {
		st  replica.Status
		now time.Time
	}
	got := make(chan answer, 1)
	select {
	case p.ops <- func(now time.Time) { got <- answer{p.core.Status(), now} }:
	case <-ctx.Done():
		return replica.Status{}, time.Time{}, ctx.Err()
	case <-p.done:
		return replica.Status{}, time.Time{}, p.stopped()
	}
	select {
	case a := <-got:
		return a.st, a.now, nil
	case <-ctx.Done():
		return replica.Status{}, time.Time{}, ctx.Err()
	case <-p.done:
		return replica.Status{}, time.Time{}, p.stopped()
	}
}

// readWait bounds how long a read waits for this replica to become able
// to serve it: the partition's WriteWait (default maxApplyWait).
func (p *part) readWait() time.Duration {
	if p.cfg.WriteWait > 0 {
		return p.cfg.WriteWait
	}
	return maxApplyWait
}

func (p *part) stopped() error {
	return fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
}

// await waits until ok holds for the published status, for at most
// readWait; after that the read fails with the retryable ErrNoPrimary (it
// was never executed).
func (p *part) await(ctx context.Context, ok func(*replica.Status, time.Time) bool) (*replica.Status, error) {
	expired := p.rt.clock.After(p.readWait())
	for {
		changed := p.statusChanged()
		st := p.status.Load()
		if ok(st, p.rt.clock.Now()) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.done:
			return nil, p.stopped()
		case <-expired:
			why := fmt.Sprintf("has applied %d", st.Applied)
			switch {
			case st.Diverged:
				why = "has diverged from its primary"
			case st.Role == replica.Primary && !leased(st, p.rt.clock.Now()):
				why = "is primary without a majority lease"
			case st.Role == replica.Recovering:
				why = "is recovering"
			}
			return nil, fmt.Errorf("%w: %s partition %d at node %s %s (read not executed; retry safe)",
				nerr.ErrNoPrimary, p.key.service, p.key.partition, p.rt.cfg.Self, why)
		case <-changed:
		}
	}
}

func (p *part) write(ctx context.Context, in *pb.CallRequest) (_ *service.Response, err error) {
	if err := p.refusal(); err != nil {
		// Not logged here: a replica that knows another primary sends
		// the write on; otherwise it is refused, never executed.
		if st := p.status.Load(); st.Primary != "" && string(st.Primary) != p.rt.cfg.Self {
			return nil, &replica.NotPrimaryError{Primary: st.Primary}
		}
		return nil, err
	}
	ctx, span, tw := p.startWrite(ctx)
	if span != nil {
		defer func() { endSpan(span, err) }()
	}
	id := transport.WriteIDOf(in).String()
	reply := make(chan Result, 1)
	select {
	case p.props <- proposal{method: in.Method, body: in.Body, writeID: id, reply: reply, trace: tw}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		if err := p.refusal(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
	}
	select {
	case r := <-reply:
		return r.Resp, outcome(id != "", r.Err)
	case <-p.done:
		// The loop answers every write it took before it ends: one still
		// unanswered was never taken (never executed).
		select {
		case r := <-reply:
			return r.Resp, outcome(id != "", r.Err)
		default:
		}
		if err := p.refusal(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
	case <-ctx.Done():
		// The write is in the replica's hands: it may still run.
		return nil, nerr.UnknownOutcome(id != "", fmt.Errorf("%w: %w", nerr.ErrDeadline, ctx.Err()))
	}
}

// forward sends a call on to the primary, once: a forwarded call that
// still finds no primary fails with the retryable ErrNoPrimary.
func (rt *Runtime) forward(ctx context.Context, primary string, in *pb.CallRequest) (*service.Response, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if primary == "" || primary == rt.cfg.Self || len(md.Get(forwardedKey)) > 0 {
		return nil, fmt.Errorf("%w for %s partition %d at node %s", nerr.ErrNoPrimary, in.Service, in.Partition, rt.cfg.Self)
	}
	addr := rt.addrOf(primary)
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
				return nil, nerr.UnknownOutcome(!transport.WriteIDOf(in).IsZero(), err)
			}
			return nil, err
		}
		return nil, err
	}
	return &service.Response{Body: out.Body, Version: out.Version}, nil
}

// Replicate takes a batch of replication messages from another node.
// Messages for partitions not hosted here are dropped, as are messages a
// full inbox cannot take (the protocol retransmits); if one of those
// carried entries, the call fails with errInboxFull, so the sender does not
// count them delivered.
func (rt *Runtime) Replicate(in *pb.ReplicaBatch) error {
	rt.det.heardFrom(in.From)
	var err error
	for _, pm := range in.Messages {
		k := partKey{pm.Service, pm.Partition}
		p := rt.lookup(pm.Service, pm.Partition)
		if p == nil {
			if p = rt.join(pm); p == nil {
				continue
			}
		}
		if p.failure.Load() != nil {
			// Its store failed (storage.go): lost, as on the way; the
			// protocol sends again once it is reopened.
			if len(pm.Entries) > 0 {
				err = errInboxFull
			}
			continue
		}
		if pm.Reject && replica.MsgType(pm.Type) == replica.MsgAppendResp {
			rt.forgetDelivered(in.From, &k)
		}
		m := fromPBMessage(pm)
		if !p.enqueue(m) && len(pm.Entries) > 0 {
			err = errInboxFull
		}
		if ack, ok := p.keeper.contact(rt.clock.Now(), p.heartbeat(), p.status.Load(), replica.ID(rt.cfg.Self), m); ok {
			rt.send(k, ack)
		}
	}
	return err
}

// Promote makes this node's replica of the partition its primary (the
// operator's `neptune partition promote`) and returns its status after.
// Without force the replica calls an election that needs a majority's
// votes: Promote waits until it is primary or promoteWait has passed and
// returns the status either way (the caller tells). With force it becomes
// primary at once, without votes: acknowledged writes it lacks are lost.
func (rt *Runtime) Promote(ctx context.Context, service string, partition int32, force bool) (*pb.ReplicaStatus, error) {
	p, err := rt.part(service, partition)
	if err != nil {
		return nil, err
	}
	done := make(chan replica.Status, 1)
	op := func(now time.Time) {
		p.core.Promote(now, force)
		done <- p.core.Status()
	}
	select {
	case p.ops <- op:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var st replica.Status
	select {
	case st = <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, nerr.ErrClosed
	}
	if !force && st.Role != replica.Primary {
		expired := rt.clock.After(p.promoteWait())
	wait:
		for {
			changed := p.statusChanged()
			if cur := p.status.Load(); cur.Role == replica.Primary || cur.Epoch > st.Epoch && cur.Primary != "" {
				st = *cur
				break
			}
			select {
			case <-ctx.Done():
				break wait
			case <-p.done:
				return nil, nerr.ErrClosed
			case <-expired:
				break wait
			case <-changed:
			}
		}
		st = *p.status.Load()
	}
	return toPBStatus(partition, p.cfg, p.spec.Replication.Linearizable, st, rt.clock.Now()), nil
}

// promoteWait bounds how long an unforced promote waits to win its
// election: voters that heard from a primary refuse to elect another until
// its lease lapsed, then the election takes up to ElectionTimeout.
func (p *part) promoteWait() time.Duration {
	c := p.cfg
	return cmp.Or(c.Lease, defaultLease) + 2*cmp.Or(c.ElectionTimeout, 300*time.Millisecond) + cmp.Or(c.AckTimeout, defaultAckTimeout)
}

// Status is the announced status of service's replicas here, one per
// partition.
func (rt *Runtime) Status(service string, partitions []int32) []*pb.ReplicaStatus {
	var out []*pb.ReplicaStatus
	for _, part := range partitions {
		if p := rt.lookup(service, part); p != nil {
			out = append(out, toPBStatus(part, p.cfg, p.spec.Replication.Linearizable, *p.status.Load(), rt.clock.Now()))
		}
	}
	return out
}

// PollVersion answers the replication part of a load poll.
func (rt *Runtime) PollVersion(service string, partition int32) transport.Version {
	p := rt.lookup(service, partition)
	if p == nil {
		return transport.Version{}
	}
	st := p.status.Load()
	return transport.Version{Replicated: true, Version: uint64(st.Applied), VersionAgo: uint64(st.VersionAgo),
		Serving: st.Role != replica.Recovering && !st.Diverged, Primary: st.Role == replica.Primary,
		Lease: leaseLeft(*st, rt.clock.Now())}
}
