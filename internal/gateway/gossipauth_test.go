package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// testGossip is the gossip security of the package's test gateways: one
// cluster key, as a keyring would give it.
var testGossip = GossipSecurity{Keys: keys(bytes.Repeat([]byte{7}, 32)), Label: "test"}

func keys(ks ...[]byte) func() [][]byte { return func() [][]byte { return ks } }

func mustAuth(t *testing.T, s GossipSecurity) *demandAuth {
	t.Helper()
	a, err := newDemandAuth(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func wantDrop(t *testing.T, what string, err error, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want dropped as %s", what, reason)
	}
	if got := dropReason(err); got != reason {
		t.Fatalf("%s: dropped as %s (%v), want %s", what, got, err, reason)
	}
}

// The pure core: a datagram sealed with a cluster key opens once; a
// replay, an older counter, a datagram from another key or another
// cluster's label, a tampered one, a plain one and one outside the time
// window are refused, each for its reason. During a key rotation a
// receiver holding both keys accepts either.
func TestDemandAuthRefusesForgedStaleAndReplayedDatagrams(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sender := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod"})
	recv := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod"})
	payload := []byte(`{"g":"a","at":1,"d":{"shop":3}}`)

	first := sender.seal(t0, payload)
	second := sender.seal(t0.Add(100*time.Millisecond), payload)
	if got, err := recv.open(t0, first); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("genuine datagram: %q, %v", got, err)
	}
	_, err := recv.open(t0, first)
	wantDrop(t, "the same datagram again", err, gossipReplayed)
	if _, err := recv.open(t0.Add(time.Second), second); err != nil {
		t.Fatalf("the sender's next datagram: %v", err)
	}
	_, err = recv.open(t0.Add(time.Second), sender.seal(t0.Add(-time.Second), payload)[:0])
	wantDrop(t, "an empty datagram", err, gossipUnauthenticated)

	// Reordered: the third sealed arrives after the fourth.
	third, fourth := sender.seal(t0, payload), sender.seal(t0, payload)
	if _, err := recv.open(t0, fourth); err != nil {
		t.Fatal(err)
	}
	_, err = recv.open(t0, third)
	wantDrop(t, "an older counter after a newer one", err, gossipReplayed)

	_, err = recv.open(t0, payload)
	wantDrop(t, "plain JSON", err, gossipUnauthenticated)
	_, err = recv.open(t0, mustAuth(t, GossipSecurity{Keys: keys(k2), Label: "prod"}).seal(t0, payload))
	wantDrop(t, "sealed with another key", err, gossipUnauthenticated)
	_, err = recv.open(t0, mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "staging"}).seal(t0, payload))
	wantDrop(t, "sealed for another cluster", err, gossipUnauthenticated)
	tampered := sender.seal(t0, payload)
	tampered[bytes.IndexByte(tampered, '3')] = '9'
	_, err = recv.open(t0, tampered)
	wantDrop(t, "a datagram with its demand changed", err, gossipUnauthenticated)
	_, err = recv.open(t0.Add(DefaultGossipWindow+time.Millisecond), sender.seal(t0, payload))
	wantDrop(t, "a datagram older than the window", err, gossipStale)
	_, err = recv.open(t0, sender.seal(t0.Add(DefaultGossipWindow+time.Millisecond), payload))
	wantDrop(t, "a datagram from the future", err, gossipStale)
	_, err = sender.open(t0, sender.seal(t0, payload))
	wantDrop(t, "its own datagram", err, gossipReplayed)

	// Rotation: the receiver installs k2 beside k1; a sender still on k1
	// and one already on k2 both pass.
	rotating := mustAuth(t, GossipSecurity{Keys: keys(k2, k1), Label: "prod"})
	for _, s := range []*demandAuth{sender, mustAuth(t, GossipSecurity{Keys: keys(k2), Label: "prod"})} {
		if _, err := rotating.open(t0, s.seal(t0, payload)); err != nil {
			t.Fatalf("during a rotation: %v", err)
		}
	}

	// A sender idle for three windows is forgotten, and its old
	// datagrams are stale by then.
	later := t0.Add(4 * DefaultGossipWindow)
	if _, err := recv.open(later, sender.seal(later, payload)); err != nil {
		t.Fatal(err)
	}
	if _, ok := recv.seen[sender.instance]; !ok || len(recv.seen) != 1 {
		t.Fatalf("replay state: %d senders", len(recv.seen))
	}
	_, err = recv.open(later, first)
	wantDrop(t, "the first datagram, replayed windows later", err, gossipStale)

	if _, err := newDemandAuth(GossipSecurity{Keys: keys()}); err == nil {
		t.Fatal("a demand authenticator without keys")
	}
}

