package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/replica/wal"
	"github.com/neptune-cluster/neptune/internal/replication"
)

// TestPartitionRebuildQuarantines: the command moves a stopped node's
// replica directory into the quarantine and says where; a second run
// finds nothing to move and fails.
func TestPartitionRebuildQuarantines(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "kv", "3")
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	args := []string{"partition", "rebuild", "--data-dir", data, "--service", "kv", "--partition", "3"}
	code, out, errOut := run(t, args)
	if code != 0 || !strings.Contains(out, "quarantined kv partition 3") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
	q, err := os.ReadDir(filepath.Join(data, replication.QuarantineDir, "kv"))
	if err != nil || len(q) != 1 || !strings.HasPrefix(q[0].Name(), "3-") {
		t.Fatalf("quarantine holds %v (%v), want one 3-TIME", q, err)
	}
	if code, _, _ := run(t, args); code == 0 {
		t.Fatal("a second rebuild with nothing to move succeeded")
	}
}

// TestPartitionRebuildServiceState: --service-state moves the service's
// store and every partition's write log together.
func TestPartitionRebuildServiceState(t *testing.T) {
	data := t.TempDir()
	for _, d := range []string{"listappend/0", "listappend/1", "service-listappend"} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, []string{"partition", "rebuild", "--data-dir", data, "--service", "listappend", "--service-state"})
	if code != 0 || !strings.Contains(out, "quarantined service listappend") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, d := range []string{"listappend", "service-listappend"} {
		if _, err := os.Stat(filepath.Join(data, d)); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", d, err)
		}
	}
	q, err := os.ReadDir(filepath.Join(data, replication.QuarantineDir, "listappend"))
	if err != nil || len(q) != 1 {
		t.Fatalf("quarantine holds %v (%v)", q, err)
	}
	moved, err := os.ReadDir(filepath.Join(data, replication.QuarantineDir, "listappend", q[0].Name()))
	if err != nil || len(moved) != 2 {
		t.Fatalf("moved %v (%v), want the logs and the store", moved, err)
	}
}
