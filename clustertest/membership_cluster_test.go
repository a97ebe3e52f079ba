package clustertest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestReplicaMoveWhileWriting moves kv partition 0's replica from node m3
// to a fourth node, m4, with `neptune partition move` while a writer keeps
// writing to partitions 0 and 1. m4 runs the same config (its replica set
// names m1-m3: it hosts kv on standby). The command adds m4, waits until
// it caught up and votes, then removes m3. Writes keep being acknowledged
// throughout; at the end partition 0's replicas are m1, m2 and m4, m3 no
// longer announces it, the three are identical and hold every
// acknowledged write, and partition 1 is untouched. Then `neptune
// partition apply` with the config file moves partition 0 back to m3.
func TestReplicaMoveWhileWriting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "m", "kv", 2, 2, "placement: {off: true}\n") // the operator moves replicas here, not placement
	args := slices.Clone(nodes[0].Spec.Args)
	dataDir := slices.Index(args, "-data-dir") + 1
	args[dataDir] = filepath.Join(filepath.Dir(args[dataDir]), "m4")
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "m4", Args: args}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { _, ok := nodeAddrs(ctx, c)["m4"]; return ok })
	if reps := replicasOf(c, 0); slices.Contains(reps, "m4") {
		t.Fatalf("m4 announces partition 0 before it was added: %v", reps)
	}

	w := &writer{c: c, sess: neptune.NewSession(), acked: map[int][]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, stop, false) }()
	time.Sleep(time.Second)
	w.mu.Lock()
	steady0 := len(w.acked[0])
	w.mu.Unlock()
	time.Sleep(2 * time.Second) // a steady window to compare the move's with
	w.mu.Lock()
	before := len(w.acked[0])
	w.mu.Unlock()
	steady := float64(before-steady0) / 2

	cmd := exec.CommandContext(ctx, neptuneBinary(t), append([]string{"partition", "move", "--join", strings.Join(cl.Seeds(), ","),
		"--timeout", "30s", "kv", "0", "m3", "m4"}, cl.SecurityArgs("operator/operator")...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	t.Logf("partition move took %v:\n%s%s", took.Round(time.Millisecond), out.String(), errOut.String())
	if err != nil || !strings.Contains(out.String(), "add m4: done") || !strings.Contains(out.String(), "remove m3: done") {
		t.Fatalf("partition move: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	w.mu.Lock()
	during := len(w.acked[0]) - before
	w.mu.Unlock()
	if during == 0 {
		t.Error("no write acknowledged on partition 0 during the move")
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("acknowledged %d+%d writes (%d on partition 0 during the move); longest gap between acknowledgements %v",
		len(w.acked[0]), len(w.acked[1]), during, w.gap.Round(time.Millisecond))
	// (Reported, not asserted: one sequential writer on a shared machine.)
	t.Logf("partition 0 writes/s: steady %.1f, during the move %.1f", steady, float64(during)/took.Seconds())

	waitFor(t, 10*time.Second, func() bool {
		reps := replicasOf(c, 0)
		slices.Sort(reps)
		return slices.Equal(reps, []string{"m1", "m2", "m4"})
	})
	for p, want := range map[int][]string{0: {"m1", "m2", "m4"}, 1: {"m1", "m2", "m3"}} {
		verifyOn(t, ctx, cl, c, p, want, w.acked[p])
	}

	// The same from config: the file still names m1-m3, and apply moves
	// partition 0 back (partition 1 is as declared).
	apply := func(extra ...string) string {
		cmd := exec.CommandContext(ctx, neptuneBinary(t), append(append([]string{"partition", "apply", "--join", strings.Join(cl.Seeds(), ","),
			"--config", args[slices.Index(args, "-config")+1], "--timeout", "30s"}, extra...), cl.SecurityArgs("operator/operator")...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("partition apply %v: %v\n%s", extra, err, out)
		}
		return string(out)
	}
	plan := apply("--dry-run")
	if !strings.Contains(plan, "kv partition 0: would add m3") || !strings.Contains(plan, "kv partition 0: would remove m4") ||
		!strings.Contains(plan, "as declared") {
		t.Fatalf("partition apply --dry-run:\n%s", plan)
	}
	t.Logf("partition apply:\n%s", apply())
	waitFor(t, 10*time.Second, func() bool {
		reps := replicasOf(c, 0)
		slices.Sort(reps)
		return slices.Equal(reps, []string{"m1", "m2", "m3"})
	})
	verifyOn(t, ctx, cl, c, 0, []string{"m1", "m2", "m3"}, w.acked[0])

	// A priority above every other replica's moves the primary role for
	// good: `neptune partition priority` makes m2 partition 0's primary.
	if primaryOf(c, 0) == "m2" {
		t.Fatal("m2 is partition 0's primary already: the priority step would show nothing")
	}
	cmd = exec.CommandContext(ctx, neptuneBinary(t), append([]string{"partition", "priority", "--join", strings.Join(cl.Seeds(), ","),
		"--timeout", "30s", "kv", "0", "m2", "10"}, cl.SecurityArgs("operator/operator")...)...)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "priority of m2 to 10: done") {
		t.Fatalf("partition priority: %v\n%s", err, out)
	}
	waitFor(t, 10*time.Second, func() bool { return primaryOf(c, 0) == "m2" })
}
