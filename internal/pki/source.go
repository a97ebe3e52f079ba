package pki

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// DefaultReloadInterval is how often, at most, a Source looks at its
// files' modification times.
const DefaultReloadInterval = 10 * time.Second

// SourceConfig configures a Source.
type SourceConfig struct {
	Files Files
	// Expect, if its role is set, is the identity the certificate must
	// name: a file naming another is refused (the source keeps what it
	// had), so a misplaced file cannot change who a node is. A zero
	// Expect accepts any identity the CA vouches for.
	Expect Identity
	// Interval is how often, at most, the files are checked for changes
	// (on the next handshake after it passes); 0 is
	// DefaultReloadInterval, negative checks only on Reload.
	Interval time.Duration
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Source holds a member's certificate, key and trusted CAs, re-reading
// the files when they change so certificates rotate without a restart.
// The TLS configurations it builds read the current material on every
// handshake. It is safe for concurrent use.
type Source struct {
	cfg   SourceConfig
	clock clock.Clock
	log   *slog.Logger
	cur   atomic.Pointer[material]

	// checking serialises file checks; a handshake that finds a check
	// under way uses the current material rather than wait.
	checking sync.Mutex
	next     atomic.Int64 // unix nanoseconds of the next due check
	// stamps are the files' (CA, certificate, key, revocations) as last
	// loaded; the revocation file's is nil while it does not exist.
	stamps [4]os.FileInfo
}

// material is one consistent load of the files.
type material struct {
	cert    *tls.Certificate // Leaf set
	id      Identity
	roots   *x509.CertPool
	cluster string
	server  *tls.Config
	// https is the HTTP listener's: a client certificate is verified if
	// given (browsers and probes come without one).
	https *tls.Config
	cas   []*x509.Certificate
	// revoked are the revoked tokens, by id.
	revoked map[string]Revocation
}

// NewSource loads the files once; it fails if they are missing, do not
// match, or the certificate is not one the CA vouches for.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultReloadInterval
	}
	s := &Source{cfg: cfg, clock: clock.OrReal(cfg.Clock), log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads the files now. On error the source keeps the material
// it had and returns the error.
func (s *Source) Reload() error {
	s.checking.Lock()
	defer s.checking.Unlock()
	return s.reloadLocked()
}

func (s *Source) reloadLocked() error {
	stamps, err := s.stat()
	if err != nil {
		return err
	}
	m, err := s.load()
	if err != nil {
		return err
	}
	s.stamps = stamps
	old := s.cur.Swap(m)
	s.scheduleLocked()
	if old != nil && !bytes.Equal(old.cert.Leaf.Raw, m.cert.Leaf.Raw) {
		s.log.Info("certificate reloaded", "identity", m.id.String(), "serial", m.cert.Leaf.SerialNumber.Text(16), "expires", m.cert.Leaf.NotAfter)
	}
	if old != nil && !maps.Equal(old.revoked, m.revoked) {
		s.log.Info("revoked tokens reloaded", "file", s.cfg.Files.Revoked, "revoked", len(m.revoked))
	}
	return nil
}

// stat is the files' stamps; the revocation file may be missing.
func (s *Source) stat() ([4]os.FileInfo, error) {
	var stamps [4]os.FileInfo
	for i, p := range []string{s.cfg.Files.CA, s.cfg.Files.Cert, s.cfg.Files.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			return stamps, fmt.Errorf("pki: %w", err)
		}
		stamps[i] = fi
	}
	if p := s.cfg.Files.Revoked; p != "" {
		fi, err := os.Stat(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return stamps, fmt.Errorf("pki: %w", err)
		}
		stamps[3] = fi
	}
	return stamps, nil
}

