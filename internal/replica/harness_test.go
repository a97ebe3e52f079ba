package replica

import (
	"cmp"
	"fmt"
	"maps"

	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
)

// service is a stand-alone service module: it executes writes and records
// the LSN atomically with them, so CHECK is "lsn <= lastLSN" (level 2/3) or
// "already seen (origin, seq)" (level 1).
type service struct {
	lastLSN LSN
	ops     []string // executed writes, in execution order
	seen    map[string]bool
}

func opName(e Entry) string { return fmt.Sprintf("%s/%d/%d:%s", e.Origin, e.ReqID, e.Seq, e.Body) }

// disk is what survives a crash.
type disk struct {
	hs      HardState
	log     []Entry
	applied LSN // lazily persisted executed marker (lags the service)
	base    map[ID]uint64
	conf    *ConfState
}

type delayed struct {
	m   Message
	due time.Time
}

type node struct {
	id   ID
	r    *Replica
	disk disk
	svc  service
	nApp int
	inc  int // incarnation: bumped by each crash
	// joinConf: the node hosts no replica until an append names it in
	// Members (a replica added while serving, config_test.go); then the
	// replica set it was created with.
	joinable bool
	joinConf *ConfState
}

// cluster runs replicas over a simulated network with explicit time; every
// choice comes from a seeded rand, so runs are reproducible.
type cluster struct {
	t      *testing.T
	rng    *rand.Rand
	now    time.Time
	cfg    Config
	order  []ID
	nodes  map[ID]*node
	net    []Message
	drop   float64
	nextID uint64

	// Faults (all seeded): dup is the chance a delivered message stays
	// queued for a second delivery; delay holds each sent message up to
	// that long (in later, ordered by due time) before it can be
	// delivered; blocked links drop what crosses them (partitions); a
	// paused node takes no input (no tick, no message) until its time,
	// then resumes with its old state; rate is a node's clock rate
	// against the global clock (1 by default), within ClockDrift.
	dup   float64
	delay time.Duration
	// bulk holds every message that carries entries that long (large
	// bodies take a while on the wire), while the others travel at once
	// (the shell's control lane).
	bulk time.Duration
	// entriesTo counts the entries sent to each replica (resends too).
	entriesTo map[ID]int
	later     []delayed
	blocked   map[[2]ID]bool
	paused    map[ID]time.Time
	rate      map[ID]float64
	t0        time.Time
	// silentSince is when each link (from, to) fell silent (blocked, or
	// from paused); after AckTimeout the recipient's failure detector
	// reports the sender dead, as the shell's does, until it is heard.
	silentSince map[[2]ID]time.Time

	// Checkers run at every step: never two replicas that both believe
	// they hold a valid lease at one global instant; at level 3 a leased
	// primary's VersionAgo is at least the highest commit x ago
	// (commits is the global timeline of the highest commit point).
	commits    []check.Point
	leaseFails int
	staleFails int
	// freshSeen counts checks of a secondary that showed itself fresh
	// (so a test can tell the freshness checker ran on something).
	freshSeen int

	acked     map[uint64]LSN // ReqID -> LSN of writes acknowledged to clients
	replied   map[uint64]bool
	failed    map[uint64]error
	canonical map[LSN]string    // level 2/3: the one write executed at each LSN
	primaries map[Epoch]ID      // at most one primary per epoch
	prop      map[uint64]string // ReqID -> op body
	origin    map[uint64][2]int // ReqID -> (node index, incarnation)
	// fatalf reports a broken invariant (t.Fatalf unless a test counts them).
	fatalf func(format string, args ...any)

	// snaps are snapshots in flight (the shell's stream), delivered after
	// the queued messages unless holdSnaps; installed counts installs.
	snaps     []snapshot
	holdSnaps bool
	installed int
	// wipes lets runSchedule also wipe a replica's data (a lost data
	// directory), when every replica serves, so that two wipes never
	// take the only copies of a write.
	wipes int
	// members, if set, are the replicas checkConverged compares (the
	// final replica set after changes).
	members []ID
}

// snapshot is a primary's service state in transfer to a follower.
type snapshot struct {
	from, to      ID
	epoch         Epoch
	lsn           LSN
	lsnEpoch      Epoch
	svc           service
	fromIncarnate int
	conf          ConfState
}

