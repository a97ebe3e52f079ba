package gateway

import (
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/service"
)

// nodeLoad is one node's accounting cycle as a call's trailer carried it.
type nodeLoad struct {
	node string
	load service.NodeLoad
}

// cluster is the loop's view of everything beyond this gateway: the
// capacity measured by the nodes (gage.CapacityEstimator over their
// accounting cycles) and, with peers, each subscriber's demand at every
// gateway (gage.Meter here, gossip from the others, gage.Splitter). The
// loop goroutine owns it; tick runs every gossip period.
type cluster struct {
	gc       gage.Config
	unit     gage.Unit
	declared gage.Vector // the configured capacity
	diskBW   float64     // bytes per second of disk time
	measured bool
	log      *slog.Logger

	est       *gage.CapacityEstimator
	lastLoad  map[string]service.NodeLoad
	split     *gage.Splitter // nil when alone
	meters    map[string]*gage.Meter
	predicted map[string]float64 // GRU per request, from the scheduler
	applied   gage.Vector
	warned    time.Time
	// out takes each tick's message for the peers (nil when alone); the
	// sender keeps only the newest.
	out chan gage.GatewayDemand

	status atomic.Pointer[clusterStatus]
}

// clusterStatus is what the last tick decided, for /api/subscribers.
type clusterStatus struct {
	At          time.Time
	CapacityGRU float64
	Measured    bool // whether node reports set the capacity
	Gateways    []string
	Share       map[string]float64
	DemandGRPS  map[string]float64
}

func newCluster(cfg Config, gc gage.Config, log *slog.Logger) (*cluster, error) {
	u := gc.UnitOrDefault()
	est, err := gage.NewCapacityEstimator(u, gage.EstimatorOptions{})
	if err != nil {
		return nil, err
	}
	c := &cluster{
		gc: gc, unit: u, declared: cfg.CapacityVector(), diskBW: float64(cfg.DiskBandwidth), measured: *cfg.Measured && *cfg.MeasuredCapacity, log: log,
		est: est, lastLoad: map[string]service.NodeLoad{}, meters: map[string]*gage.Meter{}, predicted: map[string]float64{},
	}
	c.applied = c.declared
	for _, s := range gc.All() {
		c.meters[s.Name] = &gage.Meter{Tau: time.Second}
		c.predicted[s.Name] = 1
	}
	if cfg.Gossip != "" {
		c.split, err = gage.NewSplitter(cfg.Name, gc, gage.SplitOptions{TTL: time.Duration(cfg.PeerTTL)})
		if err != nil {
			return nil, err
		}
		c.out = make(chan gage.GatewayDemand, 1)
	}
	c.status.Store(&clusterStatus{CapacityGRU: u.GRPS(c.declared), Share: map[string]float64{}, DemandGRPS: map[string]float64{}})
	return c, nil
}

// usage turns what a node reported for a request into a resource vector:
// CPU time, disk bytes as time at the configured bandwidth, and message
// bytes.
func (c *cluster) usage(u service.Usage) gage.Vector {
	v := gage.Res(u.CPU, 0, u.NetIn+u.NetOut)
	if c.diskBW > 0 {
		v[gage.Disk] = float64(u.DiskRead+u.DiskWrite) / c.diskBW
	}
	return v
}

// arrived counts a classified request in its subscriber's demand, at its
// predicted cost in GRU.
func (c *cluster) arrived(now time.Time, sub string) {
	if m := c.meters[sub]; m != nil {
		m.Add(now, c.predicted[sub])
	}
}

// observe takes a node's accounting cycle; the same cycle arrives with
// every answer until the next closes, and counts once.
func (c *cluster) observe(now time.Time, l nodeLoad) {
	if !c.measured || l.load.Interval <= 0 || c.lastLoad[l.node] == l.load {
		return
	}
	c.lastLoad[l.node] = l.load
	c.est.Observe(now, gage.NodeReport{
		Node: l.node, Interval: l.load.Interval, Used: c.usage(l.load.Used),
		Busy: gage.Vector{gage.CPU: l.load.CPUBusy, gage.Disk: l.load.DiskBusy},
	})
}

// merge takes a peer's gossip.
func (c *cluster) merge(now time.Time, m gage.GatewayDemand) {
	if c.split != nil {
		c.split.Merge(now, m)
	}
}

// capacity is the measured capacity where nodes measured it, the
// declared one elsewhere (a resource no node reports, or none yet).
func (c *cluster) capacity(now time.Time) (gage.Vector, bool) {
	v, any := c.declared, false
	if !c.measured {
		return v, false
	}
	est := c.est.Capacity(now)
	for i := range v {
		if est[i] > 0 {
			v[i], any = est[i], true
		}
	}
	return v, any
}

// share is this gateway's last computed part of sub's reservation (1
// before the first tick and without peers).
func (c *cluster) share(sub string) float64 {
	if st := c.status.Load(); st != nil {
		if f, ok := st.Share[sub]; ok {
			return f
		}
	}
	return 1
}

// tick re-reads the capacity, gossips this gateway's demand and splits
// the reservations and the capacity among the live gateways.
func (c *cluster) tick(now time.Time, sched gage.Scheduler) {
	for _, q := range sched.Queues() {
		if q.Predicted > 0 {
			c.predicted[q.Subscriber] = q.Predicted
		}
	}
	capa, measured := c.capacity(now)
	st := &clusterStatus{At: now, CapacityGRU: c.unit.GRPS(capa), Measured: measured, Share: map[string]float64{}, DemandGRPS: map[string]float64{}}
	for name, m := range c.meters {
		st.DemandGRPS[name] = m.Rate(now)
		st.Share[name] = 1
	}
	if c.split != nil {
		msg := c.split.Local(now, maps.Clone(st.DemandGRPS))
		select {
		case c.out <- msg:
		default:
			select { // replace the unsent older message
			case <-c.out:
			default:
			}
			select {
			case c.out <- msg:
			default:
			}
		}
		_ = c.split.Apply(now, sched, capa)
		st.Gateways = c.split.Live(now)
		for name := range st.Share {
			st.Share[name] = c.split.Fraction(now, name)
		}
	} else if capa != c.applied {
		sched.SetCapacity(now, capa)
	}
	c.applied = capa
	// Warn only of a capacity measured under load: the figures of idle
	// nodes are extrapolations that may be far too low.
	if measured && now.Sub(c.warned) >= 10*time.Second && c.est.Loaded(now) {
		if err := gage.Admit(c.gc, st.CapacityGRU); err != nil {
			c.warned = now
			c.log.Warn("gateway: reservations exceed the capacity the nodes measured", "err", err,
				"declared_grps", c.unit.GRPS(c.declared),
				"hint", "the nodes' measured capacity replaces capacity (capacity_grps) where they report it; measured_capacity: false paces to the declared figure")
		}
	}
	if st.Gateways == nil {
		st.Gateways = []string{}
	}
	slices.Sort(st.Gateways)
	c.status.Store(st)
}
