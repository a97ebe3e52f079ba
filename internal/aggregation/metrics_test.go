package aggregation_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// cluster is a fixed yellow pages for service "search": partition →
// its live replicas; a partition mapped to none is known but stopped.
type cluster map[int32][]membership.Replica

func (c cluster) Replicas(service string, part int32) membership.Lookup {
	if service != "search" {
		return membership.Lookup{}
	}
	rs, known := c[part]
	return membership.Lookup{Replicas: rs, ServiceKnown: true, PartitionKnown: known}
}

func (cluster) Exclude(string) {}

// answerAll answers every poll at once, idle.
type answerAll struct{}

func (answerAll) Poll(_ context.Context, ts []transport.PollTarget, _ string, _ int32, _ string, _ time.Duration) []transport.PollAnswer {
	out := make([]transport.PollAnswer, len(ts))
	for i, t := range ts {
		out[i] = transport.PollAnswer{Replica: t.Replica}
	}
	return out
}

// tree answers a subtree with every partition in it except the failed
// one, as a tree whose node for that partition failed would, and reports
// one hedge.
type tree struct {
	pb.NodeClient
	failed int32
}

func (t tree) ClientFor(string, string) (pb.NodeClient, error) { return t, nil }

func (t tree) Aggregate(_ context.Context, in *pb.AggregateRequest, _ ...grpc.CallOption) (*pb.AggregateResponse, error) {
	out := &pb.AggregateResponse{Data: []byte("r"), Hedges: 1}
	for _, p := range in.Participants {
		if p.Index >= 0 && p.Partition != t.failed {
			out.Partitions = append(out.Partitions, p.Partition)
		}
	}
	return out, nil
}

