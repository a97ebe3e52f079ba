package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

func TestCallsReachEveryPartitionThroughAnyNode(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess := neptune.NewSession()
	for i, nd := range nodes {
		c := nd.Client()
		resp, err := c.Call(ctx, "echo", i%2, "echo", []byte("hello"), neptune.WithSession(sess))
		if err != nil || string(resp.Body) != "hello" {
			t.Fatalf("echo via n%d = %v, %v", i, resp, err)
		}
		// kv partition p lives only on node p; any node's client finds it.
		p := (i + 1) % len(nodes)
		if _, err := c.Call(ctx, "kv", p, "put", []byte("k=v"+fmt.Sprint(p)), neptune.WithSession(sess)); err != nil {
			t.Fatalf("put via n%d to partition %d: %v", i, p, err)
		}
		resp, err = c.Call(ctx, "kv", p, "get", []byte("k"), neptune.WithSession(sess))
		if err != nil || string(resp.Body) != "v"+fmt.Sprint(p) {
			t.Fatalf("get via n%d from partition %d = %v, %v", i, p, resp, err)
		}
	}
}

func TestErrorsAreTypedAcrossTheWire(t *testing.T) {
	nodes := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := nodes[0].Client()
	tests := []struct {
		name      string
		service   string
		partition int
		method    string
		body      string
		want      error
		wantText  string
	}{
		{"unknown service", "nope", 0, "echo", "", neptune.ErrUnknownService, `"nope"`},
		{"unknown partition", "kv", 7, "get", "k", neptune.ErrUnknownPartition, "partition 7"},
		{"unknown method", "echo", 0, "shout", "", neptune.ErrUnknownMethod, `"shout"`},
		{"stream method through Call", "echo", 0, "chunks", "", neptune.ErrWrongMode, "is a stream method"},
		{"application error", "kv", 1, "get", "missing", nil, "kv: key not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Call(ctx, tt.service, tt.partition, tt.method, []byte(tt.body))
			if err == nil {
				t.Fatal("call succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tt.wantText)) {
				t.Fatalf("err = %q, want it to mention %q", err, tt.wantText)
			}
			if neptune.Retryable(err) {
				t.Fatalf("err %v must not be retryable", err)
			}
		})
	}
}

// TestStreamOfAPlainMethodIsTheWrongMode: Stream names a method that is
// not a stream method; the client knows from the announced method table.
func TestStreamOfAPlainMethodIsTheWrongMode(t *testing.T) {
	nodes := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := nodes[0].Client().Stream(ctx, "echo", 0, "echo", nil)
	if !errors.Is(err, neptune.ErrWrongMode) || !strings.Contains(err.Error(), "not a stream method") {
		t.Fatalf("Stream of a plain method: %v, want ErrWrongMode", err)
	}
}

func TestStreamDeliversEveryChunk(t *testing.T) {
	nodes := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := nodes[1].Client().Stream(ctx, "echo", 0, "chunks", append([]byte{5}, "x"...))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		b, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if fmt.Sprint(got) != "[0:x 1:x 2:x 3:x 4:x]" {
		t.Fatalf("chunks = %v", got)
	}
}

func TestDialedClientSeesClusterAndClosedNodeDisappears(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: []string{nodes[0].GossipAddr()}, AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 3*time.Second, func() bool { return len(c.Members(ctx, 50*time.Millisecond)) == 3 })
	nodes[2].Close()
	waitFor(t, 3*time.Second, func() bool { return len(c.Members(ctx, 50*time.Millisecond)) == 2 })
	// One try: the client's retry policy would otherwise keep retrying a
	// retryable error for its whole budget (10 s), the test's deadline.
	_, err = c.Call(ctx, "kv", 2, "get", []byte("k"), neptune.WithRetry(neptune.RetryPolicy{Budget: -1}))
	if !errors.Is(err, neptune.ErrNoReplica) || !neptune.Retryable(err) {
		t.Fatalf("call to the closed node's only partition: err = %v, want retryable ErrNoReplica", err)
	}
	for range 20 {
		if _, err := c.Call(ctx, "echo", 1, "echo", []byte("x")); err != nil {
			t.Fatalf("echo after a node left: %v", err)
		}
	}
}

func TestLargeBodiesCrossTheWire(t *testing.T) {
	nodes := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := bytes.Repeat([]byte("x"), 8<<20) // twice gRPC's default limit
	resp, err := nodes[0].Client().Call(ctx, "echo", 0, "echo", body)
	if err != nil || len(resp.Body) != len(body) {
		t.Fatalf("8 MiB echo: %v", err)
	}
}
