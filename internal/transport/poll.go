package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/ratelimit"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// LoadFunc answers a poll: the load index of a service partition on this
// node, and whether the node hosts it.
type LoadFunc func(service string, partition int32, class string) (queue int, known bool)

// Version is a replicated partition's replica state as a poll reply
// carries it, so clients choose a fresh enough replica from current data.
type Version struct {
	Replicated bool
	// Version is the replica's executed LSN; VersionAgo the level-3
	// primary's committed version x seconds ago (0 elsewhere).
	Version, VersionAgo uint64
	// Serving is false while the replica recovers or has diverged;
	// Primary marks the primary.
	Serving, Primary bool
	// Lease (primary) is what was left of its majority lease when it
	// answered; 0: it holds none, so it is not fresh (VersionAgo is 0 then
	// and means nothing) and serves no level-3 read.
	Lease time.Duration
}

// LeaseMillis is a remaining lease as the wire carries it: whole
// milliseconds, rounded up so that a lease held is never sent as none.
func LeaseMillis(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, 1<<31))
}

// VersionFunc answers the replication part of a poll.
type VersionFunc func(service string, partition int32) Version

// Work is a service's aggregation load index on a node: the estimated
// work it has committed to and its number of workers.
type Work struct {
	Pending  time.Duration
	Capacity int
}

// WorkFunc answers the aggregation part of a poll; ok is false for a
// service without aggregation operators.
type WorkFunc func(service string) (w Work, ok bool)

// PollOption adjusts a PollServer.
type PollOption func(*PollServer)

// WithVersions makes poll replies carry replica versions.
func WithVersions(f VersionFunc) PollOption { return func(s *PollServer) { s.version = f } }

// WithWork makes poll replies carry aggregation load indexes.
func WithWork(f WorkFunc) PollOption { return func(s *PollServer) { s.work = f } }

// WithPollAuth makes the server answer only authenticated, fresh,
// never-seen polls and authenticate its replies (see PollAuth). Without
// it the server answers any well-formed poll.
func WithPollAuth(a *PollAuth) PollOption { return func(s *PollServer) { s.auth = a } }

// WithPollRefusals reports every poll refused for its HMAC, its time or
// as a replay to r.
func WithPollRefusals(r Refuser) PollOption { return func(s *PollServer) { s.refusals = r } }

// WithPollRateLimit limits how many polls each source address may have
// answered: perSecond on average, burst at once; the rest are dropped
// before any other work.
func WithPollRateLimit(perSecond float64, burst int) PollOption {
	return func(s *PollServer) { s.limit = ratelimit.New(perSecond, burst) }
}

// WithServerClock makes the server's rate limit take time from c (the
// authentication window uses the PollAuth's clock).
func WithServerClock(c clock.Clock) PollOption {
	return func(s *PollServer) { s.clock = clock.OrReal(c) }
}

// PollServer answers load polls over UDP (the paper's load index server)
// and pushes loads to subscribed pollers (push.go).
type PollServer struct {
	conn    *net.UDPConn
	load    LoadFunc
	version VersionFunc
	work    WorkFunc
	log     *slog.Logger
	done    chan struct{}
	clock   clock.Clock
	auth    *PollAuth
	guard   replayGuard
	limit   *ratelimit.PerPeer
	stats   pollServerCounters
	subs    *subscriptions
	// refusals learns of refused polls (nil: nobody).
	refusals Refuser
}

// PollServerStats counts what a poll server did with the datagrams it
// read, for metrics.
type PollServerStats struct {
	Answered uint64
	// Malformed polls did not decode; Unauthenticated ones carried no
	// valid HMAC; Replayed ones were stale or seen before; Limited ones
	// exceeded their source's rate.
	Malformed, Unauthenticated, Replayed, Limited uint64
	// Pushed counts loads pushed to subscriptions; Unsubscribed counts
	// subscribe polls answered but not subscribed, the table being full.
	Pushed, Unsubscribed uint64
}

type pollServerCounters struct {
	answered, malformed, unauthenticated, replayed, limited, pushed, unsubscribed atomic.Uint64
}

// Stats returns the server's counters.
func (s *PollServer) Stats() PollServerStats {
	c := &s.stats
	return PollServerStats{Answered: c.answered.Load(), Malformed: c.malformed.Load(), Unauthenticated: c.unauthenticated.Load(),
		Replayed: c.replayed.Load(), Limited: c.limited.Load(), Pushed: c.pushed.Load(), Unsubscribed: c.unsubscribed.Load()}
}

