package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// Health is what probes ask: /livez (the process serves HTTP), /readyz
// (the node should get calls) on the metrics listener, and
// grpc.health.v1 on the RPC port, overall ("") and per hosted service.
//
// A node is ready once it has joined (it sees another member, if it was
// given seeds), every replica it hosts is open and caught up (a primary
// or a secondary, not recovering or diverged), and it is not draining.

// notReady lists why the node should get no calls; empty when ready.
func (n *Node) notReady() []string {
	why, _ := n.readiness()
	return why
}

// readiness is why the node should get no calls (empty when ready), and
// for each hosted service why its replicas here should not; each
// replica's status is read once.
func (n *Node) readiness() (why []string, services map[string][]string) {
	if n.draining.Load() {
		why = append(why, "draining")
	}
	if n.client == nil {
		return append(why, "not started"), nil
	}
	if len(n.cfg.Join) > 0 && n.client.Gossip().Members() < 2 {
		why = append(why, "not joined: no other member seen yet")
	}
	services = make(map[string][]string, len(n.services))
	for _, name := range n.serviceNames() {
		services[name] = n.serviceNotReady(name)
		why = append(why, services[name]...)
	}
	return why, services
}

// serviceNotReady lists the hosted replicas of name that should get no
// calls yet, and why.
func (n *Node) serviceNotReady(name string) []string {
	h := n.services[name]
	if h.svc.Replication == nil || n.repl == nil {
		return nil
	}
	var why []string
	for _, st := range n.repl.Status(name, n.hostedPartitions(h)) {
		switch {
		case st.Diverged:
			why = append(why, fmt.Sprintf("%s/%d diverged from its primary", name, st.Partition))
		case replica.Role(st.Role) == replica.Recovering:
			why = append(why, fmt.Sprintf("%s/%d recovering (catching up)", name, st.Partition))
		}
	}
	return why
}

func (n *Node) serviceNames() []string {
	names := make([]string, 0, len(n.services))
	for name := range n.services {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// mountHealth serves /livez, /healthz (the same) and /readyz.
func (n *Node) mountHealth(mux *http.ServeMux) {
	live := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if why := n.notReady(); len(why) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", strings.Join(why, "; "))
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// healthEvery is how often the gRPC health statuses are brought up to
// date; a drain updates them at once (healthNow). A replica's readiness
// changes no faster than an election, and an idle node should not wake
// four times a second for it.
const healthEvery = time.Second

// serveHealth keeps the gRPC health server's statuses current until ctx
// ends, then marks everything NOT_SERVING.
func (n *Node) serveHealth(ctx context.Context, hs *health.Server) {
	tick := n.clock.NewTicker(healthEvery)
	defer tick.Stop()
	for {
		status := func(notReady bool) healthpb.HealthCheckResponse_ServingStatus {
			if notReady {
				return healthpb.HealthCheckResponse_NOT_SERVING
			}
			return healthpb.HealthCheckResponse_SERVING
		}
		why, services := n.readiness()
		hs.SetServingStatus("", status(len(why) > 0))
		for name, notReady := range services {
			hs.SetServingStatus(name, status(n.draining.Load() || len(notReady) > 0))
		}
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-tick.Chan():
		case <-n.healthNow:
		}
	}
}
