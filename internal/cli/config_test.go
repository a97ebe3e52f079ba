package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

func TestParseConfigAcceptsTheExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The tour gives each node its id and data directory by flag.
	c, err := ParseConfig(append([]byte("id: n1\ndata_dir: data/n1\n"), b...))
	if err != nil {
		t.Fatalf("examples/node.yaml: %v", err)
	}
	if r := c.Services[1].Replication; r == nil || !r.Linearizable || r.Level != 2 {
		t.Fatalf("examples/node.yaml: kv not replicated linearizably: %+v", r)
	}
	if c.ID != "n1" || len(c.Services) != 2 || len(c.Services[1].Partitions) != 4 || time.Duration(c.Placement.Grace) != 5*time.Minute ||
		c.Storage != (StorageConfig{ReserveBytes: 64 << 20}) || c.MaxInflightBytes != 64<<20 {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	base := "id: n1\nservices:\n  - name: echo\n    partitions: [0]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"missing id", "services:\n  - name: echo\n    partitions: [0]\n", "id is required"},
		{"unknown key", base + "colour: blue\n", "colour"},
		{"bad port", base + "gossip_port: 70000\n", "gossip_port"},
		{"bad duration", base + "announce_ttl: soon\n", "not a duration"},
		{"ttl below interval", base + "announce_interval: 2s\nannounce_ttl: 1s\n", "announce_ttl"},
		{"unknown policy", base + "balance:\n  policy: magic\n", "balance.policy"},
		{"bad poll size", base + "balance:\n  poll_size: -1\n", "balance.poll_size"},
		{"bad load bound", base + "balance:\n  policy: affinity\n  load_bound: 0.5\n", "balance.load_bound"},
		{"unknown service policy", base + "balance:\n  services: {pcache: sticky}\n", `balance.services.pcache: unknown balancing policy "sticky"`},
		{"service policy without a service", base + "balance:\n  services: {'': affinity}\n", "balance.services: an entry names no service"},
		{"negative grace", base + "placement:\n  grace: -1m\n", "placement.grace"},
		{"bad size", base + "max_inflight_bytes: lots\n", "not a size"},
		{"budget below a message", base + "max_inflight_bytes: 1MiB\n", "max_inflight_bytes"},
		{"no services", "id: n1\n", "services is empty"},
		{"unknown service", "id: n1\nservices:\n  - name: nope\n    partitions: [0]\n", "services[0].name"},
		{"duplicate service", base + "  - name: echo\n    partitions: [1]\n", "services[1].name"},
		{"no partitions", "id: n1\nservices:\n  - name: kv\n", "services[0].partitions"},
		{"bad partition range", "id: n1\nservices:\n  - name: kv\n    partitions: 3-1\n", "3-1"},
		{"negative workers", "id: n1\nservices:\n  - name: kv\n    partitions: [0]\n    workers: -2\n", "services[0].workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// balance.services gives each service named its own policy, defaults
// for the rest; the client-wide settings stay the client's.
func TestBalanceServices(t *testing.T) {
	c, err := ParseConfig([]byte("id: n1\nbalance: {policy: polling, poll_size: 2, services: {pcache: affinity}}\nservices: [{name: echo, partitions: [0]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	def, services, err := c.Balance.toBalance()
	if err != nil {
		t.Fatal(err)
	}
	if def != (neptune.Balancing{Policy: "polling", PollSize: 2}) || len(services) != 1 || services["pcache"] != (neptune.Balancing{Policy: "affinity"}) {
		t.Fatalf("toBalance() = %+v, %+v", def, services)
	}
}

func TestParsePartitions(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"0", "[0]", true},
		{"0-3,7", "[0 1 2 3 7]", true},
		{" 2 , 4-5", "[2 4 5]", true},
		{"", "", false},
		{"a", "", false},
		{"-1", "", false},
		{"5-2", "", false},
	}
	for _, tt := range tests {
		got, err := ParsePartitions(tt.in)
		if (err == nil) != tt.ok {
			t.Fatalf("ParsePartitions(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if tt.ok && fmt.Sprint(got) != tt.want {
			t.Fatalf("ParsePartitions(%q) = %v, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("id: n1\nservices:\n  - name: kv\n    partitions: 0-3\n"))
	f.Add([]byte("announce_ttl: 1s\nbalance: {policy: polling}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err == nil && c.Validate() != nil {
			t.Fatal("ParseConfig accepted a config that Validate rejects")
		}
	})
}
