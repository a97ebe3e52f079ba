package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/pki"
)

// testKey is the cluster key of the package's test gateways, as a
// keyring would give it.
var testKey = bytes.Repeat([]byte{7}, 32)

// testGossip is the gossip security of test gateway name: the cluster
// key and a gateway certificate of the test CA.
func testGossip(t testing.TB, name string) GossipSecurity {
	return GossipSecurity{Keys: keys(testKey), Label: "test", Certs: testSource(t, pki.Identity{Role: pki.RoleGateway, Name: name})}
}

func keys(ks ...[]byte) func() [][]byte { return func() [][]byte { return ks } }

// testPKI is the package's test cluster: a CA, and certificates issued on
// first use, in a directory TestMain removes.
var testPKI struct {
	mu   sync.Mutex
	dir  string
	ca   *pki.CA
	srcs map[pki.Identity]*pki.Source
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testPKI.dir != "" {
		os.RemoveAll(testPKI.dir)
	}
	os.Exit(code)
}

func testSource(t testing.TB, id pki.Identity) *pki.Source {
	t.Helper()
	testPKI.mu.Lock()
	defer testPKI.mu.Unlock()
	if testPKI.ca == nil {
		dir, err := os.MkdirTemp("", "neptune-gateway-pki-")
		if err != nil {
			t.Fatal(err)
		}
		if testPKI.ca, err = pki.Bootstrap(dir, "test"); err != nil {
			t.Fatal(err)
		}
		testPKI.dir, testPKI.srcs = dir, map[pki.Identity]*pki.Source{}
	}
	if s, ok := testPKI.srcs[id]; ok {
		return s
	}
	files, err := testPKI.ca.IssueFiles(testPKI.dir, id, true, pki.IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := pki.NewSource(pki.SourceConfig{Files: files, Expect: id})
	if err != nil {
		t.Fatal(err)
	}
	testPKI.srcs[id] = s
	return s
}

// strangerSource is a gateway certificate of another CA naming the same
// cluster.
func strangerSource(t *testing.T, name string) *pki.Source {
	t.Helper()
	dir := t.TempDir()
	id := pki.Identity{Role: pki.RoleGateway, Name: name}
	if _, err := pki.Bootstrap(dir, "test", id); err != nil {
		t.Fatal(err)
	}
	s, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, id)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// resealWith swaps pkt's certificate for der and MACs it again under a's
// key: what a holder of the cluster key who copied another gateway's
// (public) certificate could send.
func resealWith(a *demandAuth, pkt, der []byte) []byte {
	lensAt := len(pkt) - demandFixed
	certLen, sigLen := int(binary.BigEndian.Uint16(pkt[lensAt:])), int(binary.BigEndian.Uint16(pkt[lensAt+2:]))
	sigAt := lensAt - sigLen
	certAt := sigAt - certLen
	out := append(slices.Clone(pkt[:certAt]), der...)
	out = append(out, pkt[sigAt:lensAt]...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(der)))
	out = append(out, pkt[lensAt+2:len(pkt)-1-demandMACSize]...)
	out = append(out, demandMAC(a.keys.Keys()[0], out)...)
	return append(out, demandKind)
}

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

