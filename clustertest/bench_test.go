package clustertest

import (
	"context"
	"testing"

	"github.com/neptune-cluster/neptune/internal/balance"
)

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
