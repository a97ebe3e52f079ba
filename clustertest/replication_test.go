package clustertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

func TestPlaceIsChainedAndDeterministic(t *testing.T) {
	nodes := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		partition, degree int
		want              []neptune.ReplicaSpec
	}{
		{0, 3, []neptune.ReplicaSpec{{Node: "a", Priority: 3}, {Node: "b", Priority: 2}, {Node: "c", Priority: 1}}},
		{1, 3, []neptune.ReplicaSpec{{Node: "b", Priority: 3}, {Node: "c", Priority: 2}, {Node: "d", Priority: 1}}},
		{3, 2, []neptune.ReplicaSpec{{Node: "d", Priority: 2}, {Node: "a", Priority: 1}}},
		{5, 1, []neptune.ReplicaSpec{{Node: "b", Priority: 1}}},
		{0, 5, nil},
		{0, 0, nil},
	} {
		if got := neptune.Place(tc.partition, nodes, tc.degree); !slices.Equal(got, tc.want) {
			t.Errorf("Place(%d, %v, %d) = %v, want %v", tc.partition, nodes, tc.degree, got, tc.want)
		}
	}
	r := &neptune.Replication{Level: 2, Nodes: nodes, Degree: 2, Replicas: map[int][]neptune.ReplicaSpec{2: {{Node: "a", Priority: 1}}}}
	if got := r.PartitionsOn("a", []int{0, 1, 2, 3}); !slices.Equal(got, []int{0, 2, 3}) {
		t.Errorf("PartitionsOn(a) = %v, want [0 2 3]", got)
	}
}

func TestReplicationValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		r    neptune.Replication
		want string
	}{
		{neptune.Replication{Level: 4}, "Level"},
		{neptune.Replication{Level: 2, Nodes: []string{"a"}, Degree: 2}, "Degree"},
		{neptune.Replication{Level: 2, Nodes: []string{"a", "a"}, Degree: 1}, "Nodes"},
		{neptune.Replication{Level: 3, Staleness: -1}, "Staleness"},
		{neptune.Replication{Level: 2, Replicas: map[int][]neptune.ReplicaSpec{0: {{Node: "a", Priority: 1}, {Node: "a", Priority: 2}}}}, "Replicas[0]"},
		{neptune.Replication{Level: 2, Replicas: map[int][]neptune.ReplicaSpec{0: {{Node: "a", Priority: 1}}}, MinLive: 2}, "MinLive"},
		{neptune.Replication{Level: 1, Nodes: []string{"a", "b"}, Degree: 2}, ""},
	} {
		err := tc.r.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: unexpected %v", tc.r, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.r, err, tc.want)
		}
	}
}

func TestReplicatedKVConvergesAtEveryLevel(t *testing.T) {
	for _, level := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("level%d", level), func(t *testing.T) {
			nodes := replicatedCluster(t, 3, neptune.Replication{Level: level, Degree: 3}, []int{0, 1})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := nodes[0].Client()
			waitFor(t, 5*time.Second, func() bool {
				_, err := c.Call(ctx, "kv", 1, "len", nil)
				return err == nil
			})
			sess := neptune.NewSession()
			const writes = 40
			for i := range writes {
				p := i % 2
				if _, err := writeRetrying(ctx, c, sess, p, fmt.Sprintf("k%d=v%d", i, i)); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				if level == 3 {
					// Read-your-writes through the session.
					got, err := c.Call(ctx, "kv", p, "get", fmt.Appendf(nil, "k%d", i), neptune.WithSession(sess))
					if err != nil {
						t.Fatalf("read-your-write k%d: %v", i, err)
					}
					if string(got.Body) != fmt.Sprintf("v%d", i) {
						t.Fatalf("read-your-write k%d: got %q", i, got.Body)
					}
				}
			}
			for p := range 2 {
				var last []string
				waitFor(t, 10*time.Second, func() bool {
					ok, ds := converged(ctx, rpcAddrs(nodes), p, writes/2, level == 1)
					if !ok && slices.Equal(ds, last) {
						t.Logf("partition %d: %q", p, ds)
					}
					last = ds
					return ok
				})
			}
		})
	}
}
