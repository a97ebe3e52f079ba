package membership

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Signed announcements: an announcement is accepted only for the node
// that wrote it.
//
// Why a signature with the node's certificate key rather than an HMAC
// with a key derived from the gossip key: memberlist's NotifyMsg gives
// the payload but not who sent it, and push/pull state relays every
// member's announcements through third parties, so the sender of a packet
// is not the author of what it carries. A MAC under a key every member
// holds proves only that some member wrote it; any member could still
// announce for any node id, the attack we close. A signature with the
// author's node certificate key names the author, survives relaying
// unchanged, and reuses the certificates mutual TLS already needs. The
// gossip keyring stays the first gate: without it nothing reaches these
// decoders.
//
// Envelope (all integers big endian, lengths uvarint):
//
//	"NSA1" | flags (1) | SHA-256 of the signer's certificate (32) |
//	signing time, Unix ms (8) | [len, certificate DER if flags&1] |
//	len, signature | announcement protobuf (the rest)
//
// The signature covers a domain string, the cluster label, the
// certificate fingerprint, the time and the announcement, so it cannot be
// moved to another cluster, certificate or message. The certificate is
// attached to every certCadence-th announcement and to the first few after
// it changes; others name it by fingerprint, and receivers keep verified
// certificates, so most announcements stay small enough for one UDP
// packet. Push/pull state and the announcement sent to a joining member
// always attach it. The signing time bounds replays by other members of
// an old signature (of a node since gone) to MaxAnnouncementAge.
const (
	annMagic    = "NSA1"
	stateMagic  = "NSS1"
	annFlagCert = 1
	annDomain   = "neptune announcement v1\x00"
	// certCadence: the certificate rides on announcements whose sequence
	// number is a multiple of it.
	certCadence = 4
	// certRepeat: it rides on this many announcements after it changes.
	certRepeat = 4
	// maxCertDER and maxSig bound what a decoder accepts.
	maxCertDER = 16 << 10
	maxSig     = 1 << 10
	// maxKnownCerts bounds the verified-certificate cache.
	maxKnownCerts = 4096
)

// DefaultMaxAnnouncementAge is how old a signed announcement may be when
// it arrives, directly or relayed, and how far its time may be ahead. It
// exceeds twice MaxRefreshInterval: an announcement refreshed that
// rarely is relayed until the next refresh. A
// replayed old announcement of a member since gone lives at most a TTL:
// only memberlist's live members' entries are kept past it.
const DefaultMaxAnnouncementAge = 5 * time.Minute

// Errors an announcement is refused with.
var (
	ErrAnnouncementMalformed = errors.New("membership: malformed signed announcement")
	ErrAnnouncementSigner    = errors.New("membership: announcement not signed by the node it names")
	ErrAnnouncementStale     = errors.New("membership: announcement signed too long ago or in the future")
	// ErrAnnouncementUnsigned (with ErrAnnouncementMalformed): no
	// envelope at all, a bare announcement.
	ErrAnnouncementUnsigned = errors.New("membership: announcement not signed")
	errUnknownCert          = errors.New("membership: announcement names a certificate not yet seen")
	// errBadSignature and errWrongAuthor (with ErrAnnouncementSigner)
	// tell a tampered or misattributed announcement from one signed with
	// a certificate of another CA (*ForeignSignerError).
	errBadSignature = errors.New("signature does not verify (tampered, or signed for another cluster name)")
	errWrongAuthor  = errors.New("signed by another member than the one it names")
)

// ForeignSignerError refuses an announcement signed with a certificate
// this member's CA did not issue: its author belongs to another cluster,
// or this member does. errors.Is(err, ErrAnnouncementSigner) holds.
type ForeignSignerError struct {
	// Claims is the identity the certificate names (unverified).
	Claims string
	// Cluster is the cluster name its issuer records, CAKey the issuer's
	// key id (hex), both as the certificate says.
	Cluster, CAKey string
	Err            error
}

func (e *ForeignSignerError) Error() string {
	return fmt.Sprintf("membership: announcement of %s signed with a certificate of CA %s (cluster %q) that this member's CAs did not issue: %v",
		e.Claims, e.CAKey, e.Cluster, e.Err)
}

