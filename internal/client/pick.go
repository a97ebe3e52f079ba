package client

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// balancer is one service's balancing state: its policy (the client's,
// or the service's own from Config.ServiceBalance) with the config that
// built it, which replicas answer polls and when its push subscriptions
// need renewing. Policies are not safe for concurrent use; mu is held
// around each use but never across a poll.
type balancer struct {
	mu     sync.Mutex
	cfg    balance.Config // read-only
	policy balance.Policy
	health *membership.PollHealth
	// renew is when each subscription (Plan.Subscribe) is next sent.
	renew transport.Renewals[subKey]
}

// subKey is one push subscription of a balancer.
type subKey struct {
	replica   string
	partition int32
	class     string
}

// pushLease is how long a push subscription lasts.
const pushLease = transport.SubscribeLease

// pick chooses the replica for one attempt of r, reading forward:
//
//  1. one yellow-pages lookup: the live replicas and the method's
//     declaration (r.resolve turns a wrong call into its precise error);
//  2. the client's lock, once: the partition's replica view and the
//     service's balancer;
//  3. replication's rules (view.go): a level-2/3 write goes straight to
//     the primary, recovering replicas are no candidates;
//  4. the policy: replicas that keep missing polls are skipped, the
//     policy plans its polls, the poller asks them, replication keeps the
//     fresh enough answers, the policy chooses. Probes (an async policy's)
//     are sent without waiting; their answers serve later calls. A call
//     with an affinity key (WithAffinity) asks an Affine policy's
//     PlanKey and ChooseKey instead.
func (c *Client) pick(ctx context.Context, r *request) (target, error) {
	t, err := c.choose(ctx, r)
	if err == nil {
		c.metrics.choices.WithLabelValues(r.in.Service, t.Node).Inc()
	}
	return t, err
}

// choose is pick without the count of choices.
func (c *Client) choose(ctx context.Context, r *request) (target, error) {
	in := r.in
	look := c.gossip.Lookup(in.Service, in.Partition, in.Method)
	if err := r.resolve(look); err != nil {
		if len(look.Replicas) == 0 {
			// Nothing to call: if the gossip refused nodes hosting the
			// service because a CA this client does not trust signed
			// them, that is why.
			if why := c.gossip.Foreign(in.Service); why != "" {
				return target{}, fmt.Errorf("%w: %s (%w)", nerr.ErrNotMember, why, err)
			}
		}
		return target{}, err
	}
	ids := make([]string, len(look.Replicas))
	byID := make(map[string]membership.Replica, len(look.Replicas))
	for i, rep := range look.Replicas {
		ids[i] = rep.Node
		byID[rep.Node] = rep
	}

	c.mu.Lock()
	view := c.views.of[partKey{in.Service, in.Partition}]
	b, err := c.balancerLocked(in.Service)
	c.mu.Unlock()
	if err != nil {
		return target{}, err
	}

	rt := view.route(c.clock.Now(), in, ids)
	if rt.direct != "" {
		if r.span != nil {
			r.span.AddEvent("direct to the primary", trace.WithAttributes(attribute.String("neptune.replica", rt.direct)))
		}
		return target{byID[rt.direct], b}, nil
	}

	b.mu.Lock()
	now := c.clock.Now()
	ids = b.health.Filter(now, rt.candidates)
	if len(ids) == 1 { // no choice to make: a poll would only add a round trip
		b.policy.Sent(now, ids[0])
		b.mu.Unlock()
		return target{byID[ids[0]], b}, nil
	}
	affine, keyed := b.policy.(balance.Affine)
	keyed = keyed && r.affine != ""
	var plan balance.Plan
	if keyed {
		plan = affine.PlanKey(now, r.affine, ids)
	} else {
		plan = b.policy.Plan(now, ids)
	}
	b.mu.Unlock()

	if p := rt.mustPoll(ids); p != "" {
		// A level-3 read chooses among replicas shown fresh by current
		// answers, so its probes become polls it waits for.
		if len(plan.Probe) > 0 {
			plan.Poll, plan.Probe = append(plan.Poll, plan.Probe...), nil
			plan.Wait = cmp.Or(plan.Wait, b.cfg.PollWait())
		}
		if !slices.Contains(plan.Poll, p) {
			plan.Poll = append(plan.Poll, p)
		}
		if keyed && plan.Wait == 0 { // a keyed plan polls nobody, so names no wait
			plan.Wait = b.cfg.PollWait()
		}
	}
	if len(plan.Probe) > 0 {
		c.probe(plan.Probe, byID, in.Service, in.Partition, in.Class)
	}
	if len(plan.Subscribe) > 0 {
		c.subscribe(b, plan.Subscribe, byID, in.Service, in.Partition, in.Class)
	}
	var loads []balance.Load
	var answers []transport.PollAnswer
	if len(plan.Poll) > 0 {
		targets := make([]transport.PollTarget, len(plan.Poll))
		for i, id := range plan.Poll {
			targets[i] = transport.PollTarget{Replica: id, Addr: byID[id].PollAddr}
		}
		start := c.clock.Now()
		answers = c.poller.PollFirst(ctx, targets, in.Service, in.Partition, in.Class, plan.Wait, plan.Enough)
		c.metrics.pollTime.Observe(c.clock.Since(start).Seconds())
		c.metrics.polls.WithLabelValues("answered").Add(float64(len(answers)))
		c.metrics.polls.WithLabelValues("late_or_unneeded").Add(float64(len(targets) - len(answers)))
		if r.span != nil {
			r.span.AddEvent("poll", trace.WithAttributes(attribute.String("neptune.policy", b.cfg.Policy),
				attribute.Int("neptune.polled", len(targets)), attribute.Int("neptune.answered", len(answers))))
		}
		loads = make([]balance.Load, len(answers))
		for i, a := range answers {
			loads[i] = balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT}
		}
	}
	if keep, ok := rt.fresh(ids, answers); ok {
		ids = keep
		loads = slices.DeleteFunc(loads, func(l balance.Load) bool { return !slices.Contains(keep, l.Replica) })
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	now = c.clock.Now()
	if len(plan.Poll) > 0 {
		b.health.Observe(now, plan.Poll, func(id string) bool {
			return slices.ContainsFunc(answers, func(a transport.PollAnswer) bool { return a.Replica == id })
		})
	}
	var choice string
	if keyed {
		choice = affine.ChooseKey(now, r.affine, ids, loads)
	} else {
		choice = b.policy.Choose(now, ids, loads)
	}
	b.policy.Sent(now, choice)
	return target{byID[choice], b}, nil
}

