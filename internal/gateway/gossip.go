package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/ratelimit"
)

// Demand gossip between gateways (issue 12 item 6). Every gossip period
// the loop's cluster view produces this gateway's demand per subscriber
// (gage.Splitter.Local); the sender puts it in one UDP datagram to every
// peer, the configured ones and any heard from within the peer TTL; the
// receiver hands each datagram to the loop (gage.Splitter.Merge). No
// message is relayed: with every gateway listing or being listed by every
// other, each hears each directly, and a dead gateway is simply no longer
// heard. Why not the cluster's memberlist: it carries the yellow pages on
// a 1 s announcement and 5 s expiry, too slow to return a dead gateway's
// share in about a second; a datagram per peer per 100 ms is nothing for
// the handful of gateways a cluster runs.

// wireDemand is the datagram's JSON, small (a few bytes per subscriber);
// with GossipSecurity keys an authentication trailer follows it
// (gossipauth.go).
type wireDemand struct {
	Gateway string             `json:"g"`
	At      int64              `json:"at"` // sender's clock, Unix ns: orders one sender's messages
	Demand  map[string]float64 `json:"d"`
}

// maxDatagram bounds a demand datagram, trailer included: about 500
// subscribers with long names; a config with thousands would need a
// stream instead. A larger one is dropped unread as oversized.
const maxDatagram = 32 << 10

// maxGatewayName bounds a peer's name as a datagram gives it.
const maxGatewayName = 256

// maxHeard bounds the peers learnt from datagrams rather than the config.
const maxHeard = 256

// gossiper runs the UDP socket of one gateway.
type gossiper struct {
	conn  *net.UDPConn
	clk   clock.Clock
	peers []*net.UDPAddr
	ttl   time.Duration
	self  string
	auth  *demandAuth        // nil: insecure, plain JSON
	limit *ratelimit.PerPeer // per source address; nil: none
	subs  map[string]bool
	log   *slog.Logger
	// dropped counts a refused datagram by reason; accepted one that
	// passed.
	dropped  func(reason string)
	accepted func()

	mu      sync.Mutex
	heard   map[string]heardPeer // by address
	warned  time.Time            // last warning of a dropped datagram
	tooLong bool                 // this gateway's own message exceeded maxDatagram (warned once)
}

type heardPeer struct {
	addr *net.UDPAddr
	at   time.Time
}

// newGossiper binds cfg.Gossip; subs are the subscribers whose demand a
// peer's datagram may carry (the others are ignored).
func newGossiper(cfg Config, subs []string, sec GossipSecurity, clk clock.Clock, log *slog.Logger) (*gossiper, error) {
	var auth *demandAuth
	if !sec.Insecure {
		var err error
		if auth, err = newDemandAuth(sec); err != nil {
			return nil, err
		}
	}
	la, err := net.ResolveUDPAddr("udp", cfg.Gossip)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, err
	}
	g := &gossiper{
		conn: conn, clk: clk, ttl: time.Duration(cfg.PeerTTL), self: cfg.Name, auth: auth, subs: map[string]bool{}, log: log,
		dropped: func(string) {}, accepted: func() {}, heard: map[string]heardPeer{},
	}
	if rate := cmp.Or(sec.Rate, DefaultGossipRate); rate > 0 {
		g.limit = ratelimit.New(rate, cmp.Or(sec.Burst, DefaultGossipBurst))
	}
	for _, s := range subs {
		g.subs[s] = true
	}
	for _, p := range cfg.Peers {
		a, err := net.ResolveUDPAddr("udp", p)
		if err != nil {
			conn.Close()
			return nil, err
		}
		g.peers = append(g.peers, a)
	}
	return g, nil
}

// Addr is the local UDP address.
func (g *gossiper) Addr() string { return g.conn.LocalAddr().String() }

// run sends what out yields and passes what arrives to merge, until ctx
// ends.
func (g *gossiper) run(ctx context.Context, out <-chan gage.GatewayDemand, merge func(gage.GatewayDemand)) {
	go func() {
		<-ctx.Done()
		g.conn.Close()
	}()
	go g.receive(merge)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-out:
			b := g.encode(m)
			if b == nil {
				continue
			}
			for _, a := range g.targets() {
				_, _ = g.conn.WriteToUDP(b, a)
			}
		}
	}
}

