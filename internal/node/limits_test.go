package node

import (
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
)

// The in-flight budget must hold one message: a smaller one is refused
// naming the field; zero is the default.
func TestMaxInflightBytesMustHoldAMessage(t *testing.T) {
	base := Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: "n"}}
	for _, tc := range []struct {
		inflight int64
		message  int
		ok       bool
	}{
		{0, 0, true},
		{nerr.DefaultMaxMessageBytes, 0, true},
		{nerr.DefaultMaxMessageBytes - 1, 0, false},
		{1 << 20, 1 << 16, true},
		{1 << 15, 1 << 16, false},
		{-1, 0, false},
	} {
		c := base
		c.MaxInflightBytes, c.MaxMessageBytes = tc.inflight, tc.message
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "NodeConfig.MaxInflightBytes") {
			t.Errorf("MaxInflightBytes %d, MaxMessageBytes %d: %v", tc.inflight, tc.message, err)
		}
	}
	if got := base.withDefaults().MaxInflightBytes; got != nerr.DefaultMaxInflightBytes {
		t.Errorf("default MaxInflightBytes %d, want %d", got, nerr.DefaultMaxInflightBytes)
	}
}
