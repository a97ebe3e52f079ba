package client

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// TestSubscriptionsRenewAtHalfTheirLease: a call subscribes to each
// replica once; calls within half the lease send nothing; the first call
// after renews, per replica, partition and class.
func TestSubscriptionsRenewAtHalfTheirLease(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	m, err := newClientMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pl, err := transport.NewPoller(slog.New(slog.DiscardHandler), transport.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	c := &Client{clock: clk, metrics: m, poller: pl}
	b := &balancer{}
	byID := map[string]membership.Replica{"a": {Node: "a", PollAddr: "127.0.0.1:9"}, "b": {Node: "b", PollAddr: "127.0.0.1:9"}}
	sent := func() int {
		var d dto.Metric
		if err := m.polls.WithLabelValues("subscribe").Write(&d); err != nil {
			t.Fatal(err)
		}
		return int(d.GetCounter().GetValue())
	}
	call := func(partition int32, class string) { c.subscribe(b, []string{"a", "b"}, byID, "s", partition, class) }

	call(0, "")
	if sent() != 2 {
		t.Fatalf("first call sent %d subscriptions, want 2", sent())
	}
	clk.Advance(pushLease/2 - time.Millisecond)
	call(0, "")
	if sent() != 2 {
		t.Fatalf("a call with more than half the lease left sent %d, want none", sent()-2)
	}
	call(1, "")
	call(0, "gold")
	if sent() != 6 {
		t.Fatalf("other partition and class: %d sent in all, want 6", sent())
	}
	clk.Advance(time.Millisecond)
	call(0, "")
	if sent() != 8 {
		t.Fatalf("at half the lease: %d sent in all, want 8 (renewed)", sent())
	}
	// No call for a whole lease: the subscriptions are forgotten.
	clk.Advance(pushLease)
	call(0, "")
	if sent() != 10 || b.renew.Len() != 2 {
		t.Fatalf("after an idle lease: %d sent, %d remembered; want 10 and only the renewed 2", sent(), b.renew.Len())
	}
}