// encode is m's datagram (nil if it cannot be sent).
func (g *gossiper) encode(m gage.GatewayDemand) []byte {
	b, err := json.Marshal(wireDemand{Gateway: m.Gateway, At: m.At.UnixNano(), Demand: m.Demand})
	if err != nil {
		return nil
	}
	if g.auth != nil {
		if b = g.auth.seal(g.clk.Now(), b); b == nil {
			return nil
		}
	}
	if len(b) > maxDatagram {
		g.mu.Lock()
		warn := !g.tooLong
		g.tooLong = true
		g.mu.Unlock()
		if warn {
			g.log.Error("gateway: demand message too large for one datagram; not sent", "bytes", len(b), "max", maxDatagram)
		}
		return nil
	}
	return b
}

// targets are the configured peers and those heard from lately.
func (g *gossiper) targets() []*net.UDPAddr {
	out := append([]*net.UDPAddr(nil), g.peers...)
	now := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, h := range g.heard {
		if now.Sub(h.at) > g.ttl {
			delete(g.heard, k)
			continue
		}
		dup := false
		for _, p := range g.peers {
			if p.String() == k {
				dup = true
			}
		}
		if !dup {
			out = append(out, h.addr)
		}
	}
	return out
}

func (g *gossiper) receive(merge func(gage.GatewayDemand)) {
	buf := make([]byte, maxDatagram+1)
	for {
		n, from, err := g.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		if g.limit != nil && !g.limit.Allow(from.AddrPort().Addr(), g.clk.Now()) {
			g.refused(from, drop(gossipRateLimited, "over the limit of datagrams from %v", from.IP))
			continue
		}
		m, err := g.decode(g.clk.Now(), buf[:n])
		if err != nil {
			g.refused(from, err)
			continue
		}
		if m.Gateway == g.self {
			continue // our own, looped back by a misconfigured peer list
		}
		g.accepted()
		g.mu.Lock()
		if _, ok := g.heard[from.String()]; ok || len(g.heard) < maxHeard {
			g.heard[from.String()] = heardPeer{addr: from, at: g.clk.Now()}
		}
		g.mu.Unlock()
		merge(m)
	}
}

// decode checks one received datagram at now: its size, its
// authentication (unless insecure: the HMAC, and the signature of the
// gateway certificate naming the gateway it speaks for) and its content.
// Only a datagram that passes all three names a peer or moves a share.
func (g *gossiper) decode(now time.Time, pkt []byte) (gage.GatewayDemand, error) {
	if len(pkt) > maxDatagram {
		return gage.GatewayDemand{}, drop(gossipOversized, "over %d bytes", maxDatagram)
	}
	payload, signer := pkt, ""
	if g.auth != nil {
		var err error
		if payload, signer, err = g.auth.open(now, pkt); err != nil {
			return gage.GatewayDemand{}, err
		}
	}
	var w wireDemand
	if err := json.Unmarshal(payload, &w); err != nil {
		return gage.GatewayDemand{}, drop(gossipMalformed, "%v", err)
	}
	if w.Gateway == "" || len(w.Gateway) > maxGatewayName {
		return gage.GatewayDemand{}, drop(gossipMalformed, "gateway name of %d bytes", len(w.Gateway))
	}
	if g.auth != nil && w.Gateway != signer {
		return gage.GatewayDemand{}, drop(gossipSigner, "demand for gateway %q signed by gateway %q", w.Gateway, signer)
	}
	d := make(map[string]float64, len(w.Demand))
	for sub, v := range w.Demand {
		if !(v >= 0) || math.IsInf(v, 0) {
			return gage.GatewayDemand{}, drop(gossipMalformed, "demand %v for %q", v, sub)
		}
		if g.subs[sub] { // a subscriber this config does not have cannot be split here
			d[sub] = v
		}
	}
	return gage.GatewayDemand{Gateway: w.Gateway, At: time.Unix(0, w.At), Demand: d}, nil
}

// refused counts a dropped datagram and logs it at most every 10 s (a
// flood must not become a flood of logs).
func (g *gossiper) refused(from *net.UDPAddr, err error) {
	g.dropped(dropReason(err))
	now := g.clk.Now()
	g.mu.Lock()
	warn := g.warned.IsZero() || now.Sub(g.warned) >= 10*time.Second
	if warn {
		g.warned = now
	}
	g.mu.Unlock()
	if warn {
		g.log.Warn("gateway: demand datagram refused (further ones counted in neptune_gateway_gossip_dropped_total, logged at most every 10s)", "from", from.String(), "err", err)
	}
}