// Unwrap gives ErrAnnouncementSigner and the verification failure.
func (e *ForeignSignerError) Unwrap() []error { return []error{ErrAnnouncementSigner, e.Err} }

// CAKeyID is how a CA is named in refusals: the first 8 bytes of its key
// id in hex (a certificate's AuthorityKeyId, a CA's SubjectKeyId).
func CAKeyID(id []byte) string {
	if len(id) > 8 {
		id = id[:8]
	}
	if len(id) == 0 {
		return "(no key id)"
	}
	return hex.EncodeToString(id)
}

// refusalReason is the metric label of an announcement refusal.
func refusalReason(err error) string {
	var foreign *ForeignSignerError
	switch {
	case errors.Is(err, ErrAnnouncementUnsigned):
		return "announcement_unsigned"
	case errors.As(err, &foreign):
		return "announcement_unknown_ca"
	case errors.Is(err, errBadSignature):
		return "announcement_bad_signature"
	case errors.Is(err, errWrongAuthor):
		return "announcement_wrong_author"
	case errors.Is(err, ErrAnnouncementStale):
		return "announcement_stale"
	case errors.Is(err, ErrAnnouncementMalformed):
		return "announcement_malformed"
	}
	return "announcement_signer"
}

// sealed is a verified (or own) signed announcement, kept to relay it.
type sealed struct {
	fp      [sha256.Size]byte
	at      int64
	sig     []byte
	payload []byte
	// shared, on a verified one, holds payload and its decoding
	// (decodeShared) for as long as this is kept.
	shared *decodedAnn
}

// encode writes the envelope, attaching cert if it is not nil.
func (s *sealed) encode(cert []byte) []byte {
	out := make([]byte, 0, len(annMagic)+1+len(s.fp)+8+2*binary.MaxVarintLen64+len(cert)+len(s.sig)+len(s.payload))
	out = append(out, annMagic...)
	var flags byte
	if cert != nil {
		flags |= annFlagCert
	}
	out = append(out, flags)
	out = append(out, s.fp[:]...)
	out = binary.BigEndian.AppendUint64(out, uint64(s.at))
	if cert != nil {
		out = binary.AppendUvarint(out, uint64(len(cert)))
		out = append(out, cert...)
	}
	out = binary.AppendUvarint(out, uint64(len(s.sig)))
	out = append(out, s.sig...)
	return append(out, s.payload...)
}

// decodeSealed parses an envelope without verifying anything; the slices
// alias b.
func decodeSealed(b []byte) (s sealed, cert []byte, err error) {
	bad := func(why string) (sealed, []byte, error) {
		return sealed{}, nil, fmt.Errorf("%w: %s", ErrAnnouncementMalformed, why)
	}
	if len(b) < len(annMagic) || string(b[:len(annMagic)]) != annMagic {
		return sealed{}, nil, fmt.Errorf("%w: %w: no envelope", ErrAnnouncementMalformed, ErrAnnouncementUnsigned)
	}
	if len(b) < len(annMagic)+1+sha256.Size+8 {
		return bad("envelope too short")
	}
	b = b[len(annMagic):]
	flags := b[0]
	if flags&^annFlagCert != 0 {
		return bad("unknown flags")
	}
	copy(s.fp[:], b[1:1+sha256.Size])
	b = b[1+sha256.Size:]
	s.at = int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	field := func(limit int) ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(limit) || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	var ok bool
	if flags&annFlagCert != 0 {
		if cert, ok = field(maxCertDER); !ok || len(cert) == 0 {
			return bad("certificate length")
		}
	}
	if s.sig, ok = field(maxSig); !ok || len(s.sig) == 0 {
		return bad("signature length")
	}
	s.payload = b
	return s, cert, nil
}

// annAuth signs this member's announcements and verifies others'.
type annAuth struct {
	src    *pki.Source
	label  string
	maxAge time.Duration
	clock  clock.Clock

	mu       sync.Mutex
	roots    *x509.CertPool // the CAs the cache was verified against
	known    map[[sha256.Size]byte]*x509.Certificate
	node     map[[sha256.Size]byte]string
	sentFP   [sha256.Size]byte
	fullLeft int
}

