package bench

import (
	"os"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/cli"
)

// The node processes must accept the config the benchmarks write for them.
func TestWriteServiceConfigIsANodeConfig(t *testing.T) {
	rep := neptune.Replication{Level: 3, Degree: 2, Nodes: []string{"n0", "n1", "n2"}, Staleness: time.Second}
	path, err := WriteServiceConfig(t.TempDir(), "auction", 6, rep)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each node process gets its id and data directory from its flags.
	cfg, err := cli.ParseConfig(append([]byte("id: n0\ndata_dir: /d\n"), b...))
	if err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	s := cfg.Services[0]
	r := s.Replication
	if s.Name != "auction" || len(s.Partitions) != 6 || r.Level != 3 || r.Degree != 2 || len(r.Nodes) != 3 || time.Duration(r.Staleness) != time.Second || r.MinLive != 0 {
		t.Errorf("parsed %+v, replication %+v, from\n%s", s, r, b)
	}
}
