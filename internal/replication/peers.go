package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Replication traffic to a node travels in two lanes, each with its own
// queue and its own sender goroutine, so each has at most one Replicate
// call in flight of its own:
//
//   - the control lane carries every message without entries: heartbeats
//     (appends with no entries), acks, rejects, votes, digests. They are
//     small and they are what failure detection and elections listen to.
//   - the bulk lane carries messages with entries (appends, gossip), in
//     FIFO order. (Votes carry no entries: an election never waits for
//     bulk data.)
//
// A multi-MiB batch in flight or queued therefore never delays a
// heartbeat: on one gRPC connection the two calls are separate HTTP/2
// streams, interleaved frame by frame. A heartbeat may overtake the
// entries sent before it; the follower takes an empty append ahead of its
// log as a heartbeat, not as a gap to reject (replica.handleAppend).
//
// Only control-lane calls feed the failure detector: a bulk call may take
// long for its size on a busy link without the peer being dead, and the
// heartbeats every Heartbeat keep the control lane busy enough to notice a
// dead peer at once.

// peerLanes is one destination node's two lanes.
type peerLanes struct {
	ctrl, bulk *peerQueue

	mu   sync.Mutex
	sent map[partKey]replica.LSN // highest entry LSN sent per partition
	// delivered: what the node accepted (memory.go).
	delivered delivered
}

// peerQueue holds the messages of one lane to one destination node.
type peerQueue struct {
	mu    sync.Mutex
	q     []*pb.ReplicaMessage
	sizes []int // encoded size of each q entry
	bytes int   // sum of sizes
	wake  chan struct{}
	// inflight is the batch of the call under way: with q, what is on
	// its way to the peer; inflightBytes its size.
	inflight      []*pb.ReplicaMessage
	inflightBytes int
	// held, if set, counts the bytes of q and inflight with every other
	// queue of the runtime (Runtime.HeldBytes).
	held *atomic.Int64
}

// count adds d bytes to the runtime's count of queued bytes.
func (pq *peerQueue) count(d int) {
	if pq.held != nil && d != 0 {
		pq.held.Add(int64(d))
	}
}

// onItsWay reports whether every entry of pm is in a message queued or in
// flight on this lane: sending it again would be needless (a lost copy is
// resent once the call is over, at the primary's next retransmission).
func (pq *peerQueue) onItsWay(pm *pb.ReplicaMessage) bool {
	lo, hi := pm.Entries[0].Lsn, pm.Entries[len(pm.Entries)-1].Lsn
	covers := func(m *pb.ReplicaMessage) bool {
		return len(m.Entries) > 0 && m.Service == pm.Service && m.Partition == pm.Partition && m.Epoch == pm.Epoch &&
			m.Entries[0].Lsn <= lo && hi <= m.Entries[len(m.Entries)-1].Lsn
	}
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return slices.ContainsFunc(pq.q, covers) || slices.ContainsFunc(pq.inflight, covers)
}

// poke wakes a sender if the queue holds messages.
func (pq *peerQueue) poke() {
	pq.mu.Lock()
	more := len(pq.q) > 0
	pq.mu.Unlock()
	if more {
		select {
		case pq.wake <- struct{}{}:
		default:
		}
	}
}

// done ends the call under way.
func (pq *peerQueue) done() {
	pq.mu.Lock()
	pq.inflight = nil
	pq.count(-pq.inflightBytes)
	pq.inflightBytes = 0
	pq.mu.Unlock()
}

func newPeerQueue() *peerQueue { return &peerQueue{wake: make(chan struct{}, 1)} }

// push queues pm, dropping the oldest messages beyond the count and byte
// bounds (the newest always stays) and, in the bulk lane, the queued
// messages of pm's partition from an older epoch (superseded).
func (pq *peerQueue) push(pm *pb.ReplicaMessage) {
	pq.mu.Lock()
	if len(pm.Entries) > 0 {
		pq.dropSuperseded(pm)
	}
	n := proto.Size(pm)
	pq.q, pq.sizes, pq.bytes = append(pq.q, pm), append(pq.sizes, n), pq.bytes+n
	pq.count(n)
	drop := 0
	for len(pq.q)-drop > 1 && (len(pq.q)-drop > peerQueueLimit || pq.bytes > peerQueueBytes) {
		pq.bytes -= pq.sizes[drop]
		pq.count(-pq.sizes[drop])
		drop++
	}
	if drop > 0 {
		pq.q = slices.Delete(pq.q, 0, drop) // zeroes the tail: no hidden reference stays
		pq.sizes = slices.Delete(pq.sizes, 0, drop)
	}
	pq.mu.Unlock()
	select {
	case pq.wake <- struct{}{}:
	default:
	}
}

