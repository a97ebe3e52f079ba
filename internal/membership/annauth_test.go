package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func nodeID(name string) pki.Identity { return pki.Identity{Role: pki.RoleNode, Name: name} }

// material is a cluster's PKI directory with certificates for n1…n4, a
// client, and the sources reading them.
type material struct {
	t   testing.TB
	dir string
	clk clock.Clock
}

func newMaterial(t testing.TB, cluster string, clk clock.Clock) *material {
	t.Helper()
	dir := t.TempDir()
	if _, err := pki.Bootstrap(dir, cluster, nodeID("n1"), nodeID("n2"), nodeID("n3"), nodeID("n4"), pki.Identity{Role: pki.RoleClient, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	return &material{t: t, dir: dir, clk: clk}
}

func (m *material) source(id pki.Identity) *pki.Source {
	m.t.Helper()
	s, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(m.dir, id), Clock: m.clk})
	if err != nil {
		m.t.Fatal(err)
	}
	return s
}

func (m *material) auth(id pki.Identity, label string) *annAuth {
	return newAnnAuth(m.source(id), label, 0, clock.OrReal(m.clk))
}

func announcement(node string, seq uint64) []byte {
	b, _ := proto.Marshal(&pb.Announcement{NodeId: node, RpcAddr: "10.0.0.1:7000", Seq: seq, Incarnation: 1,
		Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}})
	return b
}