// The pure core: a datagram sealed with a cluster key and signed with a
// gateway certificate opens once, naming that gateway; a replay, an older
// counter, a datagram from another key or another cluster's label, a
// tampered one, a plain one and one outside the time window are refused,
// each for its reason. During a key rotation a receiver holding both keys
// accepts either.
func TestDemandAuthRefusesForgedStaleAndReplayedDatagrams(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	gwA, gwB := testSource(t, pki.Identity{Role: pki.RoleGateway, Name: "a"}), testSource(t, pki.Identity{Role: pki.RoleGateway, Name: "b"})
	sender := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod", Certs: gwA})
	recv := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod", Certs: gwB})
	payload := []byte(`{"g":"a","at":1,"d":{"shop":3}}`)

	first := sender.seal(t0, payload)
	second := sender.seal(t0.Add(100*time.Millisecond), payload)
	if got, signer, err := recv.open(t0, first); err != nil || !bytes.Equal(got, payload) || signer != "a" {
		t.Fatalf("genuine datagram: %q signed by %q, %v", got, signer, err)
	}
	_, _, err := recv.open(t0, first)
	wantDrop(t, "the same datagram again", err, gossipReplayed)
	if _, _, err := recv.open(t0.Add(time.Second), second); err != nil {
		t.Fatalf("the sender's next datagram: %v", err)
	}
	_, _, err = recv.open(t0.Add(time.Second), sender.seal(t0.Add(-time.Second), payload)[:0])
	wantDrop(t, "an empty datagram", err, gossipUnauthenticated)

	// Reordered: the third sealed arrives after the fourth.
	third, fourth := sender.seal(t0, payload), sender.seal(t0, payload)
	if _, _, err := recv.open(t0, fourth); err != nil {
		t.Fatal(err)
	}
	_, _, err = recv.open(t0, third)
	wantDrop(t, "an older counter after a newer one", err, gossipReplayed)

	_, _, err = recv.open(t0, payload)
	wantDrop(t, "plain JSON", err, gossipUnauthenticated)
	_, _, err = recv.open(t0, mustAuth(t, GossipSecurity{Keys: keys(k2), Label: "prod", Certs: gwA}).seal(t0, payload))
	wantDrop(t, "sealed with another key", err, gossipUnauthenticated)
	_, _, err = recv.open(t0, mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "staging", Certs: gwA}).seal(t0, payload))
	wantDrop(t, "sealed for another cluster", err, gossipUnauthenticated)
	tampered := sender.seal(t0, payload)
	tampered[bytes.IndexByte(tampered, '3')] = '9'
	_, _, err = recv.open(t0, tampered)
	wantDrop(t, "a datagram with its demand changed", err, gossipUnauthenticated)
	_, _, err = recv.open(t0.Add(DefaultGossipWindow+time.Millisecond), sender.seal(t0, payload))
	wantDrop(t, "a datagram older than the window", err, gossipStale)
	_, _, err = recv.open(t0, sender.seal(t0.Add(DefaultGossipWindow+time.Millisecond), payload))
	wantDrop(t, "a datagram from the future", err, gossipStale)
	_, _, err = sender.open(t0, sender.seal(t0, payload))
	wantDrop(t, "its own datagram", err, gossipReplayed)

	// Holders of the cluster key without a gateway certificate of this
	// cluster: a client's certificate (every client holds the keyring), a
	// gateway certificate of another CA, and gateway a's certificate
	// (certificates are public) attached to a signature by b's key.
	client := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod", Certs: gwA})
	client.certs = testSource(t, pki.Identity{Role: pki.RoleClient, Name: "a"})
	_, _, err = recv.open(t0, client.seal(t0, payload))
	wantDrop(t, "signed with a client certificate", err, gossipSigner)
	_, _, err = recv.open(t0, mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod", Certs: strangerSource(t, "a")}).seal(t0, payload))
	wantDrop(t, "signed with another CA's gateway certificate", err, gossipSigner)
	b := mustAuth(t, GossipSecurity{Keys: keys(k1), Label: "prod", Certs: gwB})
	byB := b.seal(t0, payload)
	_, _, err = recv.open(t0, resealWith(b, byB, gwA.Certificate().Leaf.Raw))
	wantDrop(t, "a's certificate on b's signature", err, gossipSigner)
	if _, _, err := recv.open(t0, resealWith(b, byB, gwB.Certificate().Leaf.Raw)); err != nil {
		t.Fatalf("resealWith its own certificate: %v (so the forgery above proved nothing)", err)
	}

	// Rotation: the receiver installs k2 beside k1; a sender still on k1
	// and one already on k2 both pass.
	rotating := mustAuth(t, GossipSecurity{Keys: keys(k2, k1), Label: "prod", Certs: gwB})
	for _, s := range []*demandAuth{sender, mustAuth(t, GossipSecurity{Keys: keys(k2), Label: "prod", Certs: gwA})} {
		if _, _, err := rotating.open(t0, s.seal(t0, payload)); err != nil {
			t.Fatalf("during a rotation: %v", err)
		}
	}

	// A sender idle for three windows is forgotten, and its old
	// datagrams are stale by then.
	later := t0.Add(4 * DefaultGossipWindow)
	if _, _, err := recv.open(later, sender.seal(later, payload)); err != nil {
		t.Fatal(err)
	}
	if _, ok := recv.seen[sender.instance]; !ok || len(recv.seen) != 1 {
		t.Fatalf("replay state: %d senders", len(recv.seen))
	}
	_, _, err = recv.open(later, first)
	wantDrop(t, "the first datagram, replayed windows later", err, gossipStale)

	if _, err := newDemandAuth(GossipSecurity{Keys: keys(), Certs: gwA}); err == nil {
		t.Fatal("a demand authenticator without keys")
	}
	if _, err := newDemandAuth(GossipSecurity{Keys: keys(k1)}); err == nil {
		t.Fatal("a demand authenticator without a certificate")
	}
	if _, err := newDemandAuth(GossipSecurity{Keys: keys(k1), Certs: client.certs}); err == nil || !strings.Contains(err.Error(), "--gateway") {
		t.Fatalf("a demand authenticator with a client certificate: %v, want an error naming --gateway", err)
	}
}

