package rebalance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/placement"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// How often the controller looks at the yellow pages (reading them costs
// nothing, and the planner itself bounds how fast anything changes), and
// how long one change may take (adding a replica waits until it caught
// up, which ships the partition's state).
const (
	DefaultPoll          = time.Second
	DefaultChangeTimeout = 10 * time.Minute
)

// Source gives the cluster as this node's yellow pages show it.
type Source interface {
	View() View
}

// Changer carries out one replica-set change at node, the partition's
// primary, and returns once it committed (as `neptune partition
// add|remove` does).
type Changer interface {
	ChangeReplicas(ctx context.Context, node string, req *pb.ChangeReplicasRequest) error
}

// Controller runs the planner when this node is the actor and carries
// out its changes, each in its own goroutine, one per partition at most.
type Controller struct {
	cfg      placement.Config
	poll     time.Duration // DefaultPoll; tests shorten it
	changeTO time.Duration // DefaultChangeTimeout
	self     string
	services []Service
	src      Source
	changer  Changer
	clock    clock.Clock
	log      *slog.Logger

	mu        sync.Mutex
	pending   map[Key]pending
	lastStart time.Time
	// shape is the cluster as last seen (live nodes, each partition's
	// primary and replica set) and calmSince since when it has not
	// changed: rebalancing waits for Interval of calm (see Round).
	shape     string
	calmSince time.Time
	// moving are the partitions this actor added a replica to and has not
	// removed one from since: their surplus replica is its own move's.
	moving map[Key]bool
	mem    Memory
	wg     sync.WaitGroup
	stop   chan struct{}
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
}

// pending is a change under way and how to stop waiting for it.
type pending struct {
	placement.Change
	cancel context.CancelFunc
}

// New creates a controller for node self placing services.
func New(cfg placement.Config, self string, services []Service, src Source, changer Changer, clk clock.Clock, log *slog.Logger) *Controller {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Controller{cfg: cfg, poll: DefaultPoll, changeTO: DefaultChangeTimeout, self: self, services: services, src: src, changer: changer, clock: clock.OrReal(clk),
		log: log.With("component", "placement"), pending: map[Key]pending{}, mem: Memory{}, moving: map[Key]bool{},
		stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Start runs the controller until Stop.
func (c *Controller) Start() {
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-c.clock.After(c.poll):
			}
			c.Round(c.clock.Now())
		}
	}()
}

// SetConfig changes what may change while the controller runs (an
// operator's SIGHUP): Off and the planner's settings. Changes under way
// go on.
func (c *Controller) SetConfig(cfg placement.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
}

// Stop ends the controller and the changes under way (a change asked
// for may still complete at its primary).
func (c *Controller) Stop() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	c.cancel()
	c.wg.Wait()
}

