package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
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

// TestReplicatedServiceRegistersEveryPartition: a node registers every
// partition of a replicated service, so that it can host one a
// replica-set change names it for; the runtime hosts the placed ones
// from the start.
func TestReplicatedServiceRegistersEveryPartition(t *testing.T) {
	fc, err := ParseConfig([]byte("id: b\ndata_dir: " + t.TempDir() + "\nservices:\n  - name: kv\n    partitions: 0-3\n    replication:\n      level: 2\n      nodes: [a, b, c]\n      degree: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, parts, err := replicatedService(fc, fc.Services[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(parts, []int{0, 1, 2, 3}) {
		t.Errorf("parts = %v, want 0-3", parts)
	}
	// Place: p0 a,b; p1 b,c; p2 c,a; p3 a,b.
	if on := svc.Replication.PartitionsOn("b", parts); !slices.Equal(on, []int{0, 1, 3}) {
		t.Errorf("placed on b: %v", on)
	}
	if svc.Replication == nil || svc.Check == nil {
		t.Errorf("service not replicated with a Check: %+v", svc.Replication)
	}
}

func TestReplicationConfigCarriesLeaseAndLinearizable(t *testing.T) {
	fc, err := ParseConfig([]byte("id: b\ndata_dir: " + t.TempDir() + "\nservices:\n  - name: kv\n    partitions: 0-1\n    replication:\n      level: 2\n      nodes: [a, b]\n      degree: 2\n      linearizable: true\n      lease: 250ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, _, err := replicatedService(fc, fc.Services[0])
	if err != nil {
		t.Fatal(err)
	}
	if r := svc.Replication; !r.Linearizable || r.Lease != 250*time.Millisecond {
		t.Fatalf("replication = %+v, want linearizable with a 250ms lease", r)
	}
}

func TestStatusShowsLeasesAndDivergence(t *testing.T) {
	var b strings.Builder
	now := time.Unix(1_000_000, 0)
	printPartitions(&b, now, []neptune.PartitionInfo{
		{Service: "kv", Partition: 0, Level: 3, Linearizable: true, Replicas: []neptune.ReplicaInfo{
			{Node: "a", Role: "primary", Epoch: 4, Version: 120, Lease: 310 * time.Millisecond},
			{Node: "b", Role: "secondary", Epoch: 4, Version: 120},
			{Node: "c", Role: "secondary", Epoch: 4, Version: 90, Diverged: true},
		}},
		{Service: "kv", Partition: 1, Level: 2, Replicas: []neptune.ReplicaInfo{
			{Node: "a", Role: "primary", Epoch: 2, Version: 7},
		}},
		// A failover seen before the old primary's announcement expired,
		// and a replica cut off from it.
		{Service: "kv", Partition: 2, Level: 2, Replicas: []neptune.ReplicaInfo{
			{Node: "a", Role: "primary", Epoch: 2, Version: 9, Lease: 300 * time.Millisecond, Stale: "superseded by the primary of epoch 3"},
			{Node: "b", Role: "primary", Epoch: 3, Version: 9, Lease: 390 * time.Millisecond},
			{Node: "c", Role: "secondary", Epoch: 2, Version: 8, Contact: "lost-contact", LostSince: now.Add(-1300 * time.Millisecond)},
		}},
		// A primary whose claim lapsed with no successor.
		{Service: "kv", Partition: 3, Level: 2, Replicas: []neptune.ReplicaInfo{
			{Node: "a", Role: "primary", Epoch: 5, Version: 4, Lease: 300 * time.Millisecond, Stale: "lease lapsed 1.2s ago without a newer announcement"},
		}},
	})
	out := b.String()
	for _, want := range []string{"a:primary@120+lease", "b:secondary@120", "c:DIVERGED@90", "3 linearizable", "a (no lease)", "a:primary@7\n",
		"a:primary@9[stale]", "b:primary@9+lease", "c:secondary@8[lost-contact 1.3s]",
		"a (STALE: lease lapsed 1.2s ago without a newer announcement)", "a:primary@4[stale]"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// Partition 2's primary is the new one, not the superseded one.
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "kv" && f[1] == "2" && f[3] != "b" {
			t.Errorf("partition 2's primary shown as %q, want b: %s", f[3], line)
		}
	}
}

func TestForceWarningNamesTheVersionsAtRisk(t *testing.T) {
	reps := []neptune.ReplicaInfo{
		{Node: "a", Version: 100, Commit: 120, Last: 125},
		{Node: "c", Version: 80, Commit: 90, Last: 95},
	}
	if w := forceWarning("kv", 0, "c", reps); !strings.Contains(w, "versions 96..120 may be LOST") || !strings.Contains(w, "a announced commit point 120") {
		t.Errorf("warning for a replica behind: %s", w)
	}
	if w := forceWarning("kv", 0, "a", reps); !strings.Contains(w, "No acknowledged version is known to be lost") {
		t.Errorf("warning for the newest replica: %s", w)
	}
	if w := forceWarning("kv", 0, "z", reps); !strings.Contains(w, "up to 120") {
		t.Errorf("warning for an unknown replica: %s", w)
	}
}
