package forumload

import (
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/apps/forum"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"no partitions", func(c *Config) { c.Partitions = 0 }, "Partitions"},
		{"no topics", func(c *Config) { c.TopicsPerPartition = 0 }, "TopicsPerPartition"},
		{"write fraction", func(c *Config) { c.WriteFraction = 1.5 }, "WriteFraction"},
		{"timeout", func(c *Config) { c.CallTimeout = 0 }, "CallTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want error naming %q", err, tc.want)
			}
		})
	}
}

// Every partition gets exactly TopicsPerPartition topics, each mapping to
// it under forum.Partition, so the workload and the verification cover
// every partition.
func TestTopicsCoverEveryPartition(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Partitions, cfg.TopicsPerPartition = 5, 3
	l, err := New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for p, ts := range l.topics {
		if len(ts) != 3 {
			t.Fatalf("partition %d has %d topics, want 3", p, len(ts))
		}
		for _, topic := range ts {
			if got := forum.Partition(topic, 5); got != p || seen[topic] {
				t.Fatalf("topic %s listed under partition %d maps to %d (duplicate: %v)", topic, p, got, seen[topic])
			}
			seen[topic] = true
		}
	}
	if len(l.Topics()) != 15 {
		t.Fatalf("Topics() = %d, want 15", len(l.Topics()))
	}
}