// dropSuperseded removes the queued messages of pm's partition sent at
// an older epoch: their receiver refuses or ignores them once it has seen
// pm's epoch, and a deposed primary's queued appends may hold a burst's
// bodies.
func (pq *peerQueue) dropSuperseded(pm *pb.ReplicaMessage) {
	keep := 0
	for i, m := range pq.q {
		if m.Service == pm.Service && m.Partition == pm.Partition && m.Epoch < pm.Epoch {
			pq.bytes -= pq.sizes[i]
			pq.count(-pq.sizes[i])
			continue
		}
		pq.q[keep], pq.sizes[keep] = m, pq.sizes[i]
		keep++
	}
	clear(pq.q[keep:])
	pq.q, pq.sizes = pq.q[:keep], pq.sizes[:keep]
}

// take removes the oldest messages totalling at most maxBytes (at least one,
// if any) for one Replicate call, and their size; they are in flight until
// done.
func (pq *peerQueue) take(maxBytes int) ([]*pb.ReplicaMessage, int) {
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
	pq.inflight = batch
	// The batch stays counted until done; a previous one not ended by
	// done is over.
	pq.count(-pq.inflightBytes)
	pq.inflightBytes = size
	if len(pq.q) == 0 {
		// A burst's backing arrays would otherwise keep their capacity
		// (and, until overwritten, nothing else) for the node's lifetime.
		pq.q, pq.sizes = nil, nil
	}
	return batch, size
}

// send queues m in its lane to its destination node, starting that node's
// senders on first use. It never blocks the partition loop.
func (rt *Runtime) send(k partKey, m replica.Message) {
	to := string(m.To)
	rt.mu.Lock()
	pl, ok := rt.peers[to]
	if !ok {
		pl = &peerLanes{ctrl: newPeerQueue(), bulk: newPeerQueue(), sent: map[partKey]replica.LSN{}}
		pl.ctrl.held, pl.bulk.held = &rt.held, &rt.held
		rt.peers[to] = pl
		rt.wg.Add(1 + controlConns)
		for conn := range controlConns {
			go func() { defer rt.wg.Done(); rt.sender(to, pl, true, conn) }()
		}
		go func() { defer rt.wg.Done(); rt.sender(to, pl, false, 0) }()
	}
	rt.mu.Unlock()
	if len(m.Entries) == 0 {
		pl.ctrl.push(toPBMessage(k, m))
		return
	}
	pm := toPBMessage(k, m)
	if pl.bulk.onItsWay(pm) || pl.delivered.covers(pm, rt.clock.Now()) {
		return // a retransmission of entries on their way or just delivered
	}
	pl.noteSent(k, m.Entries, &rt.resent)
	pl.bulk.push(pm)
}

// noteSent counts the entries of es sent to this node before (a
// retransmission): the figure the burst tests hold at zero.
func (pl *peerLanes) noteSent(k partKey, es []replica.Entry, c *resendCounter) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	hi := pl.sent[k]
	for _, e := range es {
		if e.LSN <= hi {
			c.add(len(e.Body))
		}
	}
	pl.sent[k] = max(hi, es[len(es)-1].LSN)
}

// resendCounter counts entries (and their body bytes) sent to a node again.
type resendCounter struct {
	mu             sync.Mutex
	entries, bytes int64
}

func (c *resendCounter) add(n int) {
	c.mu.Lock()
	c.entries++
	c.bytes += int64(n)
	c.mu.Unlock()
}

// Resent reports how many entries, and how many body bytes, this node sent
// to a peer that had been sent them already: retransmissions after a lost
// message or a reject. In a healthy cluster it stays near zero.
func (rt *Runtime) Resent() (entries, bytes int64) {
	rt.resent.mu.Lock()
	defer rt.resent.mu.Unlock()
	return rt.resent.entries, rt.resent.bytes
}

// sender delivers one lane's queue in FIFO batches, one call at a time.
// The control lane has controlConns senders, each on its own connection
// (conn), taking from one queue: while one waits out a stalled call the
// others carry the heartbeats.
func (rt *Runtime) sender(to string, pl *peerLanes, ctrl bool, conn int) {
	pq := pl.bulk
	if ctrl {
		pq = pl.ctrl
	}
	for {
		select {
		case <-rt.ctx.Done():
			return
		case <-pq.wake:
		}
		for {
			batch, size := pq.take(batchBytes)
			if len(batch) == 0 {
				break
			}
			if ctrl {
				pq.poke() // more queued: an idle sender takes it meanwhile
			}
			start := rt.clock.Now()
			err := rt.deliver(to, batch, size, ctrl, conn)
			pq.done()
			switch {
			case err != nil && ctrl:
				if !timedOut(err) {
					// Only a call the peer refused counts against it (a
					// killed process refuses at once). One that timed out
					// met a stalled connection (a lossy link: the other
					// control connections carry on) or a paused peer, which
					// its silence shows (a primary's: AckTimeout) or its
					// late acknowledgements (a follower's).
					rt.det.callFailed(to)
					// It may have restarted without what it was sent. (A call
					// that only timed out met a busy node: forgetting would
					// let every retransmission through, and in a burst that
					// is a resend of every large entry in flight.)
					pl.delivered.forget(nil, start)
				}
				rt.log.Debug("replicate failed", "peer", to, "messages", len(batch), "err", err)
			case err != nil:
				rt.log.Debug("replicate (bulk) failed", "peer", to, "bytes", size, "err", err)
			default:
				if !ctrl {
					pl.delivered.note(batch, start)
				}
				rt.det.heardFrom(to)
			}
		}
	}
}