// A gateway configured to gossip refuses to start without either the
// cluster's keys or an explicit insecure choice.
func TestGatewayGossipNeedsKeysOrInsecure(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
capacity_grps: 100
gossip: 127.0.0.1:0
subscribers: [{name: shop, reservation: 10}]
routes: [{service: s, method: m}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Deps{Caller: &fakeCaller{}}); err == nil || !strings.Contains(err.Error(), "Deps.Gossip") {
		t.Fatalf("New without gossip security: %v, want an error naming Deps.Gossip", err)
	}
	g, err := New(cfg, Deps{Caller: &fakeCaller{}, Gossip: GossipSecurity{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	g.gossip.conn.Close()
}

// Through the sockets: gateway b gossips to a (and to a sniffer, which
// keeps b's datagrams as an attacker on the path would). A plain JSON
// datagram claiming a gateway "evil", one sealed with another key, one of
// b's with its demand altered and an oversized one are refused and
// counted; "evil" never becomes a peer. Then b dies and the attacker
// replays b's last datagram to a every period: a refuses every replay as
// such and still takes b's share back within peer_ttl + a period, as if
// nothing had been sent.
func TestGatewayIgnoresForgedAndReplayedDemand(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	sniffer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sniffer.Close()
	var last atomic.Pointer[[]byte]
	go func() {
		buf := make([]byte, maxDatagram+1)
		for {
			n, _, err := sniffer.ReadFromUDP(buf)
			if err != nil {
				return
			}
			b := slices.Clone(buf[:n])
			last.Store(&b)
		}
	}()
	a, b, stopB, reg := gossipPair(t, clk, sniffer.LocalAddr().String())
	for range 90 {
		do(a, "POST", "/", key("shop"), "")
	}
	for range 10 {
		do(b, "POST", "/", key("shop"), "")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(a.Status().Gateways) < 2 || last.Load() == nil {
		clk.Advance(DefaultGossipPeriod)
		time.Sleep(10 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatalf("a never heard b: %v", a.Status().Gateways)
		}
	}
	shareBefore := share(a, "shop")

	to, err := net.ResolveUDPAddr("udp", a.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := net.DialUDP("udp", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	send := func(b []byte) {
		if _, err := attacker.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	forged := []byte(fmt.Sprintf(`{"g":"evil","at":%d,"d":{"shop":1000000}}`, clk.Now().UnixNano()))
	send(forged)
	send(mustAuth(t, GossipSecurity{Keys: keys(bytes.Repeat([]byte{9}, 32)), Label: "test"}).seal(clk.Now(), forged))
	altered := slices.Clone(*last.Load())
	i := bytes.Index(altered, []byte(`"shop":`)) + len(`"shop":`)
	altered[i] = '9'
	send(altered)
	send(bytes.Repeat([]byte{'x'}, maxDatagram+1))
	deadline = time.Now().Add(5 * time.Second)
	for value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipUnauthenticated) < 3 ||
		value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipOversized) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("forged datagrams counted: unauthenticated %v, oversized %v; want 3 and 1",
				value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipUnauthenticated),
				value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipOversized))
		}
		time.Sleep(5 * time.Millisecond)
	}
	clk.Advance(DefaultGossipPeriod)
	time.Sleep(10 * time.Millisecond)
	if gws := a.Status().Gateways; slices.Contains(gws, "evil") || len(gws) != 2 {
		t.Fatalf("gateways at a after the forgeries: %v, want [a b]", gws)
	}
	if s := share(a, "shop"); s < shareBefore-0.05 {
		t.Fatalf("a's share of shop fell from %.3f to %.3f after forged demand", shareBefore, s)
	}
	if got := value(t, reg, "neptune_gateway_gossip_received_total"); got < 1 {
		t.Fatalf("received_total = %v: b's genuine datagrams were not counted", got)
	}

	stopB()
	time.Sleep(20 * time.Millisecond) // b's last datagram lands at a
	replay := slices.Clone(*last.Load())
	var waited time.Duration
	for share(a, "shop") < 1 {
		send(replay)
		time.Sleep(5 * time.Millisecond)
		clk.Advance(DefaultGossipPeriod)
		waited += DefaultGossipPeriod
		time.Sleep(5 * time.Millisecond)
		if waited > DefaultPeerTTL+3*DefaultGossipPeriod {
			t.Fatalf("a's share is %.3f %v after b died while b's last datagram was replayed (replayed counted: %v); the bound is peer_ttl + a period",
				share(a, "shop"), waited, value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipReplayed))
		}
	}
	if got := value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipReplayed); got < float64(waited/DefaultGossipPeriod)-1 {
		t.Fatalf("replayed_total = %v after %d replays", got, waited/DefaultGossipPeriod)
	}
	if gws := a.Status().Gateways; len(gws) != 1 || gws[0] != "a" {
		t.Fatalf("live gateways at a: %v, want [a]", gws)
	}
}