// ListenPoll starts a poll server on addr ("host:port"; port 0 picks one).
func ListenPoll(addr string, load LoadFunc, log *slog.Logger, opts ...PollOption) (*PollServer, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: poll address %q: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("transport: listen for polls on %s: %w", addr, err)
	}
	s := &PollServer{conn: conn, load: load, log: log, done: make(chan struct{}), clock: clock.Real(), subs: newSubscriptions()}
	for _, o := range opts {
		o(s)
	}
	if s.auth != nil {
		s.guard.window = s.auth.window
	}
	go s.serve()
	go s.notifier()
	return s, nil
}

// Addr is the address the server listens on.
func (s *PollServer) Addr() string { return s.conn.LocalAddr().String() }

// Close stops the server and its pushes.
func (s *PollServer) Close() error {
	close(s.subs.quit)
	err := s.conn.Close()
	<-s.done
	<-s.subs.done
	return err
}

func (s *PollServer) serve() {
	defer close(s.done)
	buf := make([]byte, 2048)
	var req pb.PollRequest
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if s.limit != nil && !s.limit.Allow(from.Addr(), s.clock.Now()) {
			s.stats.limited.Add(1)
			continue
		}
		pkt := buf[:n]
		var nonce pollNonce
		if s.auth != nil {
			payload, nn, sent, err := s.auth.open(pollKindRequest, pkt)
			if err != nil {
				s.stats.unauthenticated.Add(1)
				s.refuse("poll_hmac", from, err)
				continue
			}
			if err := s.guard.admit(s.auth.clock.Now(), sent, nn); err != nil {
				s.stats.replayed.Add(1)
				s.refuse("poll_replay", from, err)
				continue
			}
			pkt, nonce = payload, nn
		}
		if err := proto.Unmarshal(pkt, &req); err != nil {
			s.stats.malformed.Add(1)
			s.log.Debug("drop malformed poll", "from", from, "err", err)
			continue
		}
		q, known := s.load(req.Service, req.Partition, req.Class)
		rep := &pb.PollReply{Id: req.Id, Queue: int32(q), Known: known}
		if known && s.version != nil {
			v := s.version(req.Service, req.Partition)
			rep.Replicated, rep.Version, rep.VersionAgo, rep.Serving, rep.Primary = v.Replicated, v.Version, v.VersionAgo, v.Serving, v.Primary
			rep.LeaseMs = LeaseMillis(v.Lease)
		}
		if known && s.work != nil {
			if w, ok := s.work(req.Service); ok {
				rep.WorkNs, rep.Capacity = int64(w.Pending), int32(w.Capacity)
			}
		}
		if known && req.SubscribeMs > 0 {
			s.subscribe(from, &req, nonce, q)
		}
		out, _ := proto.Marshal(rep)
		if s.auth != nil {
			out = s.auth.seal(pollKindReply, out, nonce)
		}
		s.stats.answered.Add(1)
		_, _ = s.conn.WriteToUDPAddrPort(out, from)
	}
}

func (s *PollServer) refuse(reason string, from netip.AddrPort, err error) {
	if s.refusals != nil {
		s.refusals.Refuse(reason, from.Addr().Unmap().String(), fmt.Errorf("load poll: %w", err))
	}
}

// PollTarget is one replica to poll.
type PollTarget struct {
	Replica string
	Addr    string
}

// PollAnswer is one reply that arrived in time.
type PollAnswer struct {
	Replica string
	Queue   int
	RTT     time.Duration
	// Version is set for replicated partitions.
	Version Version
	// Work is set for services with aggregation operators (Capacity > 0).
	Work Work
}

// Poller sends load polls from one UDP socket and matches the replies (the
// paper's load polling agent). It is safe for concurrent use.
type Poller struct {
	conn  *net.UDPConn
	bind  net.IP // where conn listens (WithPollerBind)
	log   *slog.Logger
	clock clock.Clock
	done  chan struct{}

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]*pending
	addrs   map[string]*net.UDPAddr
	// sentOrder lists polls by send time so abandoned ones can be
	// forgotten after lateHorizon without scanning the map.
	sentOrder []sentPoll
	late      LateFunc

	// subs are the live subscriptions by their poll id (push.go).
	subs map[uint64]*subscribed

	// auth, when set, authenticates polls and replies; instance is this
	// poller's half of every poll's nonce.
	auth     *PollAuth
	instance uint64
	rejected atomic.Uint64
	// refusals learns of forged replies (nil: nobody).
	refusals Refuser
}

type pending struct {
	replica string
	service string
	sent    time.Time
	replies chan<- PollAnswer // nil once the poll's caller stopped waiting
}

type sentPoll struct {
	id   uint64
	sent time.Time
}