// probe polls replicas off the call path: the datagrams leave from another
// goroutine and the answers reach the policy through reportLate, for later
// calls.
func (c *Client) probe(ids []string, byID map[string]membership.Replica, service string, partition int32, class string) {
	targets := make([]transport.PollTarget, len(ids))
	for i, id := range ids {
		targets[i] = transport.PollTarget{Replica: id, Addr: byID[id].PollAddr}
	}
	c.metrics.polls.WithLabelValues("probe").Add(float64(len(targets)))
	go c.poller.Probe(targets, service, partition, class)
}

// subscribe keeps b subscribed to the pushed loads of ids off the call
// path: the subscriptions due for renewal are sent from another
// goroutine, and the answers and pushes reach the policy through
// reportLate.
func (c *Client) subscribe(b *balancer, ids []string, byID map[string]membership.Replica, service string, partition int32, class string) {
	var targets []transport.PollTarget
	b.mu.Lock()
	now := c.clock.Now()
	for _, id := range ids {
		if b.renew.Due(now, subKey{id, partition, class}) {
			targets = append(targets, transport.PollTarget{Replica: id, Addr: byID[id].PollAddr})
		}
	}
	if len(targets) > 0 {
		b.renew.Forget(now)
	}
	b.mu.Unlock()
	if len(targets) == 0 {
		return
	}
	c.metrics.polls.WithLabelValues("subscribe").Add(float64(len(targets)))
	go c.poller.Subscribe(targets, service, partition, class, pushLease)
}

// target is the replica a pick chose and the balancer that chose it,
// which hears when the call is done.
type target struct {
	membership.Replica
	b *balancer
}

// done tells the policy that the call to t finished after latency.
func (t target) done(now time.Time, latency time.Duration) {
	t.b.mu.Lock()
	t.b.policy.Done(now, t.Node, latency)
	t.b.mu.Unlock()
}

// balancerLocked returns service's balancer, creating it on first use
// with the service's own config if Config.ServiceBalance names it, else
// the client's; callers hold c.mu.
func (c *Client) balancerLocked(service string) (*balancer, error) {
	if b, ok := c.balancers[service]; ok {
		return b, nil
	}
	cfg, ok := c.services[service]
	if !ok {
		cfg = c.balance
	}
	p, err := balance.New(cfg, rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64())))
	if err != nil {
		return nil, fmt.Errorf("neptune: balance policy for %q: %w", service, err)
	}
	b := &balancer{cfg: cfg, policy: p, health: membership.NewPollHealth(maxPollMisses, suspectFor)}
	c.balancers[service] = b
	return b, nil
}

// reportLate gives the service's policy a poll answer that missed its
// call, a probe's or subscription's answer, or a pushed load; the policy
// may learn from it (prequal pools it, push chooses by it), and the
// replica, alive, is not suspended.
func (c *Client) reportLate(service string, a transport.PollAnswer) {
	c.mu.Lock()
	b := c.balancers[service]
	c.mu.Unlock()
	if b != nil {
		b.mu.Lock()
		b.policy.Report(c.clock.Now(), balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT})
		b.health.Heard(a.Replica)
		b.mu.Unlock()
	}
}
