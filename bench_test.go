package neptune_test

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/security"
)

// echoClient starts one in-process node hosting echo whose own client uses
// policy, secured with throwaway material if secure, and returns that
// client once it sees the node.
func echoClient(b *testing.B, policy string, secure bool) *neptune.Client {
	b.Helper()
	ctx := context.Background()
	sec := neptune.Security{Insecure: true}
	if secure {
		dir := b.TempDir()
		if err := security.Scratch(dir, "bench", "b1"); err != nil {
			b.Fatal(err)
		}
		sec = neptune.Security{Dir: dir}
	}
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: sec, ID: "b1", Balance: neptune.Balancing{Policy: policy}})
	if err != nil {
		b.Fatal(err)
	}
	if err := nd.Register(echo.Service(), 0); err != nil {
		b.Fatal(err)
	}
	if err := nd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nd.Close() })
	c := nd.Client()
	for len(c.Members(ctx, 0)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// BenchmarkCallParallel measures in-process echo calls through a node's
// client, for profiling the call path; the side-by-side comparison with raw
// gRPC is `neptune bench overhead`.
func BenchmarkCallParallel(b *testing.B) {
	for _, policy := range []string{balance.NameRandom, balance.DefaultConfig().Policy} {
		b.Run(policy, func(b *testing.B) {
			c := echoClient(b, policy, false)
			body := make([]byte, 1024)
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Call(context.Background(), "echo", 0, "echo", body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCallSequential is the sequential counterpart, for profiling the
// per-call overhead of lookup, balancing and metrics, plaintext and with
// mutual TLS (what security adds to a call: -cpuprofile on the mtls run).
func BenchmarkCallSequential(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plaintext"
		if secure {
			name = "mtls"
		}
		b.Run(name, func(b *testing.B) {
			c := echoClient(b, balance.NameRandom, secure)
			body := make([]byte, 1024)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Call(context.Background(), "echo", 0, "echo", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
