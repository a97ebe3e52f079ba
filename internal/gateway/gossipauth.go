package gateway

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// Authenticated demand gossip. A gateway's demand datagram decides how
// much of every reservation each gateway may admit, so a forged one could
// starve a subscriber (claim all the demand elsewhere) or keep a dead
// gateway's share away from the survivors (replay its last message). With
// GossipSecurity, every datagram carries a trailer after its JSON:
//
//	payload | certificate (DER) | signature | cert len (2) | sig len (2) |
//	instance (8) | counter (8) | time (8) | HMAC (32) | kind (1)
//
// instance is random per gateway start, counter counts its datagrams;
// time is the sender's clock in Unix nanoseconds.
//
// Two checks, for two questions. The HMAC-SHA-256 (over kind and
// everything before it) is under a key derived with HKDF-SHA-256 from a
// cluster key (the gossip keyring's, so rotating the keyring rotates
// these keys too) and the cluster label: it is cheap, and it drops what
// no member of this cluster sent before any certificate is parsed.
// Senders use the primary key; receivers accept any installed key (a
// rotation in progress). But every node and client holds the keyring, so
// the HMAC cannot say *which* gateway spoke: the signature can. It is
// made with the key of the gateway's certificate (role gateway,
// neptune://gateway/<name>, as announcements are signed with a node's),
// over a domain string, the label, instance, counter, time and payload;
// the receiver verifies the attached certificate against its cluster CAs
// (once per certificate, then by fingerprint) and accepts the demand only
// for the gateway the certificate names.
//
// A receiver accepts a datagram only if its HMAC verifies, its time is
// within the window of the receiver's clock, its counter is above the
// highest accepted from that instance, and it is signed by a gateway
// certificate of this cluster for the gateway its JSON names. Demand
// messages supersede each other, so an older one arriving late is useless
// and is refused like a replay: the state is one counter per sender
// instance, forgotten once anything it could have sent is outside the
// time window.
//
// The fixed part of the layout and the derivation are the load polls'
// (internal/transport, pollauth.go) under another kind byte and HKDF
// label, so a poll can never pass for demand or the reverse.
const (
	demandKind    byte = 0xD2 // 0xD1 was the unsigned layout
	demandMACSize      = sha256.Size
	// demandFixed is the trailer's size without certificate and signature.
	demandFixed   = 2 + 2 + 8 + 8 + 8 + demandMACSize + 1
	demandKeyInfo = "neptune gateway demand hmac v2\x00"
	demandSigInfo = "neptune gateway demand signature v1\x00"
	maxDemandCert = 16 << 10
	maxDemandSig  = 1 << 10
	maxKnownCerts = 256 // verified gateway certificates kept
)

// DefaultGossipWindow is how far a demand datagram's time may be from
// the receiver's clock (as transport.DefaultPollWindow: NTP keeps a
// cluster's clocks far closer; a datagram arrives in milliseconds).
const DefaultGossipWindow = 5 * time.Second

// Defaults of the per-source limit on received datagrams: a flood guard
// far above what gateways send (one datagram per gossip period, 10 a
// second by default, per peer; gateways sharing a host share its address).
const (
	DefaultGossipRate  = 200
	DefaultGossipBurst = 400
)

// maxSenders bounds the replay state; only senders holding a cluster key
// and a gateway certificate create entries, and a cluster runs a handful
// of gateways.
const maxSenders = 1024

// GossipSecurity authenticates the demand gossip between gateways. Its
// zero value is refused when the config has a gossip address: either the
// cluster's keys and this gateway's certificate, or an explicit Insecure,
// as for nodes and clients.
type GossipSecurity struct {
	// Keys returns the cluster keys, the primary first (the gossip
	// keyring's: security.Material.Keys). Called per datagram, so a live
	// keyring change applies at once.
	Keys func() [][]byte
	// Label is the cluster name (the gossip label).
	Label string
	// Certs is this gateway's certificate source
	// (security.Material.TLS): a gateway certificate
	// (neptune tls cert create --gateway NAME), whose key signs every
	// datagram and whose name is the gateway's name among its peers; its
	// CAs verify the peers' certificates.
	Certs *pki.Source
	// Window bounds the skew between two gateways' clocks; 0 is
	// DefaultGossipWindow.
	Window time.Duration
	// Rate and Burst limit the datagrams read from each source address
	// (per second, and at once) before any is authenticated, so a flood
	// costs a bucket lookup per datagram, not an HMAC; zero values take
	// DefaultGossipRate and DefaultGossipBurst, a negative Rate turns
	// the limit off. They apply to insecure gossip too.
	Rate  float64
	Burst int
	// Insecure sends and accepts plain JSON datagrams: anyone who can
	// reach the gossip port can steer the reservations' split.
	Insecure bool
}