// A gateway configured to gossip refuses to start without either the
// cluster's keys and a gateway certificate, or an explicit insecure
// choice; a secured gateway is named by its certificate.
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

	client := testGossip(t, "gw")
	client.Certs = testSource(t, pki.Identity{Role: pki.RoleClient, Name: "gw"})
	if _, err := New(cfg, Deps{Caller: &fakeCaller{}, Gossip: client}); err == nil || !strings.Contains(err.Error(), "gateway certificate") {
		t.Fatalf("New with a client certificate: %v, want an error asking for a gateway certificate", err)
	}
	g, err = New(cfg, Deps{Caller: &fakeCaller{}, Gossip: testGossip(t, "gw")})
	if err != nil {
		t.Fatal(err)
	}
	g.gossip.conn.Close()
	if g.Name() != "gw" {
		t.Fatalf("a gateway without name: in its config is named %q, want its certificate's gw", g.Name())
	}
	named := cfg
	named.Name = "other"
	if _, err := New(named, Deps{Caller: &fakeCaller{}, Gossip: testGossip(t, "gw")}); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("New with name: other and a certificate for gw: %v, want an error naming both", err)
	}
}

// Through the sockets: gateway b gossips to a (and to a sniffer, which
// keeps b's datagrams as an attacker on the path would). A plain JSON
// datagram claiming a gateway "evil", one sealed with another key, one of
// b's with its demand altered and an oversized one are refused and
// counted; so are demand sealed with the cluster key but signed with a
// client's certificate, and demand for b signed by gateway c; "evil"
// never becomes a peer. Then b dies and the attacker
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
	send(mustAuth(t, GossipSecurity{Keys: keys(bytes.Repeat([]byte{9}, 32)), Label: "test", Certs: testGossip(t, "evil").Certs}).seal(clk.Now(), forged))
	client := mustAuth(t, testGossip(t, "evil"))
	client.certs = testSource(t, pki.Identity{Role: pki.RoleClient, Name: "evil"})
	send(client.seal(clk.Now(), forged))
	asB := []byte(fmt.Sprintf(`{"g":"b","at":%d,"d":{"shop":1000000}}`, clk.Now().UnixNano()))
	send(mustAuth(t, testGossip(t, "c")).seal(clk.Now(), asB))
	altered := slices.Clone(*last.Load())
	i := bytes.Index(altered, []byte(`"shop":`)) + len(`"shop":`)
	altered[i] = '9'
	send(altered)
	send(bytes.Repeat([]byte{'x'}, maxDatagram+1))
	deadline = time.Now().Add(5 * time.Second)
	for value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipUnauthenticated) < 3 ||
		value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipOversized) < 1 ||
		value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipSigner) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("forged datagrams counted: unauthenticated %v, oversized %v, signer %v; want 3, 1 and 2",
				value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipUnauthenticated),
				value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipOversized),
				value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", gossipSigner))
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

// A flood of datagrams from one source address (127.0.0.2) is dropped
// before any is authenticated, beyond that source's burst, and counted as
// rate_limited, while b's datagrams from another address (127.0.0.1) keep
// arriving: a hears b and merges its demand. The limiter runs on the
// gateway's manual clock, which does not move during the flood, so
// exactly the burst gets through to authentication (and fails it).
func TestGatewayDropsADemandFloodFromOneSource(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	sec := testGossip(t, "a")
	sec.Rate, sec.Burst = 10, 20 // b sends 10 a second: one per period
	a, _, _, reg := gossipPairWith(t, clk, sec)
	to, err := net.ResolveUDPAddr("udp", a.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	flood, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, to)
	if err != nil {
		t.Skipf("cannot send from 127.0.0.2: %v", err)
	}
	defer flood.Close()
	const n = 200
	junk := bytes.Repeat([]byte{'j'}, 100)
	for i := range n {
		if _, err := flood.Write(junk); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // stay within the socket's buffer
		}
	}
	dropped := func(reason string) float64 {
		return value(t, reg, "neptune_gateway_gossip_dropped_total", "reason", reason)
	}
	deadline := time.Now().Add(5 * time.Second)
	for dropped(gossipRateLimited)+dropped(gossipUnauthenticated) < n {
		if time.Now().After(deadline) {
			t.Fatalf("of %d flood datagrams, %v rate limited and %v unauthenticated", n, dropped(gossipRateLimited), dropped(gossipUnauthenticated))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := dropped(gossipUnauthenticated); got != 20 {
		t.Errorf("%v flood datagrams reached authentication, want the burst (20)", got)
	}
	if got := dropped(gossipRateLimited); got != n-20 {
		t.Errorf("%v flood datagrams rate limited, want %d", got, n-20)
	}
	for len(a.Status().Gateways) < 2 {
		clk.Advance(DefaultGossipPeriod)
		time.Sleep(10 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatalf("a never heard b during the flood: %v", a.Status().Gateways)
		}
	}
	if got := value(t, reg, "neptune_gateway_gossip_received_total"); got < 1 {
		t.Fatalf("received_total = %v: b's datagrams did not get through", got)
	}
	if got := dropped(gossipRateLimited); got != n-20 {
		t.Errorf("b's datagrams were rate limited too: %v dropped, want %d", got, n-20)
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
	auth, err := newDemandAuth(testGossip(f, "a"))
	if err != nil {
		f.Fatal(err)
	}
	sender, err := newDemandAuth(testGossip(f, "b"))
	if err != nil {
		f.Fatal(err)
	}
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