func (s service) clone() service {
	return service{lastLSN: s.lastLSN, ops: slices.Clone(s.ops), seen: maps.Clone(s.seen)}
}

func newCluster(t *testing.T, seed uint64, level Level, prios []int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, rng: rand.New(rand.NewPCG(seed, 7)), now: time.Unix(1000, 0), nodes: map[ID]*node{},
		blocked: map[[2]ID]bool{}, paused: map[ID]time.Time{}, rate: map[ID]float64{}, silentSince: map[[2]ID]time.Time{},
		acked: map[uint64]LSN{}, replied: map[uint64]bool{}, failed: map[uint64]error{},
		canonical: map[LSN]string{}, primaries: map[Epoch]ID{}, prop: map[uint64]string{}, origin: map[uint64][2]int{}}
	c.fatalf = t.Fatalf
	for i, p := range prios {
		id := ID(string(rune('a' + i)))
		c.order = append(c.order, id)
		c.cfg.Replicas = append(c.cfg.Replicas, Peer{ID: id, Priority: p})
	}
	c.cfg.Level = level
	c.cfg.Heartbeat = 20 * time.Millisecond
	c.cfg.AckTimeout = 200 * time.Millisecond
	c.cfg.ElectionTimeout = 100 * time.Millisecond
	c.cfg.WriteWait = 300 * time.Millisecond
	c.cfg.Lease = 150 * time.Millisecond
	c.cfg.Staleness = 100 * time.Millisecond
	c.cfg.MaxBatch = 8
	if tweak != nil {
		tweak(&c.cfg)
	}
	c.t0 = c.now
	for _, id := range c.order {
		n := &node{id: id, svc: service{seen: map[string]bool{}}}
		c.nodes[id] = n
		c.start(n)
	}
	return c
}

func (c *cluster) start(n *node) {
	c.t.Helper()
	cfg := c.cfg
	cfg.ID = n.id
	rs := Restore{HardState: n.disk.hs, Entries: slices.Clone(n.disk.log), Applied: n.disk.applied, Base: maps.Clone(n.disk.base), ConfState: n.disk.conf}
	if n.joinConf != nil {
		cfg.Replicas = n.joinConf.Members
		if rs.ConfState == nil {
			rs.ConfState = n.joinConf
		}
	}
	r, err := New(cfg, rs)
	if err != nil {
		c.t.Fatalf("restart %s: %v", n.id, err)
	}
	n.r = r
	delete(c.paused, n.id)
	for _, o := range c.nodes {
		if o.r != nil && o != n {
			o.r.SetAlive(n.id, true)
		}
		if o.r == nil {
			r.SetAlive(o.id, false)
		}
	}
	c.process(n)
}

func (c *cluster) crash(id ID) {
	n := c.nodes[id]
	n.r = nil
	n.inc++
	for _, o := range c.nodes {
		if o.r != nil {
			o.r.SetAlive(id, false)
		}
	}
}

