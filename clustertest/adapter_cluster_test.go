package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestProgramsClusteredUnchanged clusters an unmodified Python HTTP
// service and grep on two real node processes: each node hosts two
// partitions backed by its own program instance; calls through Neptune
// reach the right one, and program errors and a hung program come back as
// clear errors.
func TestProgramsClusteredUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	pys := []string{startPython(t), startPython(t)}
	files := map[int]string{0: "apple\nbanana\n", 1: "apricot\n", 2: "grape\nmango\n", 3: "papaya\n"}
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	for i, parts := range []string{"[0, 1]", "[2, 3]"} {
		nodeDir := filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		for p := 2 * i; p < 2*i+2; p++ {
			pdir := filepath.Join(nodeDir, "grep", fmt.Sprint(p))
			if err := os.MkdirAll(pdir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pdir, "fruit.txt"), []byte(files[p]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cfg := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i+1))
		if err := os.WriteFile(cfg, []byte(nodeConfig(pys[i], nodeDir, parts, i == 0)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("n%d", i+1), Args: []string{"-config", cfg, "-announce-interval", "200ms", "-announce-ttl", "2s"}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(service string, part int, method string, body string) (string, error) {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.Call(callCtx, service, part, method, []byte(body))
		if err != nil {
			return "", err
		}
		return string(resp.Body), nil
	}
	waitFor(t, 15*time.Second, func() bool {
		for p := range 4 {
			if _, err := call("grep", p, "search", "x"); err != nil {
				return false
			}
		}
		return true
	})

	for p := range 4 {
		if _, err := call("pykv", p, "put", fmt.Sprintf("k=v%d", p)); err != nil {
			t.Fatalf("put on partition %d: %v", p, err)
		}
	}
	for p := range 4 {
		if got, err := call("pykv", p, "get", "k"); err != nil || got != fmt.Sprintf("v%d", p) {
			t.Fatalf("get on partition %d = %q, %v", p, got, err)
		}
	}
	// Partitions 2 and 3 live in the second Python process only.
	for i, want := range []string{"404", "200"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", pys[i]+"/get", strings.NewReader("k"))
		req.Header.Set("Neptune-Partition", "2")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := fmt.Sprint(resp.StatusCode); got != want {
			t.Fatalf("python %d, partition 2: status %s, want %s", i+1, got, want)
		}
	}
	if _, err := call("pykv", 1, "get", "nokey"); err == nil || !strings.Contains(err.Error(), "status 404") || !strings.Contains(err.Error(), "no key 'nokey'") {
		t.Fatalf("missing key: err = %v, want the program's 404 message", err)
	}
	if _, err := call("pykv", 2, "put", "novalue"); err == nil || !strings.Contains(err.Error(), "status 400: put wants key=value") {
		t.Fatalf("malformed put: err = %v, want the program's 400 message", err)
	}

	for _, tc := range []struct {
		part    int
		pattern string
		want    []string
	}{{0, "an", []string{"banana"}}, {1, "ap", []string{"apricot"}}, {2, "ap", []string{"grape"}}, {3, "ap", []string{"papaya"}}, {3, "kiwi", nil}} {
		got, err := call("grep", tc.part, "search", tc.pattern+"\n")
		if err != nil {
			t.Fatalf("grep %q on partition %d: %v", tc.pattern, tc.part, err)
		}
		lines := strings.Fields(got)
		slices.Sort(lines)
		if !slices.Equal(lines, tc.want) {
			t.Fatalf("grep %q on partition %d = %q, want %q", tc.pattern, tc.part, lines, tc.want)
		}
	}

	start := time.Now()
	_, err = call("hang", 0, "run", "")
	if !errors.Is(err, neptune.ErrDeadline) || !strings.Contains(err.Error(), "killed after 300ms") {
		t.Fatalf("hung program: err = %v, want a deadline error naming the timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("hung program answered after %v, want the 300ms timeout plus overhead", d)
	}
}
