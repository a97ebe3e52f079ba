package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/dashboard"
)

// top draws the dashboard's views from its JSON twins, bounded in rows
// and screens.
func TestTopShowsTheDashboard(t *testing.T) {
	members := dashboard.MembersFunc(func(context.Context) ([]neptune.Member, error) {
		var ms []neptune.Member
		for _, n := range []string{"a", "b", "c"} {
			ms = append(ms, neptune.Member{Node: n, Age: 100 * time.Millisecond,
				Services: []neptune.HostedService{{Name: "kv", Partitions: []int{0, 1}, Load: map[int]int{0: 1, 1: 2}}}})
		}
		return ms, nil
	})
	parts := dashboard.PartitionsFunc(func(context.Context) ([]neptune.PartitionInfo, error) {
		return []neptune.PartitionInfo{{Service: "kv", Partition: 0, Level: 2, Replicas: []neptune.ReplicaInfo{
			{Node: "a", Role: "primary", Epoch: 4, Version: 10}, {Node: "b", Role: "secondary", Epoch: 4, Version: 7}}}}, nil
	})
	d, err := dashboard.New(dashboard.Config{Self: "a", Members: members, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, out, errOut := run(t, []string{"top", "--addr", addr, "--count", "2", "--interval", "100ms", "--rows", "2"})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"CLUSTER from a", "3 alive", "… 1 more", "kv       0     a        4", "b v7 -3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "CLUSTER from"); n != 2 {
		t.Errorf("%d screens, want 2", n)
	}
	if code, _, _ := run(t, []string{"top"}); code != ExitUsage {
		t.Errorf("top without --addr: exit %d, want %d", code, ExitUsage)
	}
}
