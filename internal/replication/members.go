package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// changeRetry is the pause between asks while another change is in flight.
const changeRetry = 50 * time.Millisecond

// ErrChangeIncomplete: the change was asked for but had not taken effect
// when the wait ended; it may still complete.
var ErrChangeIncomplete = errors.New("neptune: replica-set change not complete yet")

// ChangeReplicas is the operator's `neptune partition add|remove`: it asks
// this node's replica, which must be the partition's primary, for ch and
// waits until ctx ends for the change to be committed (an added replica
// caught up and promoted to voter, a removed one gone; removing the
// primary itself hands its role over first). The reply is the replica set
// as this replica knows it then. An error wrapping nerr.ErrNoPrimary
// (NotPrimaryError: the primary is elsewhere) or replica.ErrChangeRefused
// means nothing changed; after any other, the change may have happened.
func (rt *Runtime) ChangeReplicas(ctx context.Context, service string, partition int32, ch replica.Change) (*pb.ChangeReplicasReply, error) {
	p, err := rt.part(service, partition)
	if err != nil {
		return nil, err
	}
	for {
		done := make(chan error, 1)
		if !p.post(ctx, func(now time.Time) { done <- p.core.ChangeMembers(now, ch) }) {
			return nil, errors.Join(ctx.Err(), fmt.Errorf("%w: partition loop stopped", nerr.ErrClosed))
		}
		select {
		case err = <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: asked for, no answer: %w", ErrChangeIncomplete, ctx.Err())
		case <-p.done:
			return nil, nerr.ErrClosed
		}
		if !errors.Is(err, replica.ErrChangeInFlight) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("another change stays in flight: %w", ctx.Err())
		case <-rt.clock.After(changeRetry):
		}
	}
	var np *replica.NotPrimaryError
	switch {
	case errors.As(err, &np):
		return nil, fmt.Errorf("%w: %w", nerr.ErrNoPrimary, err)
	case err != nil:
		return nil, err
	}
	for {
		changed := p.statusChanged()
		st := p.status.Load()
		if changeDone(st, ch) {
			return changeReply(st, true), nil
		}
		select {
		case <-ctx.Done():
			return changeReply(p.status.Load(), false), nil
		case <-p.done:
			st := p.status.Load()
			return changeReply(st, changeDone(st, ch)), nil
		case <-changed:
		}
	}
}

// changeDone reports whether st shows ch committed.
func changeDone(st *replica.Status, ch replica.Change) bool {
	if st.MembersPending && !st.Removed {
		return false
	}
	if ch.Add != "" {
		return slices.ContainsFunc(st.Members, func(m replica.Peer) bool { return m.ID == ch.Add && !m.Learner })
	}
	return st.Removed || !slices.ContainsFunc(st.Members, func(m replica.Peer) bool { return m.ID == ch.Remove })
}

func changeReply(st *replica.Status, done bool) *pb.ChangeReplicasReply {
	return &pb.ChangeReplicasReply{Members: toPBPeers(st.Members), Done: done, Primary: string(st.Primary)}
}
