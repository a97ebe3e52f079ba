package replication

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Memory through a burst of large writes (issue 13, bounded resources).
// Measured with `neptune bench burst` and heap profiles
// (docs/experiments/replica.md), a node's memory after a burst was held in
// three places, each bounded here:
//
//   - a follower's inbox: while its loop persists and executes a large
//     batch, the primary's retransmissions of the same entries piled up in
//     the inbox (4096 messages, each up to a batch of entries). The inbox
//     now holds at most inboxBytes of entry bodies; a Replicate call whose
//     messages it cannot take fails, so the sender knows they did not
//     arrive;
//   - the primary's retransmissions: entries a peer's node accepted into
//     its inbox are not sent again for redeliverAfter, unless the peer
//     rejects an append or stops answering (see delivered);
//   - the Go heap: a burst raises the collector's goal to about twice the
//     burst's live heap, and an idle node allocates too little afterwards
//     to reach it, so the garbage and the pages it held stay until the
//     runtime's forced collection (2 min) and the scavenger's slow return.
//     Once a node has persisted releaseAfterBytes of entries and then been
//     quiet for releaseIdle, and again at releaseSettled, the runtime
//     collects and returns freed memory to the OS at once (releaser);
//   - the C heap: pebble's memtables are malloc'd, and glibc kept what a
//     burst freed; the releaser trims it too (trimCHeap).
const (
	// inboxBytes bounds the entry bytes queued in one partition's inbox
	// (one message is always admitted, whatever its size).
	inboxBytes = 64 << 20
	// redeliverAfter is how long entries a peer's node accepted are not
	// retransmitted to it.
	redeliverAfter = 2 * time.Second
	// releaseAfterBytes of persisted entries, then releaseIdle without
	// any, make the node return its freed memory.
	releaseAfterBytes = 64 << 20
	releaseIdle       = time.Second
	// releaseSettled is when a burst's memory is released a second time:
	// at releaseIdle a slow replica may still be catching up, and the
	// entries it holds the log back with become garbage only once it has.
	releaseSettled = 5 * time.Second
)

// errInboxFull refuses a Replicate call whose entries the inbox of their
// partition cannot take now; the sender retransmits them later.
var errInboxFull = errors.New("neptune: replication inbox full")

// msgBytes is the entry bytes m carries.
func msgBytes(m replica.Message) int64 { return entryBytes(m.Entries) }

// entryBytes is the body bytes of es.
func entryBytes(es []replica.Entry) int64 {
	var n int64
	for _, e := range es {
		n += int64(len(e.Body))
	}
	return n
}

// enqueue offers m to p's inbox: false if the inbox is full (by count, or,
// for entries, which the protocol retransmits, by entry bytes when it
// already holds some).
func (p *part) enqueue(m replica.Message) bool {
	n := msgBytes(m)
	if n > 0 {
		if held := p.inboxHeld.Add(n); held > inboxBytes && held != n {
			p.inboxHeld.Add(-n)
			return false
		}
	}
	select {
	case p.inbox <- m:
		return true
	default:
		p.inboxHeld.Add(-n)
		return false
	}
}

// step hands m, taken from the inbox, to the replica.
func (p *part) step(m replica.Message) {
	p.took(m)
	now := p.rt.clock.Now()
	if p.heard == nil {
		p.heard = map[replica.ID]time.Time{}
	}
	p.heard[m.From] = now
	p.core.Step(now, m)
}

// took accounts for m leaving the inbox.
func (p *part) took(m replica.Message) { p.inboxHeld.Add(-msgBytes(m)) }

// delivered remembers, per partition, the highest entry a peer's node
// accepted from this node's bulk lane, under which epoch and when. A
// reject from the peer forgets it: the peer dropped entries it was sent.
// A call is noted with the time it started, and not at all if a reject
// arrived since: the peer cannot have rejected its entries before it
// began, so a reject that overtakes the call's answer still counts.
type delivered struct {
	mu       sync.Mutex
	at       map[partKey]delivery
	rejected map[partKey]time.Time
}

type delivery struct {
	epoch uint64
	hi    uint64
	when  time.Time
}

// note records that batch, sent at start, was accepted.
func (d *delivered) note(batch []*pb.ReplicaMessage, start time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pm := range batch {
		k := partKey{pm.Service, pm.Partition}
		if replica.MsgType(pm.Type) != replica.MsgAppend || len(pm.Entries) == 0 || !start.After(d.rejected[k]) {
			continue
		}
		hi := pm.Entries[len(pm.Entries)-1].Lsn
		if d.at == nil {
			d.at = map[partKey]delivery{}
		}
		if cur, ok := d.at[k]; ok && cur.epoch == pm.Epoch && cur.hi > hi {
			hi = cur.hi
		}
		d.at[k] = delivery{epoch: pm.Epoch, hi: hi, when: start}
	}
}

// covers reports whether pm only retransmits entries the peer's node
// accepted under the same epoch less than redeliverAfter ago.
func (d *delivered) covers(pm *pb.ReplicaMessage, now time.Time) bool {
	if replica.MsgType(pm.Type) != replica.MsgAppend || len(pm.Entries) == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.at[partKey{pm.Service, pm.Partition}]
	return ok && cur.epoch == pm.Epoch && pm.Entries[len(pm.Entries)-1].Lsn <= cur.hi && now.Sub(cur.when) < redeliverAfter
}

// forget drops what is known of k at now (all partitions if k is nil):
// the peer rejected an append, or may have restarted.
func (d *delivered) forget(k *partKey, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k == nil {
		clear(d.at)
		return
	}
	delete(d.at, *k)
	if d.rejected == nil {
		d.rejected = map[partKey]time.Time{}
	}
	d.rejected[*k] = now
}

// forgetDelivered: from rejected an append of k, so it lacks entries it
// may have been sent; retransmit at once.
func (rt *Runtime) forgetDelivered(from string, k *partKey) {
	rt.mu.Lock()
	pl := rt.peers[from]
	rt.mu.Unlock()
	if pl != nil {
		pl.delivered.forget(k, rt.clock.Now())
	}
}

// releaser counts the entry bytes persisted and, after a burst, returns
// freed memory to the OS (see the top of this file).
type releaser struct {
	bytes atomic.Int64
	last  atomic.Int64 // clock time of the last add, UnixNano
	// pending: the burst's second release is still to come (loop-owned
	// by releaseMemory).
	pending bool
	// release is debug.FreeOSMemory; tests count calls instead.
	release func()
}

func (r *releaser) add(n int64, now time.Time) {
	if n > 0 {
		r.bytes.Add(n)
		r.last.Store(now.UnixNano())
	}
}

// due reports whether a release is due at now: releaseIdle after a burst
// went quiet (which resets the count), and once more at releaseSettled.
func (r *releaser) due(now time.Time) bool {
	quiet := now.Sub(time.Unix(0, r.last.Load()))
	if r.bytes.Load() >= releaseAfterBytes && quiet >= releaseIdle {
		r.bytes.Store(0)
		r.pending = true
		return true
	}
	if r.pending && quiet >= releaseSettled {
		r.pending = false
		return true
	}
	return false
}

// releaseMemory runs until ctx ends, releasing memory when due.
func (rt *Runtime) releaseMemory(ctx context.Context) {
	t := rt.clock.NewTicker(releaseIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if rt.mem.due(rt.clock.Now()) {
			release := rt.mem.release
			if release == nil {
				release = func() { debug.FreeOSMemory(); trimCHeap() }
			}
			release()
		}
	}
}

// tuneOnce applies tuneCHeap for the process.
var tuneOnce sync.Once
