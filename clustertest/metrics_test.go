package clustertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
)

// TestTwoNodesInOneProcessEachWithItsOwnRegistry: each node's metrics go
// to its own registry, which its /metrics serves.
func TestTwoNodesInOneProcessEachWithItsOwnRegistry(t *testing.T) {
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	nodes := startEchoNodes(t, regs[0], regs[1])
	for i, nd := range nodes {
		want := fmt.Sprintf(`neptune_server_calls_total{code="ok",method="echo",service="echo"} 1`)
		if body := scrape(t, nd); !strings.Contains(body, want) {
			t.Errorf("m%d /metrics lacks %s", i, want)
		}
		mfs, err := regs[i].Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) == 0 {
			t.Errorf("registry %d is empty", i)
		}
	}
}

// TestNodesSharingARegistry: metric names are fixed, so a second node in
// the same registry is refused with an error naming the metric (no
// panic); wrapped with a node label, one registry holds both.
func TestNodesSharingARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "s0", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "s1", Registerer: reg})
	if err == nil || !strings.Contains(err.Error(), "neptune_server_calls_total") || !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("second node in one registry: err = %v, want AlreadyRegisteredError naming the metric", err)
	}

	shared := prometheus.NewRegistry()
	wrap := func(id string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"node": id}, shared)
	}
	nodes := startEchoNodes(t, wrap("m0"), wrap("m1"))
	mfs, err := shared.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "neptune_server_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	if !seen["m0"] || !seen["m1"] {
		t.Fatalf("shared registry has calls of nodes %v, want m0 and m1", seen)
	}
	// A wrapped registerer is no Gatherer: each node serves a private
	// registry holding the same metrics.
	if body := scrape(t, nodes[1]); !strings.Contains(body, `neptune_server_calls_total{code="ok",method="echo",service="echo"} 1`) {
		t.Errorf("m1 /metrics lacks its calls:\n%s", body)
	}
}