func TestSignedAnnouncementsNameTheirAuthor(t *testing.T) {
	clk := clock.NewManual(time.Now())
	m := newMaterial(t, "c", clk)
	n1, n2 := m.auth(nodeID("n1"), "c"), m.auth(nodeID("n2"), "c")

	// Seq 1 is the first after the certificate appeared: it is attached.
	_, env, err := n1.seal(announcement("n1", 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	a, s, err := n2.open(env)
	if err != nil || a.NodeId != "n1" || s == nil {
		t.Fatalf("open: %v, %v", a, err)
	}
	// Later ones carry only the fingerprint; n2 knows it now, a newcomer
	// does not until an attached one or push/pull state arrives.
	var slim []byte
	for seq := uint64(2); seq <= certRepeat+1; seq++ {
		_, slim, _ = n1.seal(announcement("n1", seq), seq)
	}
	if len(slim) >= len(env)-300 {
		t.Fatalf("announcement without its certificate is %d bytes, with it %d", len(slim), len(env))
	}
	if _, _, err := n2.open(slim); err != nil {
		t.Fatalf("fingerprint-only from a known certificate: %v", err)
	}
	newcomer := m.auth(nodeID("n3"), "c")
	if _, _, err := newcomer.open(slim); !errors.Is(err, errUnknownCert) {
		t.Fatalf("fingerprint-only to a newcomer: %v", err)
	}
	// Relaying attaches the certificate again, unchanged signature.
	relayed := s.encode(n2.certificate(s.fp))
	if _, _, err := newcomer.open(relayed); err != nil {
		t.Fatalf("relayed: %v", err)
	}
}

func TestForgedAnnouncementsAreRefused(t *testing.T) {
	clk := clock.NewManual(time.Now())
	m := newMaterial(t, "c", clk)
	victim := m.auth(nodeID("n2"), "c")
	n3 := m.auth(nodeID("n3"), "c")
	other := newMaterial(t, "c", clk)

	reasons := map[string]string{}
	mustRefuse := func(name string, env []byte, want error) {
		t.Helper()
		_, _, err := victim.open(env)
		if err == nil || (want != nil && !errors.Is(err, want)) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
		reasons[name] = refusalReason(err)
	}
	// The attack of the issue: a bare protobuf announcement.
	mustRefuse("unsigned", announcement("n1", 1_000_000), ErrAnnouncementMalformed)
	// A member with a valid node certificate announcing another node.
	_, env, _ := n3.seal(announcement("n1", 1), 1)
	mustRefuse("n3 as n1", env, ErrAnnouncementSigner)
	// Certificates of another CA, of a client, for another cluster label.
	_, env, _ = other.auth(nodeID("n1"), "c").seal(announcement("n1", 1), 1)
	mustRefuse("another CA", env, ErrAnnouncementSigner)
	_, env, _ = m.auth(pki.Identity{Role: pki.RoleClient, Name: "web"}, "c").seal(announcement("web", 1), 1)
	mustRefuse("client certificate", env, ErrAnnouncementSigner)
	_, env, _ = m.auth(nodeID("n1"), "other").seal(announcement("n1", 1), 1)
	mustRefuse("other label", env, ErrAnnouncementSigner)
	// Each refusal is counted under its own reason.
	for name, want := range map[string]string{"unsigned": "announcement_unsigned", "n3 as n1": "announcement_wrong_author",
		"another CA": "announcement_unknown_ca", "client certificate": "announcement_wrong_author", "other label": "announcement_bad_signature"} {
		if reasons[name] != want {
			t.Errorf("%s refused as %q, want %q", name, reasons[name], want)
		}
	}
	// Tampering with any part.
	_, env, _ = m.auth(nodeID("n1"), "c").seal(announcement("n1", 1), 1)
	if _, _, err := victim.open(env); err != nil {
		t.Fatal(err)
	}
	for i := len(annMagic) + 1; i < len(env); i += 7 {
		bad := bytes.Clone(env)
		bad[i] ^= 0x40
		mustRefuse(fmt.Sprintf("byte %d flipped", i), bad, nil)
	}
	// A replay of an old signature.
	clk.Advance(DefaultMaxAnnouncementAge + time.Second)
	mustRefuse("stale", env, ErrAnnouncementStale)
}

// TestGossipAcceptsOnlySignedAnnouncementsOfTheirAuthor runs two secured
// members and feeds the receiving one forgeries through memberlist's
// delegate callbacks, as a member holding the gossip key could.
func TestGossipAcceptsOnlySignedAnnouncementsOfTheirAuthor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newMaterial(t, "c", nil)
	key, _ := GenerateKey()
	a := m.start(ctx, "n1", key, "c", nil)
	refusals := &refusalLog{}
	bcfg := m.config("n2", key, "c", []string{a.Addr()})
	bcfg.Refusals = refusals
	b, err := Start(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !eventually(ctx, 10*time.Second, func() bool { return len(b.Replicas("kv", 0).Replicas) == 2 && len(a.Replicas("kv", 0).Replicas) == 2 }) {
		t.Fatalf("secured members do not see each other: %v / %v", a.Replicas("kv", 0), b.Replicas("kv", 0))
	}

	rejected := b.Stats().Rejected
	refusals.reset()
	d := (*delegate)(b)
	// Forgeries claim a newer incarnation than n1's: one that claims an
	// older one is skipped unverified (notNewer) and changes nothing.
	forged := func() []byte {
		b, _ := proto.Marshal(&pb.Announcement{NodeId: "n1", RpcAddr: "10.0.0.1:7000", Seq: 1 << 40, Incarnation: 1 << 62,
			Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}})
		return b
	}
	d.NotifyMsg(forged()) // the 86-byte attack
	_, env, _ := m.auth(nodeID("n3"), "c").seal(forged(), 1)
	d.NotifyMsg(append([]byte{msgSpread}, env...)) // n3 speaking for n1
	d.MergeRemoteState(encodeState([]stateEntry{{envelope: env}}), false)
	var plain pb.PagesState
	plain.Entries = append(plain.Entries, &pb.RelayedAnnouncement{Announcement: &pb.Announcement{NodeId: "n1", Seq: 1 << 40, Incarnation: 1 << 40}})
	pstate, _ := proto.Marshal(&plain)
	d.MergeRemoteState(pstate, false)
	if got := b.Stats().Rejected - rejected; got != 4 {
		t.Errorf("rejected %d forgeries, want 4", got)
	}
	want := map[string]int{"announcement_unsigned": 2, "announcement_wrong_author": 2}
	if got := refusals.byReason(); !maps.Equal(got, want) {
		t.Errorf("refusals reported %v, want %v", got, want)
	}
	if got := refusals.sources(); !slices.Equal(got, []string{`announcement of "n1"`, "yellow pages state"}) {
		t.Errorf("refusals name %v, want the node id they claim (or the state they came in)", got)
	}
	for _, e := range b.Snapshot() {
		if e.Ann.Seq >= 1<<40 || e.Ann.RpcAddr == "10.0.0.1:7000" {
			t.Fatalf("forged entry in the yellow pages: %v", e.Ann)
		}
	}
}

// start runs a secured member announcing "kv" partition 0.
func (m *material) start(ctx context.Context, id string, key []byte, label string, join []string) *Gossip {
	m.t.Helper()
	g, err := Start(ctx, m.config(id, key, label, join))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { g.Close() })
	return g
}