// LateFunc receives an answer that arrived after its Poll returned, every
// answer to a Probe or Subscribe and every push. Late answers must not decide the call they were
// for (stale load information misleads), but a policy may still learn from
// them.
type LateFunc func(service string, a PollAnswer)

// lateHorizon is how long an unanswered poll is remembered for LateFunc.
const lateHorizon = time.Second

// PollerOption adjusts a Poller.
type PollerOption func(*Poller)

// WithClock makes the poller take time from c: the poll deadline, answers'
// round-trip times and when unanswered polls are forgotten. The default is
// the real clock; tests pass a manual one.
func WithClock(c clock.Clock) PollerOption { return func(p *Poller) { p.clock = clock.OrReal(c) } }

// WithPollerRefusals reports every reply the poller drops as forged (its
// HMAC or nonce does not verify) to r.
func WithPollerRefusals(r Refuser) PollerOption { return func(p *Poller) { p.refusals = r } }

// WithPollerAuth makes the poller authenticate its polls and accept only
// replies that authenticate and answer a poll it sent (see PollAuth).
func WithPollerAuth(a *PollAuth) PollerOption { return func(p *Poller) { p.auth = a } }

// Rejected is how many replies the poller dropped because they did not
// authenticate or answered no poll of this poller, and how many pushes it
// dropped for no live subscription or an old sequence number.
func (p *Poller) Rejected() uint64 { return p.rejected.Load() }

// WithPollerBind binds the poller's socket to ip (default: every
// interface), so a member told to listen on one address opens no socket
// on the others.
func WithPollerBind(ip net.IP) PollerOption { return func(p *Poller) { p.bind = ip } }

// NewPoller opens the poller's socket.
func NewPoller(log *slog.Logger, opts ...PollerOption) (*Poller, error) {
	p := &Poller{log: log, clock: clock.Real(), done: make(chan struct{}), waiting: map[uint64]*pending{}, addrs: map[string]*net.UDPAddr{},
		subs: map[uint64]*subscribed{}, instance: randomInstance(), bind: net.IPv4zero}
	for _, o := range opts {
		o(p)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: p.bind})
	if err != nil {
		return nil, fmt.Errorf("transport: open poll socket on %s: %w", p.bind, err)
	}
	p.conn = conn
	go p.read()
	return p, nil
}

// Close closes the socket.
func (p *Poller) Close() error {
	err := p.conn.Close()
	<-p.done
	return err
}

// Poll asks every target for its load on service's partition and returns
// the answers that arrive within wait (or before ctx ends). Late answers are
// discarded, as in the paper: stale load information misleads.
func (p *Poller) Poll(ctx context.Context, targets []PollTarget, service string, partition int32, class string, wait time.Duration) []PollAnswer {
	return p.PollFirst(ctx, targets, service, partition, class, wait, 0)
}

// PollFirst is Poll that returns as soon as enough answers are in (0 or
// more than the targets means all of them); the others, arriving later, go
// to the OnLate function.
func (p *Poller) PollFirst(ctx context.Context, targets []PollTarget, service string, partition int32, class string, wait time.Duration, enough int) []PollAnswer {
	replies := make(chan PollAnswer, len(targets))
	ids := p.send(targets, service, partition, class, replies, 0)
	defer func() {
		// Unanswered polls stay known for lateHorizon so a late answer can
		// still reach LateFunc; the caller no longer listens.
		p.mu.Lock()
		for _, id := range ids {
			if w, ok := p.waiting[id]; ok {
				w.replies = nil
			}
		}
		p.mu.Unlock()
	}()

	if enough <= 0 || enough > len(ids) {
		enough = len(ids)
	}
	answers := make([]PollAnswer, 0, len(ids))
	timer := p.clock.NewTimer(wait)
	defer timer.Stop()
	for len(answers) < enough {
		select {
		case a := <-replies:
			answers = append(answers, a)
		case <-timer.Chan():
			return drain(answers, replies, enough)
		case <-ctx.Done():
			return drain(answers, replies, enough)
		}
	}
	return answers
}

// drain adds the answers already delivered when the wait ended: they
// arrived in time, even if select chose the deadline first.
func drain(answers []PollAnswer, replies <-chan PollAnswer, enough int) []PollAnswer {
	for len(answers) < enough {
		select {
		case a := <-replies:
			answers = append(answers, a)
		default:
			return answers
		}
	}
	return answers
}

// Probe sends polls without waiting for them: every answer goes to the
// OnLate function, as a late one would. It is how a policy polls off the
// call path (balance.Plan.Probe).
func (p *Poller) Probe(targets []PollTarget, service string, partition int32, class string) {
	p.send(targets, service, partition, class, nil, 0)
}