// decode's content checks, with authentication off (the insecure mode):
// a negative demand, an empty or overlong gateway name, and a datagram
// over the limit are refused; unknown subscribers are left out.
func TestDemandDecodeRefusesBadContent(t *testing.T) {
	g := &gossiper{subs: map[string]bool{"shop": true}}
	now := time.Unix(0, 0)
	for _, c := range []struct{ pkt, reason string }{
		{`{"g":"b","at":1,"d":{"shop":-1}}`, gossipMalformed},
		{`{"g":"","at":1,"d":{}}`, gossipMalformed},
		{`{"g":"` + strings.Repeat("b", maxGatewayName+1) + `","at":1}`, gossipMalformed},
		{`{"g":"b","at":1,"d":{"shop":1e999}}`, gossipMalformed},
		{`not json`, gossipMalformed},
		{strings.Repeat(" ", maxDatagram+1), gossipOversized},
	} {
		_, err := g.decode(now, []byte(c.pkt))
		wantDrop(t, c.pkt[:min(len(c.pkt), 40)], err, c.reason)
	}
	m, err := g.decode(now, []byte(`{"g":"b","at":1,"d":{"shop":2,"ghost":5}}`))
	if err != nil || len(m.Demand) != 1 || m.Demand["shop"] != 2 {
		t.Fatalf("decode = %+v, %v; want shop's demand only", m, err)
	}
	var de *dropError
	if _, err := g.decode(now, []byte(`[]`)); !errors.As(err, &de) {
		t.Fatalf("a JSON array: %v, want a drop error", err)
	}
}

func FuzzDemandDatagram(f *testing.F) {
	auth, err := newDemandAuth(testGossip)
	if err != nil {
		f.Fatal(err)
	}
	sender, _ := newDemandAuth(testGossip)
	now := time.Unix(1000, 0)
	f.Add(sender.seal(now, []byte(`{"g":"b","at":1,"d":{"shop":2}}`)))
	f.Add([]byte(`{"g":"b","at":1,"d":{"shop":2}}`))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		g := &gossiper{auth: auth, subs: map[string]bool{"shop": true}}
		m, err := g.decode(now, pkt)
		if err == nil && (m.Gateway == "" || len(m.Gateway) > maxGatewayName) {
			t.Fatalf("accepted gateway name %q", m.Gateway)
		}
	})
}
