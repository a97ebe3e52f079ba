package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside a PKI directory.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Default validity periods.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// backdate is how far before now certificates become valid, so a peer
// whose clock is a little behind accepts a fresh certificate.
const backdate = 5 * time.Minute

// Files are what one member reads: its certificate and private key, the
// CA certificates it trusts (ca.pem may hold several CAs while the
// cluster moves from one CA to another) and, optionally, the revoked
// tokens (revoke.go; "" or a missing file: none).
type Files struct {
	CA, Cert, Key string
	Revoked       string
}

// FilesFor names id's files in dir: <role>-<name>.pem and
// <role>-<name>-key.pem beside the CA's ca.pem and the revocation file.
func FilesFor(dir string, id Identity) Files {
	base := filepath.Join(dir, string(id.Role)+"-"+id.Name)
	return Files{CA: filepath.Join(dir, CACertFile), Cert: base + ".pem", Key: base + "-key.pem", Revoked: filepath.Join(dir, RevokedTokensFile)}
}

// CA is a cluster certificate authority: it signs node, client and
// operator certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is Cert encoded, as written to ca.pem.
	PEM []byte
}

// Cluster is the cluster name the CA records.
func (ca *CA) Cluster() string { return ClusterOf(ca.Cert) }

// CAOptions adjust NewCA.
type CAOptions struct {
	// ValidFor defaults to DefaultCAValidity.
	ValidFor time.Duration
	// Now defaults to time.Now.
	Now time.Time
}

// NewCA creates a self-signed CA for cluster with a fresh ECDSA P-256 key.
// It may sign only leaf certificates (path length 0): a cluster has one
// level of trust, so a leaf's chain is the leaf and the CA.
func NewCA(cluster string, opts CAOptions) (*CA, error) {
	if cluster == "" {
		return nil, errors.New("pki: empty cluster name")
	}
	if opts.ValidFor <= 0 {
		opts.ValidFor = DefaultCAValidity
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Neptune CA " + cluster, Organization: []string{cluster}},
		NotBefore:             opts.Now.Add(-backdate),
		NotAfter:              opts.Now.Add(opts.ValidFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pemCert(der)}, nil
}

// IssueOptions adjust Issue.
type IssueOptions struct {
	// ValidFor defaults to DefaultCertValidity (and never outlives the CA).
	ValidFor time.Duration
	// Hosts are extra DNS names or IP addresses to put in the certificate,
	// for tools that check host names; Neptune itself ignores them.
	Hosts []string
	// Now defaults to time.Now.
	Now time.Time
}

// Issue creates a key pair for id and a certificate for it signed by the
// CA, and returns both PEM encoded (the key as PKCS #8). Node and gateway
// certificates serve and dial (server and client authentication); client,
// operator and scraper certificates only dial.
func (ca *CA) Issue(id Identity, opts IssueOptions) (certPEM, keyPEM []byte, err error) {
	if err := id.Validate(); err != nil {
		return nil, nil, err
	}
	if opts.ValidFor <= 0 {
		opts.ValidFor = DefaultCertValidity
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := opts.Now.Add(opts.ValidFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if id.Role == RoleNode || id.Role == RoleGateway {
		// Both serve: nodes RPC, both their HTTPS listeners.
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id.Name, Organization: ca.Cert.Subject.Organization, OrganizationalUnit: []string{string(id.Role)}},
		NotBefore:             opts.Now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{id.URI()},
	}
	hosts := opts.Hosts
	if (id.Role == RoleNode || id.Role == RoleGateway) && isDNSName(id.Name) && !slices.Contains(hosts, id.Name) {
		// A member that serves is usually reached by its name (compose
		// services, DNS): tools that check host names, such as a
		// Prometheus scraping https://n1:9100, then accept it.
		hosts = append([]string{id.Name}, hosts...)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign certificate for %s: %w", id, err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), nil
}

// CreateCA creates a CA for cluster and writes ca.pem and ca-key.pem
// (mode 0600) into dir, creating dir. It refuses to replace an existing CA
// unless force is set: losing the CA key means re-issuing every
// certificate of the cluster.
func CreateCA(dir, cluster string, force bool, opts CAOptions) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if !force {
		if err := refuseExisting(certPath, keyPath); err != nil {
			return nil, err
		}
	}
	ca, err := NewCA(cluster, opts)
	if err != nil {
		return nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	if err := WriteFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(certPath, ca.PEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads the CA from dir (ca.pem, ca-key.pem). If ca.pem holds
// several certificates, the one matching the key signs.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyPath, err)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificate: %w", err)
	}
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", certPath, err)
	}
	for _, c := range certs {
		if c.IsCA && publicKeysEqual(c.PublicKey, key.Public()) {
			return &CA{Cert: c, Key: key, PEM: pemCert(c.Raw)}, nil
		}
	}
	return nil, fmt.Errorf("pki: no CA certificate in %s matches %s", certPath, keyPath)
}

// IssueFiles issues a certificate for id and writes it and its key (mode
// 0600) into dir as FilesFor names them. It refuses to replace existing
// files unless force is set.
func (ca *CA) IssueFiles(dir string, id Identity, force bool, opts IssueOptions) (Files, error) {
	f := FilesFor(dir, id)
	if !force {
		if err := refuseExisting(f.Cert, f.Key); err != nil {
			return Files{}, err
		}
	}
	certPEM, keyPEM, err := ca.Issue(id, opts)
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	// Key first: a reloading source that sees the new certificate with
	// the old key rejects the pair and retries at its next check.
	if err := WriteFileAtomic(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	if err := WriteFileAtomic(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// Bootstrap creates throwaway material in dir: a CA for cluster and a
// certificate for each of ids, replacing whatever is there. It is for
// scratch clusters (the demo, tests), not for production CAs.
func Bootstrap(dir, cluster string, ids ...Identity) (*CA, error) {
	ca, err := CreateCA(dir, cluster, true, CAOptions{})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := ca.IssueFiles(dir, id, true, IssueOptions{}); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so a reader sees the old or the new contents,
// never a partial file. The file gets perm before any data is written.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}

// ErrExists is returned instead of replacing a file without force.
var ErrExists = errors.New("already exists")

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("pki: %s %w (pass force to replace it)", p, ErrExists)
		}
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// isDNSName reports whether name can be a DNS name: dot-separated labels
// of letters, digits and hyphens, none empty or starting or ending with
// a hyphen.
func isDNSName(name string) bool {
	if len(name) > 253 {
		return false
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
