package neptune_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
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

// replicatedCluster starts n in-process nodes hosting kv with rep (placed
// over all nodes), each with its own data dir.
func replicatedCluster(t *testing.T, n int, rep neptune.Replication, partitions []int) []*neptune.Node {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		rep.Nodes = append(rep.Nodes, fmt.Sprintf("r%d", i))
	}
	var nodes []*neptune.Node
	var join []string
	for i := range n {
		id := rep.Nodes[i]
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond,
			AnnounceTTL: time.Second, DataDir: filepath.Join(t.TempDir(), id)})
		if err != nil {
			t.Fatal(err)
		}
		svc := kv.New().Service()
		r := rep
		svc.Replication = &r
		if err := nd.Register(svc, rep.PartitionsOn(id, partitions)...); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	return nodes
}

// writeRetrying retries a write while the error is retryable (failover).
func writeRetrying(ctx context.Context, c *neptune.Client, sess *neptune.Session, p int, body string) (*neptune.Response, error) {
	for {
		resp, err := c.Call(ctx, "kv", p, "put", []byte(body), neptune.WithSession(sess))
		if err == nil || !neptune.Retryable(err) || ctx.Err() != nil {
			return resp, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// digestAt asks one insecure node directly for a partition's digest.
func digestAt(ctx context.Context, rpcAddr string, p int) (string, error) {
	conns := transport.NewConns()
	defer conns.Close()
	return digestOf(ctx, conns, "", rpcAddr, p)
}

// digestOf asks node at rpcAddr through conns (secured or not) for a
// partition's digest.
func digestOf(ctx context.Context, conns *transport.Conns, node, rpcAddr string, p int) (string, error) {
	cl, err := conns.ClientFor(node, rpcAddr)
	if err != nil {
		return "", err
	}
	out, err := cl.Call(ctx, &pb.CallRequest{Service: "kv", Partition: int32(p), Method: "digest", Mode: pb.Mode_MODE_READ})
	if err != nil {
		return "", err
	}
	return string(out.Body), nil
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

func rpcAddrs(nodes []*neptune.Node) []string {
	var out []string
	for _, nd := range nodes {
		out = append(out, nd.RPCAddr())
	}
	return out
}

// converged reports whether every replica of p holds wantKeys keys and the
// same contents (at levels 2 and 3 also the same LSN; LSNs are local
// positions at level 1, so local says to ignore them).
func converged(ctx context.Context, addrs []string, p, wantKeys int, local bool) (bool, []string) {
	var ds []string
	for _, a := range addrs {
		d, err := digestAt(ctx, a, p)
		if err != nil {
			return false, append(ds, err.Error())
		}
		ds = append(ds, d)
	}
	want := fmt.Sprintf("keys=%d ", wantKeys)
	for _, d := range ds {
		if !strings.HasPrefix(d, want) {
			return false, ds
		}
		if local {
			d = d[strings.Index(d, "sha256"):]
		}
		first := ds[0]
		if local {
			first = first[strings.Index(first, "sha256"):]
		}
		if d != first {
			return false, ds
		}
	}
	return true, ds
}