func (c *cluster) up() []ID {
	var ids []ID
	for _, id := range c.order {
		if n := c.nodes[id]; n != nil && n.r != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// process runs the shell loop for n until it has no more work.
func (c *cluster) process(n *node) {
	c.t.Helper()
	for {
		rd := n.r.Ready()
		if rd.Empty() {
			n.r.Advance(rd)
			c.checkLeases()
			return
		}
		if rd.Installed != nil {
			n.disk.log, n.disk.applied = nil, rd.Installed.LSN
		}
		if rd.ConfState != nil {
			cs := *rd.ConfState
			n.disk.conf = &cs
		}
		if rd.HardState != nil {
			n.disk.hs = *rd.HardState
		}
		if len(rd.Entries) > 0 {
			at := rd.Entries[0].LSN
			i := 0
			for i < len(n.disk.log) && n.disk.log[i].LSN < at {
				i++
			}
			n.disk.log = append(n.disk.log[:i:i], rd.Entries...)
		}
		if rd.TruncateBase != nil {
			n.disk.base = maps.Clone(rd.TruncateBase)
		}
		if t := min(rd.Truncate, n.disk.applied); t > 0 {
			i := 0
			for i < len(n.disk.log) && n.disk.log[i].LSN <= t {
				i++
			}
			n.disk.log = slices.Clone(n.disk.log[i:])
		}
		for _, e := range rd.Check {
			n.r.Checked(e.LSN, c.completed(n, e))
		}
		for _, e := range rd.Apply {
			c.execute(n, e)
		}
		for _, to := range rd.Snapshots {
			// The shell snapshots the service as it is after this batch's
			// writes: it covers everything executed.
			l := n.svc.lastLSN
			c.snaps = append(c.snaps, snapshot{from: n.id, to: to, epoch: n.r.epoch, lsn: l, lsnEpoch: n.r.term(l),
				svc: n.svc.clone(), fromIncarnate: n.inc, conf: n.r.Committed()})
		}
		c.post(rd.Messages)
		for _, rp := range rd.Replies {
			c.reply(n, rp)
		}
		n.r.Advance(rd)
		if s := n.r.Status(); s.Role == Primary {
			if p, ok := c.primaries[s.Epoch]; ok && p != n.id {
				c.fatalf("two primaries in epoch %d: %s and %s", s.Epoch, p, n.id)
			}
			c.primaries[s.Epoch] = n.id
		}
	}
}

// local is node id's clock at the global time t.
func (c *cluster) local(id ID, t time.Time) time.Time {
	rate, ok := c.rate[id]
	if !ok {
		return t
	}
	return c.t0.Add(time.Duration(float64(t.Sub(c.t0)) * rate))
}

// global is the global time at which node id's clock reads t.
func (c *cluster) global(id ID, t time.Time) time.Time {
	rate, ok := c.rate[id]
	if !ok {
		return t
	}
	return c.t0.Add(time.Duration(float64(t.Sub(c.t0)) / rate))
}

// post queues sent messages, through the delay line if one is set.
func (c *cluster) post(ms []Message) {
	for _, m := range ms {
		if m.Type == MsgAppend && len(m.Entries) > 0 {
			if c.entriesTo == nil {
				c.entriesTo = map[ID]int{}
			}
			c.entriesTo[m.To] += len(m.Entries)
		}
	}
	if c.bulk > 0 {
		for _, m := range ms {
			if len(m.Entries) > 0 {
				c.later = append(c.later, delayed{m: m, due: c.now.Add(c.bulk)})
			} else {
				c.net = append(c.net, m)
			}
		}
		return
	}
	if c.delay <= 0 {
		c.net = append(c.net, ms...)
		return
	}
	for _, m := range ms {
		c.later = append(c.later, delayed{m: m, due: c.now.Add(time.Duration(c.rng.Int64N(int64(c.delay))))})
	}
}

// release moves the messages whose delay is over to the network, in
// order of due time (messages sent together may arrive reordered).
func (c *cluster) release() {
	slices.SortStableFunc(c.later, func(a, b delayed) int { return a.due.Compare(b.due) })
	i := 0
	for i < len(c.later) && !c.later[i].due.After(c.now) {
		c.net = append(c.net, c.later[i].m)
		i++
	}
	c.later = slices.Delete(c.later, 0, i)
}

// checkLeases runs the lease and staleness checkers at this instant.
func (c *cluster) checkLeases() {
	var holders []ID
	maxCommit := LSN(0)
	for _, id := range c.up() {
		r := c.nodes[id].r // (what Status reports, without its allocations)
		// (A diverged commit point is from a history a forced promote
		// discarded: it is no commit of the partition's.)
		if !r.diverged {
			maxCommit = max(maxCommit, r.commit)
		}
		if _, p := c.paused[id]; p || r.role != Primary {
			continue
		}
		if until := r.leaseUntil(); !until.IsZero() && c.local(id, c.now).Before(until) {
			holders = append(holders, id)
		}
	}
	if n := len(c.commits); n == 0 || uint64(maxCommit) > c.commits[n-1].Version {
		c.commits = append(c.commits, check.Point{At: c.now, Version: uint64(maxCommit)})
	}
	if len(holders) > 1 {
		c.leaseFails++
		c.fatalf("two leases at %v: %v", c.now.Sub(c.t0), holders)
		return
	}
	// A secondary that shows itself fresh (FreshUntil) has executed every
	// commit older than x, as the primary's VersionAgo promises.
	for _, id := range c.up() {
		r := c.nodes[id].r
		if _, p := c.paused[id]; p || r.role != Secondary || !c.local(id, c.now).Before(r.freshUntil()) {
			continue
		}
		cut := c.global(id, c.nodes[id].r.now).Add(-time.Duration(float64(c.cfg.Staleness) / cmp.Or(c.rate[id], 1)))
		want := LSN(0)
		for _, p := range c.commits {
			if !p.At.After(cut) {
				want = LSN(p.Version)
			}
		}
		c.freshSeen++
		if r.applied < want {
			c.staleFails++
			c.fatalf("secondary %s shows itself fresh until %v at version %d, but %d was committed %v ago",
				id, r.freshUntil().Sub(c.t0), r.applied, want, c.cfg.Staleness)
		}
	}
	if len(holders) == 1 && c.cfg.Level == Level3 {
		id := holders[0]
		s := c.nodes[id].r.Status()
		// Status is as of the replica's last input; x of its clock back
		// from then, in global time.
		cut := c.global(id, c.nodes[id].r.now).Add(-time.Duration(float64(c.cfg.Staleness) / cmp.Or(c.rate[id], 1)))
		want := LSN(0)
		for _, p := range c.commits {
			if !p.At.After(cut) {
				want = LSN(p.Version)
			}
		}
		if s.VersionAgo < want {
			c.staleFails++
			c.fatalf("leased primary %s publishes VersionAgo %d, but %d was committed %v ago", id, s.VersionAgo, want, c.cfg.Staleness)
		}
	}
}

// isolate blocks every link between the groups (each listed node is in
// the group its index says; unlisted nodes keep every link).
func (c *cluster) split(groups ...[]ID) {
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					c.blocked[[2]ID{a, b}] = true
				}
			}
		}
	}
}

