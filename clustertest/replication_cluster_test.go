package clustertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// writer writes unique keys to partitions 0 and 1 until stop, retrying
// each until it is acknowledged or its attempts run out, and records the
// client history.
type writer struct {
	c     *neptune.Client
	sess  *neptune.Session
	mu    sync.Mutex
	acked map[int][]string // partition -> acknowledged keys
	ops   []check.Op
	gap   time.Duration // longest time between acknowledgements
}

func (w *writer) run(ctx context.Context, stop <-chan struct{}, reads bool) {
	last := time.Now()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		p, key := i%2, fmt.Sprintf("w%d", i)
		start := time.Now()
		for ctx.Err() == nil {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := w.c.Call(callCtx, "kv", p, "put", []byte(key+"=v"), neptune.WithSession(w.sess))
			cancel()
			if err == nil {
				now := time.Now()
				w.mu.Lock()
				w.acked[p] = append(w.acked[p], key)
				w.ops = append(w.ops, check.Op{Session: "s", Kind: check.Write, Partition: fmt.Sprint(p), Version: resp.Version, Start: start, End: now})
				w.gap = max(w.gap, now.Sub(last))
				w.mu.Unlock()
				last = now
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if reads && ctx.Err() == nil {
			start := time.Now()
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := w.c.Call(callCtx, "kv", p, "get", []byte(key), neptune.WithSession(w.sess))
			cancel()
			if err == nil {
				w.mu.Lock()
				w.ops = append(w.ops, check.Op{Session: "s", Kind: check.Read, Partition: fmt.Sprint(p), Version: resp.Version, Start: start, End: time.Now()})
				w.mu.Unlock()
			}
		}
	}
}

// TestReplicaKillAndRestartLosesNoAcknowledgedWrite runs a writer stream
// against three real node processes while the primary of partition 0 is
// SIGKILLed and restarted, and then a secondary; at the end all replicas
// hold the same state and every acknowledged write.
func TestReplicaKillAndRestartLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, nodes, c := replProcs(t, ctx, 2)
	w := &writer{c: c, sess: neptune.NewSession(), acked: map[int][]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, stop, false) }()
	for _, victim := range []string{"primary", "secondary"} {
		time.Sleep(500 * time.Millisecond)
		primary := waitPrimary(t, c, 0) // after the first kill it may still be electing
		target := primary
		if victim == "secondary" {
			target = map[string]string{"r1": "r2", "r2": "r3", "r3": "r1"}[primary]
		}
		node := nodes[slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == target })]
		w.mu.Lock()
		before := len(w.acked[0])
		w.mu.Unlock()
		if err := node.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := cl.Restart(ctx, node); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		during := len(w.acked[0]) - before
		w.mu.Unlock()
		t.Logf("killed and restarted %s (%s of partition 0); %d writes acknowledged on partition 0 meanwhile", target, victim, during)
		if during == 0 {
			t.Errorf("no write acknowledged on partition 0 while the %s was down", victim)
		}
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("acknowledged %d+%d writes; longest gap between acknowledgements %v", len(w.acked[0]), len(w.acked[1]), w.gap.Round(time.Millisecond))
	verifyReplicas(t, ctx, cl, c, w.acked, false)
}

// TestLevel3HistoryThroughFailover records a session's writes and reads at
// level 3 across a primary kill and verifies read-your-writes, monotonic
// reads and the staleness bound with the history checker; then that the
// replicas converged with every acknowledged write.
func TestLevel3HistoryThroughFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, nodes, c := replProcs(t, ctx, 3)
	w := &writer{c: c, sess: neptune.NewSession(), acked: map[int][]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, stop, true) }()
	time.Sleep(500 * time.Millisecond)
	primary := primaryOf(c, 1)
	node := nodes[slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == primary })]
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := cl.Restart(ctx, node); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	reads := 0
	timeline := map[string]check.Timeline{}
	for _, o := range w.ops {
		if o.Kind == check.Write {
			// An acknowledged write at LSN v means the primary had v by its end.
			tl := timeline[o.Partition]
			if len(tl) == 0 || tl[len(tl)-1].Version < o.Version {
				timeline[o.Partition] = append(tl, check.Point{At: o.End, Version: o.Version})
			}
		} else {
			reads++
		}
	}
	if reads < 10 {
		t.Fatalf("only %d reads recorded", reads)
	}
	if vs := check.Sessions(w.ops); len(vs) > 0 {
		t.Fatalf("%d session violations, first: %v", len(vs), vs[0])
	}
	const x = time.Second // the default staleness bound
	if vs := check.Staleness(w.ops, timeline, x, 200*time.Millisecond); len(vs) > 0 {
		t.Fatalf("%d staleness violations, first: %v", len(vs), vs[0])
	}
	t.Logf("%d operations (%d reads) satisfy read-your-writes, monotonic reads and staleness <= x+eps", len(w.ops), reads)
	verifyReplicas(t, ctx, cl, c, w.acked, false)
}

// TestLevel1ConvergesAfterAReplicaRestart: write-anywhere replicas converge
// and keep every acknowledged write through a SIGKILL and restart.
func TestLevel1ConvergesAfterAReplicaRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, nodes, c := replProcs(t, ctx, 1)
	w := &writer{c: c, sess: neptune.NewSession(), acked: map[int][]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, stop, false) }()
	time.Sleep(500 * time.Millisecond)
	if err := nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := cl.Restart(ctx, nodes[1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	verifyReplicas(t, ctx, cl, c, w.acked, true)
}