// An aggregation over four partitions, one stopped (no live replica) and
// one whose node fails, counts a partial call with coverage 1/2, two
// partitions lost and the tree's hedge; one whose partitions are all
// stopped counts as failed, an unknown service as an error. The
// dashboard's Aggregation view and its JSON twin show them.
func TestMetricsCountLostPartitionsAndTheDashboardShowsThem(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := aggregation.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := func(n string) []membership.Replica { return []membership.Replica{{Node: n, RPCAddr: n, PollAddr: n}} }
	dir := cluster{0: r("n0"), 1: r("n1"), 2: r("n2"), 3: nil, 9: nil}
	c := aggregation.NewCaller(aggregation.Config{Directory: dir, Poller: answerAll{}, Dialer: tree{failed: 2}, Metrics: m})
	ctx := context.Background()
	agg := aggregation.Aggregation{Service: "search", Partitions: []int{0, 1, 2, 3}, Local: "l", Reduce: "r", Quality: 0.5, Deadline: time.Second}
	res, err := c.Aggregate(ctx, agg, aggregation.Experiment{})
	if err != nil || res.Status != aggregation.Partial || res.Coverage != 0.5 {
		t.Fatalf("aggregate: %+v, %v; want partial with coverage 0.5", res, err)
	}
	stopped := agg
	stopped.Partitions = []int{3, 9}
	if _, err := c.Aggregate(ctx, stopped, aggregation.Experiment{}); !errors.Is(err, nerr.ErrNoReplica) {
		t.Fatalf("every partition stopped: %v, want ErrNoReplica", err)
	}
	unknown := agg
	unknown.Service = "nope"
	if _, err := c.Aggregate(ctx, unknown, aggregation.Experiment{}); !errors.Is(err, nerr.ErrUnknownService) {
		t.Fatalf("unknown service: %v", err)
	}

	calls := func(svc, status string) float64 {
		return value(t, reg, aggregation.MetricCalls, svc, status)
	}
	if calls("search", "partial") != 1 || calls("search", "failed") != 1 || calls("search", "full") != 0 || calls("nope", "error") != 1 {
		t.Errorf("calls: partial %v failed %v full %v error %v; want 1 1 0 1",
			calls("search", "partial"), calls("search", "failed"), calls("search", "full"), calls("nope", "error"))
	}
	if lost := value(t, reg, aggregation.MetricLost, "search"); lost != 4 {
		t.Errorf("partitions lost %v, want 2 + 2", lost)
	}
	if h := value(t, reg, aggregation.MetricHedges, "search"); h != 1 {
		t.Errorf("hedges %v, want 1", h)
	}

	d, err := dashboard.New(dashboard.Config{Self: "client", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	var v dashboard.AggregationView
	if err := json.Unmarshal([]byte(fetch(t, srv.URL+dashboard.APIPrefix+"aggregation?service=search")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Called) != 1 || len(v.Rooted) != 0 {
		t.Fatalf("aggregation view: %+v, want one row for search, called", v)
	}
	row := v.Called[0]
	if row.Calls != 2 || row.Partial != 1 || row.Failed != 1 || row.Errors != 0 || row.Lost != 4 || row.Hedges != 1 || row.Coverage != 0.25 {
		t.Errorf("search row %+v; want 2 calls (1 partial, 1 failed), 4 lost, 1 hedge, mean coverage (0.5+0)/2", row)
	}
	page := fetch(t, srv.URL+"/aggregation")
	for _, want := range []string{`<tr data-service="search">`, `<tr data-service="nope">`, "25%"} {
		if !strings.Contains(page, want) {
			t.Errorf("aggregation page lacks %q", want)
		}
	}
}

// directWorkers runs operators at once.
type directWorkers struct{}

func (directWorkers) Do(ctx context.Context, _ string, run func(context.Context)) error {
	run(ctx)
	return nil
}

type hosting struct{ h aggregation.Hosted }

func (s hosting) Aggregation(string) (aggregation.Hosted, bool) { return s.h, true }

// A node that runs a call's tree at the root counts it with the coverage
// of the partitions it was sent (its child's partition failed here); a
// node running a subtree below the root counts nothing. Its dashboard
// shows the call as rooted here.
func TestRootCountsTheCallsItReduces(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := aggregation.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	agg := &service.Aggregator{
		Local:  map[string]service.LocalFunc{"l": func(context.Context, int, []byte) ([]byte, error) { return []byte("a"), nil }},
		Reduce: map[string]service.ReduceFunc{"r": func(_ context.Context, a, b, _ []byte) ([]byte, error) { return append(a, b...), nil }},
	}
	srv := aggregation.NewServer(aggregation.ServerConfig{
		Self:     "n0",
		Services: hosting{aggregation.Hosted{Operators: agg, Partitions: []int32{0}, Workers: directWorkers{}, Ledger: &dac.Ledger{}}},
		Caller:   aggregation.NewCaller(aggregation.Config{Directory: cluster{1: {{Node: "n1", RPCAddr: "n1"}}}, Dialer: tree{failed: 1}, Metrics: m}),
	})
	sec := int64(time.Second)
	in := &pb.AggregateRequest{CallId: "t", Service: "search", Local: "l", Reduce: "r", Self: 0, DeadlineNs: sec, GraceNs: int64(10 * time.Millisecond),
		Participants: []*pb.Participant{
			{Index: 0, Partition: 0, Parent: -1, DeadlineNs: sec, Replicas: []*pb.ReplicaAddr{{Node: "n0"}}},
			{Index: 1, Partition: 1, Parent: 0, DeadlineNs: sec / 2, Replicas: []*pb.ReplicaAddr{{Node: "n1"}}},
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := srv.Serve(ctx, in)
	if err != nil || len(out.Partitions) != 1 {
		t.Fatalf("root answered %v, %v; want partition 0 only", out, err)
	}
	// The same node as a leaf below another root records nothing.
	leaf := &pb.AggregateRequest{CallId: "u", Service: "search", Local: "l", Reduce: "r", Self: 1, DeadlineNs: sec, GraceNs: int64(10 * time.Millisecond),
		Participants: []*pb.Participant{{Index: 1, Partition: 0, Parent: 0, DeadlineNs: sec}}}
	if _, err := srv.Serve(ctx, leaf); err != nil {
		t.Fatal(err)
	}
	if c, l := value(t, reg, aggregation.MetricRootCalls, "search"), value(t, reg, aggregation.MetricRootLost, "search"); c != 1 || l != 1 {
		t.Errorf("root calls %v, lost %v; want 1 and 1", c, l)
	}
	if c := value(t, reg, aggregation.MetricCalls, "search", "partial"); c != 0 {
		t.Errorf("the root counted a call as made here")
	}
	d, err := dashboard.New(dashboard.Config{Self: "n0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srvD := httptest.NewServer(d)
	defer srvD.Close()
	var v dashboard.AggregationView
	if err := json.Unmarshal([]byte(fetch(t, srvD.URL+dashboard.APIPrefix+"aggregation")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Called) != 0 || len(v.Rooted) != 1 || v.Rooted[0].Calls != 1 || v.Rooted[0].Coverage != 0.5 || v.Rooted[0].Lost != 1 {
		t.Errorf("aggregation view %+v; want one rooted call of search, coverage 1/2, 1 lost", v)
	}
}

// value is the counter of metric name with the given label values (in
// label-name order) in reg, 0 if it has none.
func value(t *testing.T, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			got := make([]string, 0, len(s.GetLabel()))
			for _, l := range s.GetLabel() {
				got = append(got, l.GetValue())
			}
			if strings.Join(got, ",") == strings.Join(values, ",") {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
