package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/lab/bench/appendbench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestRollingRestartFailsNoCall is issue 29's rolling restart: every node
// of a three-node level-2 cluster is stopped with SIGTERM (it drains: its
// primaries handed over, its calls in flight finished), restarted on its
// data and given time to catch up, one after the other, under 24
// appenders whose client makes one try per call (no retry policy: what a
// caller sees is what the cluster does). No call fails, and the
// list-append checker finds every acknowledged append exactly once on
// identical replicas.
func TestRollingRestartFailsNoCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var drains []string
	cfg := appendbench.Config{Exe: neptuneBinary(t), Dir: t.TempDir(), Level: 2, Parts: 2, Appenders: 24, Keys: 8,
		Duration: 4 * time.Second, Retry: config.NoRetry, Fault: func(ctx context.Context, cl *appendbench.Cluster) error {
			for _, n := range cl.Nodes {
				led := []string{}
				for p := range 2 {
					if cl.Primary(p) == n.Spec.ID {
						led = append(led, fmt.Sprint(p))
					}
				}
				took, err := n.Stop(20 * time.Second)
				if err != nil {
					return err
				}
				drains = append(drains, fmt.Sprintf("%s (primary of %v) drained in %v", n.Spec.ID, led, took.Round(time.Millisecond)))
				if err := cl.Restart(ctx, n); err != nil {
					return err
				}
				if err := waitCaughtUp(ctx, cl, n.Spec.ID); err != nil {
					return err
				}
			}
			return nil
		}}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cl, err := appendbench.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d appends, %d failed calls, %d retries in %v; %s\n%v", res.Appends, res.Errors, res.Retries, res.Elapsed.Round(time.Millisecond),
		strings.Join(drains, ", "), res.Report)
	rep := res.Report
	if rep.Count(check.Duplicated) != 0 || rep.Count(check.Lost) != 0 || rep.Count(check.Divergent) != 0 || !rep.Valid() {
		t.Errorf("list-append anomalies:\n%v", rep)
	}
	if res.Errors != 0 {
		t.Errorf("%d calls failed during the rolling restart, want 0", res.Errors)
	}
	if len(drains) != 3 || rep.Acked < 500 {
		t.Errorf("too little happened to judge: %d nodes restarted, %d acknowledged appends", len(drains), rep.Acked)
	}
}

// TestOperatorDrainsANode: `neptune node drain` with an operator's
// certificate moves the node's primary roles elsewhere and its process
// exits; a client's certificate is refused and changes nothing.
func TestOperatorDrainsANode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := neptuneBinary(t)
	cl, err := localcluster.NewSecure(bin, t.TempDir(), "drain")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte("services:\n  - name: kv\n    partitions: 0-1\n    replication: {level: 2, degree: 3, nodes: [d1, d2, d3]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var nodes []*localcluster.Node
	for i := range 3 {
		n, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("d%d", i+1), Args: []string{"--config", cfg, "--data-dir", filepath.Join(t.TempDir(), "data")}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Security: cl.ClientSecurity("client/client")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := localcluster.WaitServing(ctx, c, "kv", 2, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	target, err := localcluster.Primary(ctx, c, "kv", 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	drain := func(cert string) (string, error) {
		args := append([]string{"node", "drain", "--join", strings.Join(cl.Seeds(), ","), "--node", target}, cl.SecurityArgs(cert)...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := drain("client/client"); err == nil || !strings.Contains(out, "role client may not call it") {
		t.Fatalf("drain with a client certificate: %v\n%s", err, out)
	}
	out, err := drain("operator/operator")
	if err != nil {
		t.Fatalf("drain %s: %v\n%s", target, err, out)
	}
	t.Log(strings.TrimSpace(out))
	i := slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == target })
	waitFor(t, 20*time.Second, func() bool { return syscall.Kill(nodes[i].PID(), 0) != nil })
	for p := range 2 {
		waitFor(t, 10*time.Second, func() bool {
			pr, err := localcluster.Primary(ctx, c, "kv", p, time.Second)
			return err == nil && pr != target
		})
	}
}
