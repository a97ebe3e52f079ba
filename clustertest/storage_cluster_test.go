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

	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/internal/testfs"
	"github.com/neptune-cluster/neptune/lab/bench/appendbench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestListAppendThroughAFullDisk runs the durable list-append service on
// three node processes (level 2) while node a3's data directory, a small
// tmpfs, is filled to the last byte under load: a3 is primary of
// partition 2 and a follower of 0 and 1. The node must not exit: it logs
// an error naming its data directory and free space, its primary role
// moves, writes go on through the others, and once the filler is removed
// it resumes by itself; the history checker then finds no append lost,
// duplicated or divergent.
func TestListAppendThroughAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	full := testfs.Tmpfs(t, 96<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	var filled, freed time.Duration
	cfg := appendbench.Config{Exe: neptuneBinary(t), Dir: dir, Level: 2, Parts: 3, Appenders: 8, Keys: 4, Duration: 14 * time.Second,
		NodeDir: func(id string) string {
			if id == "a3" {
				return full
			}
			return dir + "/" + id
		},
		Extra: "storage:\n  reserve_bytes: 8388608\n",
	}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	var a3Log string
	cfg.Fault = func(ctx context.Context, cl *appendbench.Cluster) error {
		start := time.Now()
		a3 := cl.Nodes[2]
		a3Log = a3.LogPath
		for cl.Primary(2) != "a3" { // (by priority, once caught up)
			if time.Since(start) > 5*time.Second {
				return fmt.Errorf("primary of partition 2 is %q, want a3", cl.Primary(2))
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		filler := testfs.Fill(t, full, 0)
		filled = time.Since(start)
		time.Sleep(4 * time.Second)
		if err := syscall.Kill(a3.PID(), 0); err != nil {
			return fmt.Errorf("a3 is gone with its disk full: %w", err)
		}
		if p := cl.Primary(2); p == "a3" || p == "" {
			for _, n := range cl.Nodes {
				b, _ := os.ReadFile(n.LogPath)
				for _, l := range strings.Split(string(b), "\n") {
					if strings.Contains(l, "partition=2") || strings.Contains(l, "ERROR") || strings.Contains(l, "WARN") {
						t.Logf("%s: %s", n.Spec.ID, l)
					}
				}
			}
			return fmt.Errorf("primary of partition 2 is %q with a3's disk full, want another", p)
		}
		if err := os.Remove(filler); err != nil {
			return err
		}
		freed = time.Since(start)
		return nil
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
	rep := res.Report
	t.Logf("%d appends, %d retries in %v (disk filled at %v, freed at %v)\n%v", res.Appends, res.Retries, res.Elapsed.Round(time.Millisecond),
		filled.Round(time.Millisecond), freed.Round(time.Millisecond), rep)
	if rep.Count(check.Duplicated) != 0 || rep.Count(check.Lost) != 0 || rep.Count(check.Divergent) != 0 || !rep.Valid() {
		t.Errorf("list-append anomalies:\n%v", rep)
	}
	b, err := os.ReadFile(a3Log)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "data directory full") || strings.Contains(l, "storage failed") || strings.Contains(l, "has space again") ||
			strings.Contains(l, "reopened") {
			t.Log("a3: " + l)
		}
	}
	switch {
	case strings.Contains(log, "panic") || strings.Contains(log, "goroutine "):
		t.Errorf("a3 panicked:\n%s", log)
	case !strings.Contains(log, "data directory full") || !strings.Contains(log, "path="+full) || !strings.Contains(log, "free_bytes="):
		t.Errorf("a3 did not log an error naming its directory and free space")
	case !strings.Contains(log, "has space again"):
		t.Errorf("a3 did not say it resumed")
	}
	if rep.Acked < 500 {
		t.Errorf("too little happened to judge: %d acknowledged appends", rep.Acked)
	}
}

// TestCorruptReplicaRebuiltByCommand: bytes flipped in the middle of a
// stopped follower's write log. The node refuses to start, naming the
// command that repairs it; the command quarantines the replica, the node
// starts, and the replica is rebuilt from its peers to the primary's
// version.
func TestCorruptReplicaRebuiltByCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "q", "kv", 1, 2, "")
	put := func(from, to int) {
		for i := from; i < to; i++ {
			for {
				callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := c.Call(callCtx, "kv", 0, "put", fmt.Appendf(nil, "k%d=%0100d", i, i))
				cancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	put(0, 300)
	primary := primaryOf(c, 0)
	var n *localcluster.Node
	for _, m := range nodes {
		if m.Spec.ID != primary {
			n = m
			break
		}
	}
	dataDir := n.Spec.Args[slices.Index(n.Spec.Args, "-data-dir")+1]
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	seg := newestFile(t, filepath.Join(dataDir, "kv", "0"), ".log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[middleRecord(t, seg, b)+12] ^= 0xff // in a record with others after it
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = cl.Restart(ctx, n)
	cmd := fmt.Sprintf("neptune partition rebuild --data-dir %s --service kv --partition 0", dataDir)
	if err == nil || !strings.Contains(err.Error(), cmd) {
		t.Fatalf("restart with a corrupt write log: %v, want a refusal naming %q", err, cmd)
	}
	out, err := exec.Command(neptuneBinary(t), "partition", "rebuild", "--data-dir", dataDir, "--service", "kv", "--partition", "0").CombinedOutput()
	t.Logf("neptune partition rebuild: %s", out)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Restart(ctx, n); err != nil {
		t.Fatal(err)
	}
	put(300, 310)
	waitFor(t, 20*time.Second, func() bool {
		var want, got uint64
		for _, pi := range c.Partitions() {
			for _, r := range pi.Replicas {
				if r.Role == "primary" {
					want = r.Version
				}
				if r.Node == n.Spec.ID && r.Role == "secondary" {
					got = r.Version
				}
			}
		}
		return want > 0 && got == want
	})
	logb, _ := os.ReadFile(n.LogPath)
	if !strings.Contains(string(logb), `level=ERROR msg="write log corrupt`) {
		t.Error("the corruption was not logged at ERROR")
	}
}
