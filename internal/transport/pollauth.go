package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// Authenticated polls. A load poll and its reply are protobuf messages in
// one UDP datagram each; with a PollAuth both carry a fixed trailer after
// the protobuf bytes (the protobuf schema is unchanged):
//
//	payload | instance (8) | counter (8) | time (8) | HMAC (32) | kind (1)
//
// instance is a random number the poller picks when it opens its socket
// and counter its poll id; together they are the poll's nonce, and a
// reply repeats its request's nonce. time is the sender's clock in Unix
// nanoseconds. The HMAC-SHA-256 covers kind, payload, nonce and time,
// under a poll key derived with HKDF-SHA-256 from a cluster key (the
// gossip keyring's keys, so rotating the keyring rotates poll keys) and
// the cluster label, so one cluster's polls never verify in another.
// Senders use the primary key; receivers accept any installed key.
//
// A poll server answers a request only if its HMAC verifies, its time is
// within the replay window of the server's clock, and its nonce was not
// seen before (per poller instance, a sliding window of the last 64
// counters, as IPsec does: memory per poller, not per poll). A poller
// accepts a reply only if its HMAC verifies and it repeats the nonce of a
// poll still waiting, so a forged or replayed reply cannot steer a choice.
const (
	pollKindRequest byte = 0xA1
	pollKindReply   byte = 0xA2
	pollMACSize          = sha256.Size
	// PollTrailerSize is what authentication adds to each datagram.
	PollTrailerSize = 8 + 8 + 8 + pollMACSize + 1
)

// DefaultPollWindow is how far a poll's timestamp may be from the
// server's clock. Clocks of a cluster's machines agree far better than
// this under NTP; a poll is answered in milliseconds.
const DefaultPollWindow = 5 * time.Second

// pollKeyInfo labels the HKDF derivation of poll keys.
const pollKeyInfo = "neptune poll hmac v1\x00"

// PollAuthConfig configures a PollAuth.
type PollAuthConfig struct {
	// Keys returns the cluster keys, the primary first (the gossip
	// keyring's GetKeys): called per datagram, so a live keyring change
	// applies at once.
	Keys func() [][]byte
	// Label is the cluster name (the gossip label).
	Label string
	// Window bounds the age of a request; 0 is DefaultPollWindow.
	Window time.Duration
	// Clock stamps and checks times; nil is the real clock.
	Clock clock.Clock
}

// PollAuth authenticates load polls and their replies. One PollAuth may
// serve a poll server and a poller. It is safe for concurrent use.
type PollAuth struct {
	keys   *DerivedKeys // poll keys
	window time.Duration
	clock  clock.Clock
}

// NewPollAuth returns a PollAuth; it fails if there is no key.
func NewPollAuth(cfg PollAuthConfig) (*PollAuth, error) {
	if cfg.Keys == nil || len(cfg.Keys()) == 0 {
		return nil, errors.New("transport: poll authentication needs a cluster key")
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultPollWindow
	}
	return &PollAuth{keys: NewDerivedKeys(cfg.Keys, pollKeyInfo+cfg.Label), window: cfg.Window, clock: clock.OrReal(cfg.Clock)}, nil
}

// pollNonce identifies one poll: the poller's instance and the poll id.
type pollNonce struct {
	instance, counter uint64
}

// seal appends the trailer of kind to payload (which it may extend in
// place) under the primary key, stamped with the PollAuth's clock.
func (a *PollAuth) seal(kind byte, payload []byte, n pollNonce) []byte {
	now := a.clock.Now()
	keys := a.keys.Keys()
	if len(keys) == 0 {
		return nil
	}
	out := binary.BigEndian.AppendUint64(payload, n.instance)
	out = binary.BigEndian.AppendUint64(out, n.counter)
	out = binary.BigEndian.AppendUint64(out, uint64(now.UnixNano()))
	out = append(out, pollMAC(keys[0], kind, out)...)
	return append(out, kind)
}

