package transport

import (
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Pushed loads. A poll with subscribe_ms > 0 is answered as any poll and
// also subscribes its source to the (service, partition, class) load for
// that long (at most MaxSubscribeLease). Whenever the node signals that a
// load may have changed (PollServer.Notify), the server pushes, to every
// live subscription whose load differs from the one it last sent, a
// PollReply with the subscribing poll's id and push_seq 1, 2, ...; with
// PollAuth it is sealed with the subscribing poll's nonce, as the answer
// was. The poller accepts a push only if it authenticates, names a live
// subscription of this poller instance and carries a push_seq above the
// last it accepted for it: a replayed push is refused like a replayed
// answer. A subscription is renewed by polling again with subscribe_ms;
// nothing ends one early (a lost poller's pushes stop at its lease).
//
// Pushes cost the node one datagram per subscriber and change, so the
// subscriptions are bounded (WithMaxSubscriptions): beyond the bound a
// subscribe poll is answered but not subscribed. Subscribe polls pass the
// same rate limit, authentication and replay guard as any poll.

// MaxSubscribeLease caps the lease a subscribe poll may ask for.
const MaxSubscribeLease = 10 * time.Second

// SubscribeLease is the lease a client asks for its push subscriptions.
// It renews one once half is left, on the first call after that
// (Renewals), so a client that stops calling stops costing the replicas
// pushes within a lease.
const SubscribeLease = 2 * time.Second

// Renewals is when each of a client's push subscriptions is next due to
// be sent (Poller.Subscribe with SubscribeLease): at once when new, then
// once half its lease has passed. It takes the time as an input and does
// no I/O. The zero value is ready; not safe for concurrent use.
type Renewals[K comparable] struct {
	next map[K]time.Time
}

// Due reports whether k's subscription is to be sent at now, and if so
// counts it sent.
func (r *Renewals[K]) Due(now time.Time, k K) bool {
	if now.Before(r.next[k]) {
		return false
	}
	if r.next == nil {
		r.next = map[K]time.Time{}
	}
	r.next[k] = now.Add(SubscribeLease / 2)
	return true
}

// Forget drops the subscriptions whose lease is over at now: no call
// wanted them since, or their replica left.
func (r *Renewals[K]) Forget(now time.Time) {
	maps.DeleteFunc(r.next, func(_ K, at time.Time) bool { return now.Sub(at) >= SubscribeLease/2 })
}

// Len is how many subscriptions r remembers.
func (r *Renewals[K]) Len() int { return len(r.next) }

// DefaultMaxSubscriptions is the default bound on a poll server's
// subscriptions.
const DefaultMaxSubscriptions = 4096

// WithMaxSubscriptions bounds how many subscriptions the server keeps
// (n <= 0: DefaultMaxSubscriptions).
func WithMaxSubscriptions(n int) PollOption {
	return func(s *PollServer) {
		if n <= 0 {
			n = DefaultMaxSubscriptions
		}
		s.subs.max = n
	}
}

type subKey struct {
	from      netip.AddrPort
	service   string
	partition int32
	class     string
}

// subscription is one subscriber's: the subscribing poll's nonce (whose
// counter is its id), when it ends, the load last sent and the last
// push_seq.
type subscription struct {
	nonce   pollNonce
	expires time.Time
	last    int
	seq     uint64
}

// subscriptions is a poll server's table. The reading goroutine adds to
// it, the notifier goroutine pushes from it; mu guards the table.
type subscriptions struct {
	mu     sync.Mutex
	table  map[subKey]*subscription
	max    int
	notify chan struct{} // capacity 1: Notify never blocks, signals coalesce
	quit   chan struct{} // closed by Close
	done   chan struct{} // closed when the notifier returns
	rounds atomic.Uint64 // push rounds finished, so tests know one ran
	// size is len(table), read without the lock: with no subscription
	// (no client uses push) Notify costs an atomic load.
	size atomic.Int64
}

func newSubscriptions() *subscriptions {
	return &subscriptions{table: map[subKey]*subscription{}, max: DefaultMaxSubscriptions, notify: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
}

// Notify tells the server that a load it serves may have changed; the
// notifier goroutine then pushes the changed loads. It never blocks and
// may be called from any goroutine, as often as loads change: signals
// that arrive while a round is pending coalesce into it, and each push
// carries the load read when it is sent.
func (s *PollServer) Notify() {
	if s.subs.size.Load() == 0 {
		return
	}
	select {
	case s.subs.notify <- struct{}{}:
	default:
	}
}

// subscribe records (or renews) req's subscription for from, whose load
// was just answered as queue; called by the reading goroutine.
func (s *PollServer) subscribe(from netip.AddrPort, req *pb.PollRequest, nonce pollNonce, queue int) {
	if s.auth == nil {
		nonce = pollNonce{counter: req.Id}
	}
	now := s.clock.Now()
	lease := min(time.Duration(req.SubscribeMs)*time.Millisecond, MaxSubscribeLease)
	k := subKey{from: from, service: req.Service, partition: req.Partition, class: req.Class}
	t := s.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	sub, ok := t.table[k]
	if !ok && len(t.table) >= t.max {
		t.expire(now)
		if len(t.table) >= t.max {
			s.stats.unsubscribed.Add(1)
			return
		}
	}
	if !ok {
		sub = &subscription{}
		t.table[k] = sub
		t.size.Store(int64(len(t.table)))
	}
	// A renewal is a new poll id: the poller follows push_seq per id, so
	// the sequence restarts.
	*sub = subscription{nonce: nonce, expires: now.Add(lease), last: queue}
}

// expire drops the subscriptions whose lease ended; callers hold t.mu.
func (t *subscriptions) expire(now time.Time) {
	for k, sub := range t.table {
		if !now.Before(sub.expires) {
			delete(t.table, k)
		}
	}
	t.size.Store(int64(len(t.table)))
}

// notifier pushes changed loads after each Notify until Close.
func (s *PollServer) notifier() {
	defer close(s.subs.done)
	for {
		select {
		case <-s.subs.quit:
			return
		case <-s.subs.notify:
			s.push()
			s.subs.rounds.Add(1)
		}
	}
}

// outgoing is one push, built under the table's lock and sent after.
type outgoing struct {
	to    netip.AddrPort
	nonce pollNonce
	rep   *pb.PollReply
}

// push sends every live subscription whose load changed its new load.
func (s *PollServer) push() {
	t := s.subs
	now := s.clock.Now()
	t.mu.Lock()
	var out []outgoing
	for k, sub := range t.table {
		if !now.Before(sub.expires) {
			delete(t.table, k) // its lease ended
			continue
		}
		q, known := s.load(k.service, k.partition, k.class)
		if !known || q == sub.last {
			continue
		}
		sub.last = q
		sub.seq++
		out = append(out, outgoing{to: k.from, nonce: sub.nonce, rep: &pb.PollReply{Id: sub.nonce.counter, Queue: int32(q), Known: true, PushSeq: sub.seq}})
	}
	t.size.Store(int64(len(t.table)))
	t.mu.Unlock()
	for _, o := range out {
		b, _ := proto.Marshal(o.rep)
		if s.auth != nil {
			b = s.auth.seal(pollKindReply, b, o.nonce)
		}
		s.stats.pushed.Add(1)
		_, _ = s.conn.WriteToUDPAddrPort(b, o.to)
	}
}

// subscribed is one of a poller's subscriptions, by its poll id.
type subscribed struct {
	replica, service string
	expires          time.Time
	seq              uint64 // highest push_seq accepted
}

// Subscribe sends each target a subscribe poll for lease (capped by the
// server at MaxSubscribeLease) without waiting: the answer and every push
// the target sends until the lease ends go to the OnLate function, as
// probes' answers do. Renew a subscription by calling Subscribe again
// before its lease ends; the new one replaces it at the server. It is
// safe for concurrent use and does not block on the network.
func (p *Poller) Subscribe(targets []PollTarget, service string, partition int32, class string, lease time.Duration) {
	if lease <= 0 {
		return
	}
	p.send(targets, service, partition, class, nil, lease)
}

// expire forgets subscriptions whose lease ended; callers hold p.mu.
func (p *Poller) expire(now time.Time) {
	for id, sub := range p.subs {
		if !now.Before(sub.expires) {
			delete(p.subs, id)
		}
	}
}

// pushed delivers an authentic push (its nonce already checked against
// this instance and its id) if it is for a live subscription and newer
// than any push accepted for it; else it counts it rejected. Called by
// the reading goroutine.
func (p *Poller) pushed(rep *pb.PollReply) {
	now := p.clock.Now()
	p.mu.Lock()
	sub, ok := p.subs[rep.Id]
	if ok && !now.Before(sub.expires) {
		delete(p.subs, rep.Id)
		ok = false
	}
	if !ok || rep.PushSeq <= sub.seq || !rep.Known {
		p.mu.Unlock()
		p.rejected.Add(1)
		return
	}
	sub.seq = rep.PushSeq
	late := p.late
	a := PollAnswer{Replica: sub.replica, Queue: int(rep.Queue)}
	service := sub.service
	p.mu.Unlock()
	if late != nil {
		late(service, a)
	}
}
