package neptune_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// largeWrites fires n concurrent 15 MiB kv puts of one key (each under the 16 MiB
// message limit) at partition 0 and counts how they ended.
func largeWrites(ctx context.Context, c *neptune.Client, n int) (ok int, refused []error, other []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			body := append([]byte("big="), bytes.Repeat([]byte{'x'}, 15<<20)...)
			_, err := c.Call(ctx, "kv", 0, "put", body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, neptune.ErrOverloaded):
				refused = append(refused, err)
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	return ok, refused, other
}

// Eight, then sixteen, concurrent 15 MiB writes at a level-2 primary (a
// real node process, the default in-flight byte budget): the node's peak
// resident memory stays within the budget plus a margin, every call
// either succeeds or is refused with a retryable ErrOverloaded that says
// it never ran, and a refused write retried afterwards succeeds.
func TestLargeWritesStayWithinTheNodesByteBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, nodes, c := appProcs(t, ctx, "m", "kv", 1, 2, "")
	if _, err := writeRetrying(ctx, c, nil, 0, "k=v"); err != nil {
		t.Fatal(err)
	}
	primary := primaryOf(c, 0)
	var pid int
	for _, n := range nodes {
		if n.Spec.ID == primary {
			pid = n.PID()
		}
	}
	if pid == 0 {
		t.Fatalf("no process for primary %q", primary)
	}
	idle, err := localcluster.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	var refused []error
	for _, n := range []int{8, 16} {
		ok, ref, other := largeWrites(ctx, c, n)
		peak, err := localcluster.PeakRSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d concurrent 15 MiB writes at primary %s: %d ok, %d refused ErrOverloaded, %d other; peak RSS %d MiB (%d MiB before the first round)",
			n, primary, ok, len(ref), len(other), peak>>20, idle>>20)
		for _, err := range other {
			t.Errorf("write failed with neither success nor ErrOverloaded: %v", err)
		}
		if ok == 0 {
			t.Errorf("%d concurrent writes: none succeeded", n)
		}
		refused = append(refused, ref...)
	}
	for _, err := range refused {
		var unknown *neptune.UnknownOutcomeError
		if !neptune.Retryable(err) || errors.As(err, &unknown) {
			t.Errorf("refused write: %v: want a retryable ErrOverloaded that never ran", err)
		}
	}
	if len(refused) > 0 {
		t.Logf("refused: %v", refused[0])
	}
	// A refused write, retried once the others are done, succeeds.
	if _, err := c.Call(ctx, "kv", 0, "put", append([]byte("big="), bytes.Repeat([]byte{'y'}, 15<<20)...)); err != nil {
		t.Errorf("a 15 MiB write alone: %v", err)
	}
	peak, err := localcluster.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 64 << 20 // neptune.DefaultMaxInflightBytes
	if bound := int64(budget + 200<<20); peak > bound {
		t.Errorf("primary's peak RSS %d MiB, over %d MiB (the in-flight byte budget %d MiB + 200 MiB)", peak>>20, bound>>20, budget>>20)
	}
}
