package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/balance"
)

// TestValidateBalanceNamesTheService: a per-service balancing is
// validated as the client's own, and its error names the field and the
// service, so the operator finds the entry to fix.
func TestValidateBalanceNamesTheService(t *testing.T) {
	ok := map[string]balance.Config{"pcache": {Policy: balance.NameAffinity, LoadBound: 1.5}, "kv": {}}
	if err := ValidateBalance("ClientConfig", balance.Config{}, ok); err != nil {
		t.Fatalf("valid per-service policies refused: %v", err)
	}
	for _, tc := range []struct {
		name     string
		services map[string]balance.Config
		want     string
		unknown  bool
	}{
		{"unknown policy", map[string]balance.Config{"kv": {}, "pcache": {Policy: "sticky"}}, `NodeConfig.ServiceBalance["pcache"]`, true},
		{"bad field", map[string]balance.Config{"pcache": {Policy: balance.NameAffinity, LoadBound: 0.5}}, `NodeConfig.ServiceBalance["pcache"]: balance: LoadBound`, false},
		{"no service name", map[string]balance.Config{"": {}}, "NodeConfig.ServiceBalance: an entry names no service", false},
	} {
		err := ValidateBalance("NodeConfig", balance.Config{}, tc.services)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, balance.ErrUnknownPolicy) != tc.unknown {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	if err := (Node{ID: "n", Security: Security{Insecure: true}, ServiceBalance: map[string]balance.Config{"kv": {Policy: "x"}}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `NodeConfig.ServiceBalance["kv"]`) {
		t.Errorf("NodeConfig.Validate: %v, want the bad ServiceBalance entry named", err)
	}
}
