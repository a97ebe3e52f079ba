package neptune_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/neptune-cluster/neptune"
)

// A service is a set of methods; a node hosts partitions of it; any
// client of the cluster calls it by service, partition and method, and the
// library finds a replica. One in-process node here; more join it with
// NodeConfig.Join, and replication is one field of the Service.
func Example() {
	greeter := neptune.Service{Name: "greeter", Methods: []neptune.Method{{
		Name: "hello", Mode: neptune.Read,
		Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			return &neptune.Response{Body: fmt.Appendf(nil, "hello, %s (partition %d)", r.Body, r.Partition)}, nil
		},
	}}}
	node, err := neptune.NewNode(neptune.NodeConfig{ID: "n1", Security: neptune.Security{Insecure: true}})
	if err != nil {
		log.Fatal(err)
	}
	if err := node.Register(greeter, 0, 1); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	// The node's own client; neptune.Dial joins a cluster from elsewhere.
	// A call made before the yellow pages list the service is retried
	// (ClientConfig.Retry).
	resp, err := node.Client().Call(ctx, "greeter", 1, "hello", []byte("world"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp.Body))
	// Output: hello, world (partition 1)
}

// A streaming aggregation shows its partial results as the tree reduces
// them; a caller content with half the partitions stops there, which
// cancels the rest of the tree's work.
func ExampleClient_AggregateStream() {
	ctx := context.Background()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: []string{"10.0.0.1:7946"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.AggregateStream(ctx, neptune.Aggregation{
		Service: "search", Partitions: []int{0, 1, 2, 3, 4, 5, 6, 7}, Local: "topk", Reduce: "merge",
		LocalParams: []byte("neptune"), Quality: 0.5, Deadline: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	for {
		p, err := s.Next()
		if err != nil { // io.EOF after the final partial
			break
		}
		fmt.Printf("%.0f%% in, %v missing\n", 100*p.Coverage, p.Missing)
		if p.QualityMet {
			s.Close()
			break
		}
	}
	res, err := s.Result() // as Aggregate's, for the partial stopped at
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Contributing)
}
