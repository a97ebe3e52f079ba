package neptune

import (
	"fmt"
	"strings"

	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
)

// Security says how a node or client proves who it is and whom it trusts.
// Its zero value is refused: a member either names its material (Dir) or
// says Insecure, so running without protection is always a decision.
//
// With material, every gRPC connection is mutual TLS with certificates of
// the cluster CA (a node's names its node id; callers are authorised by
// the role their certificate names: clients call, nodes replicate,
// operators promote), gossip is encrypted and authenticated with the
// keyring and carries the cluster label, announcements are signed by the
// node they describe, and load polls carry an HMAC. Certificates and the
// keyring file are re-read when they change. Create the material with
// `neptune tls ca create`, `neptune tls cert create` and `neptune keyring
// generate`.
type Security struct {
	// Insecure turns every protection off: plaintext gRPC anyone may call,
	// gossip anyone may join and poison, unauthenticated polls. Only for
	// experiments on a trusted machine; a node logs a warning.
	Insecure bool
	// Dir holds ca.pem and the member's certificate and key
	// (node-<id>.pem and node-<id>-key.pem for a node, <role>-<name>.pem
	// for a client). Required unless Insecure.
	Dir string
	// Cert names the certificate a client presents, as role/name:
	// "client/web" (calls) or "operator/alice" (calls and promote). A
	// node always presents node/<ID>; leave it empty or set exactly that.
	// Required for a secured client.
	Cert string
	// KeyringFile is the gossip keyring (`neptune keyring`); default
	// Dir/keyring.json. It is watched: install, use and remove take effect
	// without a restart.
	KeyringFile string
	// Cluster is the gossip label, so two clusters on one network never
	// merge; default the cluster name the CA records. For a node it is
	// the same name as NodeConfig.Cluster (set either; if both, equal),
	// and a CA recording another name is refused.
	Cluster string
}

// config maps s onto the security loader's config for a member whose
// certificate must name want (want.Name empty: a client, whose identity
// comes from Cert). field names s in errors.
func (s Security) config(field string, want pki.Identity) (security.Config, error) {
	if s.Insecure {
		if s.Dir != "" || s.Cert != "" || s.KeyringFile != "" {
			return security.Config{}, fmt.Errorf("neptune: %s.Insecure is set together with material (Dir, Cert or KeyringFile): choose one", field)
		}
		return security.Config{Insecure: true}, nil
	}
	if s.Dir == "" {
		return security.Config{}, fmt.Errorf("neptune: %s.Dir is required: the directory with ca.pem and this member's certificate (neptune tls ...), or set %s.Insecure to run without protection", field, field)
	}
	id := want
	if s.Cert != "" {
		role, name, ok := strings.Cut(s.Cert, "/")
		got := pki.Identity{Role: pki.Role(role), Name: name}
		if !ok || got.Validate() != nil {
			return security.Config{}, fmt.Errorf("neptune: %s.Cert %q: want role/name, e.g. client/web or operator/alice", field, s.Cert)
		}
		if want.Name != "" && got != want {
			return security.Config{}, fmt.Errorf("neptune: %s.Cert %q: a node presents its own certificate, %s", field, s.Cert, want)
		}
		id = got
	}
	if id.Name == "" {
		return security.Config{}, fmt.Errorf("neptune: %s.Cert is required: the certificate to present, e.g. client/web or operator/alice", field)
	}
	return security.Config{Dir: s.Dir, Identity: id, KeyringFile: s.KeyringFile, Label: s.Cluster}, nil
}
