package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/dashboard"
)

// dashPollWait bounds each load poll of the dashboard's Cluster view: a
// member that does not answer in time shows its load as late.
const dashPollWait = 20 * time.Millisecond

// dashSource feeds the dashboard (internal/dashboard) from the node: the
// yellow pages of its client, which exists only once Start has created
// it (the metrics listener starts earlier), and its services' staleness
// bounds.
type dashSource struct {
	n      *Node
	client atomic.Pointer[client.Client]
}

// Members lists the yellow pages without polling: the dashboard polls
// each member's load concurrently (PollLoad).
func (d *dashSource) Members(ctx context.Context) ([]client.Member, error) {
	c := d.client.Load()
	if c == nil {
		return nil, nil
	}
	return c.Members(ctx, 0), nil
}

func (d *dashSource) PollLoad(ctx context.Context, m client.Member) {
	if c := d.client.Load(); c != nil {
		c.PollLoad(ctx, m, dashPollWait)
	}
}

func (d *dashSource) Departed(context.Context) ([]client.Departed, error) {
	c := d.client.Load()
	if c == nil {
		return nil, nil
	}
	return c.Departed(), nil
}

func (d *dashSource) Partitions(context.Context) ([]client.PartitionInfo, error) {
	c := d.client.Load()
	if c == nil {
		return nil, nil
	}
	return c.Partitions(), nil
}

// staleness is a hosted service's level-3 bound (services are fixed once
// the client exists); 0 for services this node does not host.
func (d *dashSource) staleness(svc string) time.Duration {
	h := d.n.services[svc]
	if h == nil || h.svc.Replication == nil || h.svc.Replication.Level != 3 {
		return 0
	}
	if s := h.svc.Replication.Staleness; s > 0 {
		return s
	}
	return time.Second
}

// dashboard is the node's dashboard, served on its metrics listener.
func (n *Node) dashboard() (*dashboard.Server, error) {
	n.dash.n = n
	rss := dashboard.PeerRSS{}
	if !n.sec.Insecure() {
		// Peers' dashboards are HTTPS and admit nodes on /api/dashboard/self.
		rss.Scheme, rss.Client = "https", n.sec.PeerHTTPClient()
	}
	return dashboard.New(dashboard.Config{Self: n.cfg.ID, Role: "node", Members: &n.dash, Loads: &n.dash, Departed: &n.dash, Partitions: &n.dash, Staleness: n.dash.staleness,
		Gatherer: n.reg.Gatherer, RSS: rss, Interval: n.refreshInterval, TTL: n.cfg.AnnounceTTL, Clock: n.clock})
}
