package clustertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestKilledNodeLeavesYellowPagesWithinTTLAndRejoins runs three real node
// processes, SIGKILLs one, and checks that it disappears from the yellow
// pages within the TTL while calls keep succeeding, then that it rejoins
// after a restart.
func TestKilledNodeLeavesYellowPagesWithinTTLAndRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	const interval, ttl = 200 * time.Millisecond, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := localcluster.New(neptuneBinary(t), t.TempDir())
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range 3 {
		n, err := cl.Start(ctx, localcluster.Spec{
			ID:       fmt.Sprintf("n%d", i+1),
			Services: []string{"echo:0"},
			Args:     []string{"-announce-interval", interval.String(), "-announce-ttl", ttl.String()},
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(), AnnounceTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, func() bool { return len(memberIDs(ctx, c)) == 3 })

	call := func() error {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := c.Call(callCtx, "echo", 0, "echo", []byte("ping"))
		if err == nil && string(resp.Body) != "ping" {
			err = fmt.Errorf("echo answered %q", resp.Body)
		}
		return err
	}
	for range 20 {
		if err := call(); err != nil {
			t.Fatalf("before the kill: %v", err)
		}
	}

	victim := nodes[2]
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	gone := false
	for time.Since(killed) < ttl+300*time.Millisecond {
		if err := call(); err != nil {
			t.Fatalf("call %v after the kill failed: %v", time.Since(killed), err)
		}
		if !slices.Contains(memberIDs(ctx, c), "n3") {
			gone = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !gone {
		t.Fatalf("n3 still in the yellow pages %v after SIGKILL (TTL %v): %v", time.Since(killed), ttl, memberIDs(ctx, c))
	}
	t.Logf("n3 left the yellow pages %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	for range 50 {
		if err := call(); err != nil {
			t.Fatalf("after n3 left: %v", err)
		}
	}

	if err := cl.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return slices.Contains(memberIDs(ctx, c), "n3") })
	for range 20 {
		if err := call(); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
}
