package neptune

import "github.com/neptune-cluster/neptune/internal/config"

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
// generate`. Fields: Insecure; Dir (ca.pem and the member's certificate
// and key); Cert (a client's role/name, e.g. "client/web" or
// "operator/alice"); KeyringFile (default Dir/keyring.json); Cluster (the
// gossip label, the same name as NodeConfig.Cluster).
type Security = config.Security