func (c *cluster) heal() { clear(c.blocked) }

// detect plays the shell's failure detector for partitions and pauses:
// a peer silent for AckTimeout is reported dead, and alive again once its
// link works (crashes are reported at once by crash and start).
func (c *cluster) detect() {
	if len(c.blocked) == 0 && len(c.paused) == 0 && len(c.silentSince) == 0 {
		return
	}
	for _, from := range c.order {
		for _, to := range c.order {
			if from == to || c.nodes[to].r == nil {
				continue
			}
			key := [2]ID{from, to}
			_, paused := c.paused[from]
			since, was := c.silentSince[key]
			switch {
			case c.blocked[key] || paused:
				if !was {
					c.silentSince[key] = c.now
				} else if c.now.Sub(since) >= c.cfg.AckTimeout {
					c.nodes[to].r.SetAlive(from, false)
				}
			case was:
				delete(c.silentSince, key)
				c.nodes[to].r.SetAlive(from, c.nodes[from].r != nil)
			}
		}
	}
}

// pause stops id taking any input for d.
func (c *cluster) pause(id ID, d time.Duration) { c.paused[id] = c.now.Add(d) }

func (c *cluster) isPaused(id ID) bool {
	until, ok := c.paused[id]
	if ok && !c.now.Before(until) {
		delete(c.paused, id)
		return false
	}
	return ok
}

func (c *cluster) completed(n *node, e Entry) bool {
	if c.cfg.Level == Level1 {
		return n.svc.seen[opName(e)]
	}
	return e.LSN <= n.svc.lastLSN
}

func (c *cluster) execute(n *node, e Entry) {
	c.t.Helper()
	if c.cfg.Level == Level1 {
		if n.svc.seen[opName(e)] {
			c.fatalf("%s executed %s twice", n.id, opName(e))
		}
	} else {
		if e.LSN <= n.svc.lastLSN {
			c.fatalf("%s executed LSN %d after %d: out of order or twice", n.id, e.LSN, n.svc.lastLSN)
		}
		if op, ok := c.canonical[e.LSN]; ok && op != opName(e) {
			c.fatalf("%s executed %q at LSN %d, another replica %q", n.id, opName(e), e.LSN, op)
		}
		c.canonical[e.LSN] = opName(e)
	}
	n.svc.lastLSN = e.LSN
	if e.Method != "" {
		n.svc.ops = append(n.svc.ops, opName(e))
		n.svc.seen[opName(e)] = true
	}
	n.nApp++
	if n.nApp%3 == 0 { // the executed marker is persisted lazily; CHECK covers the gap
		n.disk.applied = e.LSN
	}
}