func (m *material) config(id string, key []byte, label string, join []string) Config {
	m.t.Helper()
	kr, err := NewKeyring([][]byte{key})
	if err != nil {
		m.t.Fatal(err)
	}
	return Config{NodeID: id, BindAddr: "127.0.0.1", Join: join, AnnounceInterval: 50 * time.Millisecond, TTL: time.Second,
		Keyring: kr, Label: label, Certs: m.source(nodeID(id)),
		Announce: func() *pb.Announcement {
			return &pb.Announcement{RpcAddr: id + ":1", Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}}
		}}
}

func TestOnlyMembersWithTheKeyAndLabelJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newMaterial(t, "c", nil)
	key, _ := GenerateKey()
	wrong, _ := GenerateKey()
	refusals := &refusalLog{}
	acfg := m.config("n1", key, "c", nil)
	acfg.Refusals = refusals
	a, err := Start(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	// Start retries its seeds until its context ends: refusals end in a second.
	refused := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	for name, cfg := range map[string]Config{
		"wrong key":   m.config("n2", wrong, "c", []string{a.Addr()}),
		"wrong label": m.config("n3", key, "d", []string{a.Addr()}),
	} {
		g, err := Start(refused(), cfg)
		if err == nil {
			g.Close()
			t.Errorf("%s: joined", name)
		} else if msg := err.Error(); !strings.Contains(msg, "keyring holds a key the cluster uses") || strings.Contains(msg, "\n") {
			t.Errorf("%s: %q, want one line saying to check the keyring and cluster name", name, msg)
		}
	}
	// Plaintext gossip cannot join either, and is told why it may be.
	g, err := Start(refused(), Config{NodeID: "plain", BindAddr: "127.0.0.1", Join: []string{a.Addr()}})
	if err == nil {
		g.Close()
		t.Error("plaintext member joined")
	} else if !strings.Contains(err.Error(), "A secured cluster ignores gossip from a member without its keyring") {
		t.Errorf("plaintext member refused with %q, want a hint about the keyring", err)
	}
	if a.Members() != 1 {
		t.Fatalf("n1 has %d members", a.Members())
	}
	// The seed saw each attempt and reported it: the wrong key and the
	// plaintext member under gossip_key or gossip_label (a plaintext packet
	// carries no label), the wrong label under gossip_label.
	got := refusals.byReason()
	if got["gossip_key"] == 0 || got["gossip_label"] == 0 {
		t.Errorf("the seed reported %v, want gossip_key and gossip_label refusals", got)
	}
	if src := refusals.sources(); len(src) == 0 || src[0] != "127.0.0.1" {
		t.Errorf("refusals name %v, want the source address 127.0.0.1", src)
	}
	// A member whose certificate names another node does not start.
	cfg := m.config("n4", key, "c", nil)
	cfg.Certs = m.source(nodeID("n1"))
	if g, err := Start(ctx, cfg); err == nil {
		g.Close()
		t.Fatal("a member announcing n4 with n1's certificate started")
	}
}

// refusalLog is a Refuser that remembers what it was told.
type refusalLog struct {
	mu  sync.Mutex
	got []refusal
}

type refusal struct {
	reason, source string
	err            error
}

func (l *refusalLog) Refuse(reason, source string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, refusal{reason, source, err})
}

func (l *refusalLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = nil
}

func (l *refusalLog) byReason() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, r := range l.got {
		out[r.reason]++
	}
	return out
}

