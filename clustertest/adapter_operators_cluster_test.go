package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestProgramOperatorsCrashAndHangOnNodeProcesses: two node processes
// host partitions 0-3 and 4-7 of two services whose aggregation
// operators run outside the node (adapter/testdata/aggops.py): "opexec"
// runs the program once per operator, "ophttp" asks an HTTP program. An
// aggregation whose local operator crashes on partition 3 (the process
// kills itself; the HTTP handler dies without answering) and hangs on
// partition 5 returns by its deadline without exactly those two
// partitions, with the right sum; both nodes keep serving, and the next
// aggregation is full.
func TestProgramOperatorsCrashAndHangOnNodeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is missing but CI is set: .ci/run installs it")
		}
		t.Skip("python3 not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	dir := t.TempDir()
	// The program runs in each partition's directory: absolute paths, and
	// the interpreter itself rather than a shim that looks it up per run.
	script, err := filepath.Abs(filepath.Join(repoRoot, "adapter", "testdata", "aggops.py"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		py = strings.TrimSpace(string(out))
	}
	base := startAggOps(t, py, script)
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i, parts := range []string{"[0, 1, 2, 3]", "[4, 5, 6, 7]"} {
		id := fmt.Sprintf("n%d", i+1)
		cfg := filepath.Join(dir, id+".yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`services:
  - name: opexec
    partitions: %[1]s
    exec:
      command: %[2]s
      data_dir: %[3]s
      aggregate:
        local: [{name: count, args: [%[4]s, local]}]
        reduce: [{name: sum, args: [%[4]s, reduce]}]
  - name: ophttp
    partitions: %[1]s
    http:
      base_url: %[5]s
      aggregate:
        local: [{name: count, route: /local}]
        reduce: [{name: sum, route: /reduce}]
`, parts, py, filepath.Join(dir, id+"-data"), script, base)), 0o644); err != nil {
			t.Fatal(err)
		}
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"-config", cfg, "-announce-interval", "200ms", "-announce-ttl", "10s"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c := dialMembers(t, ctx, cl, 2, 15*time.Second)

	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	const deadline = 4 * time.Second
	agg := func(service string, quality float64, params string) (*neptune.AggregateResult, time.Duration, error) {
		start := time.Now()
		res, err := c.Aggregate(ctx, neptune.Aggregation{
			Service: service, Partitions: all, Local: "count", Reduce: "sum", LocalParams: []byte(params),
			Quality: quality, Deadline: deadline, ReduceBudget: 400 * time.Millisecond,
		})
		return res, time.Since(start), err
	}
	sum := func(res *neptune.AggregateResult) int {
		n, _ := strconv.Atoi(string(res.Data))
		return n
	}
	// Every call starts a program per partition (opexec): on a machine
	// loaded by two test runs beside a CPU hog, calls missed their 4 s
	// deadline for 20 s after the nodes were up.
	full := func(service, when string) {
		t.Helper()
		waitFor(t, 40*time.Second, func() bool {
			res, _, err := agg(service, 1, "")
			if err != nil || res.Status != neptune.AggregateFull || sum(res) != int(sumOf(all)) {
				t.Logf("%s%s: %+v, %v; want full", service, when, res, err)
				return false
			}
			return true
		})
	}
	for _, service := range []string{"opexec", "ophttp"} {
		full(service, "")
		res, took, err := agg(service, 0.5, `{"crash": [3], "hang": [5]}`)
		want := []int{0, 1, 2, 4, 6, 7}
		if err != nil || res.Status != neptune.AggregatePartial || !slices.Equal(res.Contributing, want) || sum(res) != int(sumOf(want)) || res.Coverage != 0.75 {
			t.Fatalf("%s with a crash and a hang: %+v (%q), %v; want partitions %v summing to %d", service, res, res.Data, err, want, sumOf(want))
		}
		if took > deadline+2*time.Second {
			t.Fatalf("%s with a hung operator returned after %v, deadline %v", service, took, deadline)
		}
		for _, n := range nodes {
			if err := syscall.Kill(n.PID(), 0); err != nil {
				t.Fatalf("%s: node %s is gone: %v", service, n.Spec.ID, err)
			}
		}
		// Nothing stays broken: a full result again, once the crashed
		// program is restarted (on a loaded machine one call may still
		// miss a partition's 4 s deadline: 7 of 8 beside two test runs).
		full(service, " after the faults")
	}
}

// startAggOps runs aggops.py as an HTTP program and returns its base URL.
func startAggOps(t *testing.T, py, script string) string {
	t.Helper()
	cmd := exec.Command(py, script, "serve")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("aggops.py said %q, %v", line, err)
	}
	return "http://127.0.0.1:" + port
}
