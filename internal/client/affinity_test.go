package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/security"
)

// TestAffinityKeyPicksTheKeysReplica: under the affinity policy a call
// with a key goes to the key's first replica in rendezvous order, every
// time and without polling (every poll here is held forever); under
// another policy the key changes nothing (the control: one key's calls
// spread over the replicas).
func TestAffinityKeyPicksTheKeysReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seed, insecure := threeFakeReplicas(t, ctx)
	dial := func(policy string) *Client {
		cfg := balance.DefaultConfig()
		cfg.Policy = policy
		c, err := New(ctx, Config{Client: config.Client{Join: []string{seed}, Balance: cfg}, Material: insecure})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		for len(c.gossip.Lookup("work", 0, "get").Replicas) < 3 {
			select {
			case <-ctx.Done():
				t.Fatal("the client never saw the three nodes")
			case <-time.After(10 * time.Millisecond):
			}
		}
		return c
	}
	call := func(c *Client, key string) string {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.Call(cctx, "work", 0, "get", nil, WithAffinity(key))
		if err != nil {
			t.Fatalf("call with key %s: %v", key, err)
		}
		return string(resp.Body)
	}
	aff := dial(balance.NameAffinity)
	seen := map[string]bool{}
	for k := range 20 {
		key := fmt.Sprint("key-", k)
		want := balance.Rank(key, []string{"a", "b", "c"})[0]
		seen[want] = true
		for range 3 {
			if got := call(aff, key); got != want {
				t.Fatalf("%s went to %s, want its first replica %s", key, got, want)
			}
		}
	}
	if len(seen) < 2 {
		t.Fatalf("20 keys all ranked %v first: the test shows nothing", seen)
	}

	random := dial(balance.NameRandom)
	got := map[string]bool{}
	for range 30 {
		got[call(random, "key-0")] = true
	}
	if len(got) < 2 {
		t.Fatalf("control: under random, 30 calls with one key all went to %v", got)
	}
}

// TestServiceBalanceIsPerService: ServiceBalance gives one service its
// own policy, as Envoy's per-cluster lb_policy. Through one client whose
// own policy is random, keyed calls to "pcache" (affinity) stay on the
// key's first replica while the same key's calls to "work" spread.
func TestServiceBalanceIsPerService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seed, insecure := threeFakeReplicas(t, ctx)
	c, err := New(ctx, Config{Client: config.Client{Join: []string{seed}, Balance: balance.Config{Policy: balance.NameRandom},
		ServiceBalance: map[string]balance.Config{"pcache": {Policy: balance.NameAffinity}}}, Material: insecure})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, svc := range []string{"pcache", "work"} {
		for len(c.gossip.Lookup(svc, 0, "get").Replicas) < 3 {
			select {
			case <-ctx.Done():
				t.Fatalf("the client never saw the three nodes host %s", svc)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	call := func(svc, key string) string {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.Call(cctx, svc, 0, "get", nil, WithAffinity(key))
		if err != nil {
			t.Fatalf("%s with key %s: %v", svc, key, err)
		}
		return string(resp.Body)
	}
	want := balance.Rank("key-0", []string{"a", "b", "c"})[0]
	work := map[string]bool{}
	for range 30 {
		if got := call("pcache", "key-0"); got != want {
			t.Fatalf("pcache: key-0 went to %s, want its first replica %s", got, want)
		}
		work[call("work", "key-0")] = true
	}
	if len(work) < 2 {
		t.Fatalf("work (random): 30 calls with one key all went to %v", work)
	}
}

// TestServiceBalanceValidated: a bad per-service policy is refused by
// New, naming the field and the service.
func TestServiceBalanceValidated(t *testing.T) {
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{Client: config.Client{Join: []string{"127.0.0.1:1"},
		ServiceBalance: map[string]balance.Config{"pcache": {Policy: "sticky"}}}, Material: insecure})
	if !errors.Is(err, balance.ErrUnknownPolicy) || !strings.Contains(err.Error(), `ServiceBalance["pcache"]`) {
		t.Fatalf("New with an unknown per-service policy: %v, want ErrUnknownPolicy naming ServiceBalance[\"pcache\"]", err)
	}
}

// threeFakeReplicas starts fake nodes a, b and c, each hosting partition
// 0, and returns the seed to join and insecure material to dial with.
func threeFakeReplicas(t *testing.T, ctx context.Context) (string, *security.Material) {
	t.Helper()
	seed, _ := fakeNode(t, ctx, "a", 0, nil)
	fakeNode(t, ctx, "b", 0, []string{seed})
	fakeNode(t, ctx, "c", 0, []string{seed})
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return seed, insecure
}
