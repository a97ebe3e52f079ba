package gateway

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
)

// SubscriberStatus is one subscriber as a gateway sees it: what
// `neptune status --gateway` prints and /api/subscribers serves.
type SubscriberStatus struct {
	Name string `json:"name"`
	// Reserved is the whole reservation (GRPS); Share is this gateway's
	// fraction of it and of the limit.
	Reserved float64 `json:"reserved_grps"`
	Limit    float64 `json:"limit_grps,omitempty"`
	Share    float64 `json:"share"`
	// DemandGRPS is the demand seen here now (GRU per second, decaying).
	DemandGRPS float64 `json:"demand_grps"`
	// Demanded, Served and Dropped count requests since the start:
	// classified, sent, refused (429 and 504 by the scheduler).
	Demanded int64 `json:"demanded"`
	Served   int64 `json:"served"`
	Dropped  int64 `json:"dropped"`
	// ServedGRU is what the served requests cost, in GRU, since the
	// start: the rate of its change is the rate served in GRPS.
	ServedGRU float64 `json:"served_gru"`
	// ServedByResource is what they used of each resource (cpu, disk,
	// net), in GRU, since the start. Each request costs its own
	// bottleneck, so where requests' bottlenecks differ (some reads
	// cached, some from the disk) ServedGRU grows faster than the
	// subscriber's usage of its bottleneck resource over many requests,
	// the largest of these, which is what the scheduler shares (§3.5).
	ServedByResource map[string]float64 `json:"served_gru_by_resource,omitempty"`
}

// Status is a gateway's state for operators.
type Status struct {
	Gateway     string             `json:"gateway,omitempty"`
	Gateways    []string           `json:"gateways"` // live, by gossip; empty alone
	CapacityGRU float64            `json:"capacity_grps"`
	Measured    bool               `json:"capacity_measured"`
	At          time.Time          `json:"at"`
	Subscribers []SubscriberStatus `json:"subscribers"`
}

// Status returns the gateway's current state, subscribers in config order.
func (g *Gateway) Status() Status {
	st := g.cluster.status.Load()
	out := Status{Gateway: g.Name(), Gateways: st.Gateways, CapacityGRU: st.CapacityGRU, Measured: st.Measured, At: st.At}
	if out.Gateways == nil {
		out.Gateways = []string{}
	}
	for _, s := range g.cfg.Gage().All() {
		sm := g.metrics.subs[s.Name]
		share := st.Share[s.Name]
		if _, ok := st.Share[s.Name]; !ok {
			share = 1
		}
		out.Subscribers = append(out.Subscribers, SubscriberStatus{
			Name: s.Name, Reserved: s.Reservation, Limit: s.Limit, Share: share, DemandGRPS: st.DemandGRPS[s.Name],
			Demanded: sm.nDemanded.Load(), Served: sm.nServed.Load(), Dropped: sm.nDropped.Load(),
			ServedGRU: float64(sm.nServedMicroGRU.Load()) / 1e6, ServedByResource: map[string]float64{},
		})
		for r := range sm.nUsedMicroGRU {
			out.Subscribers[len(out.Subscribers)-1].ServedByResource[gage.Resource(r).String()] = float64(sm.nUsedMicroGRU[r].Load()) / 1e6
		}
	}
	return out
}

// StatusPath is where StatusHandler is mounted on the metrics listener.
const StatusPath = "/api/subscribers"

// StatusHandler serves Status as JSON.
func (g *Gateway) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.Status())
	})
}
