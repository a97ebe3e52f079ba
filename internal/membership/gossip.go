package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Config configures gossip membership.
type Config struct {
	// NodeID names this member; it must be unique in the cluster.
	NodeID string
	// BindAddr and BindPort are where memberlist listens (UDP and TCP).
	// Port 0 picks a free port.
	BindAddr string
	BindPort int
	// AdvertiseAddr is the IP other members reach this one at (memberlist
	// refuses names); empty: what memberlist picks from BindAddr.
	AdvertiseAddr string
	// Join lists host:port gossip addresses of existing members; a name
	// stands for every address it resolves to.
	Join []string
	// JoinTimeout bounds how long Start tries the seeds (0: JoinTimeout;
	// negative: until its context ends).
	JoinTimeout time.Duration
	// AnnounceInterval is how often this member refreshes its
	// announcement (the paper's 1 s).
	AnnounceInterval time.Duration
	// TTL is how long an announcement lives without refresh (the paper's 5 s).
	TTL time.Duration
	// Announce returns this member's current announcement; nil means the
	// member only listens (a client).
	Announce func() *pb.Announcement
	// OnChange, if set, is called (without locks held) after a node joins
	// or leaves the yellow pages.
	OnChange func()
	// Watch, if set, learns of every change to the yellow pages, in order
	// (a client keeps its replica views with it).
	Watch  Watcher
	Logger *slog.Logger
	Clock  clock.Clock

	// Security. All of it is off when unset (the zero Config gossips in
	// the clear, as before); the node's wiring turns it on.

	// Keyring, if set, encrypts and authenticates all gossip (AES-GCM,
	// memberlist's GossipVerifyIncoming and GossipVerifyOutgoing on): a
	// host without a key can neither read, join nor inject. It stays live:
	// SetKeys rotates it. See keyring.go for files and rotation.
	Keyring *memberlist.Keyring
	// Label is the cluster name. memberlist prefixes every packet and
	// stream with it and drops those of another label, so two clusters on
	// one network never merge, even with the same key; it is also bound
	// into signed announcements.
	Label string
	// Certs, if set, signs this member's announcements with its
	// certificate key and accepts an announcement only when a node
	// certificate of the cluster CA naming the announced node id signed
	// it (see annauth.go). An announcing member's certificate must name
	// its NodeID.
	Certs *pki.Source
	// MaxAnnouncementAge bounds the age of a signed announcement (relays
	// included); 0 is DefaultMaxAnnouncementAge.
	MaxAnnouncementAge time.Duration
	// StreamRate and StreamBurst, if StreamRate > 0, limit incoming gossip
	// stream connections (joins, push/pull, large announcements) per
	// source address; the excess is closed before memberlist reads it.
	StreamRate  float64
	StreamBurst int

	// Refusals, if set, learns of every announcement refused and of the
	// gossip memberlist drops for another key or cluster name (see
	// Refuser).
	Refusals Refuser

	// Identity is told to the other members at join and checked against
	// theirs (see identity.go); a name already live elsewhere always
	// refuses the start.
	Identity Identity

	// Transport, if set, carries memberlist's packets and streams in
	// place of sockets on BindAddr:BindPort (memberlist.MockNetwork in a
	// simulation of many members; a wrapper that loses packets). The
	// member's address is then the transport's.
	Transport memberlist.Transport

	// testTransport, if set, wraps the transport memberlist gets (tests
	// cut the network with it).
	testTransport func(memberlist.Transport) memberlist.Transport
}

// Watcher follows the yellow pages as they change. Its methods run with
// the pages' lock held, in the order the changes happen, so they must be
// quick and must not call back into Gossip.
type Watcher interface {
	// Applied: e is node e.Ann.NodeId's entry after an announcement that
	// the pages accepted (a newer one than they held).
	Applied(e Entry)
	// Removed: node left the pages (its entry expired, it left, or
	// memberlist declared it dead).
	Removed(node string)
}

// Refuser learns of each peer a member refuses (security.Refusals
// counts and logs them): reason is the metric label, source who was
// refused, err why in words.
type Refuser interface {
	Refuse(reason, source string, err error)
}

// Defaults from the paper: refresh every second, expire after five. A
// member refreshes every DefaultAnnounceInterval only in clusters of up to
// RefreshPeers members (see RefreshInterval), and an entry of a member
// memberlist holds live does not expire (see dissemination.go).
const (
	DefaultAnnounceInterval = time.Second
	DefaultTTL              = 5 * time.Second
)

// maxBestEffort is the largest announcement sent over UDP, directly or
// piggybacked on memberlist's gossip; larger ones use memberlist's
// reliable (TCP) channel.
const maxBestEffort = 1200

// Failure detection (memberlist's SWIM with Lifeguard), set so that a
// killed member leaves every yellow page within the paper's 5 s TTL at
// 1,000 members: memberlist suspects it after a failed direct and
// indirect probe and declares it dead after suspicionMult·log10(N)·
// probeInterval once another member confirms the suspicion (2.7 s at
// N = 1,000), which then reaches every member within a few gossip rounds.
const (
	probeInterval  = 300 * time.Millisecond
	probeTimeout   = 200 * time.Millisecond
	suspicionMult  = 3
	gossipInterval = 100 * time.Millisecond
)

// Gossip is a running member: it announces itself and maintains the yellow
// pages from what others announce.
type Gossip struct {
	cfg       Config
	ml        *memberlist.Memberlist
	log       *slog.Logger
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	// ready is closed once ml is set: messages memberlist delivers
	// before (NotifyMsg, MergeRemoteState) wait for it.
	ready chan struct{}

	mu    sync.Mutex
	pages *Pages
	seq   uint64
	inc   int64

	// auth signs and verifies announcements (Config.Certs); sealed keeps
	// the signed form of each entry in pages, to relay it.
	auth     *annAuth
	sealed   map[string]*sealed
	accepted atomic.Uint64
	rejected atomic.Uint64
	// verified counts signature checks (announcements not held already).
	verified  atomic.Uint64
	transport *limitedTransport
	conflicts *conflicts

	// members holds copies of memberlist's live nodes, taken in its event
	// callbacks (which run under memberlist's own lock): the *Node values
	// Members() returns are rewritten by memberlist on every alive message,
	// so reading them later from another goroutine races with it.
	membersMu sync.Mutex
	members   map[string]memberlist.Node
	live      atomic.Int64 // len(members)

	// lost holds the last address of each member memberlist declared dead
	// or gone (under membersMu); rejoin contacts them again (see rejoin).
	lost       map[string]lostMember
	rejoining  atomic.Bool
	lastRejoin time.Time // loop goroutine only

	// kick asks the loop for an announcement now (AnnounceNow); one
	// pending kick stands for any number.
	kick chan struct{}

	// changes queues the announcements spreading epidemically, this
	// member's and those it relays, piggybacked on memberlist's gossip.
	changes *memberlist.TransmitLimitedQueue
	// Under mu: the keys of this member's last announcement
	// (announcementKeys), when it last sent it to everyone, and when it
	// signed it.
	changeKey, volatileKey string
	lastSent, signedAt     time.Time
	resends                int
	// antiEntropyDue is when the loop next exchanges state with a random
	// member (loop goroutine only); antiEntropy is set while one runs.
	antiEntropyDue time.Time
	antiEntropy    atomic.Bool
	// strangerSince is since when the pages hold each stranger's entry,
	// and strangerExchange when this member last brought anti-entropy
	// forward for one (loop goroutine only; exchangeSoonOnStranger).
	strangerSince    map[string]time.Time
	strangerExchange time.Time

	// wantCert names members whose announcements came signed with a
	// certificate this one has not seen (under mu; see wantCertOf).
	wantCert map[string]bool
	// asking is, per live member whose entry this one lacks, when to ask
	// it for its announcement next (loop goroutine only; see askMissing).
	asking map[string]*asking
	// answered is when each member last got this one's announcement on
	// its asking (under mu), so a flood of asks costs one answer each
	// per wantAnswerGap.
	answered map[string]time.Time
	// unknownAsker is when an asker memberlist did not hold live last
	// made this member exchange state with it (under mu).
	unknownAsker time.Time

	// foreign remembers announcements refused as signed by another CA
	// (under mu), so a lookup that finds nothing can say why.
	foreign map[string]foreignSigner
}

