package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestIdentityClassesHoldOnTheNode: a secured node process maps callers'
// certificate identities to classes (services[].identity_classes,
// dissertation §4.2.2: a class per client): client/partner → gold (50 %
// guaranteed), client/flood → bronze. The calls name the opposite — the
// 96 flood callers ask for gold, the 8 partner callers for bronze — so
// only the mapping can give partner its guarantee; 8 callers of an
// unmapped client/other asking bronze keep bronze, the control, and get
// about their arrival share.
func TestIdentityClassesHoldOnTheNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	const svc = 20 * time.Millisecond
	bin := neptuneBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	cl, err := localcluster.NewSecure(bin, dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(cfg, []byte(`id: ignored
metrics: 127.0.0.1:0
services:
  - name: work
    partitions: [0]
    workers: 4
    queue_limit: 4096
    policy: edf
    classes:
      - {name: gold, yield: throughput, value: 4, deadline: 2s, guarantee: 0.5}
      - {name: bronze, yield: throughput, value: 1, deadline: 2s}
    identity_classes: {client/partner: gold, client/flood: bronze}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "n1", Args: []string{"-config", cfg}}); err != nil {
		t.Fatal(err)
	}
	asks := map[string]string{"partner": "bronze", "flood": "gold", "other": "bronze"}
	clients := map[string]*neptune.Client{}
	for name := range asks {
		if err := cl.Issue(pki.Identity{Role: pki.RoleClient, Name: name}); err != nil {
			t.Fatal(err)
		}
		c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/" + name), Join: cl.Seeds()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitFor(t, 10*time.Second, func() bool { return len(c.Members(ctx, 0)) == 1 })
		clients[name] = c
	}
	call := func(sub string) (bool, error) {
		// Calls do not inherit a run deadline: EDF would see every late
		// call due at the same instant.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := clients[sub].Call(cctx, "work", 0, "work", work.Encode(svc), neptune.WithClass(asks[sub]))
		if errors.Is(err, neptune.ErrDeadline) {
			return false, nil // past its class's deadline in the queue: not served
		}
		return err == nil, err
	}
	if _, err := call("partner"); err != nil {
		t.Fatal(err)
	}
	got := shareOfWork(t, ctx, call, map[string]int{"flood": 96, "partner": 8, "other": 8}, time.Second, 3*time.Second)
	if got["partner"] < 0.4 {
		t.Errorf("client/partner (mapped to gold, guarantee 0.5, asking bronze) got %.2f of the work, want ≥ 0.40", got["partner"])
	}
	if got["other"] > 0.2 {
		t.Errorf("control: unmapped client/other asking bronze got %.2f of the work, want its arrival share (< 0.2)", got["other"])
	}
	t.Logf("shares: %s", fmt.Sprint(got))
}