// same reports whether two stamps are of one unchanged file (or both of
// none).
func same(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func (s *Source) scheduleLocked() {
	if s.cfg.Interval > 0 {
		s.next.Store(s.clock.Now().Add(s.cfg.Interval).UnixNano())
	} else {
		s.next.Store(1<<63 - 1)
	}
}

func (s *Source) load() (*material, error) {
	f := s.cfg.Files
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificates: %w", err)
	}
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", f.CA, err)
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		if !c.IsCA {
			return nil, fmt.Errorf("pki: %s: certificate %q is not a CA", f.CA, c.Subject)
		}
		roots.AddCert(c)
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("pki: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: read key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s and %s: %w", f.Cert, f.Key, err)
	}
	chain := make([]*x509.Certificate, len(pair.Certificate))
	for i, der := range pair.Certificate {
		if chain[i], err = x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("pki: %s: %w", f.Cert, err)
		}
	}
	pair.Leaf = chain[0]
	id, err := verify(roots, chain, s.clock.Now(), x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, fmt.Errorf("pki: %s is not vouched for by %s: %w", f.Cert, f.CA, err)
	}
	if s.cfg.Expect.Role != "" && id != s.cfg.Expect {
		return nil, fmt.Errorf("pki: %s names %s, want %s", f.Cert, id, s.cfg.Expect)
	}
	cluster := ""
	for _, c := range cas {
		if err := chain[len(chain)-1].CheckSignatureFrom(c); err == nil {
			cluster = ClusterOf(c)
			break
		}
	}
	m := &material{cert: &pair, id: id, roots: roots, cluster: cluster, cas: cas, revoked: map[string]Revocation{}}
	if f.Revoked != "" {
		rs, err := ReadRevocations(f.Revoked)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			m.revoked[r.ID] = r
		}
	}
	m.server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
		// gRPC requires ALPN; a config returned by GetConfigForClient
		// replaces the one gRPC set it on.
		NextProtos: []string{"h2"},
		// No resumption: every connection is verified against the CAs
		// trusted when it is made, not when an earlier one was.
		SessionTicketsDisabled: true,
		Time:                   s.clock.Now,
	}
	m.https = m.server.Clone()
	m.https.ClientAuth = tls.VerifyClientCertIfGiven
	m.https.NextProtos = []string{"h2", "http/1.1"}
	return m, nil
}

// current returns the material, first re-reading the files if a check is
// due and they changed.
func (s *Source) current() *material {
	if s.clock.Now().UnixNano() >= s.next.Load() && s.checking.TryLock() {
		s.checkLocked()
		s.checking.Unlock()
	}
	return s.cur.Load()
}

func (s *Source) checkLocked() {
	if s.clock.Now().UnixNano() < s.next.Load() {
		return // another caller just checked
	}
	stamps, err := s.stat()
	if err != nil {
		s.log.Warn("certificate file unreadable; keeping the loaded certificate and revoked tokens", "err", err)
		s.scheduleLocked()
		return
	}
	changed := false
	for i := range stamps {
		changed = changed || !same(s.stamps[i], stamps[i])
	}
	if !changed {
		s.scheduleLocked()
		return
	}
	if err := s.reloadLocked(); err != nil {
		s.log.Warn("certificate or revocation files changed but do not load; keeping the loaded certificate and revoked tokens", "err", err)
		s.scheduleLocked()
	}
}

// VerifyToken checks a bearer token against the trusted CAs and the
// revoked tokens, as they are now (re-reading changed files first).
func (s *Source) VerifyToken(token string) (Token, error) {
	m := s.current()
	t, err := verifyToken(token, m.cas, s.clock.Now(), true)
	if err != nil {
		return Token{}, err
	}
	if _, ok := m.revoked[t.ID]; ok && t.ID != "" {
		return Token{}, fmt.Errorf("%w (token %s of %s)", ErrTokenRevoked, t.ID, t.Identity)
	}
	return t, nil
}

// Identity is who this member's certificate names.
func (s *Source) Identity() Identity { return s.current().id }

// Certificate is this member's current certificate and key.
func (s *Source) Certificate() *tls.Certificate { return s.current().cert }