// Reasons a received demand datagram is dropped: the reason label of
// neptune_gateway_gossip_dropped_total.
const (
	gossipUnauthenticated = "unauthenticated" // no trailer, or its HMAC verifies under no cluster key
	gossipStale           = "stale"           // its time is outside the window of this gateway's clock
	gossipReplayed        = "replayed"        // its counter is not above the last accepted from its sender
	gossipOversized       = "oversized"       // larger than maxDatagram
	gossipMalformed       = "malformed"       // authenticated (or insecure) but not a valid demand message
	gossipSigner          = "signer"          // not signed by a gateway certificate of this cluster, or demand for another gateway than it names
	gossipRateLimited     = "rate_limited"    // over the per-source limit, dropped unread
)

var gossipDropReasons = []string{gossipUnauthenticated, gossipStale, gossipReplayed, gossipOversized, gossipMalformed, gossipSigner, gossipRateLimited}

// dropError is an open failure with the reason it is counted under.
type dropError struct {
	reason string
	err    error
}

func (e *dropError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *dropError) Unwrap() error { return e.err }

func drop(reason string, format string, args ...any) error {
	return &dropError{reason: reason, err: fmt.Errorf(format, args...)}
}

// dropReason is the metric label of err (malformed if it is not one of
// demandAuth's).
func dropReason(err error) string {
	if d, ok := errors.AsType[*dropError](err); ok {
		return d.reason
	}
	return gossipMalformed
}

// demandAuth seals and opens demand datagrams. It is a pure core: the
// caller passes the time. seal is called by the sending goroutine and
// open by the receiving one; both may run at once.
type demandAuth struct {
	keys     *transport.DerivedKeys // demand keys
	certs    *pki.Source
	label    string
	window   time.Duration
	instance uint64

	mu      sync.Mutex
	counter uint64 // last counter sealed
	seen    map[uint64]*senderState
	swept   time.Time
	roots   *x509.CertPool // the CAs known was verified against
	known   map[[sha256.Size]byte]knownCert
}

type senderState struct {
	top  uint64 // highest counter accepted
	last time.Time
}

// knownCert is a gateway certificate verified against the cluster CAs.
type knownCert struct {
	cert *x509.Certificate
	name string
}

func newDemandAuth(s GossipSecurity) (*demandAuth, error) {
	if s.Keys == nil || len(s.Keys()) == 0 {
		return nil, errors.New("gossip security: no cluster key (give the keyring, or choose insecure)")
	}
	if s.Certs == nil {
		return nil, errors.New("gossip security: no certificate (a gateway certificate signs every demand datagram: neptune tls cert create --gateway NAME)")
	}
	if id := s.Certs.Identity(); id.Role != pki.RoleGateway {
		return nil, fmt.Errorf("gossip security: the certificate names %s, not a gateway: demand gossip needs a gateway certificate (neptune tls cert create --gateway NAME, presented with --cert gateway/NAME)", id)
	}
	if s.Window <= 0 {
		s.Window = DefaultGossipWindow
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &demandAuth{
		keys: transport.NewDerivedKeys(s.Keys, demandKeyInfo+s.Label), certs: s.Certs, label: s.Label, window: s.Window,
		instance: binary.BigEndian.Uint64(b[:]), seen: map[uint64]*senderState{}, known: map[[sha256.Size]byte]knownCert{},
	}, nil
}

func demandMAC(key, signed []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte{demandKind})
	m.Write(signed)
	return m.Sum(nil)
}

// signed is what a datagram's signature covers: head is instance,
// counter and time.
func (a *demandAuth) signed(head, payload []byte) []byte {
	msg := make([]byte, 0, len(demandSigInfo)+len(a.label)+1+len(head)+len(payload))
	msg = append(msg, demandSigInfo...)
	msg = append(msg, a.label...)
	msg = append(msg, 0)
	msg = append(msg, head...)
	return append(msg, payload...)
}

// seal returns payload with the trailer, stamped now, signed with this
// gateway's certificate key and MACed under the primary key (nil if there
// is no key or the certificate's key cannot sign).
func (a *demandAuth) seal(now time.Time, payload []byte) []byte {
	keys := a.keys.Keys()
	if len(keys) == 0 {
		return nil
	}
	cert := a.certs.Certificate()
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil
	}
	a.mu.Lock()
	a.counter++
	n := a.counter
	a.mu.Unlock()
	head := make([]byte, 0, 24)
	head = binary.BigEndian.AppendUint64(head, a.instance)
	head = binary.BigEndian.AppendUint64(head, n)
	head = binary.BigEndian.AppendUint64(head, uint64(now.UnixNano()))
	sig, err := pki.Sign(signer, a.signed(head, payload))
	if err != nil {
		return nil
	}
	der := cert.Leaf.Raw
	out := make([]byte, 0, len(payload)+len(der)+len(sig)+demandFixed)
	out = append(out, payload...)
	out = append(out, der...)
	out = append(out, sig...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(der)))
	out = binary.BigEndian.AppendUint16(out, uint16(len(sig)))
	out = append(out, head...)
	out = append(out, demandMAC(keys[0], out)...)
	return append(out, demandKind)
}