// timedOut reports whether a Replicate call failed only by its deadline.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// deliver makes one Replicate call. Its timeout grows with the batch: a
// 16 MiB batch on a busy link is slow, not lost.
func (rt *Runtime) deliver(to string, batch []*pb.ReplicaMessage, size int, ctrl bool, conn int) error {
	addr := rt.addrOf(to)
	if addr == "" {
		return fmt.Errorf("%w: node %q is not in the yellow pages", nerr.ErrNoReplica, to)
	}
	base := deliverTimeout
	if !ctrl {
		base = bulkDeliverTimeout
	}
	timeout := base + time.Duration(int64(size)*int64(time.Second)/bulkBytesPerSecond)
	ctx, cancel := clock.WithTimeout(rt.ctx, rt.clock, timeout)
	defer cancel()
	b := &pb.ReplicaBatch{From: rt.cfg.Self, Messages: batch}
	if cs, ok := rt.cfg.Sender.(ControlSender); ok && ctrl {
		return cs.ReplicateControl(ctx, conn, to, addr, b)
	}
	return rt.cfg.Sender.Replicate(ctx, to, addr, b)
}

// bulkBytesPerSecond is the slowest link rate a Replicate call is given
// time for before it counts as failed. A bulk call that times out is sent
// again (the entries may not have arrived), so a rate the receiver cannot
// keep up with costs a resend of every large entry: at 16 MiB/s, 8 MiB
// calls to a node busy with the same burst on a shared 2-core machine
// timed out (`neptune bench burst`). A dead peer fails a call at once,
// and the control lane detects a silent one, so a long wait here delays
// nothing else.
const bulkBytesPerSecond = 4 << 20

// addrOf is node's RPC address: the yellow pages', or, once they no longer
// list it, the last one they did. A network partition longer than the
// announcement TTL drops the nodes on the other side from the pages, and
// they may come back only well after the network heals; replication keeps
// calling the last address meanwhile, so the partition's replicas find
// each other again within a redial of the heal. (Under mutual TLS the
// connection admits only the server whose certificate names node, so an
// address since taken by another process receives nothing.)
func (rt *Runtime) addrOf(node string) string {
	addr := rt.cfg.Directory.RPCAddr(node)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if addr == "" {
		return rt.addrs[node]
	}
	rt.addrs[node] = addr
	return addr
}

// probeEvery is how often probeLost runs.
const probeEvery = 250 * time.Millisecond

// probeLost finds peers again that the yellow pages dropped. The failure
// detector counts a peer the pages do not list as alive only while it is
// heard from, and a replica sends nothing to a peer it deems dead; after a
// partition longer than the announcement TTL both sides would wait for
// gossip to list the other again, which may take long after the network
// healed. So every probeEvery, each peer replica that the pages do not
// list and that has not been heard from for suspectFor is sent an empty
// Replicate call at its last known address: the answer, and the call at
// the other end, count as hearing from each other, and replication
// resumes.
func (rt *Runtime) probeLost(ctx context.Context) {
	t := rt.clock.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		for _, id := range rt.peerNodes() {
			if listed := rt.cfg.Directory.RPCAddr(id); listed != "" {
				rt.mu.Lock()
				rt.addrs[id] = listed
				rt.mu.Unlock()
				continue
			}
			rt.mu.Lock()
			addr := rt.addrs[id]
			rt.mu.Unlock()
			if addr == "" || rt.det.heardWithin(id, rt.clock.Now(), suspectFor) {
				continue
			}
			cctx, cancel := clock.WithTimeout(ctx, rt.clock, deliverTimeout)
			err := rt.cfg.Sender.Replicate(cctx, id, addr, &pb.ReplicaBatch{From: rt.cfg.Self})
			cancel()
			if err == nil {
				rt.det.heardFrom(id)
			}
		}
	}
}

// peerNodes lists the nodes of the hosted replicas' current replica sets,
// this one excepted.
func (rt *Runtime) peerNodes() []string {
	rt.pmu.RLock()
	defer rt.pmu.RUnlock()
	var peers []string
	for _, p := range rt.parts {
		for _, r := range p.status.Load().Members {
			if id := string(r.ID); id != rt.cfg.Self && !slices.Contains(peers, id) {
				peers = append(peers, id)
			}
		}
	}
	return peers
}