func (c *cluster) reply(n *node, rp Reply) {
	c.t.Helper()
	if c.replied[rp.ReqID] {
		c.fatalf("request %d answered twice", rp.ReqID)
	}
	c.replied[rp.ReqID] = true
	if rp.Err != nil {
		if !Retryable(rp.Err) {
			c.fatalf("request %d: non-retryable %v", rp.ReqID, rp.Err)
		}
		c.failed[rp.ReqID] = rp.Err
		return
	}
	c.acked[rp.ReqID] = rp.LSN
}

// write submits a client write at node id and returns its ReqID.
func (c *cluster) write(id ID) uint64 {
	c.nextID++
	body := fmt.Sprintf("w%d", c.nextID)
	c.prop[c.nextID] = body
	n := c.nodes[id]
	c.origin[c.nextID] = [2]int{slices.Index(c.order, id), n.inc}
	n.r.Propose(c.local(id, c.now), Write{ReqID: c.nextID, Method: "put", Body: []byte(body)})
	c.process(n)
	return c.nextID
}

// deliver delivers (or drops, or duplicates) message i of the network
// queue. A message to a paused node stays queued.
func (c *cluster) deliver(i int) {
	m := c.net[i]
	if c.isPaused(m.To) {
		return
	}
	c.net = slices.Delete(c.net, i, i+1)
	n := c.nodes[m.To]
	if n.r == nil && n.joinable && hasMember(m.Members, m.To) && c.nodes[m.From].r != nil {
		// The node's shell creates the replica the append names it in.
		n.joinable, n.joinConf = false, &ConfState{LSN: m.MembersAt, Members: m.Members}
		c.start(n)
	}
	if n.r == nil || c.nodes[m.From].r == nil || c.blocked[[2]ID{m.From, m.To}] || (c.drop > 0 && c.rng.Float64() < c.drop) {
		return
	}
	if c.dup > 0 && c.rng.Float64() < c.dup {
		c.net = append(c.net, m)
	}
	n.r.Step(c.local(m.To, c.now), m)
	c.process(n)
}

// deliverSnap delivers (or loses) snapshot i: the follower's shell asks
// its replica whether it wants it, restores the service and installs it;
// a lost or refused one is reported to the primary.
func (c *cluster) deliverSnap(i int) {
	c.t.Helper()
	s := c.snaps[i]
	c.snaps = slices.Delete(c.snaps, i, i+1)
	n, src := c.nodes[s.to], c.nodes[s.from]
	ok := n.r != nil && !c.isPaused(s.to) && !c.blocked[[2]ID{s.from, s.to}] && !(c.drop > 0 && c.rng.Float64() < c.drop)
	if ok && n.r.WantsSnapshot(s.from, s.epoch, s.lsn) {
		n.svc = s.svc.clone()
		n.r.InstallSnapshot(c.local(s.to, c.now), s.lsn, s.lsnEpoch, &s.conf)
		c.installed++
		c.process(n)
		return
	}
	if src.r != nil && src.inc == s.fromIncarnate && !c.isPaused(s.from) {
		src.r.SnapshotFailed(s.to)
		c.process(src)
	}
}

// deliverable is the index of the first queued message that can be
// delivered now (-1: none).
func (c *cluster) deliverable() int {
	for i, m := range c.net {
		if !c.isPaused(m.To) {
			return i
		}
	}
	return -1
}

// flush delivers every queued message in FIFO order, including ones sent
// while flushing (messages to paused nodes wait).
func (c *cluster) flush() {
	c.t.Helper()
	for i := 0; ; i++ {
		j := c.deliverable()
		if j < 0 && len(c.snaps) > 0 && !c.holdSnaps {
			c.deliverSnap(0)
			continue
		}
		if j < 0 {
			return
		}
		if i > 100000 {
			m := c.net[0]
			for _, id := range []ID{m.From, m.To} {
				if r := c.nodes[id].r; r != nil {
					c.t.Logf("%s: %+v first %d stable %d truncated %d handed %d", id, r.Status(), r.first, r.stable, r.truncated, r.handed)
					if r.role == Primary {
						for p, pr := range r.progress {
							c.t.Logf("  progress %s: %+v", p, *pr)
						}
					}
				}
			}
			c.fatalf("messages never quiesce, e.g. %+v", c.net[0])
		}
		c.deliver(j)
	}
}