// Roots are the CAs this member currently trusts.
func (s *Source) Roots() *x509.CertPool { return s.current().roots }

// Cluster is the cluster name recorded by the CA that signed this
// member's certificate: the gossip label, so two clusters on one network
// never merge.
func (s *Source) Cluster() string { return s.current().cluster }

// Expires is when this member's current certificate expires, for a
// metric or a warning ahead of it.
func (s *Source) Expires() time.Time { return s.current().cert.Leaf.NotAfter }

// Now is the source's clock, for callers verifying certificates with it.
func (s *Source) Now() time.Time { return s.clock.Now() }

// ServerConfig is the TLS configuration of a node's gRPC server: TLS 1.3,
// the current certificate, and a client certificate required and
// verified against the current CAs. Read the client's identity with
// PeerIdentity.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current().server, nil
		},
	}
}

// HTTPSConfig is the TLS configuration of a member's HTTP listener
// (dashboard, /metrics): the current certificate, and a client
// certificate verified against the current CAs when one is given, since
// browsers, scrapers with tokens and probes come without one. Read the
// client's identity with PeerIdentity.
func (s *Source) HTTPSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current().https, nil
		},
	}
}

// HTTPSClientConfig is the TLS configuration for reading a member's
// HTTPS listener (neptune top, tests): it presents the current
// certificate and accepts any server certificate the current CAs issued,
// whatever its role or host names (members are found by address).
func (s *Source) HTTPSClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := s.Verify(cs.PeerCertificates, x509.ExtKeyUsageAny)
			return err
		},
		Time: s.clock.Now,
	}
}

// CAs are the CA certificates the member trusts now (two while the
// cluster moves to a new CA): tokens are verified against their keys.
func (s *Source) CAs() []*x509.Certificate { return s.current().cas }

// ClientConfig is the TLS configuration for dialling a node. It presents
// the current certificate and accepts the server only if the current CAs
// vouch for it as a node, and, if node is not empty, as that node id.
//
// Host names are not checked (InsecureSkipVerify turns off only Go's
// built-in check): nodes are found by id in the yellow pages, and their
// addresses change, so the certificate is checked against the id instead,
// in VerifyConnection, which runs on every handshake.
func (s *Source) ClientConfig(node string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := s.Verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if id.Role != RoleNode {
				return fmt.Errorf("pki: server is %s, not a node", id)
			}
			if node != "" && id.Name != node {
				return fmt.Errorf("pki: server is node %q, want %q", id.Name, node)
			}
			return nil
		},
		Time: s.clock.Now,
	}
}

// Verify checks a peer's certificate chain (leaf first) against the
// current CAs for usage and returns the identity the leaf names.
func (s *Source) Verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (Identity, error) {
	return verify(s.current().roots, chain, s.clock.Now(), usage)
}

// ErrUnverified wraps every reason a peer's certificate is refused.
var ErrUnverified = errors.New("pki: peer certificate refused")

func verify(roots *x509.CertPool, chain []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) (Identity, error) {
	if len(chain) == 0 || chain[0] == nil {
		return Identity{}, fmt.Errorf("%w: no certificate", ErrUnverified)
	}
	leaf := chain[0]
	if leaf.IsCA {
		return Identity{}, fmt.Errorf("%w: a CA certificate is not a member's", ErrUnverified)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	return id, nil
}

// PeerIdentity is the identity of the peer of a TLS connection whose
// certificate the standard handshake verified (a server with
// RequireAndVerifyClientCert): the leaf of its first verified chain.
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, fmt.Errorf("%w: no verified certificate", ErrUnverified)
	}
	return IdentityOf(cs.VerifiedChains[0][0])
}

// ParseCerts decodes every CERTIFICATE block of a PEM file; other blocks
// are an error, and so is a file with none.
func ParseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// ParseKey decodes a PEM private key (PKCS #8, or SEC 1 "EC PRIVATE KEY").
func ParseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM private key")
	}
	var key any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q", blk.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}
