package replication

import (
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// peerQueue holds the messages for one destination node.
type peerQueue struct {
	mu    sync.Mutex
	q     []*pb.ReplicaMessage
	sizes []int // encoded size of each q entry
	bytes int   // sum of sizes
	wake  chan struct{}
}

// push queues pm, dropping the oldest messages beyond the count and byte
// bounds (the newest always stays).
func (pq *peerQueue) push(pm *pb.ReplicaMessage) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	n := proto.Size(pm)
	pq.q, pq.sizes, pq.bytes = append(pq.q, pm), append(pq.sizes, n), pq.bytes+n
	drop := 0
	for len(pq.q)-drop > 1 && (len(pq.q)-drop > peerQueueLimit || pq.bytes > peerQueueBytes) {
		pq.bytes -= pq.sizes[drop]
		drop++
	}
	if drop > 0 {
		pq.q = slices.Delete(pq.q, 0, drop)
		pq.sizes = slices.Delete(pq.sizes, 0, drop)
	}
}

// take removes the oldest messages totalling at most maxBytes (at least one,
// if any) for one Replicate call.
func (pq *peerQueue) take(maxBytes int) []*pb.ReplicaMessage {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	n, size := 0, 0
	for n < len(pq.q) && (n == 0 || size+pq.sizes[n] <= maxBytes) {
		size += pq.sizes[n]
		n++
	}
	batch := slices.Clone(pq.q[:n])
	pq.q = slices.Delete(pq.q, 0, n)
	pq.sizes = slices.Delete(pq.sizes, 0, n)
	pq.bytes -= size
	return batch
}

// send queues m for its destination node, starting that node's sender on
// first use. It never blocks the partition loop.
func (rt *Runtime) send(k partKey, m replica.Message) {
	to := string(m.To)
	rt.mu.Lock()
	pq, ok := rt.peers[to]
	if !ok {
		pq = &peerQueue{wake: make(chan struct{}, 1)}
		rt.peers[to] = pq
		rt.wg.Add(1)
		go func() { defer rt.wg.Done(); rt.sender(to, pq) }()
	}
	rt.mu.Unlock()
	pq.push(toPBMessage(k, m))
	select {
	case pq.wake <- struct{}{}:
	default:
	}
}

// sender delivers one node's queue in FIFO batches, one call at a time.
func (rt *Runtime) sender(to string, pq *peerQueue) {
	for {
		select {
		case <-rt.ctx.Done():
			return
		case <-pq.wake:
		}
		for {
			batch := pq.take(batchBytes)
			if len(batch) == 0 {
				break
			}
			if err := rt.deliver(to, batch); err != nil {
				rt.det.callFailed(to)
				rt.log.Debug("replicate failed", "peer", to, "messages", len(batch), "err", err)
			} else {
				rt.det.heardFrom(to)
			}
		}
	}
}

func (rt *Runtime) deliver(to string, batch []*pb.ReplicaMessage) error {
	addr := rt.cfg.Directory.RPCAddr(to)
	if addr == "" {
		return fmt.Errorf("%w: node %q is not in the yellow pages", nerr.ErrNoReplica, to)
	}
	ctx, cancel := clock.WithTimeout(rt.ctx, rt.clock, deliverTimeout)
	defer cancel()
	return rt.cfg.Sender.Replicate(ctx, to, addr, &pb.ReplicaBatch{From: rt.cfg.Self, Messages: batch})
}
