package clustertest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// largeWriteRSSFactor bounds a level-2 primary's resident memory per byte
// of its in-flight budget under large writes: each admitted byte is held
// about six times while the write runs (the decoded request, the write
// log's batch, the service's batch and its copy, one encoding per
// follower) and Go's collector lets the heap grow to twice its live size
// (docs/architecture/identity.md, "Request limits"). Measured: 6.5–11×
// the 64 MiB budget over idle; without the budget, 16 writes took the
// node 22× over idle.
const largeWriteRSSFactor = 12

// Eight, then sixteen, concurrent 15 MiB writes at a level-2 primary (a
// real node process, the default in-flight byte budget of 64 MiB): every
// call either succeeds or is refused with a retryable ErrOverloaded that
// says it never ran, the primary's peak resident memory stays within a
// bound derived from the budget, and a refused write sent again alone
// succeeds.
func TestLargeWritesStayWithinTheNodesByteBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "m", "kv", 1, 2, "")
	if _, err := writeRetrying(ctx, c, nil, 0, "k=v"); err != nil {
		t.Fatal(err)
	}
	// The writes go through a client with the default yellow-page
	// lifetime: a primary busy with 60 MiB of writes on a shared machine
	// may miss the test cluster's 1 s one, which is not what is tested;
	// and no retry policy, so each refusal is seen as it is.
	wc, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(),
		Retry: neptune.RetryPolicy{Budget: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	primary := ""
	waitFor(t, 20*time.Second, func() bool { primary = primaryOf(wc, 0); return primary != "" })
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
		ok, ref, other := largeWrites(ctx, wc, n)
		peak, err := localcluster.PeakRSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d concurrent 15 MiB writes at primary %s: %d ok, %d refused ErrOverloaded, %d other; peak RSS %d MiB (%d MiB before the first round)",
			n, primary, ok, len(ref), len(other), peak>>20, idle>>20)
		for _, err := range other {
			t.Errorf("write failed with neither success nor ErrOverloaded: %v", err)
		}
		if ok == 0 || len(ref) == 0 {
			t.Errorf("%d concurrent writes: %d succeeded, %d refused; want some of each (4 fit the budget)", n, ok, len(ref))
		}
		refused = append(refused, ref...)
	}
	for _, err := range refused {
		var unknown *neptune.UnknownOutcomeError
		if errors.As(err, &unknown) && unknown.Identified && !strings.Contains(err.Error(), "node "+primary+"'s") {
			// Refused by a node other than the primary: the call moved
			// there after an attempt at the primary that may have run (a
			// node busy with 60 MiB of writes on a shared machine can
			// lose its lease), so its outcome is unknown, and its
			// identity makes the retry safe.
			t.Logf("refused after an attempt elsewhere: %v", err)
			continue
		}
		if !neptune.Retryable(err) || errors.As(err, &unknown) {
			t.Errorf("refused write: %v: want a retryable ErrOverloaded that never ran", err)
		}
	}
	if len(refused) > 0 {
		t.Logf("refused: %v", refused[0])
	}
	peak, err := localcluster.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if bound := idle + largeWriteRSSFactor*neptune.DefaultMaxInflightBytes; peak > bound {
		t.Errorf("primary's peak RSS %d MiB, over %d MiB (idle + %d × the in-flight byte budget of %d MiB)",
			peak>>20, bound>>20, largeWriteRSSFactor, neptune.DefaultMaxInflightBytes>>20)
	}
	// A refused write sent again once the others are done succeeds.
	if _, err := wc.Call(ctx, "kv", 0, "put", append([]byte("big="), bytes.Repeat([]byte{'y'}, 15<<20)...)); err != nil {
		t.Errorf("a 15 MiB write alone: %v", err)
	}
}