// sources are the distinct sources named, sorted.
func (l *refusalLog) sources() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.got {
		out = append(out, r.source)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestAMemberOfAnotherCASaysItIsNotAMember starts a member whose
// certificate another CA issued (holding the key and label): it joins the
// gossip, but each side refuses the other's announcements as signed by an
// unknown CA, and the outsider can say in words why its yellow pages are
// empty.
func TestAMemberOfAnotherCASaysItIsNotAMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newMaterial(t, "c", nil)
	other := newMaterial(t, "c", nil)
	key, _ := GenerateKey()
	inside, outside := &refusalLog{}, &refusalLog{}
	acfg := m.config("n1", key, "c", nil)
	acfg.Refusals = inside
	a, err := Start(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Foreign("kv") != "" {
		t.Fatalf("a member alone reports foreign signers: %s", a.Foreign("kv"))
	}
	ocfg := other.config("n4", key, "c", []string{a.Addr()})
	ocfg.Refusals = outside
	o, err := Start(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if !eventually(ctx, 10*time.Second, func() bool {
		return inside.byReason()["announcement_unknown_ca"] > 0 && o.Foreign("kv") != ""
	}) {
		t.Fatalf("refusals: inside %v, outside %v; outsider says %q", inside.byReason(), outside.byReason(), o.Foreign("kv"))
	}
	if why := o.Foreign("search"); why != "" {
		t.Errorf("the outsider blames foreign signers for a service none of them hosts: %q", why)
	}
	for _, e := range a.Snapshot() {
		if e.Ann.NodeId == "n4" {
			t.Fatal("the outsider entered the member's yellow pages")
		}
	}
	// The member says the same of the outsider (for "kv", which it
	// hosts: n1's own lookups find itself first and never ask).
	if !eventually(ctx, 5*time.Second, func() bool { return a.Foreign("kv") != "" }) || a.Foreign("nope") != "" {
		t.Errorf("the member says %q of kv and %q of an unknown service", a.Foreign("kv"), a.Foreign("nope"))
	}
	why := o.Foreign("kv")
	for _, want := range []string{"node/n1", `cluster "c"`, "not a member of their cluster", CAKeyID(m.source(nodeID("n1")).Certificate().Leaf.AuthorityKeyId)} {
		if !strings.Contains(why, want) {
			t.Errorf("the outsider says %q, want it to contain %q", why, want)
		}
	}
}

// TestKeyRotationOnALiveCluster rotates the keyring of two running members
// through install, use and remove; they keep each other's announcements
// throughout, a member with only the new key joins and one with only the
// old key cannot.
func TestKeyRotationOnALiveCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := newMaterial(t, "c", nil)
	k1, _ := GenerateKey()
	k2, _ := GenerateKey()
	a := m.start(ctx, "n1", k1, "c", nil)
	b := m.start(ctx, "n2", k1, "c", []string{a.Addr()})
	both := func() bool {
		return len(a.Replicas("kv", 0).Replicas) == 2 && len(b.Replicas("kv", 0).Replicas) == 2
	}
	if !eventually(ctx, 10*time.Second, both) {
		t.Fatal("members do not see each other")
	}
	for i, step := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		for _, g := range []*Gossip{a, b} {
			if err := g.SetKeys(step); err != nil {
				t.Fatal(err)
			}
		}
		before := b.Stats().Accepted
		if !eventually(ctx, 5*time.Second, func() bool { return b.Stats().Accepted > before+3 && both() }) {
			t.Fatalf("step %d: announcements stopped", i)
		}
	}
	c := m.start(ctx, "n3", k2, "c", []string{a.Addr()})
	if !eventually(ctx, 10*time.Second, func() bool { return len(c.Replicas("kv", 0).Replicas) == 3 }) {
		t.Fatal("a member with the new key did not learn the cluster")
	}
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if g, err := Start(short, m.config("n4", k1, "c", []string{a.Addr()})); err == nil {
		g.Close()
		t.Fatal("a member with the removed key joined")
	}
}

func TestGossipStreamsAreRateLimitedPerSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := Start(ctx, Config{NodeID: "n1", BindAddr: "127.0.0.1", StreamRate: 0.001, StreamBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range 5 {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if !eventually(ctx, 5*time.Second, func() bool { return g.Stats().StreamsLimited == 3 }) {
		t.Fatalf("limited %d streams, want 3", g.Stats().StreamsLimited)
	}
}

// FuzzSignedAnnouncement feeds the announcement decoder (what NotifyMsg
// runs on a secured member) arbitrary bytes: it must not panic, what
// decodes re-encodes to the same fields, and what it accepts is signed by
// the node it names (only n1 signed anything here).
func FuzzSignedAnnouncement(f *testing.F) {
	clk := clock.NewManual(time.Now())
	m := newMaterial(f, "c", clk)
	n1, victim := m.auth(nodeID("n1"), "c"), m.auth(nodeID("n2"), "c")
	for seq := uint64(1); seq <= certRepeat+1; seq++ {
		_, env, err := n1.seal(announcement("n1", seq), seq)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(env)
	}
	f.Add(announcement("n1", 1))
	f.Add([]byte(annMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, cert, err := decodeSealed(b)
		if err == nil {
			again, cert2, err := decodeSealed(s.encode(cert))
			if err != nil || again.fp != s.fp || again.at != s.at || !bytes.Equal(again.sig, s.sig) || !bytes.Equal(again.payload, s.payload) || !bytes.Equal(cert, cert2) {
				t.Fatalf("re-encoding changed the envelope: %v", err)
			}
		}
		if a, _, err := victim.open(b); err == nil && a.NodeId != "n1" {
			t.Fatalf("accepted an announcement of %q", a.NodeId)
		}
	})
}

// FuzzSignedState feeds the push/pull state decoder arbitrary bytes.
func FuzzSignedState(f *testing.F) {
	f.Add(encodeState([]stateEntry{{ageMs: 5, envelope: []byte("x")}, {ageMs: 0, envelope: nil}}))
	f.Add([]byte(stateMagic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodeState(b)
		if err != nil {
			return
		}
		again, err := decodeState(encodeState(entries))
		if err != nil || len(again) != len(entries) {
			t.Fatalf("re-encoded state differs: %v", err)
		}
		for i := range entries {
			if again[i].ageMs != entries[i].ageMs || !bytes.Equal(again[i].envelope, entries[i].envelope) {
				t.Fatalf("entry %d changed", i)
			}
		}
	})
}

// TestSignatureCheckedOncePerChange: an envelope this member already holds
// (push/pull relays every entry again) is taken without a second
// signature check; a new announcement and a tampered copy of the held one
// are checked (and the tampered one refused).
func TestSignatureCheckedOncePerChange(t *testing.T) {
	clk := clock.NewManual(time.Now())
	m := newMaterial(t, "c", clk)
	n1 := m.auth(nodeID("n1"), "c")
	g := &Gossip{cfg: Config{NodeID: "n2", Clock: clk, TTL: DefaultTTL}, log: slog.New(slog.DiscardHandler), pages: NewPages(DefaultTTL),
		sealed: map[string]*sealed{}, auth: m.auth(nodeID("n2"), "c")}
	_, env1, err := n1.seal(announcement("n1", 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(env []byte) error {
		a, s, err := g.open(env)
		if err == nil {
			g.receive(clk.Now(), clk.Now(), a, s, msgDirect)
		}
		return err
	}
	if err := deliver(env1); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := deliver(env1); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.verified.Load(); got != 1 {
		t.Fatalf("verified %d signatures for one announcement relayed 6 times, want 1", got)
	}
	tampered := bytes.Clone(env1)
	tampered[len(tampered)-1] ^= 1
	if err := deliver(tampered); err == nil {
		t.Fatal("a tampered copy of a held announcement was accepted")
	}
	_, env2, err := n1.seal(announcement("n1", 2), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := deliver(env2); err != nil {
		t.Fatal(err)
	}
	// The tampered copy claims no newer sequence number than the entry
	// held: it is skipped before its signature is checked (notNewer).
	if got := g.verified.Load(); got != 2 {
		t.Fatalf("verified %d signatures, want 2 (first, second)", got)
	}
	if e := g.Snapshot(); len(e) != 1 || e[0].Ann.Seq != 2 {
		t.Fatalf("pages hold %v, want n1 at seq 2", e)
	}
	clk.Advance(2 * DefaultTTL)
	if err := deliver(env2); err != nil {
		t.Fatal(err)
	}
	if got := g.verified.Load(); got != 3 {
		t.Fatalf("verified %d signatures, want 3: an expired entry's envelope is checked again", got)
	}
}

// TestOlderAnnouncementsAreSkippedUnverified: state and relays repeat
// entries the member holds newer versions of; their signatures are not
// checked, while a newer one's is.
func TestOlderAnnouncementsAreSkippedUnverified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newMaterial(t, "c", nil)
	key, _ := GenerateKey()
	a := m.start(ctx, "n1", key, "c", nil)
	b := m.start(ctx, "n2", key, "c", []string{a.Addr()})
	if !eventually(ctx, 10*time.Second, func() bool { return len(b.Replicas("kv", 0).Replicas) == 2 }) {
		t.Fatal("b never saw a")
	}
	n1 := m.auth(nodeID("n1"), "c")
	seal := func(inc int64) []byte {
		p, _ := proto.Marshal(&pb.Announcement{NodeId: "n1", RpcAddr: "10.0.0.1:7000", Seq: 1, Incarnation: inc,
			Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}})
		_, env, _ := n1.seal(p, 1)
		return env
	}
	d := (*delegate)(b)
	before := b.verified.Load()
	d.MergeRemoteState(encodeState([]stateEntry{{envelope: seal(1)}}), true)
	if got := b.verified.Load() - before; got != 0 {
		t.Fatalf("an older announcement of n1 was verified (%d checks)", got)
	}
	d.MergeRemoteState(encodeState([]stateEntry{{envelope: seal(1 << 62)}}), true)
	if got := b.verified.Load() - before; got != 1 {
		t.Fatalf("a newer announcement of n1 got %d checks, want 1", got)
	}
}