func (c *cluster) tick(d time.Duration) {
	c.now = c.now.Add(d)
	c.release()
	c.detect()
	for _, id := range c.up() {
		if c.isPaused(id) {
			continue
		}
		n := c.nodes[id]
		n.r.Tick(c.local(id, c.now))
		c.process(n)
	}
	c.checkLeases()
}

// settle ticks and flushes for d of simulated time.
func (c *cluster) settle(d time.Duration) {
	for end := c.now.Add(d); c.now.Before(end); {
		c.tick(10 * time.Millisecond)
		c.flush()
	}
}

// primary is the primary a client would find: the one in the highest
// epoch (a deposed one may not know it yet).
func (c *cluster) primary() ID {
	best := ID("")
	for _, id := range c.up() {
		if s := c.nodes[id].r.Status(); s.Role == Primary && (best == "" || s.Epoch > c.nodes[best].r.Status().Epoch) {
			best = id
		}
	}
	return best
}

// checkAnswered asserts that every write whose origin did not crash since
// got an answer.
func (c *cluster) checkAnswered() {
	c.t.Helper()
	for req := uint64(1); req <= c.nextID; req++ {
		o := c.origin[req]
		if !c.replied[req] && c.nodes[c.order[o[0]]].inc == o[1] {
			c.fatalf("write %d at %s never answered", req, c.order[o[0]])
		}
	}
}

// checkConverged asserts identical service state on every replica and that
// every acknowledged write is present everywhere, using the history checker.
func (c *cluster) checkConverged() {
	c.t.Helper()
	digests := map[string]string{}
	present := map[string]map[string]bool{}
	ids := c.order
	if c.members != nil {
		ids = c.members
	}
	for _, id := range ids {
		ops := slices.Clone(c.nodes[id].svc.ops)
		if c.cfg.Level == Level1 {
			slices.Sort(ops) // commutative writes: order may differ
		}
		digests[string(id)] = strings.Join(ops, ",")
		present[string(id)] = map[string]bool{}
		for _, op := range ops {
			present[string(id)][op[strings.IndexByte(op, ':')+1:]] = true
		}
	}
	var acked []string
	for req := range c.acked {
		acked = append(acked, c.prop[req])
	}
	slices.Sort(acked)
	if vs := append(check.Convergence(digests), check.Durability(acked, present)...); len(vs) > 0 {
		c.fatalf("%d violations, first: %v", len(vs), vs[0])
	}
}

func (c *cluster) has(id ID, req uint64) bool {
	suffix := ":" + c.prop[req]
	for _, op := range c.nodes[id].svc.ops {
		if strings.HasSuffix(op, suffix) {
			return true
		}
	}
	return false
}

// runSchedule drives c through a seeded random schedule of writes, message
// reorderings and drops, ticks, crashes and restarts, then heals everything
// and checks the invariants.
func runSchedule(c *cluster, level Level, steps int) {
	c.drop = 0.1
	for i := range steps {
		if c.wipes > 0 && i%250 == 249 {
			c.wipeOne()
		}
		switch x := c.rng.IntN(100); {
		case x < 45 && len(c.snaps) > 0 && c.rng.IntN(8) == 0:
			c.deliverSnap(c.rng.IntN(len(c.snaps)))
		case x < 45 && len(c.net) > 0:
			c.deliver(c.rng.IntN(len(c.net)))
		case x < 70:
			c.tick(time.Duration(5+c.rng.IntN(20)) * time.Millisecond)
		case x < 93:
			if p := c.primary(); p != "" && c.rng.IntN(10) < 7 {
				c.write(p) // a client that follows redirects
			} else if up := c.up(); len(up) > 0 {
				c.write(up[c.rng.IntN(len(up))])
			}
		case x < 95:
			if up := c.up(); len(up) > 1 {
				c.crash(up[c.rng.IntN(len(up))])
			}
		default:
			for _, id := range c.order {
				if c.nodes[id].r == nil {
					c.start(c.nodes[id])
					break
				}
			}
		}
	}
	for _, id := range c.order {
		if c.nodes[id].r == nil {
			c.start(c.nodes[id])
		}
	}
	c.drop = 0
	c.settle(3 * time.Second)
	final := c.write(c.up()[0])
	c.settle(time.Second)
	if _, ok := c.acked[final]; !ok && level != Level1 {
		// The write went to a secondary: redirect like a client.
		if c.primary() == "" {
			for _, id := range c.order {
				r := c.nodes[id].r
				c.t.Logf("%s: %+v vote %q electing %v alive %v", id, r.Status(), r.vote, r.electing, r.alive)
			}
			c.fatalf("no primary after healing")
		}
		final = c.write(c.primary())
		c.settle(time.Second)
	}
	if _, ok := c.acked[final]; !ok {
		c.fatalf("write after healing not acknowledged: %v", c.failed[final])
	}
	c.checkConverged()
	c.checkAnswered()
}