func newAnnAuth(src *pki.Source, label string, maxAge time.Duration, clk clock.Clock) *annAuth {
	if maxAge <= 0 {
		maxAge = DefaultMaxAnnouncementAge
	}
	return &annAuth{src: src, label: label, maxAge: maxAge, clock: clk,
		known: map[[sha256.Size]byte]*x509.Certificate{}, node: map[[sha256.Size]byte]string{}}
}

func (a *annAuth) signed(s *sealed) []byte {
	msg := make([]byte, 0, len(annDomain)+len(a.label)+1+len(s.fp)+8+len(s.payload))
	msg = append(msg, annDomain...)
	msg = append(msg, a.label...)
	msg = append(msg, 0)
	msg = append(msg, s.fp[:]...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(s.at))
	return append(msg, s.payload...)
}

// seal signs payload (this member's announcement with sequence number seq)
// with the current certificate's key and returns it and its envelope.
func (a *annAuth) seal(payload []byte, seq uint64) (*sealed, []byte, error) {
	cert := a.src.Certificate()
	key, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("membership: certificate key of type %T cannot sign", cert.PrivateKey)
	}
	s := &sealed{fp: sha256.Sum256(cert.Leaf.Raw), at: a.clock.Now().UnixMilli(), payload: payload}
	sig, err := pki.Sign(key, a.signed(s))
	if err != nil {
		return nil, nil, fmt.Errorf("membership: sign announcement: %w", err)
	}
	s.sig = sig
	a.mu.Lock()
	if s.fp != a.sentFP {
		a.sentFP, a.fullLeft = s.fp, certRepeat
	}
	attach := a.fullLeft > 0 || seq%certCadence == 0
	if a.fullLeft > 0 {
		a.fullLeft--
	}
	a.mu.Unlock()
	var der []byte
	if attach {
		der = cert.Leaf.Raw
	}
	return s, s.encode(der), nil
}

// certificate returns the DER of this member's certificate or a verified
// one, for relaying; nil if unknown.
func (a *annAuth) certificate(fp [sha256.Size]byte) []byte {
	if own := a.src.Certificate().Leaf.Raw; sha256.Sum256(own) == fp {
		return own
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.known[fp]; ok {
		return c.Raw
	}
	return nil
}

// open verifies an envelope and returns the announcement it carries.
func (a *annAuth) open(b []byte) (*pb.Announcement, *sealed, error) {
	s, der, err := decodeSealed(b)
	if err != nil {
		return nil, nil, err
	}
	now := a.clock.Now()
	cert, node, err := a.resolve(s.fp, der, now)
	if err != nil {
		return nil, nil, err
	}
	if d := now.Sub(time.UnixMilli(s.at)); d > a.maxAge || d < -a.maxAge {
		return nil, nil, fmt.Errorf("%w: %v old (node %s)", ErrAnnouncementStale, d, node)
	}
	if err := pki.CheckSignature(cert, a.signed(&s), s.sig); err != nil {
		return nil, nil, fmt.Errorf("%w: %w: node %s: %v", ErrAnnouncementSigner, errBadSignature, node, err)
	}
	d, err := decodeShared(s.payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrAnnouncementMalformed, err)
	}
	if d.ann.NodeId != node {
		return nil, nil, fmt.Errorf("%w: %w: announces %q, signed by node %q", ErrAnnouncementSigner, errWrongAuthor, d.ann.NodeId, node)
	}
	// Kept, s must not alias b (a packet, or a whole push/pull state).
	s.payload, s.sig, s.shared = d.payload, bytes.Clone(s.sig), d
	return d.ann, &s, nil
}