type foreignSigner struct {
	err  *ForeignSignerError
	seen time.Time
	// services are those its last refused announcement claims
	// (unverified).
	services []string
}

type lostMember struct {
	addr  string
	since time.Time
}

// Rejoin timing: after a partition heals, memberlist alone never finds
// members it declared dead once its GossipToTheDeadTime passed (and it
// probes and pushes/pulls only live ones), so both sides of a long cut
// would keep split yellow pages. Every RejoinInterval the member joins
// the last address of each lost member again, for up to LostRetention.
const (
	RejoinInterval = time.Second
	LostRetention  = 10 * time.Minute
	// rejoinBatch is how many lost members one rejoin tries.
	rejoinBatch = 3
)

// Stats counts signed announcements (direct and relayed) accepted and
// refused, and gossip streams refused by the rate limit.
type Stats struct {
	Accepted, Rejected, StreamsLimited uint64
}

// Stats returns the member's counters.
func (g *Gossip) Stats() Stats {
	st := Stats{Accepted: g.accepted.Load(), Rejected: g.rejected.Load()}
	if g.transport != nil {
		st.StreamsLimited = g.transport.limited.Load()
	}
	return st
}

// SetKeys makes the live gossip keyring hold exactly keys, keys[0]
// primary (see SyncKeyring): how a node applies a rotated keyring file
// without a restart. The load polls' keys follow, when their PollAuth
// reads this keyring.
func (g *Gossip) SetKeys(keys [][]byte) error { return SyncKeyring(g.cfg.Keyring, keys) }

