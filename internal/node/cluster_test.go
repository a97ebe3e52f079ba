package node

import (
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/security"
)

// TestOneClusterName: NodeConfig.Cluster and the gossip label
// (NodeConfig.Security.Cluster) are one name; either sets both, a CA
// recording another name is refused naming both fields, and with neither
// set a secured node takes the CA's name, an insecure one DefaultCluster.
func TestOneClusterName(t *testing.T) {
	dir := t.TempDir()
	if err := security.Scratch(dir, "alpha", "n1"); err != nil {
		t.Fatal(err)
	}
	secured := func(label string) config.Security { return config.Security{Dir: dir, Cluster: label} }
	for _, tc := range []struct {
		name    string
		cluster string
		sec     config.Security
		want    string   // the node's cluster name and gossip label
		errHas  []string // when refused
	}{
		{name: "CA's name by default", sec: secured(""), want: "alpha"},
		{name: "Cluster agrees with the CA", cluster: "alpha", sec: secured(""), want: "alpha"},
		{name: "label alone agrees with the CA", sec: secured("alpha"), want: "alpha"},
		{name: "both, equal", cluster: "alpha", sec: secured("alpha"), want: "alpha"},
		{name: "Cluster disagrees with the CA", cluster: "beta", sec: secured(""),
			errHas: []string{"NodeConfig.Cluster", `"beta"`, `"alpha"`, "NodeConfig.Security.Dir"}},
		{name: "label disagrees with the CA", sec: secured("beta"),
			errHas: []string{"NodeConfig.Security.Cluster", `"beta"`, `"alpha"`}},
		{name: "Cluster and label disagree", cluster: "alpha", sec: secured("beta"),
			errHas: []string{"NodeConfig.Cluster", "NodeConfig.Security.Cluster", `"alpha"`, `"beta"`}},
		{name: "insecure default", sec: config.Security{Insecure: true}, want: DefaultCluster},
		{name: "insecure named", cluster: "gamma", sec: config.Security{Insecure: true}, want: "gamma"},
		{name: "insecure label alone", sec: config.Security{Insecure: true, Cluster: "gamma"}, want: "gamma"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(Config{Node: config.Node{ID: "n1", Cluster: tc.cluster, Security: tc.sec}})
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("New accepted the node (cluster %q)", n.cfg.Cluster)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %s", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.cfg.Cluster != tc.want {
				t.Errorf("cluster = %q, want %q", n.cfg.Cluster, tc.want)
			}
			if !n.sec.Insecure() && n.sec.Label != tc.want {
				t.Errorf("gossip label = %q, want %q", n.sec.Label, tc.want)
			}
		})
	}
}
