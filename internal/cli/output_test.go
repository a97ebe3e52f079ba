package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/backup"
)

// status -o json prints one JSON document a program can read: the
// members with their services, and the partitions (none here).
func TestStatusJSON(t *testing.T) {
	n := startEcho(t, "a")
	code, out, stderr := run(t, []string{"status", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms", "-o", "json"})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc statusJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Members) != 1 || doc.Members[0].Node != "a" || len(doc.Members[0].Services) == 0 || doc.Members[0].Services[0].Name != "echo" ||
		doc.Partitions == nil || len(doc.Partitions) != 0 {
		t.Errorf("status -o json: %+v\n%s", doc, out)
	}
	for _, k := range []string{`"members"`, `"rpc_addr"`, `"age_ms"`, `"partitions":[]`} {
		if !strings.Contains(out, k) {
			t.Errorf("output lacks %s:\n%s", k, out)
		}
	}
	code, _, stderr = run(t, []string{"status", "--insecure", "--join", n.GossipAddr(), "-o", "yaml"})
	if code != ExitUsage || !strings.Contains(stderr, "--output must be text or json") {
		t.Errorf("-o yaml: exit %d, %q", code, stderr)
	}
}

// restore verifies a backup and seeds a data directory, printing what it
// holds; piped, it shows no progress on stderr. A data directory that
// already holds the service's replicas is refused.
func TestRestoreSeedsAndIsQuietWhenPiped(t *testing.T) {
	dir := t.TempDir()
	s, err := backup.NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write([]byte{0, 0, 'i', 'm', 'a', 'g', 'e'})
	file := filepath.Join(dir, "kv.nbk")
	h := backup.Header{Service: "kv", Created: time.Now(), Release: "test", Partitions: []backup.Part{{Partition: 0, LSN: 7, Node: "a"}}}
	if err := backup.Write(file, h, []*backup.Spool{s}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	code, out, stderr := run(t, []string{"restore", "--file", file, "--data-dir", data})
	if code != ExitOK || stderr != "" || !strings.Contains(out, "partition 0: LSN 7 (from a)") || !strings.Contains(out, "seeded "+data) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(data, "kv", "restore.nbk")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(data, "kv", "0"), 0o755)
	code, _, stderr = run(t, []string{"restore", "--file", file, "--data-dir", data})
	if code == ExitOK || !strings.Contains(stderr, "already holds replicas of kv") {
		t.Errorf("restore over replicas: exit %d, %q", code, stderr)
	}
	code, _, stderr = run(t, []string{"restore", "--file", file})
	if code != ExitUsage || !strings.Contains(stderr, "data-dir") {
		t.Errorf("restore without --data-dir or --check: exit %d, %q", code, stderr)
	}
}