// Start joins the cluster and begins announcing.
func Start(ctx context.Context, cfg Config) (*Gossip, error) {
	if cfg.AnnounceInterval == 0 {
		cfg.AnnounceInterval = DefaultAnnounceInterval
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gossip{
		cfg:    cfg,
		log:    cfg.Logger,
		pages:  NewPages(cfg.TTL),
		inc:    cfg.Clock.Now().UnixNano(),
		done:   make(chan struct{}),
		ready:  make(chan struct{}),
		sealed: map[string]*sealed{},
		kick:   make(chan struct{}, 1),
	}
	if cfg.Certs != nil {
		if want := (pki.Identity{Role: pki.RoleNode, Name: cfg.NodeID}); cfg.Announce != nil && cfg.Certs.Identity() != want {
			return nil, fmt.Errorf("membership: certificate names %s, but this member announces itself as %s", cfg.Certs.Identity(), want)
		}
		g.auth = newAnnAuth(cfg.Certs, cfg.Label, cfg.MaxAnnouncementAge, cfg.Clock)
	}
	mc := memberlistConfig(clock.Dilation(cfg.Clock))
	mc.Name = cfg.NodeID
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	g.conflicts = &conflicts{self: cfg.NodeID, starting: true, later: cfg.Identity.OnConflict}
	mc.Conflict = g.conflicts
	mc.Logger = log.New(&memberlistLog{log: cfg.Logger.With("component", "memberlist"), refusals: cfg.Refusals}, "", 0)
	mc.Label = cfg.Label
	if cfg.Keyring != nil {
		mc.Keyring = cfg.Keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	// own is the transport this member bound, shut if memberlist fails
	// to start on it.
	var own memberlist.Transport
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	} else {
		s, err := bindSockets(mc)
		if err != nil {
			return nil, fmt.Errorf("membership: start memberlist on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
		}
		own, mc.Transport = s, s
		if cfg.StreamRate > 0 {
			g.transport = newLimitedTransport(s, cfg.StreamRate, cfg.StreamBurst)
			own, mc.Transport = g.transport, g.transport
		}
	}
	if cfg.testTransport != nil {
		mc.Transport = cfg.testTransport(mc.Transport)
	}
	// memberlist gossips (GetBroadcasts) and delivers messages from the
	// moment Create binds its sockets: the queue exists before, and
	// messages wait for g.ml (ready). A restarted node that peers still
	// gossiped to crashed on a nil queue.
	g.changes = &memberlist.TransmitLimitedQueue{NumNodes: g.liveCount, RetransmitMult: mc.RetransmitMult}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if own != nil {
			_ = own.Shutdown()
		}
		return nil, fmt.Errorf("membership: start memberlist on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	g.ml = ml
	close(g.ready)
	g.announce(cfg.Clock.Now(), sendRefresh)
	if len(cfg.Join) > 0 {
		if err := join(ctx, ml, cfg); err != nil {
			_ = ml.Shutdown()
			return nil, err
		}
	}
	if err := g.checkJoined(); err != nil {
		if !errors.Is(err, ErrDuplicateID) {
			// We joined: leave so that our name is free for a corrected
			// start. Never with a duplicate id: a leave would be taken
			// for the live holder's.
			_ = ml.Leave(time.Second)
		}
		_ = ml.Shutdown()
		return nil, err
	}
	// The join exchanged the whole state already: the first anti-entropy
	// comes an interval later.
	g.antiEntropyDue = cfg.Clock.Now().Add(antiEntropyInterval(g.liveCount()))
	ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go g.loop(ctx)
	return g, nil
}

// JoinTimeout is how long Start keeps trying to reach a seed by default,
// so nodes of a cluster may start in any order.
const JoinTimeout = 10 * time.Second

// Pauses between join attempts grow from joinPause, doubling, to
// maxJoinPause, each drawn from its upper half (so members started
// together do not knock in step).
const (
	joinPause    = 250 * time.Millisecond
	maxJoinPause = 5 * time.Second
)

// join contacts the seeds until one answers, for cfg.JoinTimeout (0:
// JoinTimeout; negative: until ctx ends), pausing with backoff between
// attempts. A seed that is a host name is resolved afresh on every
// attempt, to all its addresses (a headless Service, a Compose service).
func join(ctx context.Context, ml *memberlist.Memberlist, cfg Config) error {
	limit := cfg.JoinTimeout
	if limit == 0 {
		limit = JoinTimeout
	}
	start := cfg.Clock.Now()
	for attempt := 0; ; attempt++ {
		_, err := ml.Join(cfg.Join)
		if err == nil {
			return nil
		}
		spent := cfg.Clock.Since(start)
		if limit > 0 && spent >= limit {
			return fmt.Errorf("membership: join %v (tried for %v): %w%s", cfg.Join, limit, oneLine{err}, joinHint(cfg, err))
		}
		d := min(joinPause<<min(attempt, 5), maxJoinPause)
		d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
		if limit > 0 {
			d = min(d, limit-spent)
		}
		if attempt == 0 || d >= maxJoinPause/2 {
			cfg.Logger.Warn("seeds not reachable yet, retrying", "join", cfg.Join, "retry_in", d, "tried_for", spent.Round(time.Millisecond),
				"err", oneLine{err}, "hint", strings.TrimPrefix(joinHint(cfg, err), "; "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: join %v: %w (last attempt: %v)%s", cfg.Join, ctx.Err(), oneLine{err}, joinHint(cfg, err))
		case <-cfg.Clock.After(d):
		}
	}
}

// oneLine prints memberlist's multi-line join errors on one line.
type oneLine struct{ err error }

func (e oneLine) Error() string { return strings.Join(strings.Fields(e.err.Error()), " ") }
func (e oneLine) Unwrap() error { return e.err }

// joinHint says what to check when no seed let this member in. A seed
// of a secured cluster drops gossip without its key or with another
// label silently (by design: it tells an outsider nothing), so a
// mismatch looks like a seed that is down; the error says both. But
// when every seed refused the connection, nothing listens there: a key
// or a label cannot be the reason, and the hint says so.
func joinHint(cfg Config, err error) string {
	if refusedEverywhere(err) {
		return "; nothing listens at that address (connection refused): start a node there first (its --gossip-port is the port to --join), or fix --join"
	}
	if cfg.Keyring == nil {
		return "; is a seed up at that address? A secured cluster ignores gossip from a member without its keyring: give this one the cluster's material (--tls-dir, --keyring) instead of running insecure"
	}
	return fmt.Sprintf("; is a seed up at that address? A cluster ignores gossip under a key it does not hold or another cluster name: check that this member's keyring holds a key the cluster uses, that its cluster name (%q) is the cluster's, and that the cluster is not running insecure", cfg.Label)
}

// refusedEverywhere reports whether every seed refused the TCP
// connection: memberlist lists one error per seed.
func refusedEverywhere(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	n := strings.Count(msg, "connection refused")
	return n > 0 && n == strings.Count(msg, "failed to join")
}

// Addr is the gossip address others can join.
func (g *Gossip) Addr() string {
	n := g.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Members is the number of live memberlist members, this one included.
func (g *Gossip) Members() int { return g.ml.NumMembers() }

// liveCount is the number of live members as memberlist's events told
// this one, itself included: what the broadcast queue and the refresh
// interval scale with. Unlike memberlist's NumMembers it takes no lock
// of memberlist's and costs nothing per call (memberlist asks the queue
// for broadcasts while it sends every packet).
func (g *Gossip) liveCount() int { return max(int(g.live.Load()), 1) }

// Close leaves the cluster gracefully and stops announcing.
func (g *Gossip) Close() error {
	var err error
	g.closeOnce.Do(func() {
		g.cancel()
		<-g.done
		_ = g.ml.Leave(time.Second)
		err = g.ml.Shutdown()
	})
	return err
}

// Replicas returns the live nodes hosting service's partition.
func (g *Gossip) Replicas(service string, partition int32) Lookup {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pages.Replicas(g.cfg.Clock.Now(), service, partition)
}

// Lookup is Replicas and Method in one read of the pages: what a call
// needs to know before it polls anyone.
func (g *Gossip) Lookup(service string, partition int32, method string) Lookup {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pages.Lookup(g.cfg.Clock.Now(), service, partition, method)
}

// Method returns the declared method, if any live node announces it.
func (g *Gossip) Method(service, method string) (*pb.MethodInfo, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pages.Method(g.cfg.Clock.Now(), service, method)
}

// Exclude hides node until it announces itself again.
func (g *Gossip) Exclude(node string) {
	g.mu.Lock()
	g.pages.Exclude(node)
	g.mu.Unlock()
	g.log.Info("node excluded after failed calls", "peer", node)
}

// Snapshot returns the live yellow pages.
func (g *Gossip) Snapshot() []Entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pages.Snapshot(g.cfg.Clock.Now())
}

// Departures returns the members that left the yellow pages recently
// (within DepartedRetention), with why and when they were last seen.
func (g *Gossip) Departures() []Departure {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pages.Departures(g.cfg.Clock.Now())
}

// maxTick bounds the loop's tick when announcements are rarer, so that
// expiry and asking for missing entries keep their pace.
const maxTick = time.Second

func (g *Gossip) loop(ctx context.Context) {
	defer close(g.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
			g.announce(g.cfg.Clock.Now(), sendNothing)
			continue
		case <-g.cfg.Clock.After(min(g.cfg.AnnounceInterval, maxTick)):
		}
		now := g.cfg.Clock.Now()
		live := g.liveMembers()
		g.mu.Lock()
		// Fewer than two refreshes fit in a TTL: liveness comes from
		// memberlist. In a smaller cluster the refreshes keep entries
		// alive, and one that stops expires a TTL later, as the paper's
		// soft state does (sooner if memberlist declares it dead). This
		// member's own entry lives while it runs (a re-send does not
		// apply it anew).
		// The authors' refresh interval: a member that announces nothing
		// (a client) has no interval of its own that says how often the
		// nodes refresh, so it takes the paper's TTL/5 when shorter.
		authors := RefreshInterval(min(g.cfg.AnnounceInterval, g.cfg.TTL/5), g.liveCount())
		fromSWIM := 2*authors >= g.cfg.TTL
		g.pages.Keep(now, func(id string) bool { return id == g.cfg.NodeID || (fromSWIM && live[id]) })
		gone := g.pages.Expire(now)
		for _, id := range gone {
			delete(g.sealed, id)
			if g.cfg.Watch != nil {
				g.cfg.Watch.Removed(id)
			}
		}
		g.mu.Unlock()
		for _, id := range gone {
			g.log.Info("node expired from yellow pages", "peer", id)
		}
		if len(gone) > 0 && g.cfg.OnChange != nil {
			g.cfg.OnChange()
		}
		g.announce(now, sendNothing)
		g.askMissing(now, live)
		g.exchangeSoonOnStranger(now, live)
		g.exchangeState(now, len(live))
		g.rejoin()
	}
}

// Announce announces this member to every other member now and returns
// once its own yellow pages hold the new announcement (AnnounceNow is the
// asynchronous form). A node calls it when it starts serving replicas, so
// a call made right after its Start finds them.
func (g *Gossip) Announce() { g.announce(g.cfg.Clock.Now(), sendRefresh) }

// AnnounceNow announces this member at once instead of at the next
// tick: a node calls it when a replica's role or epoch changes, so
// clients route writes to a new primary within gossip rounds rather than
// up to an interval later. It never blocks; kicks that come while one is
// pending are merged.
func (g *Gossip) AnnounceNow() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// RefreshInterval is how often this member refreshes its announcement
// to everyone at the cluster's current size (see RefreshInterval).
func (g *Gossip) RefreshInterval() time.Duration {
	return RefreshInterval(g.cfg.AnnounceInterval, g.liveCount())
}

// announce builds this member's announcement and sends what
// planAnnouncement decides, at least at (sendRefresh: a new announcement
// to everyone whatever changed).
func (g *Gossip) announce(now time.Time, atLeast announceAction) {
	if g.cfg.Announce == nil {
		return
	}
	a := g.cfg.Announce()
	refresh := g.RefreshInterval()
	for _, s := range a.Services {
		for _, r := range s.Replicas {
			r.LeaseValidMs = leaseValid(r.LeaseMs, refresh)
		}
	}
	changeKey, volatileKey := announcementKeys(a)
	g.mu.Lock()
	action := planAnnouncement(announceState{changed: changeKey != g.changeKey, volatile: volatileKey != g.volatileKey,
		sinceSent: now.Sub(g.lastSent), signedAge: now.Sub(g.signedAt), refresh: refresh, resignAfter: min(g.maxAnnouncementAge()/2, resignAfter)})
	action = max(action, atLeast)
	if action == sendResend && g.pages.entries[g.cfg.NodeID] == nil {
		action = sendRefresh // our own entry lapsed (a long pause): announce anew
	}
	if action == sendNothing {
		g.mu.Unlock()
		return
	}
	g.lastSent = now
	if action == sendResend {
		g.resends++
		cadence := g.resends%certCadence == 0
		g.mu.Unlock()
		// The certificate rides along when it still fits a packet, else
		// every certCadence-th time: a member that missed it (or refused
		// it as foreign) learns it.
		msg := g.heldAnnouncement(true)
		if len(msg) > maxBestEffort && !cadence {
			msg = g.heldAnnouncement(false)
		}
		g.sendAll(msg)
		return
	}
	g.seq++
	a.NodeId, a.Seq, a.Incarnation = g.cfg.NodeID, g.seq, g.inc
	g.changeKey, g.volatileKey, g.signedAt = changeKey, volatileKey, now
	g.apply(now, a)
	g.mu.Unlock()
	msg, bare := g.encode(a)
	if msg == nil {
		return
	}
	if action == sendChange {
		g.spread(g.cfg.NodeID, bare)
	}
	g.sendAll(msg)
}

// maxAnnouncementAge is how old the others accept a signed announcement.
func (g *Gossip) maxAnnouncementAge() time.Duration {
	if g.cfg.MaxAnnouncementAge > 0 {
		return g.cfg.MaxAnnouncementAge
	}
	return DefaultMaxAnnouncementAge
}

// encode returns a as sent: signed when announcements are (msg with the
// certificate attached when its cadence says, bare never), else its
// protobuf for both.
func (g *Gossip) encode(a *pb.Announcement) (msg, bare []byte) {
	b, err := proto.Marshal(a)
	if err != nil {
		g.log.Error("encode announcement", "err", err)
		return nil, nil
	}
	if g.auth == nil {
		return b, b
	}
	s, env, err := g.auth.seal(b, a.Seq)
	if err != nil {
		g.log.Error("sign announcement", "err", err)
		return nil, nil
	}
	g.mu.Lock()
	g.sealed[g.cfg.NodeID] = s
	g.mu.Unlock()
	return env, s.encode(nil)
}

// How an announcement message came: straight from its author, or
// spreading epidemically, which a receiver relays when it is a change new
// to it. A spreading one starts with msgSpread, a byte that begins no
// announcement of the releases before (an envelope begins "NSA1", a bare
// protobuf with a field tag); a direct one is sent as those releases send
// it, so they keep reading it during a rolling upgrade (they refuse the
// spreading ones, and learn the change at the author's next refresh).
const (
	msgDirect byte = 1 // never on the wire: receive's kind
	msgSpread byte = 2
	// msgWant asks its receiver for its announcement, certificate
	// attached; the asker's name, a zero byte and its address follow
	// (see askMissing). No
	// announcement begins with it either: a protobuf field tag 3 would
	// be field 0, which protobuf forbids.
	msgWant byte = 3
)

// sendAll sends announcement msg to every other member directly (a
// refresh).
func (g *Gossip) sendAll(msg []byte) {
	if msg == nil {
		return
	}
	for _, n := range g.memberCopies() {
		g.send(n, msg)
	}
}

// send sends announcement msg directly to member n, over UDP if it fits
// a packet.
func (g *Gossip) send(n *memberlist.Node, msg []byte) {
	if n.Name == g.cfg.NodeID || msg == nil {
		return
	}
	var err error
	if len(msg) <= maxBestEffort {
		err = g.ml.SendBestEffort(n, msg)
	} else {
		err = g.ml.SendReliable(n, msg)
	}
	if err != nil {
		g.log.Debug("send announcement", "peer", n.Name, "err", err)
	}
}

// spread queues node's announcement msg (without certificate) to spread
// epidemically, replacing one of node's queued before. One too large to
// piggyback goes to every member directly instead.
func (g *Gossip) spread(node string, msg []byte) {
	if len(msg) > maxBestEffort {
		g.sendAll(msg)
		return
	}
	g.changes.QueueBroadcast(change{node: node, msg: append([]byte{msgSpread}, msg...)})
}

// change is one announcement spreading: a newer one of the same node
// replaces it in the queue.
type change struct {
	node string
	msg  []byte
}

func (c change) Invalidates(b memberlist.Broadcast) bool {
	o, ok := b.(change)
	return ok && o.node == c.node
}
func (c change) Name() string    { return c.node }
func (c change) Message() []byte { return c.msg }
func (c change) Finished()       {}

// receive applies an announcement heard at seen; s is its signed form
// when announcements are signed. kind is how it came: msgDirect or
// msgSpread in a message (from its author or relayed), 0 in a state
// exchange. A spreading change that matters (announcementKeys), new to
// this member, is relayed on: that is how it spreads epidemically. An
// announcement the pages hold already renews the entry (Pages.Touch).
func (g *Gossip) receive(now, seen time.Time, a *pb.Announcement, s *sealed, kind byte) {
	if a.NodeId == "" {
		return
	}
	if a.NodeId == g.cfg.NodeID {
		g.refute(a)
		return
	}
	g.mu.Lock()
	old, had := g.pagesHas(now, a.NodeId)
	var oldAnn *pb.Announcement
	if had {
		oldAnn = old.Ann
	}
	applied := g.apply(seen, a)
	if applied && s != nil {
		g.sealed[a.NodeId] = s
	}
	fromMember := kind != 0
	if !applied && g.pages.Touch(now, a, seen, fromMember) && fromMember && g.cfg.Watch != nil {
		g.cfg.Watch.Applied(*g.pages.entries[a.NodeId])
	}
	g.mu.Unlock()
	if applied && kind == msgSpread && isChange(oldAnn, a) {
		var msg []byte
		if s != nil {
			msg = s.encode(nil)
		} else {
			msg, _ = proto.Marshal(a)
		}
		g.spread(a.NodeId, msg)
	}
	if !had {
		g.log.Info("node announced", "peer", a.NodeId, "rpc", a.RpcAddr)
		if g.cfg.OnChange != nil {
			g.cfg.OnChange()
		}
	}
}

// refute answers an announcement of this member's id newer than any it
// made (a second process started with the same id, refused since, whose
// announcement reached others first): as SWIM refutes a suspicion, this
// member takes a higher incarnation and spreads its announcement at once.
// Without it, the impostor's entry would stand for as long as memberlist
// holds this member live, every announcement of the true one refused as
// older. Its own announcements coming back (relayed, or in a peer's
// state) are not refuted: that bumped both members' incarnations at
// every state exchange, a change to spread each time.
func (g *Gossip) refute(a *pb.Announcement) {
	g.mu.Lock()
	if notAfter(a, g.inc, g.seq) || g.cfg.Announce == nil {
		g.mu.Unlock()
		return
	}
	g.inc = a.Incarnation + 1
	g.changeKey = "" // the next announcement is a change
	g.mu.Unlock()
	g.log.Warn("another process announced this node's id; refuting it", "incarnation", a.Incarnation)
	g.AnnounceNow()
}

// isChange reports whether next differs from prev (nil: none held) in a
// field that matters.
func isChange(prev, next *pb.Announcement) bool {
	if prev == nil {
		return true
	}
	a, _ := announcementKeys(prev)
	b, _ := announcementKeys(next)
	return a != b
}

// rejoin contacts lost members again (see RejoinInterval); one join at a
// time, in the background, since a join to an unreachable address blocks
// until memberlist's TCP timeout.
func (g *Gossip) rejoin() {
	now := g.cfg.Clock.Now()
	if now.Sub(g.lastRejoin) < RejoinInterval || g.rejoining.Load() {
		return
	}
	g.lastRejoin = now
	var addrs []string
	g.membersMu.Lock()
	for name, l := range g.lost {
		if now.Sub(l.since) > LostRetention {
			delete(g.lost, name)
			continue
		}
		addrs = append(addrs, l.addr)
	}
	g.membersMu.Unlock()
	if g.liveCount() == 1 {
		// Alone, though given seeds: they may have reached only this
		// member (a seed name that resolved to itself alone, nodes that
		// started at the same moment). Ask them again, resolved afresh,
		// so such clusters of one merge as their peers appear.
		addrs = append(addrs, g.cfg.Join...)
	}
	if len(addrs) == 0 {
		return
	}
	// A few at a time: one answered join merges the whole state, and
	// after a wide cut every member would otherwise push/pull with every
	// lost one each second, a storm that grows as N².
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	addrs = addrs[:min(len(addrs), rejoinBatch)]
	g.rejoining.Store(true)
	go func() {
		defer g.rejoining.Store(false)
		if n, err := g.ml.Join(addrs); n > 0 {
			g.log.Info("rejoined lost members", "reached", n, "of", len(addrs))
		} else {
			g.log.Debug("lost members still unreachable", "addrs", addrs, "err", err)
		}
	}()
}

// liveMembers is the set of members memberlist holds live (alive or
// suspect), this one included.
func (g *Gossip) liveMembers() map[string]bool {
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	live := make(map[string]bool, len(g.members))
	for name := range g.members {
		live[name] = true
	}
	return live
}

// exchangeState runs anti-entropy when it is due: a full push/pull of
// memberlist's and the yellow pages' state with one random member, in
// the background (memberlist's own periodic push/pull carries no yellow
// pages: its interval grows only as log N while their size grows as N).
func (g *Gossip) exchangeState(now time.Time, members int) {
	if g.antiEntropy.Load() {
		return
	}
	if now.Before(g.antiEntropyDue) {
		return
	}
	d := antiEntropyInterval(members)
	g.antiEntropyDue = now.Add(d/2 + time.Duration(rand.Int64N(int64(d)))) // mean d, jittered
	var peers []*memberlist.Node
	for _, n := range g.memberCopies() {
		if n.Name != g.cfg.NodeID {
			peers = append(peers, n)
		}
	}
	if len(peers) == 0 {
		return
	}
	peer := peers[rand.IntN(len(peers))]
	g.antiEntropy.Store(true)
	go func() {
		defer g.antiEntropy.Store(false)
		if _, err := g.ml.Join([]string{peer.FullAddress().Addr}); err != nil {
			g.log.Debug("anti-entropy exchange failed", "peer", peer.Name, "err", err)
		}
	}()
}

// exchangeSoonOnStranger brings anti-entropy forward to now, at most once
// per unknownAskerGap, when the pages have held for strangerGrace the
// entry of a member memberlist holds neither live nor lost: this member
// missed its alive message, and without memberlist's periodic push/pull
// only a state exchange tells memberlist of it. The grace lets a joiner's
// alive message arrive: its announcement, sent to each member it learns
// of, comes first.
func (g *Gossip) exchangeSoonOnStranger(now time.Time, live map[string]bool) {
	g.mu.Lock()
	ids := strangers(now, g.pages, g.cfg.NodeID, live)
	g.mu.Unlock()
	g.membersMu.Lock()
	ids = slices.DeleteFunc(ids, func(id string) bool { _, ok := g.lost[id]; return ok }) // lost ones are rejoined
	g.membersMu.Unlock()
	since := make(map[string]time.Time, len(ids))
	var overdue []string
	for _, id := range ids {
		t, ok := g.strangerSince[id]
		if !ok {
			t = now
		}
		since[id] = t
		if now.Sub(t) >= strangerGrace {
			overdue = append(overdue, id)
		}
	}
	g.strangerSince = since
	if len(overdue) > 0 && now.Sub(g.strangerExchange) >= unknownAskerGap {
		g.log.Debug("holding entries of members memberlist does not hold; exchanging state", "members", overdue)
		g.strangerExchange = now
		g.antiEntropyDue = now
	}
}

// strangerGrace is how long the pages hold a stranger's entry before the
// member exchanges state to learn of it: longer than a joiner's alive
// message takes to spread, shorter than the TTL after which a large
// cluster's pages drop an entry memberlist does not hold.
const strangerGrace = 3 * time.Second

// strangers are the members other than self, not live, whose entries the
// pages hold.
func strangers(now time.Time, p *Pages, self string, live map[string]bool) []string {
	var ids []string
	for id, e := range p.entries {
		if id != self && !live[id] && !now.After(e.Expires) {
			ids = append(ids, id)
		}
	}
	return ids
}

// memberlistConfig starts from memberlist's LAN profile, also on
// loopback (the local profile's 1 s stream timeout fails joins of a
// large cluster's state on a busy machine, and its 2·log10(n+1)
// retransmits missed a joiner's alive message at some members), and sets
// failure detection and dissemination as the yellow pages need them. Its
// timers run dilation times slower than real time (1 but in a simulation
// on a dilated clock, clock.Dilated).
func memberlistConfig(dilation float64) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	defer func() {
		for _, d := range []*time.Duration{&mc.ProbeInterval, &mc.ProbeTimeout, &mc.GossipInterval, &mc.GossipToTheDeadTime,
			&mc.TCPTimeout, &mc.DeadNodeReclaimTime} {
			*d = time.Duration(float64(*d) * dilation)
		}
	}()
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = probeInterval, probeTimeout, suspicionMult
	mc.GossipInterval = gossipInterval
	// Compression (LZW on every packet and stream) cost more CPU than
	// anything else memberlist did with a thousand members; protobuf
	// announcements are compact already.
	mc.EnableCompression = false
	// No periodic push/pull of memberlist's own: its interval grows only
	// as log N while its size (every member's state) grows as N, so its
	// cost per member grew as N/log N (at 1,000 members it was most of
	// the bytes a member sent idle). exchangeState's anti-entropy carries
	// memberlist's states with the yellow pages, at an interval that
	// grows as N; a member whose pages hold for strangerGrace the entry
	// of one memberlist does not hold (it missed its alive message)
	// exchanges state at once (exchangeSoonOnStranger).
	mc.PushPullInterval = 0
	// A member found dead may come back at another address (a container
	// restarted with a new IP, same id and data) once it has been dead a
	// second; a live member's id at a second address stays a conflict
	// (Identity.OnConflict refuses the newcomer).
	mc.DeadNodeReclaimTime = time.Second
	return mc
}

// apply records a in the pages and tells the watcher if the pages took
// it (it was newer than what they held); callers hold g.mu.
func (g *Gossip) apply(now time.Time, a *pb.Announcement) bool {
	if !g.pages.Apply(now, a) {
		return false
	}
	if g.cfg.Watch != nil {
		g.cfg.Watch.Applied(*g.pages.entries[a.NodeId])
	}
	return true
}

func (g *Gossip) pagesHas(now time.Time, id string) (*Entry, bool) {
	e, ok := g.pages.entries[id]
	if !ok || now.After(e.Expires) {
		return nil, false
	}
	return e, true
}

// delegate receives memberlist's user messages and push/pull state.
type delegate Gossip

func (d *delegate) NodeMeta(limit int) []byte {
	if m := d.cfg.Identity.Meta; len(m) <= limit {
		return m
	}
	return nil // the node trims its meta to memberlist.MetaMaxSize
}

func (d *delegate) NotifyMsg(b []byte) {
	g := (*Gossip)(d)
	<-g.ready
	kind := msgDirect
	if len(b) > 0 && b[0] == msgSpread {
		kind, b = msgSpread, b[1:]
	}
	now := g.cfg.Clock.Now()
	if len(b) > 0 && b[0] == msgWant {
		if name, addr, ok := strings.Cut(string(b[1:]), "\x00"); ok {
			g.answerWant(now, name, addr)
		}
		return
	}
	if g.auth != nil {
		a, s, err := g.open(b)
		if err != nil {
			return
		}
		g.receive(now, now, a, s, kind)
		return
	}
	var a pb.Announcement
	if err := proto.Unmarshal(b, &a); err != nil {
		g.log.Warn("drop malformed announcement", "err", err)
		return
	}
	g.receive(now, now, &a, nil, kind)
}

// open verifies a signed announcement, counting the outcome. Refusals go
// to Config.Refusals (counted, and logged rate-limited); an announcement
// naming a certificate not seen yet is no refusal: its author attaches
// the certificate every few announcements.
func (g *Gossip) open(b []byte) (*pb.Announcement, *sealed, error) {
	if env, _, err := decodeSealed(b); err == nil {
		if a, s, ok := g.held(env); ok {
			g.accepted.Add(1)
			return a, s, nil
		}
		if g.notNewer(env) {
			return nil, nil, errNotNewer
		}
	}
	g.verified.Add(1)
	a, s, err := g.auth.open(b)
	if err != nil {
		g.rejected.Add(1)
		if errors.Is(err, errUnknownCert) {
			g.wantCertOf(b)
			return nil, nil, err
		}
		var foreign *ForeignSignerError
		if errors.As(err, &foreign) {
			g.mu.Lock()
			if g.foreign == nil {
				g.foreign = map[string]foreignSigner{}
			}
			if _, ok := g.foreign[foreign.Claims]; ok || len(g.foreign) < maxForeign {
				g.foreign[foreign.Claims] = foreignSigner{err: foreign, seen: g.cfg.Clock.Now(), services: claimedServices(b)}
			}
			g.mu.Unlock()
		}
		if g.cfg.Refusals != nil {
			g.cfg.Refusals.Refuse(refusalReason(err), claimedAuthor(b), err)
		}
		return nil, nil, err
	}
	g.accepted.Add(1)
	return a, s, nil
}

// held returns the announcement the envelope s carries when this member already
// holds exactly it, live (same signature by the same certificate over
// the same bytes, verified when it first arrived): push/pull relays every
// entry again and again, and re-verifying an unchanged one would change
// nothing, since the pages refuse an announcement they already hold. So a
// signature is checked once per change, not once per relay.
func (g *Gossip) held(s sealed) (*pb.Announcement, *sealed, bool) {
	// The certificate names the author (its own, or one verified
	// before), so the payload need not be decoded to find what is held.
	node, ok := g.auth.signer(s.fp)
	if !ok {
		return nil, nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	have := g.sealed[node]
	e, live := g.pagesHas(g.cfg.Clock.Now(), node)
	if have == nil || !live || have.fp != s.fp || have.at != s.at || !bytes.Equal(have.sig, s.sig) || !bytes.Equal(have.payload, s.payload) {
		return nil, nil, false
	}
	return e.Ann, have, true
}

// errNotNewer: an announcement no newer than the one held, skipped
// unverified (the pages would refuse it anyway).
var errNotNewer = errors.New("membership: announcement no newer than the one held")

// notNewer reports whether the envelope s claims an announcement no newer (incarnation,
// sequence number) than the live entry held for its node: push/pull state
// and relays repeat entries this member holds newer versions of, and
// checking their signatures only to refuse them cost a thousand members'
// anti-entropy more than anything else. The claim is unverified, which is
// safe: trusting it can only make this member skip an announcement, never
// accept one.
func (g *Gossip) notNewer(s sealed) bool {
	var a pb.Announcement
	if proto.Unmarshal(s.payload, &a) != nil || a.NodeId == "" || a.NodeId == g.cfg.NodeID {
		return false // our own id goes to receive, which refutes an impostor
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.pagesHas(g.cfg.Clock.Now(), a.NodeId)
	return ok && notAfter(&a, e.Ann.Incarnation, e.Ann.Seq)
}

// wantCertOf notes that an announcement arrived from a member whose
// certificate this one has not seen (it missed the messages that carry
// it, and refreshes carry it only every certCadence-th time when it does
// not fit a packet): askMissing then asks that member for its
// announcement, which comes with the certificate.
func (g *Gossip) wantCertOf(b []byte) {
	s, _, err := decodeSealed(b)
	if err != nil {
		return
	}
	var a pb.Announcement
	if proto.Unmarshal(s.payload, &a) != nil || a.NodeId == "" {
		return
	}
	g.mu.Lock()
	if g.wantCert == nil {
		g.wantCert = map[string]bool{}
	}
	if len(g.wantCert) < maxForeign {
		g.wantCert[a.NodeId] = true
	}
	g.mu.Unlock()
}

// maxForeign bounds the remembered foreign signers.
const maxForeign = 64

// claimedServices are the services a refused announcement claims to host
// (unverified: only for the words of Foreign).
func claimedServices(b []byte) []string {
	s, _, err := decodeSealed(b)
	if err != nil {
		return nil
	}
	var a pb.Announcement
	if proto.Unmarshal(s.payload, &a) != nil {
		return nil
	}
	var out []string
	for _, h := range a.Services {
		out = append(out, h.Name)
	}
	return out
}

// claimedAuthor is the node id a refused announcement names, unverified,
// for the refusal's source; "?" if it names none.
func claimedAuthor(b []byte) string {
	payload := b
	if s, _, err := decodeSealed(b); err == nil {
		payload = s.payload
	}
	var a pb.Announcement
	if proto.Unmarshal(payload, &a) != nil || a.NodeId == "" {
		return "?"
	}
	return "announcement of " + strconv.Quote(a.NodeId)
}

// Foreign describes the members whose announcements this member refused
// within the TTL because a CA it does not trust signed them, and which
// claim to host service, or "" if none does: when no member this member
// can verify hosts service either, it is not a member of their cluster
// (it holds another CA), and a lookup says so. What a refused
// announcement claims is read unverified, only to choose these words.
func (g *Gossip) Foreign(service string) string {
	now := g.cfg.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	var names []string
	var last foreignSigner
	for claims, f := range g.foreign {
		if now.Sub(f.seen) > g.cfg.TTL {
			delete(g.foreign, claims)
			continue
		}
		if !slices.Contains(f.services, service) {
			continue
		}
		names = append(names, claims)
		if f.seen.After(last.seen) {
			last = f
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	ours := "no CA"
	if g.cfg.Certs != nil {
		ours = fmt.Sprintf("CA %s (cluster %q)", CAKeyID(g.cfg.Certs.Certificate().Leaf.AuthorityKeyId), g.cfg.Certs.Cluster())
	}
	return fmt.Sprintf("%s announce service %q with certificates of CA %s (cluster %q), but this member trusts only %s: it is not a member of their cluster; give it the cluster's ca.pem and a certificate that CA issued",
		strings.Join(names, ", "), service, last.err.CAKey, last.err.Cluster, ours)
}

// memberlistLog routes memberlist's log lines to the member's logger at
// debug level, and reports the lines that say it dropped gossip under
// another key or cluster name (memberlist has no other hook for them) to
// the Refuser.
type memberlistLog struct {
	log      *slog.Logger
	refusals Refuser
}

func (l *memberlistLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	l.log.Debug(line)
	if l.refusals == nil {
		return len(p), nil
	}
	if reason := gossipRefusal(line); reason != "" {
		source := "?"
		if i := strings.LastIndex(line, "from="); i >= 0 {
			addr := strings.Fields(line[i+len("from="):] + " ?")[0]
			if h, _, err := net.SplitHostPort(addr); err == nil {
				source = h // a source's streams come from many ports
			}
		}
		l.refusals.Refuse(reason, source, errors.New(strings.TrimPrefix(line, "[ERR] ")))
	}
	return len(p), nil
}

// gossipRefusal is the reason memberlist (v0.7) dropped a packet or
// stream, from its log line, or "" for any other line.
func gossipRefusal(line string) string {
	switch {
	case strings.Contains(line, "Decrypt packet failed"),
		strings.Contains(line, "no installed keys could decrypt"),
		strings.Contains(line, "encryption is configured but remote state is not encrypted"),
		strings.Contains(line, "remote state is encrypted and encryption is not configured"):
		return "gossip_key"
	case strings.Contains(line, "unacceptable label"),
		strings.Contains(line, "stream label header"),
		strings.Contains(line, "double packet label header"):
		return "gossip_label"
	}
	return ""
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.changes.GetBroadcasts(overhead, limit)
}

// LocalState is the yellow pages, for a push/pull this member or the
// other started by joining (a join, exchangeState's anti-entropy);
// memberlist's periodic push/pull carries an empty state (which members
// of older releases read as such).
func (d *delegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	if !join {
		if g.auth != nil {
			return encodeState(nil)
		}
		return nil
	}
	now := g.cfg.Clock.Now()
	if g.auth != nil {
		return g.signedState(now)
	}
	var st pb.PagesState
	for _, e := range g.Snapshot() {
		st.Entries = append(st.Entries, &pb.RelayedAnnouncement{Announcement: e.Ann, AgeMs: now.Sub(e.Seen).Milliseconds()})
	}
	b, _ := proto.Marshal(&st)
	return b
}

func (d *delegate) MergeRemoteState(b []byte, _ bool) {
	g := (*Gossip)(d)
	<-g.ready
	if g.auth != nil {
		g.mergeSigned(b)
		return
	}
	var st pb.PagesState
	if err := proto.Unmarshal(b, &st); err != nil {
		g.log.Warn("drop malformed yellow pages state", "err", err)
		return
	}
	now := g.cfg.Clock.Now()
	for _, r := range st.Entries {
		if r.Announcement == nil || r.AgeMs < 0 {
			continue
		}
		g.receive(now, now.Add(-time.Duration(r.AgeMs)*time.Millisecond), r.Announcement, nil, 0)
	}
}

// signedState is the push/pull state with signed announcements: each
// entry's envelope as its author signed it, its certificate attached.
func (g *Gossip) signedState(now time.Time) []byte {
	var entries []stateEntry
	for _, e := range g.Snapshot() {
		g.mu.Lock()
		s := g.sealed[e.Ann.NodeId]
		g.mu.Unlock()
		if s == nil {
			continue
		}
		entries = append(entries, stateEntry{ageMs: now.Sub(e.Seen).Milliseconds(), envelope: s.encode(g.auth.certificate(s.fp))})
	}
	return encodeState(entries)
}

func (g *Gossip) mergeSigned(b []byte) {
	entries, err := decodeState(b)
	if err != nil {
		g.rejected.Add(1)
		if g.cfg.Refusals != nil {
			g.cfg.Refusals.Refuse(refusalReason(err), "yellow pages state", err)
		}
		return
	}
	now := g.cfg.Clock.Now()
	for _, e := range entries {
		a, s, err := g.open(e.envelope)
		if err != nil {
			continue
		}
		g.receive(now, now.Add(-time.Duration(e.ageMs)*time.Millisecond), a, s, 0)
	}
}

// events forwards memberlist's failure detection to the yellow pages: a node
// memberlist declares dead is dropped before its TTL runs out.
type events Gossip

func (e *events) NotifyJoin(n *memberlist.Node) {
	g := (*Gossip)(e)
	c := g.noteMember(n)
	if n.Name == g.cfg.NodeID {
		return
	}
	// Tell the newcomer about us now rather than at the next refresh.
	go g.send(c, g.heldAnnouncement(true))
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	g := (*Gossip)(e)
	g.membersMu.Lock()
	delete(g.members, n.Name)
	g.live.Store(int64(len(g.members)))
	if n.Name != g.cfg.NodeID {
		if g.lost == nil {
			g.lost = map[string]lostMember{}
		}
		g.lost[n.Name] = lostMember{addr: n.Address(), since: g.cfg.Clock.Now()}
	}
	g.membersMu.Unlock()
	g.mu.Lock()
	_, had := g.pagesHas(g.cfg.Clock.Now(), n.Name)
	g.pages.Remove(g.cfg.Clock.Now(), n.Name, WhyGone)
	delete(g.sealed, n.Name)
	if g.cfg.Watch != nil {
		g.cfg.Watch.Removed(n.Name)
	}
	g.mu.Unlock()
	if had {
		g.log.Info("node left yellow pages", "peer", n.Name)
		if g.cfg.OnChange != nil {
			g.cfg.OnChange()
		}
	}
}

func (e *events) NotifyUpdate(n *memberlist.Node) { (*Gossip)(e).noteMember(n) }

// noteMember keeps a copy of n (called under memberlist's lock) and
// returns it.
func (g *Gossip) noteMember(n *memberlist.Node) *memberlist.Node {
	c := *n
	c.Meta = append([]byte(nil), n.Meta...)
	g.membersMu.Lock()
	if g.members == nil {
		g.members = map[string]memberlist.Node{}
	}
	g.members[c.Name] = c
	g.live.Store(int64(len(g.members)))
	delete(g.lost, c.Name)
	g.membersMu.Unlock()
	return &c
}

// memberCopies returns copies of the live members memberlist told us of.
func (g *Gossip) memberCopies() []*memberlist.Node {
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	out := make([]*memberlist.Node, 0, len(g.members))
	for _, n := range g.members {
		out = append(out, &n)
	}
	return out
}

// heldAnnouncement is this member's current announcement as the others
// hold it, with its certificate attached if withCert (for a member that
// may not know it).
func (g *Gossip) heldAnnouncement(withCert bool) []byte {
	g.mu.Lock()
	if g.auth != nil {
		s := g.sealed[g.cfg.NodeID]
		g.mu.Unlock()
		if s == nil {
			return nil
		}
		var cert []byte
		if withCert {
			cert = g.auth.certificate(s.fp)
		}
		return s.encode(cert)
	}
	var ann *pb.Announcement
	if e, ok := g.pages.entries[g.cfg.NodeID]; ok {
		ann = e.Ann // announcements are never mutated once applied
	}
	g.mu.Unlock()
	if ann == nil {
		return nil
	}
	b, _ := proto.Marshal(ann)
	return b
}

// askMissing asks live members whose entries this one lacks, or whose
// certificate it has not seen, for their announcements (planAsks).
func (g *Gossip) askMissing(now time.Time, live map[string]bool) {
	g.mu.Lock()
	var missing []string
	for id := range live {
		if _, ok := g.pagesHas(now, id); (!ok || g.wantCert[id]) && id != g.cfg.NodeID {
			missing = append(missing, id)
		}
	}
	clear(g.wantCert)
	g.mu.Unlock()
	rand.Shuffle(len(missing), func(i, j int) { missing[i], missing[j] = missing[j], missing[i] })
	if g.asking == nil {
		g.asking = map[string]*asking{}
	}
	ask := planAsks(now, missing, g.asking)
	if len(ask) == 0 {
		return
	}
	self := g.ml.LocalNode()
	msg := fmt.Appendf([]byte{msgWant}, "%s\x00%s", g.cfg.NodeID, self.FullAddress().Addr)
	g.membersMu.Lock()
	var to []memberlist.Node
	for _, id := range ask {
		if n, ok := g.members[id]; ok {
			to = append(to, n)
		}
	}
	g.membersMu.Unlock()
	for _, n := range to {
		if err := g.ml.SendBestEffort(&n, msg); err != nil {
			g.log.Debug("ask for an announcement", "peer", n.Name, "err", err)
		}
	}
}

// answerWant sends this member's announcement, certificate attached, to
// the member asker at addr that asked for it (msgWant), once per
// wantAnswerGap. An asker memberlist does not hold live here (this member
// missed its alive message, while the asker has this one's) is answered
// at its address all the same, and this member exchanges state with it,
// at most once per unknownAskerGap, to learn the members it missed.
func (g *Gossip) answerWant(now time.Time, asker, addr string) {
	if g.cfg.Announce == nil || asker == g.cfg.NodeID {
		return
	}
	host, portStr, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	ip := net.ParseIP(host)
	if err != nil || perr != nil || ip == nil {
		return
	}
	g.membersMu.Lock()
	_, known := g.members[asker]
	g.membersMu.Unlock()
	g.mu.Lock()
	if g.answered == nil || len(g.answered) > 4*maxForeign {
		g.answered = map[string]time.Time{}
	}
	if last, ok := g.answered[asker]; ok && now.Sub(last) < wantAnswerGap {
		g.mu.Unlock()
		return
	}
	g.answered[asker] = now
	exchange := !known && now.Sub(g.unknownAsker) >= unknownAskerGap
	if exchange {
		g.unknownAsker = now
	}
	g.mu.Unlock()
	to := &memberlist.Node{Name: asker, Addr: ip, Port: uint16(port)}
	// Not on memberlist's packet handler: a reliable send dials a stream.
	go g.send(to, g.heldAnnouncement(true))
	if exchange && !g.antiEntropy.Swap(true) {
		go func() {
			defer g.antiEntropy.Store(false)
			if _, err := g.ml.Join([]string{addr}); err != nil {
				g.log.Debug("state exchange with an unknown asker failed", "peer", asker, "err", err)
			}
		}()
	}
}