func pollMAC(key []byte, kind byte, signed []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte{kind})
	m.Write(signed)
	return m.Sum(nil)
}

// Errors of open, for counting what a server or poller drops.
var (
	errPollShort = errors.New("too short for an authentication trailer")
	errPollKind  = errors.New("wrong kind of datagram")
	errPollMAC   = errors.New("HMAC does not verify under any cluster key")
)

// open checks a datagram of kind and returns its payload, nonce and the
// sender's time. It decodes everything a peer controls before any state
// is touched; replay and time checks are the caller's.
func (a *PollAuth) open(kind byte, pkt []byte) (payload []byte, n pollNonce, sent time.Time, err error) {
	if len(pkt) < PollTrailerSize {
		return nil, n, sent, errPollShort
	}
	if pkt[len(pkt)-1] != kind {
		return nil, n, sent, errPollKind
	}
	body := len(pkt) - PollTrailerSize
	signed := pkt[:body+24]
	mac := pkt[body+24 : len(pkt)-1]
	ok := false
	for _, k := range a.keys.Keys() {
		if hmac.Equal(mac, pollMAC(k, kind, signed)) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, n, sent, errPollMAC
	}
	n.instance = binary.BigEndian.Uint64(pkt[body:])
	n.counter = binary.BigEndian.Uint64(pkt[body+8:])
	sent = time.Unix(0, int64(binary.BigEndian.Uint64(pkt[body+16:])))
	return pkt[:body:body], n, sent, nil
}

// replayWindow is how many counters below the highest seen a poller
// instance's requests may arrive (UDP reorders) before they are refused.
const replayWindow = 64

// replayGuard remembers, per poller instance, which recent counters were
// answered. It is not safe for concurrent use (the poll server's single
// reading goroutine owns it).
type replayGuard struct {
	window time.Duration
	seen   map[uint64]*replayState
	swept  time.Time
}

type replayState struct {
	top  uint64 // highest counter accepted
	bits uint64 // bit i: top-i accepted
	last time.Time
}

// maxInstances bounds the guard's memory; beyond it, the idlest poller
// instances are forgotten first (their stale requests then fail the time
// check anyway).
const maxInstances = 1 << 16

// admit reports whether a request with nonce n sent at sent may be
// answered at now, and records it.
func (g *replayGuard) admit(now, sent time.Time, n pollNonce) error {
	if d := now.Sub(sent); d > g.window || d < -g.window {
		return fmt.Errorf("timestamp %v off the server's clock (window %v)", d, g.window)
	}
	if g.seen == nil {
		g.seen = map[uint64]*replayState{}
	}
	g.sweep(now)
	st, ok := g.seen[n.instance]
	if !ok {
		if len(g.seen) >= maxInstances {
			return errors.New("too many pollers")
		}
		g.seen[n.instance] = &replayState{top: n.counter, bits: 1, last: now}
		return nil
	}
	st.last = now
	switch {
	case n.counter > st.top:
		shift := n.counter - st.top
		if shift >= replayWindow {
			st.bits = 1
		} else {
			st.bits = st.bits<<shift | 1
		}
		st.top = n.counter
		return nil
	case st.top-n.counter >= replayWindow:
		return errors.New("counter below the replay window")
	default:
		bit := uint64(1) << (st.top - n.counter)
		if st.bits&bit != 0 {
			return errors.New("replayed")
		}
		st.bits |= bit
		return nil
	}
}

// sweep forgets instances idle for three windows: any request they sent
// before is outside the time window by then, so forgetting them cannot
// let a replay in.
func (g *replayGuard) sweep(now time.Time) {
	if now.Sub(g.swept) < g.window {
		return
	}
	g.swept = now
	for id, st := range g.seen {
		if now.Sub(st.last) > 3*g.window {
			delete(g.seen, id)
		}
	}
}

func randomInstance() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.BigEndian.Uint64(b[:])
}
