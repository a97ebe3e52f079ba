package gateway

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
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

// wireDemand is the datagram: JSON, small (a few bytes per subscriber).
type wireDemand struct {
	Gateway string             `json:"g"`
	At      int64              `json:"at"` // sender's clock, Unix ns: orders one sender's messages
	Demand  map[string]float64 `json:"d"`
}

// maxDatagram bounds what is read; a config with thousands of
// subscribers would need a stream instead.
const maxDatagram = 64 << 10

// gossiper runs the UDP socket of one gateway.
type gossiper struct {
	conn  *net.UDPConn
	clk   clock.Clock
	peers []*net.UDPAddr
	ttl   time.Duration
	self  string

	mu    sync.Mutex
	heard map[string]heardPeer // by address
}

type heardPeer struct {
	addr *net.UDPAddr
	at   time.Time
}

func newGossiper(cfg Config, clk clock.Clock) (*gossiper, error) {
	la, err := net.ResolveUDPAddr("udp", cfg.Gossip)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, err
	}
	g := &gossiper{conn: conn, clk: clk, ttl: time.Duration(cfg.PeerTTL), self: cfg.Name, heard: map[string]heardPeer{}}
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
			b, err := json.Marshal(wireDemand{Gateway: m.Gateway, At: m.At.UnixNano(), Demand: m.Demand})
			if err != nil {
				continue
			}
			for _, a := range g.targets() {
				_, _ = g.conn.WriteToUDP(b, a)
			}
		}
	}
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
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := g.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		var w wireDemand
		if json.Unmarshal(buf[:n], &w) != nil || w.Gateway == "" || w.Gateway == g.self {
			continue
		}
		g.mu.Lock()
		g.heard[from.String()] = heardPeer{addr: from, at: g.clk.Now()}
		g.mu.Unlock()
		merge(gage.GatewayDemand{Gateway: w.Gateway, At: time.Unix(0, w.At), Demand: w.Demand})
	}
}
