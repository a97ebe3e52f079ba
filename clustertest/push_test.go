package clustertest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
)

// TestPushPolicyFollowsPushedLoadsWithoutPolling runs two in-process nodes
// hosting "work" partition 0 (p0 also hosts partition 1) and a client
// with the push policy. Once p0 is made busy through partition 1, which
// only it hosts, the pushes it sends steer the client's partition-0 calls
// to idle p1, and no call ever waited for a poll.
func TestPushPolicyFollowsPushedLoadsWithoutPolling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := make(chan struct{})
	var holding atomic.Int32
	nodes := startNodes(t, 2, "p", func(nd *neptune.Node, i int) error {
		id := []byte{'p', byte('0' + i)}
		svc := neptune.Service{Name: "work", Workers: 2, Methods: []neptune.Method{
			{Name: "who", Mode: neptune.Read, Handler: func(context.Context, *neptune.Request) (*neptune.Response, error) {
				return &neptune.Response{Body: id}, nil
			}},
			{Name: "hold", Mode: neptune.Read, Handler: func(ctx context.Context, _ *neptune.Request) (*neptune.Response, error) {
				holding.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return &neptune.Response{}, nil
			}},
		}}
		if i == 0 {
			return nd.Register(svc, 0, 1)
		}
		return nd.Register(svc, 0)
	})
	reg := prometheus.NewRegistry()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: []string{nodes[0].GossipAddr()}, Balance: neptune.Balancing{Policy: "push"},
		Registerer: reg, Security: neptune.Security{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 5*time.Second, func() bool { return len(c.Members(ctx, 50*time.Millisecond)) == 2 })
	// who names the node that served a call; a call queued behind p0's
	// held ones misses its deadline.
	who := func() string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		resp, err := c.Call(cctx, "work", 0, "who", nil)
		if errors.Is(err, neptune.ErrDeadline) {
			return "queued"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.Body)
	}
	// Subscribe to both while they are idle.
	for range 20 {
		who()
	}
	// Make p0 busy: two calls hold its workers, two more queue. They come
	// from another client, so only p0's pushes can tell ours.
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = nodes[1].Client().Call(ctx, "work", 1, "hold", nil)
		}()
	}
	waitFor(t, 5*time.Second, func() bool { return holding.Load() == 2 })
	served := map[string]int{}
	for range 100 {
		served[who()]++
	}
	// Pushes land in microseconds on loopback; allow one call that left
	// before p0's did. Without pushes, the client learns only from its
	// own calls that miss their deadline at p0 (about 6 of 100).
	if served["p1"] < 99 {
		t.Fatalf("with p0 busy, calls served %v: want 99 of 100 on idle p1", served)
	}

	// No poll on the call path: none answered, none timed, only
	// subscriptions sent.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var subscribed, answered float64
	var timed uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "neptune_client_polls_total":
				for _, l := range m.GetLabel() {
					switch l.GetValue() {
					case "subscribe":
						subscribed += m.GetCounter().GetValue()
					case "answered", "late_or_unneeded":
						answered += m.GetCounter().GetValue()
					}
				}
			case "neptune_client_poll_seconds":
				timed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if subscribed == 0 || answered != 0 || timed != 0 {
		t.Fatalf("polls: %v subscribe, %v on the call path, %d timed; want subscriptions only", subscribed, answered, timed)
	}
}