// Round looks at the cluster once at now and, for the services this
// node is the actor of, starts the planned changes that are not already under way. It
// returns the changes it started.
func (c *Controller) Round(now time.Time) []placement.Change {
	c.mu.Lock()
	off := c.cfg.Off
	c.mu.Unlock()
	if off {
		return nil
	}
	v := c.src.View()
	mine := slices.DeleteFunc(slices.Clone(c.services), func(s Service) bool { return Actor(v, s) != c.self })
	if len(mine) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// An add waits until the new replica caught up, which never happens
	// if its node died: stop waiting, so the planner can abandon it.
	for _, p := range c.pending {
		if p.Kind == placement.Add && !slices.ContainsFunc(v.Live, func(a *pb.Announcement) bool { return a.NodeId == p.Node }) {
			p.cancel()
		}
	}
	st, parts := Observe(now, v, mine, c.mem)
	// A change asked for shows in the yellow pages only once its primary
	// announces it: count an add under way as joining meanwhile, so the
	// planner's MaxInFlight holds.
	for i := range st.Partitions {
		p := &st.Partitions[i]
		if ch, ok := c.pending[Key{p.Service, p.Partition}]; ok && ch.Kind == placement.Add && !slices.Contains(p.Replicas, ch.Node) {
			p.Replicas = append(p.Replicas, ch.Node)
			p.Joining = append(p.Joining, ch.Node)
		}
	}
	// Rebalancing waits until the cluster kept its shape for Interval: a
	// failover or a restart moves primaries for a few seconds (priority
	// hands them back), and a node just joined may still be opening its
	// replicas; rebalancing on that transient would fight it.
	if sh := shape(st); sh != c.shape {
		c.shape, c.calmSince = sh, now
	}
	st.LastStart = c.lastStart
	if c.calmSince.After(st.LastStart) {
		st.LastStart = c.calmSince
	}
	var started []placement.Change
	for _, ch := range placement.Plan(now, st, c.cfg) {
		k := Key{ch.Service, ch.Partition}
		if _, busy := c.pending[k]; busy {
			continue
		}
		i := slices.IndexFunc(st.Partitions, func(p placement.Partition) bool { return p.Service == k.Service && p.Partition == k.Partition })
		primary := st.Partitions[i].Primary
		if primary == "" {
			continue // no primary to order it now; planned again next round
		}
		// A surplus replica this actor did not add is an operator's move
		// under way (`partition move` adds, then removes): it is left
		// alone until the cluster was calm for Interval.
		if ch.Surplus && !c.moving[k] && now.Sub(c.calmSince) < c.interval() {
			continue
		}
		switch ch.Kind {
		case placement.Add:
			c.moving[k] = true
		case placement.Remove:
			delete(c.moving, k)
		}
		req := request(ch, parts[k].Members)
		if ch.Rebalance {
			c.lastStart = now
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.changeTO)
		c.pending[k] = pending{ch, cancel}
		started = append(started, ch)
		c.log.Info("placement change", "change", ch.String(), "primary", primary)
		c.wg.Add(1)
		go c.execute(ctx, k, ch, primary, req)
	}
	return started
}

// execute carries ch out at primary and forgets it when done.
func (c *Controller) execute(ctx context.Context, k Key, ch placement.Change, primary string, req *pb.ChangeReplicasRequest) {
	defer c.wg.Done()
	start := c.clock.Now()
	err := c.changer.ChangeReplicas(ctx, primary, req)
	c.mu.Lock()
	c.pending[k].cancel()
	delete(c.pending, k)
	c.mu.Unlock()
	if errors.Is(err, context.Canceled) {
		c.log.Info("placement change no longer waited for", "change", ch.String())
		return
	}
	if err != nil {
		c.log.Warn("placement change failed; planned again next round", "change", ch.String(), "err", err)
		return
	}
	c.log.Info("placement change done", "change", ch.String(), "took", c.clock.Since(start).Round(time.Millisecond))
}

// Pending is how many changes are under way.
func (c *Controller) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

func (c *Controller) interval() time.Duration {
	if c.cfg.Interval > 0 {
		return c.cfg.Interval
	}
	return placement.DefaultInterval
}

// shape is what rebalancing waits to see stable: the live nodes and each
// partition's primary, replicas and joining replicas.
func shape(st placement.State) string {
	var live []string
	for _, n := range st.Nodes {
		if n.Alive {
			live = append(live, n.ID)
		}
	}
	slices.Sort(live)
	var b strings.Builder
	fmt.Fprintln(&b, live)
	for _, p := range st.Partitions {
		fmt.Fprintln(&b, p.Service, p.Partition, p.Primary, slices.Sorted(slices.Values(p.Replicas)), slices.Sorted(slices.Values(p.Joining)))
	}
	return b.String()
}

// request is ch as a ChangeReplicas request against members, the
// replica set it was planned from: a new replica takes the priority of
// the one it replaces (1 if none); a hand-off raises the new primary's
// priority above every other member's.
func request(ch placement.Change, members []*pb.ReplicaPeer) *pb.ChangeReplicasRequest {
	req := &pb.ChangeReplicasRequest{Service: ch.Service, Partition: ch.Partition, Expect: make([]string, 0, len(members))}
	top, prio := int32(0), map[string]int32{}
	for _, m := range members {
		req.Expect = append(req.Expect, m.Id)
		prio[m.Id] = m.Priority
		top = max(top, m.Priority)
	}
	switch ch.Kind {
	case placement.Add:
		req.Add, req.Priority = ch.Node, max(prio[ch.From], 1)
	case placement.Remove:
		req.Remove = ch.Node
	case placement.Lead:
		req.Add, req.Priority, req.SetPriority = ch.Node, top+1, true
	default:
		panic(fmt.Sprintf("rebalance: unknown change kind %v", ch.Kind))
	}
	return req
}
