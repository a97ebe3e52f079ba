// Package pki is the cluster's public-key infrastructure: a cluster CA,
// the certificates it issues to nodes, clients and operators, the files
// they live in, a source that re-reads those files when they change (so
// certificates rotate without a restart), and the identity a verified
// certificate names.
//
// Identity in a certificate. Every leaf certificate carries exactly one
// URI subject alternative name of the form
//
//	neptune://<role>/<name>
//
// where role is node, client, operator, gateway or scraper and name is the node id (for a
// node) or a free name (for clients and operators); for example
// neptune://node/n1. The subject common name repeats the name for humans
// and logs, but authorisation reads only the URI: one field, covered by
// the CA's signature, that says both who and in what role, and that
// cannot be confused with a host name (DNS and IP SANs may be added for
// tools such as grpcurl and are ignored by Neptune). The CA's subject
// organisation is the cluster name.
//
// Algorithms: ECDSA P-256 keys and SHA-256 signatures, from the standard
// library only. P-256 is accepted by every TLS stack an operator's tools
// may use, and Go's implementation is constant time and fast (a handshake
// costs well under a millisecond). Keys are stored as PKCS #8; the loaders
// accept any key type crypto/tls accepts (Ed25519 and RSA included).
package pki

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is what a certificate's holder may do in the cluster.
type Role string

// The roles. Authorisation rules (internal/transport) say which role may
// call which method.
const (
	// RoleNode is a cluster node: it serves calls, replicates partitions
	// and announces itself in gossip.
	RoleNode Role = "node"
	// RoleClient calls services.
	RoleClient Role = "client"
	// RoleOperator calls services and runs administrative operations
	// (promote a replica, change configuration).
	RoleOperator Role = "operator"
	// RoleGateway is an HTTP gateway (Gage's front door): it calls
	// services for its subscribers and signs the demand datagrams it
	// gossips to the other gateways, which accept demand only under a
	// gateway certificate naming the gateway it comes from.
	RoleGateway Role = "gateway"
	// RoleScraper may only read a member's /metrics over HTTPS (a
	// Prometheus server): it calls no service and joins nothing.
	RoleScraper Role = "scraper"
)

// Roles lists every role.
var Roles = []Role{RoleNode, RoleClient, RoleOperator, RoleGateway, RoleScraper}

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool {
	switch r {
	case RoleNode, RoleClient, RoleOperator, RoleGateway, RoleScraper:
		return true
	}
	return false
}

// URIScheme is the scheme of the identity URI in every leaf certificate.
const URIScheme = "neptune"

// Identity is who a certificate names: a role and a name (the node id for
// a node).
type Identity struct {
	Role Role
	Name string
}

func (id Identity) String() string { return string(id.Role) + "/" + id.Name }

// URI is the identity's subject alternative name: neptune://<role>/<name>.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: URIScheme, Host: string(id.Role), Path: "/" + id.Name}
}

// Validate checks that the role is known and the name is usable as a node
// id, a URI path segment and part of a file name.
func (id Identity) Validate() error {
	if !id.Role.Valid() {
		return fmt.Errorf("pki: unknown role %q (want node, client, operator, gateway or scraper)", id.Role)
	}
	return ValidateName(id.Name)
}

// MaxName is the longest name a certificate may carry.
const MaxName = 128

// ValidateName checks a node id or client/operator name: 1 to MaxName
// characters from letters, digits and . _ - ~ : @ (the characters a URI
// path segment takes unescaped), not starting with a dot.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("pki: empty name")
	}
	if len(name) > MaxName {
		return fmt.Errorf("pki: name %.20q… longer than %d bytes", name, MaxName)
	}
	if name[0] == '.' {
		return fmt.Errorf("pki: name %q starts with a dot", name)
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("._-~:@", c):
		default:
			return fmt.Errorf("pki: name %q contains %q (allowed: letters, digits, . _ - ~ : @)", name, c)
		}
	}
	return nil
}

// ErrNoIdentity means a certificate carries no usable Neptune identity.
var ErrNoIdentity = errors.New("pki: certificate carries no neptune identity")

// IdentityOf reads the identity of a certificate the caller has verified
// against the cluster CA: its one neptune:// URI SAN. A certificate with
// none, several, or a malformed one has no identity.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, ErrNoIdentity
	}
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
	default:
		return Identity{}, fmt.Errorf("%w: %d neptune URIs", ErrNoIdentity, len(found))
	}
	u := found[0]
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.Port() != "" {
		return Identity{}, fmt.Errorf("%w: malformed URI %q", ErrNoIdentity, u)
	}
	name, ok := strings.CutPrefix(u.Path, "/")
	if !ok {
		return Identity{}, fmt.Errorf("%w: malformed URI %q", ErrNoIdentity, u)
	}
	id := Identity{Role: Role(u.Host), Name: name}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrNoIdentity, err)
	}
	return id, nil
}

// ClusterOf is the cluster name a CA certificate records (its subject
// organisation), "" if none.
func ClusterOf(ca *x509.Certificate) string {
	if ca == nil || len(ca.Subject.Organization) == 0 {
		return ""
	}
	return ca.Subject.Organization[0]
}

// Sign signs msg with a member's certificate key: Ed25519 over msg
// itself, ECDSA and RSA over its SHA-256 digest. Members sign what they
// gossip (announcements, gateways' demand) so that a receiver knows which
// member wrote it, not just that some holder of the cluster key did.
func Sign(key crypto.Signer, msg []byte) ([]byte, error) {
	if _, ok := key.Public().(ed25519.PublicKey); ok {
		return key.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	d := sha256.Sum256(msg)
	return key.Sign(rand.Reader, d[:], crypto.SHA256)
}

// CheckSignature verifies a signature Sign made with the key of c.
func CheckSignature(c *x509.Certificate, msg, sig []byte) error {
	var alg x509.SignatureAlgorithm
	switch c.PublicKeyAlgorithm {
	case x509.ECDSA:
		alg = x509.ECDSAWithSHA256
	case x509.Ed25519:
		alg = x509.PureEd25519
	case x509.RSA:
		alg = x509.SHA256WithRSA
	default:
		return fmt.Errorf("unsupported key algorithm %v", c.PublicKeyAlgorithm)
	}
	return c.CheckSignature(alg, msg, sig)
}
