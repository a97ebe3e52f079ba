package security

import (
	"fmt"
	"strings"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/pki"
)

// FromConfig maps s, the public API's security settings, onto the
// loader's config for a member whose certificate must name want
// (want.Name empty: a client, whose identity comes from s.Cert). field
// names s in errors (NodeConfig.Security, ClientConfig.Security).
func FromConfig(s config.Security, field string, want pki.Identity) (Config, error) {
	if err := s.Check(field); err != nil {
		return Config{}, err
	}
	if s.Insecure {
		return Config{Insecure: true, Label: s.Cluster}, nil
	}
	id := want
	if s.Cert != "" {
		role, name, ok := strings.Cut(s.Cert, "/")
		got := pki.Identity{Role: pki.Role(role), Name: name}
		if !ok || got.Validate() != nil {
			return Config{}, fmt.Errorf("neptune: %s.Cert %q: want role/name, e.g. client/web or operator/alice", field, s.Cert)
		}
		if want.Name != "" && got != want {
			return Config{}, fmt.Errorf("neptune: %s.Cert %q: a node presents its own certificate, %s", field, s.Cert, want)
		}
		id = got
	}
	if id.Name == "" {
		return Config{}, fmt.Errorf("neptune: %s.Cert is required: the certificate to present, e.g. client/web or operator/alice", field)
	}
	return Config{Dir: s.Dir, Identity: id, KeyringFile: s.KeyringFile, Label: s.Cluster}, nil
}
