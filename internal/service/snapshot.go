package service

import (
	"context"
	"io"
)

// Snapshotter is the snapshot callback pair of a replicated service
// (issue 17; go.etcd.io/raft's MsgSnap/ApplySnapshot is the model). A
// replica whose primary no longer holds the log entries it needs (a new
// replica, or one that lost its data after the log was truncated), or
// whose log diverged after a forced promote, gets the primary's state by
// a snapshot, then the log after it. Without one such a replica can only
// be rebuilt by hand.
//
// Both are called for one partition at a time. Each write the service
// executes records its LSN (see CheckFunc), so a snapshot knows the LSN
// it covers.
type Snapshotter interface {
	// Snapshot writes a consistent image of partition's state to w and
	// returns the LSN of the last replicated write the image reflects.
	//
	// It runs on its own goroutine while the partition's writes go on
	// executing (the runtime does not pause them: a large state would
	// stall writes for as long as it takes to write). The image must
	// therefore be one point in their order: the state after some write
	// and before the next, such as a storage snapshot or a read
	// transaction, pinned at the start and streamed without holding
	// writes back. Every write that changes the state must record its
	// LSN in the same atomic step (what CHECK reads), so the LSN returned
	// is exactly the last one the image holds; the runtime takes the
	// image to cover max(that LSN, the LSN executed when it called
	// Snapshot).
	Snapshot(ctx context.Context, partition int, w io.Writer) (lsn uint64, err error)
	// Restore replaces partition's state with an image from Snapshot and
	// returns the LSN it covers. It must be all or nothing (stage the
	// image, then swap it in: a failed or interrupted Restore leaves the
	// old state) and durable when it returns. No write of partition runs
	// meanwhile.
	Restore(ctx context.Context, partition int, r io.Reader) (lsn uint64, err error)
}
