package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/transport"
)

// Authenticated demand gossip. A gateway's demand datagram decides how
// much of every reservation each gateway may admit, so a forged one could
// starve a subscriber (claim all the demand elsewhere) or keep a dead
// gateway's share away from the survivors (replay its last message). With
// GossipSecurity keys, every datagram carries a trailer after its JSON:
//
//	payload | instance (8) | counter (8) | time (8) | HMAC (32) | kind (1)
//
// instance is random per gateway start, counter counts its datagrams;
// time is the sender's clock in Unix nanoseconds. The HMAC-SHA-256 covers
// kind, payload, instance, counter and time, under a key derived with
// HKDF-SHA-256 from a cluster key (the gossip keyring's, so rotating the
// keyring rotates these keys too) and the cluster label, so one
// cluster's gateways never accept another's. Senders use the primary
// key; receivers accept any installed key (a rotation in progress).
//
// A receiver accepts a datagram only if its HMAC verifies, its time is
// within the window of the receiver's clock, and its counter is above the
// highest accepted from that instance. Demand messages supersede each
// other, so an older one arriving late is useless and is refused like a
// replay: the state is one counter per sender instance, forgotten once
// anything it could have sent is outside the time window.
//
// The layout and derivation are the load polls' (internal/transport,
// pollauth.go) under another kind byte and HKDF label, so a poll can never
// pass for demand or the reverse.
const (
	demandKind    byte = 0xD1
	demandMACSize      = sha256.Size
	// DemandTrailerSize is what authentication adds to each datagram.
	DemandTrailerSize = 8 + 8 + 8 + demandMACSize + 1
	demandKeyInfo     = "neptune gateway demand hmac v1\x00"
)

// DefaultGossipWindow is how far a demand datagram's time may be from
// the receiver's clock (as transport.DefaultPollWindow: NTP keeps a
// cluster's clocks far closer; a datagram arrives in milliseconds).
const DefaultGossipWindow = 5 * time.Second

// maxSenders bounds the replay state; only senders holding a cluster key
// create entries, and a cluster runs a handful of gateways.
const maxSenders = 1024

// GossipSecurity authenticates the demand gossip between gateways. Its
// zero value is refused when the config has a gossip address: either the
// cluster's keys or an explicit Insecure, as for nodes and clients.
type GossipSecurity struct {
	// Keys returns the cluster keys, the primary first (the gossip
	// keyring's: security.Material.Keys). Called per datagram, so a live
	// keyring change applies at once.
	Keys func() [][]byte
	// Label is the cluster name (the gossip label).
	Label string
	// Window bounds the skew between two gateways' clocks; 0 is
	// DefaultGossipWindow.
	Window time.Duration
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
)

var gossipDropReasons = []string{gossipUnauthenticated, gossipStale, gossipReplayed, gossipOversized, gossipMalformed}

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
	window   time.Duration
	instance uint64

	mu      sync.Mutex
	counter uint64 // last counter sealed
	seen    map[uint64]*senderState
	swept   time.Time
}

type senderState struct {
	top  uint64 // highest counter accepted
	last time.Time
}

func newDemandAuth(s GossipSecurity) (*demandAuth, error) {
	if s.Keys == nil || len(s.Keys()) == 0 {
		return nil, errors.New("gossip security: no cluster key (give the keyring, or choose insecure)")
	}
	if s.Window <= 0 {
		s.Window = DefaultGossipWindow
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &demandAuth{
		keys: transport.NewDerivedKeys(s.Keys, demandKeyInfo+s.Label), window: s.Window,
		instance: binary.BigEndian.Uint64(b[:]), seen: map[uint64]*senderState{},
	}, nil
}

func demandMAC(key, signed []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte{demandKind})
	m.Write(signed)
	return m.Sum(nil)
}

// seal returns payload with the trailer, stamped now under the primary
// key (nil if there is no key).
func (a *demandAuth) seal(now time.Time, payload []byte) []byte {
	keys := a.keys.Keys()
	if len(keys) == 0 {
		return nil
	}
	a.mu.Lock()
	a.counter++
	n := a.counter
	a.mu.Unlock()
	out := make([]byte, 0, len(payload)+DemandTrailerSize)
	out = append(out, payload...)
	out = binary.BigEndian.AppendUint64(out, a.instance)
	out = binary.BigEndian.AppendUint64(out, n)
	out = binary.BigEndian.AppendUint64(out, uint64(now.UnixNano()))
	out = append(out, demandMAC(keys[0], out)...)
	return append(out, demandKind)
}

// open checks pkt at now and returns its payload. Everything a sender
// controls is verified before any state changes; an error is a
// *dropError naming why.
func (a *demandAuth) open(now time.Time, pkt []byte) ([]byte, error) {
	if len(pkt) < DemandTrailerSize || pkt[len(pkt)-1] != demandKind {
		return nil, drop(gossipUnauthenticated, "no authentication trailer")
	}
	body := len(pkt) - DemandTrailerSize
	signed := pkt[:body+24]
	mac := pkt[body+24 : len(pkt)-1]
	ok := false
	for _, k := range a.keys.Keys() {
		if hmac.Equal(mac, demandMAC(k, signed)) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, drop(gossipUnauthenticated, "HMAC does not verify under any cluster key")
	}
	instance := binary.BigEndian.Uint64(pkt[body:])
	counter := binary.BigEndian.Uint64(pkt[body+8:])
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(pkt[body+16:])))
	if d := now.Sub(sent); d > a.window || d < -a.window {
		return nil, drop(gossipStale, "sent %v off this gateway's clock (window %v)", d, a.window)
	}
	if instance == a.instance {
		return nil, drop(gossipReplayed, "this gateway's own datagram")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(now)
	st, known := a.seen[instance]
	switch {
	case !known && len(a.seen) >= maxSenders:
		return nil, drop(gossipReplayed, "more than %d senders within the window", maxSenders)
	case !known:
		a.seen[instance] = &senderState{top: counter, last: now}
	case counter <= st.top:
		return nil, drop(gossipReplayed, "counter %d not above %d, the last accepted from this sender", counter, st.top)
	default:
		st.top, st.last = counter, now
	}
	return pkt[:body:body], nil
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
