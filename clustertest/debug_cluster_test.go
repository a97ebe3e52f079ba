package clustertest

import (
	"archive/zip"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDebugZip: `neptune debug zip` on three secured node processes, one
// of them stopped (SIGSTOP: in the yellow pages, answering nothing). The
// archive holds each live node's status, config without secrets,
// metrics, recent logs, profiles and dashboard views; the stopped node is
// listed as not reachable and the command succeeds. A client certificate
// is refused: no node answers it.
func TestDebugZip(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	exe := neptuneBinary(t)
	cl, nodes, _ := appProcs(t, ctx, "z", "kv", 1, 2, "")
	if err := nodes[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer nodes[2].Resume()
	file := filepath.Join(t.TempDir(), "debug.zip")
	args := []string{"debug", "zip", "--join", strings.Join(cl.Seeds()[:2], ","), "--file", file, "--cpu", "1s", "--timeout", "3s", "--wait", "300ms"}
	out, err := exec.CommandContext(ctx, exe, append(args, cl.SecurityArgs("operator/operator")...)...).CombinedOutput()
	t.Logf("neptune debug zip: %v\n%s", err, out)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string]string{}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(b)
	}
	for _, id := range []string{"z1", "z2"} {
		for name, want := range map[string]string{
			"status.json":               `"node": "` + id + `"`,
			"config.json":               `"keyring": "[redacted]"`,
			"metrics.txt":               "neptune_members",
			"logs.txt":                  "node started",
			"goroutines.txt":            "goroutine ",
			"heap.pb.gz":                "\x1f\x8b",
			"cpu.pb.gz":                 "\x1f\x8b",
			"dashboard/cluster.json":    `"members"`,
			"dashboard/partitions.json": `"partitions"`,
		} {
			got, ok := files["nodes/"+id+"/"+name]
			if !ok || !strings.Contains(got, want) {
				t.Errorf("nodes/%s/%s: present %v, want it to hold %q; starts %q", id, name, ok, want, got[:min(len(got), 200)])
			}
		}
		if cfg := files["nodes/"+id+"/config.json"]; strings.Contains(cfg, "PRIVATE KEY") || strings.Contains(cfg, "BEGIN") {
			t.Errorf("nodes/%s/config.json holds key material:\n%s", id, cfg)
		}
	}
	var summary struct {
		Nodes []struct {
			Node      string
			Reachable bool
			Errors    map[string]string
		}
	}
	if err := json.Unmarshal([]byte(files["summary.json"]), &summary); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, files["summary.json"])
	}
	listed := false
	for _, n := range summary.Nodes {
		if n.Node == "z3" {
			listed = !n.Reachable && len(n.Errors) > 0
		}
	}
	if !listed {
		t.Errorf("the stopped node z3 is not listed as unreachable in summary.json:\n%s", files["summary.json"])
	}
	for _, name := range []string{"cluster/members.json", "cluster/partitions.json"} {
		if _, ok := files[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}

	// A client certificate may not collect.
	args = []string{"debug", "zip", "--join", strings.Join(cl.Seeds()[:2], ","), "--file", filepath.Join(t.TempDir(), "c.zip"), "--cpu", "0", "--timeout", "3s", "--wait", "300ms"}
	out, err = exec.CommandContext(ctx, exe, append(args, cl.SecurityArgs("client/client")...)...).CombinedOutput()
	t.Logf("neptune debug zip as a client: %v\n%s", err, out)
	if err == nil || !strings.Contains(string(out), "no node answered") || !strings.Contains(string(out), "role client may not call") {
		t.Errorf("a client's debug zip: err %v, want it refused by role", err)
	}
}
