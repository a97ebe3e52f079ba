package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestReplicationPromoteNeedsAMajorityUnlessForced runs `neptune partition
// promote` on three node processes after two of them were SIGKILLed: the
// survivor cannot win a majority's votes, so the command says so and
// exits 1, changing nothing; with --force it first prints which
// acknowledged versions may be lost, then makes the survivor primary.
// Once a second replica is back, writes commit again and every write
// acknowledged before the kills is still there (the survivor held them).
func TestReplicationPromoteNeedsAMajorityUnlessForced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "p", "kv", 1, 2, "")
	var keys []string
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Call(callCtx, "kv", 0, "put", []byte(key+"=v"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	time.Sleep(300 * time.Millisecond) // the secondaries learn the last commit point
	primary := primaryOf(c, 0)
	var survivor *localcluster.Node
	var killed []*localcluster.Node
	for _, n := range nodes {
		if n.Spec.ID != primary && survivor == nil {
			survivor = n
			continue
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, n)
	}
	join := []string{survivor.GossipAddr}
	promote := func(extra ...string) (int, string, string) {
		args := append([]string{"partition", "promote", "--join", strings.Join(join, ","), "--service", "kv", "--partition", "0",
			"--node", survivor.Spec.ID}, cl.SecurityArgs("operator/operator")...)
		cmd := exec.CommandContext(ctx, neptuneBinary(t), append(args, extra...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}

	code, stdout, stderr := promote()
	if code != 1 || !strings.Contains(stderr, "did not win a majority") {
		t.Fatalf("promote of a lone survivor: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 saying it did not win a majority", code, stdout, stderr)
	}
	code, stdout, stderr = promote("--force")
	if code != 0 || !strings.Contains(stdout, "WARNING") || !strings.Contains(stdout, "is primary") {
		t.Fatalf("forced promote: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	t.Logf("forced promote said:\n%s", stdout)

	if err := cl.Restart(ctx, killed[len(killed)-1]); err != nil {
		t.Fatal(err)
	}
	put := func(key string) error {
		var err error
		for ctx.Err() == nil {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = c.Call(callCtx, "kv", 0, "put", []byte(key+"=v"))
			cancel()
			if err == nil {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return err
	}
	if err := put("after"); err != nil {
		t.Fatalf("no write committed after the forced promote and a restart: %v", err)
	}
	for _, key := range append(keys, "after") {
		var err error
		for range 100 {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var resp *neptune.Response
			resp, err = c.Call(callCtx, "kv", 0, "get", []byte(key))
			cancel()
			if err == nil && string(resp.Body) == "v" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("acknowledged key %s lost after the forced promote: %v", key, err)
		}
	}
}
