package cli

import (
	"strings"
	"testing"
)

func TestReplicationConfigErrorsNameTheKey(t *testing.T) {
	base := "id: a\ndata_dir: /tmp/x\nservices:\n  - name: kv\n    partitions: 0-3\n    replication:\n"
	for _, tc := range []struct {
		yaml, want string
	}{
		{"      level: 4\n      nodes: [a]\n      degree: 1\n", "services[0].replication.level"},
		{"      level: 2\n      nodes: [a, b]\n      degree: 3\n", "services[0].replication.degree"},
		{"      level: 2\n", "services[0].replication: set nodes and degree"},
		{"      level: 3\n      nodes: [a]\n      degree: 1\n      staleness: -1s\n", "services[0].replication.staleness"},
		{"      level: 2\n      replicas:\n        0: [{node: a, priority: 1}]\n", "partition 1 has no replicas"},
		{"      level: 2\n      replicas:\n        0: [{priority: 1}]\n", "replicas.0[0].node"},
		{"      level: 2\n      nodes: [a, b]\n      degree: 2\n      bogus: 1\n", "bogus"},
		{"      level: 2\n      nodes: [a, b]\n      degree: 2\n", ""},
	} {
		_, err := ParseConfig([]byte(base + tc.yaml))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: unexpected %v", tc.yaml, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(base, "data_dir: /tmp/x\n", "", 1) + "      level: 2\n      nodes: [a]\n      degree: 1\n")); err == nil || !strings.Contains(err.Error(), "data_dir") {
		t.Errorf("missing data_dir: %v", err)
	}
}

func TestReplicatedServiceHostsOnlyPlacedPartitions(t *testing.T) {
	fc, err := ParseConfig([]byte("id: b\ndata_dir: " + t.TempDir() + "\nservices:\n  - name: kv\n    partitions: 0-3\n    replication:\n      level: 2\n      nodes: [a, b, c]\n      degree: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, parts, err := replicatedService(fc, fc.Services[0])
	if err != nil {
		t.Fatal(err)
	}
	// Place: p0 a,b; p1 b,c; p2 c,a; p3 a,b.
	if want := []int{0, 1, 3}; len(parts) != 3 || parts[0] != want[0] || parts[1] != want[1] || parts[2] != want[2] {
		t.Errorf("parts = %v, want %v", parts, want)
	}
	if svc.Replication == nil || svc.Check == nil {
		t.Errorf("service not replicated with a Check: %+v", svc.Replication)
	}
}