// wipeOne restarts crashed replicas, lets the cluster heal and, once
// every replica serves (so every acknowledged write is on each), wipes
// one replica's data; the schedule then goes on, with whatever was in
// flight (snapshots included) still queued.
func (c *cluster) wipeOne() {
	for _, id := range c.order {
		if c.nodes[id].r == nil {
			c.start(c.nodes[id])
		}
	}
	drop := c.drop
	c.drop = 0
	for range 20 {
		if c.allServing() {
			break
		}
		c.tick(10 * time.Millisecond)
		c.deliverSome(50)
	}
	c.drop = drop
	if c.allServing() {
		c.wipes--
		c.wipe(c.order[c.rng.IntN(len(c.order))])
	}
}

// deliverSome delivers up to n queued messages in random order.
func (c *cluster) deliverSome(n int) {
	for range n {
		if len(c.net) == 0 {
			return
		}
		c.deliver(c.rng.IntN(len(c.net)))
	}
}

// TestRandomized drives clusters through seeded random schedules of writes,
// message reorderings and drops, ticks, crashes and restarts, then heals
// everything and checks: one primary per epoch, one write per LSN on every
// replica, nothing executed twice, identical final state, and every
// acknowledged write present on every replica.
func TestRandomized(t *testing.T) {
	seeds := 10
	steps := 1500
	if testing.Short() {
		seeds, steps = 4, 600
	}
	for _, level := range []Level{Level1, Level2, Level3} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("L%d/seed%d", level, seed), func(t *testing.T) {
				prios := []int{3, 2, 1}
				if seed%3 == 1 {
					prios = []int{1, 5, 3, 2, 4}
				}
				c := newCluster(t, seed, level, prios, nil)
				runSchedule(c, level, steps)
				kinds := map[string]int{}
				for _, err := range c.failed {
					kinds[err.Error()[:min(18, len(err.Error()))]]++
				}
				t.Logf("acked %d failed %v epochs %d applied %d unanswered %d", len(c.acked), kinds, len(c.primaries), c.nodes["a"].svc.lastLSN, int(c.nextID)-len(c.replied))
				if len(c.acked) == 0 {
					t.Fatal("no write was acknowledged")
				}
			})
		}
	}
}

type violation string

// TestPaperModeIsUnsafeWithLoss runs the same schedules with MinLive=1 (the
// paper's rule: the primary drops any replica that misses an ack deadline and
// may end up committing alone) and with the default majority floor. With
// message loss, which the paper rules out, paper mode must break an
// invariant in some schedule, while the floor keeps every schedule correct.
func TestPaperModeIsUnsafeWithLoss(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 10
	}
	count := func(minLive int) int {
		bad := 0
		for seed := range uint64(seeds) {
			func() {
				c := newCluster(t, seed, Level2, []int{3, 2, 1}, func(cfg *Config) { cfg.MinLive = minLive })
				c.fatalf = func(format string, args ...any) { panic(violation(fmt.Sprintf(format, args...))) }
				defer func() {
					if v := recover(); v != nil {
						if _, ok := v.(violation); !ok {
							panic(v)
						}
						bad++
					}
				}()
				runSchedule(c, Level2, 800)
			}()
		}
		return bad
	}
	paper, floor := count(1), count(0)
	t.Logf("schedules breaking an invariant: paper mode (MinLive=1) %d of %d, majority floor %d of %d", paper, seeds, floor, seeds)
	if floor != 0 || paper == 0 {
		t.Fatalf("paper mode %d, majority floor %d violating schedules; want >0 and 0", paper, floor)
	}
}
