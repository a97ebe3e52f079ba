package cli

import (
	"log/slog"
	"strings"
	"testing"
)

// FuzzConfigToNode follows a node config file the whole way `neptune
// node --config` does (decode, validate, build the node and register its
// services), without starting it: any input gives a node or an error
// naming what to fix, never a panic, and a config Validate accepts is not
// refused by the node it describes.
func FuzzConfigToNode(f *testing.F) {
	for _, s := range []string{
		"id: n1\nservices:\n  - name: kv\n    partitions: 0-3\n",
		"id: n1\nsecurity: {insecure: true}\nservices:\n  - {name: echo, partitions: [0, 1], workers: 2, queue_limit: 4}\n",
		"id: a\nservices:\n  - name: kv\n    partitions: 0-1\n    replication: {level: 2, replicas: {0: [a, b], 1: [b, a]}}\n",
		"id: a\nservices:\n  - name: work\n    partitions: 0\n    classes: [{name: gold, weight: 3}, {name: free, weight: 1}]\n    default_class: free\n    policy: wfq\n",
		"id: a\nservices:\n  - name: ext\n    partitions: 0\n    http: {url: \"http://127.0.0.1:1\"}\n",
		"id: a\nbalance: {policy: polling, poll_size: 2, discard: 5ms}\nannounce_interval: 1s\nannounce_ttl: 5s\nservices: [{name: echo, partitions: \"0\"}]\n",
		"id: a\nservices: [{name: echo, partitions: \"0-70000\"}]\n",
		"id: a\nbalance: {policy: affinity, load_bound: 1.5}\nservices:\n  - name: work\n    partitions: 0\n    classes: [{name: gold, yield: throughput, value: 1, deadline: 1s}]\n    identity_classes: {client/p: gold}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fc, err := ParseConfig(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error does not name the config: %v", err)
			}
			return
		}
		for _, s := range fc.Services {
			if appServices[s.Name] != nil || s.Exec != nil {
				return // opens databases or names programs: not for a fuzzer
			}
		}
		// Material and the data directory are the test's, not the input's.
		fc.Security = SecurityConfig{Insecure: true}
		fc.DataDir = t.TempDir()
		n, err := buildNode(fc, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatalf("Validate accepted a config the node refuses: %v\n%s", err, b)
		}
		_ = n.Close()
	})
}