// open checks pkt at now and returns its payload and the name of the
// gateway whose certificate signed it. Everything a sender controls is
// verified before any state changes, the cheap checks (HMAC, time,
// counter) before the certificate and signature; an error is a
// *dropError naming why.
func (a *demandAuth) open(now time.Time, pkt []byte) (payload []byte, gateway string, err error) {
	n := len(pkt)
	if n < demandFixed || pkt[n-1] != demandKind {
		return nil, "", drop(gossipUnauthenticated, "no authentication trailer")
	}
	macAt := n - 1 - demandMACSize
	headAt := macAt - 24
	lensAt := headAt - 4
	ok := false
	for _, k := range a.keys.Keys() {
		if hmac.Equal(pkt[macAt:n-1], demandMAC(k, pkt[:macAt])) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, "", drop(gossipUnauthenticated, "HMAC does not verify under any cluster key")
	}
	certLen, sigLen := int(binary.BigEndian.Uint16(pkt[lensAt:])), int(binary.BigEndian.Uint16(pkt[lensAt+2:]))
	if certLen == 0 || certLen > maxDemandCert || sigLen == 0 || sigLen > maxDemandSig || certLen+sigLen > lensAt {
		return nil, "", drop(gossipSigner, "certificate of %d bytes, signature of %d", certLen, sigLen)
	}
	sigAt := lensAt - sigLen
	certAt := sigAt - certLen
	head := pkt[headAt:macAt]
	instance := binary.BigEndian.Uint64(head)
	counter := binary.BigEndian.Uint64(head[8:])
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(head[16:])))
	if d := now.Sub(sent); d > a.window || d < -a.window {
		return nil, "", drop(gossipStale, "sent %v off this gateway's clock (window %v)", d, a.window)
	}
	if instance == a.instance {
		return nil, "", drop(gossipReplayed, "this gateway's own datagram")
	}
	if err := a.fresh(now, instance, counter); err != nil {
		return nil, "", err
	}
	payload = pkt[:certAt:certAt]
	cert, name, err := a.resolve(pkt[certAt:sigAt])
	if err != nil {
		return nil, "", err
	}
	if err := pki.CheckSignature(cert, a.signed(head, payload), pkt[sigAt:lensAt]); err != nil {
		return nil, "", drop(gossipSigner, "signature of gateway %q: %v", name, err)
	}
	if err := a.accept(now, instance, counter); err != nil {
		return nil, "", err
	}
	return payload, name, nil
}

// fresh refuses a counter not above the last accepted from instance,
// before any signature is checked; accept records it once one is.
func (a *demandAuth) fresh(now time.Time, instance, counter uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(now)
	st, known := a.seen[instance]
	switch {
	case !known && len(a.seen) >= maxSenders:
		return drop(gossipReplayed, "more than %d senders within the window", maxSenders)
	case known && counter <= st.top:
		return drop(gossipReplayed, "counter %d not above %d, the last accepted from this sender", counter, st.top)
	}
	return nil
}

func (a *demandAuth) accept(now time.Time, instance, counter uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, known := a.seen[instance]
	switch {
	case !known && len(a.seen) >= maxSenders:
		return drop(gossipReplayed, "more than %d senders within the window", maxSenders)
	case !known:
		a.seen[instance] = &senderState{top: counter, last: now}
	case counter <= st.top: // the same datagram twice, checked at once
		return drop(gossipReplayed, "counter %d not above %d, the last accepted from this sender", counter, st.top)
	default:
		st.top, st.last = counter, now
	}
	return nil
}

// resolve returns the gateway certificate der and the gateway it names:
// verified before (by fingerprint, while the CAs are the same and it has
// not expired), or verified now against the cluster CAs.
func (a *demandAuth) resolve(der []byte) (*x509.Certificate, string, error) {
	fp := sha256.Sum256(der)
	roots := a.certs.Roots()
	now := a.certs.Now()
	a.mu.Lock()
	if roots != a.roots { // the CAs were reloaded: verify everything again
		clear(a.known)
		a.roots = roots
	}
	k, ok := a.known[fp]
	a.mu.Unlock()
	if ok && !now.After(k.cert.NotAfter) {
		return k.cert, k.name, nil
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, "", drop(gossipSigner, "certificate: %v", err)
	}
	id, err := a.certs.Verify([]*x509.Certificate{c}, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, "", drop(gossipSigner, "%v", err)
	}
	if id.Role != pki.RoleGateway {
		return nil, "", drop(gossipSigner, "signed by %s, not a gateway", id)
	}
	a.mu.Lock()
	if len(a.known) >= maxKnownCerts {
		clear(a.known)
	}
	a.known[fp] = knownCert{cert: c, name: id.Name}
	a.mu.Unlock()
	return c, id.Name, nil
}

// sweep forgets senders idle for three windows: anything they sent
// before is outside the time window by then, so forgetting them cannot
// let a replay in. Called with mu held.
func (a *demandAuth) sweep(now time.Time) {
	if now.Sub(a.swept) < a.window {
		return
	}
	a.swept = now
	for id, st := range a.seen {
		if now.Sub(st.last) > 3*a.window {
			delete(a.seen, id)
		}
	}
}