// resolve finds the node certificate with fingerprint fp: verified before,
// or der, verified now against the cluster CAs as a node's.
func (a *annAuth) resolve(fp [sha256.Size]byte, der []byte, now time.Time) (*x509.Certificate, string, error) {
	if der != nil && sha256.Sum256(der) != fp {
		return nil, "", fmt.Errorf("%w: certificate does not match its fingerprint", ErrAnnouncementMalformed)
	}
	roots := a.src.Roots()
	a.mu.Lock()
	defer a.mu.Unlock()
	if roots != a.roots { // the CAs were reloaded: verify everything again
		clear(a.known)
		clear(a.node)
		a.roots = roots
	}
	if c, ok := a.known[fp]; ok {
		if now.After(c.NotAfter) {
			delete(a.known, fp)
			delete(a.node, fp)
			return nil, "", fmt.Errorf("%w: certificate expired", ErrAnnouncementSigner)
		}
		return c, a.node[fp], nil
	}
	if der == nil {
		return nil, "", errUnknownCert
	}
	c, err := parseCertShared(fp, der)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrAnnouncementMalformed, err)
	}
	id, err := a.src.Verify([]*x509.Certificate{c}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		if errors.As(err, new(x509.UnknownAuthorityError)) {
			claims := "an unnamed member"
			if cid, err := pki.IdentityOf(c); err == nil {
				claims = cid.String()
			}
			cluster := ""
			if len(c.Issuer.Organization) > 0 {
				cluster = c.Issuer.Organization[0]
			}
			return nil, "", &ForeignSignerError{Claims: claims, Cluster: cluster, CAKey: CAKeyID(c.AuthorityKeyId), Err: err}
		}
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage {
			return nil, "", fmt.Errorf("%w: %w: not a node's certificate: %v", ErrAnnouncementSigner, errWrongAuthor, err)
		}
		return nil, "", fmt.Errorf("%w: %v", ErrAnnouncementSigner, err)
	}
	if id.Role != pki.RoleNode {
		return nil, "", fmt.Errorf("%w: %w: signed by %s, not a node", ErrAnnouncementSigner, errWrongAuthor, id)
	}
	a.remember(fp, c, id.Name)
	return c, id.Name, nil
}

// signer is the node whose certificate has fingerprint fp: this member's
// own, or one verified before.
func (a *annAuth) signer(fp [sha256.Size]byte) (string, bool) {
	if sha256.Sum256(a.src.Certificate().Leaf.Raw) == fp {
		return a.src.Identity().Name, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	node, ok := a.node[fp]
	return node, ok
}

// remember caches a verified node certificate. Callers hold a.mu.
func (a *annAuth) remember(fp [sha256.Size]byte, c *x509.Certificate, node string) {
	if _, ok := a.known[fp]; !ok && len(a.known) >= maxKnownCerts {
		clear(a.known)
		clear(a.node)
	}
	a.known[fp], a.node[fp] = c, node
}

// encodeState writes push/pull state of signed announcements:
// "NSS1" then, per entry, uvarint age in ms, uvarint length, envelope.
func encodeState(entries []stateEntry) []byte {
	out := []byte(stateMagic)
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(e.ageMs))
		out = binary.AppendUvarint(out, uint64(len(e.envelope)))
		out = append(out, e.envelope...)
	}
	return out
}

type stateEntry struct {
	ageMs    int64
	envelope []byte
}

// maxStateEntries bounds what one push/pull state may carry.
const maxStateEntries = 1 << 16

// decodeState parses push/pull state; envelopes alias b.
func decodeState(b []byte) ([]stateEntry, error) {
	if len(b) < len(stateMagic) || string(b[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("%w: %w: not signed yellow pages state", ErrAnnouncementMalformed, ErrAnnouncementUnsigned)
	}
	b = b[len(stateMagic):]
	var out []stateEntry
	for len(b) > 0 {
		if len(out) == maxStateEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrAnnouncementMalformed, maxStateEntries)
		}
		age, k := binary.Uvarint(b)
		if k <= 0 || age > 1<<62 {
			return nil, fmt.Errorf("%w: entry age", ErrAnnouncementMalformed)
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: entry length", ErrAnnouncementMalformed)
		}
		out = append(out, stateEntry{ageMs: int64(age), envelope: b[k : k+int(n) : k+int(n)]})
		b = b[k+int(n):]
	}
	return out, nil
}