// send sends a poll to each target and registers it, delivering answers
// to replies (nil: to the OnLate function), subscribing for lease if it is
// positive; it returns the polls' ids.
func (p *Poller) send(targets []PollTarget, service string, partition int32, class string, replies chan<- PollAnswer, lease time.Duration) []uint64 {
	ids := make([]uint64, 0, len(targets))
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forget(now)
	p.expire(now)
	for _, t := range targets {
		ua, err := p.resolve(t.Addr)
		if err != nil {
			p.log.Debug("bad poll address", "replica", t.Replica, "addr", t.Addr, "err", err)
			continue
		}
		p.nextID++
		id := p.nextID
		msg, _ := proto.Marshal(&pb.PollRequest{Id: id, Service: service, Partition: partition, Class: class, SubscribeMs: LeaseMillis(lease)})
		if p.auth != nil {
			msg = p.auth.seal(pollKindRequest, msg, pollNonce{p.instance, id})
		}
		p.waiting[id] = &pending{replica: t.Replica, service: service, sent: now, replies: replies}
		ids = append(ids, id)
		if _, err := p.conn.WriteToUDP(msg, ua); err != nil {
			delete(p.waiting, id)
			ids = ids[:len(ids)-1]
			continue
		}
		p.sentOrder = append(p.sentOrder, sentPoll{id: id, sent: now})
		if lease > 0 {
			p.subs[id] = &subscribed{replica: t.Replica, service: service, expires: now.Add(lease)}
		}
	}
	return ids
}

// forget drops polls sent more than lateHorizon ago; callers hold p.mu.
func (p *Poller) forget(now time.Time) {
	n := 0
	for n < len(p.sentOrder) && now.Sub(p.sentOrder[n].sent) > lateHorizon {
		delete(p.waiting, p.sentOrder[n].id)
		n++
	}
	if n > 0 {
		p.sentOrder = append(p.sentOrder[:0], p.sentOrder[n:]...)
	}
}

// OnLate makes f receive the answers that arrive after their Poll returned,
// and the answers to probes.
// f runs on the poller's reading goroutine and must not block.
func (p *Poller) OnLate(f LateFunc) {
	p.mu.Lock()
	p.late = f
	p.mu.Unlock()
}

// resolve caches resolved UDP addresses; callers hold p.mu.
func (p *Poller) resolve(addr string) (*net.UDPAddr, error) {
	if ua, ok := p.addrs[addr]; ok {
		return ua, nil
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	p.addrs[addr] = ua
	return ua, nil
}

func (p *Poller) read() {
	defer close(p.done)
	buf := make([]byte, 512)
	var rep pb.PollReply
	for {
		n, from, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		pkt := buf[:n]
		if p.auth != nil {
			payload, nonce, _, err := p.auth.open(pollKindReply, pkt)
			if err == nil && nonce.instance != p.instance {
				err = errors.New("reply to another poller")
			}
			if err == nil && (proto.Unmarshal(payload, &rep) != nil || rep.Id != nonce.counter) {
				err = errors.New("reply does not match its nonce")
			}
			if err != nil {
				p.rejected.Add(1)
				if p.refusals != nil {
					p.refusals.Refuse("poll_reply_forged", from.Addr().Unmap().String(), fmt.Errorf("load poll reply: %w", err))
				}
				continue
			}
		} else if proto.Unmarshal(pkt, &rep) != nil {
			continue
		}
		if rep.PushSeq > 0 {
			p.pushed(&rep)
			continue
		}
		p.mu.Lock()
		w, ok := p.waiting[rep.Id]
		delete(p.waiting, rep.Id)
		if !ok || !rep.Known {
			p.mu.Unlock()
			if !ok && p.auth != nil {
				p.rejected.Add(1) // authentic, but for no poll waiting: a replay
			}
			continue
		}
		a := PollAnswer{Replica: w.replica, Queue: int(rep.Queue), RTT: p.clock.Since(w.sent),
			Version: Version{Replicated: rep.Replicated, Version: rep.Version, VersionAgo: rep.VersionAgo, Serving: rep.Serving, Primary: rep.Primary,
				Lease: time.Duration(rep.LeaseMs) * time.Millisecond},
			Work: Work{Pending: time.Duration(rep.WorkNs), Capacity: int(rep.Capacity)}}
		// Deliver under the lock: an answer matched before its Poll's
		// deadline is then in the Poll's channel when the deadline fires.
		replies, late := w.replies, p.late
		if replies != nil {
			replies <- a // buffered for every target: never blocks
		}
		p.mu.Unlock()
		if replies == nil && late != nil {
			late(w.service, a)
		}
	}
}
