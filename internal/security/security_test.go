package security

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

type echoNode struct {
	pb.UnimplementedNodeServer
	id string
}

func (e *echoNode) Call(ctx context.Context, in *pb.CallRequest) (*pb.CallResponse, error) {
	caller, _ := transport.Caller(ctx)
	return &pb.CallResponse{Body: []byte(e.id + " answers " + caller.String())}, nil
}

// node is a secured node's network face: gRPC, polls and gossip.
type node struct {
	gossip *membership.Gossip
	rpc    string
	poll   string
}

func startNode(t *testing.T, ctx context.Context, m *Material, id string, join []string) *node {
	t.Helper()
	opts, err := m.Transport().ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterNodeServer(srv, &echoNode{id: id})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	ps, err := transport.ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { return 1, true }, slog.New(slog.DiscardHandler), m.PollServerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	n := &node{rpc: ln.Addr().String(), poll: ps.Addr()}
	cfg := membership.Config{NodeID: id, BindAddr: "127.0.0.1", Join: join, AnnounceInterval: 50 * time.Millisecond, TTL: time.Second,
		Announce: func() *pb.Announcement {
			return &pb.Announcement{RpcAddr: n.rpc, PollAddr: n.poll, Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}}
		}}
	m.Gossip(&cfg)
	if n.gossip, err = membership.Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.gossip.Close() })
	return n
}

func load(t *testing.T, dir string, id pki.Identity) *Material {
	t.Helper()
	m, err := Load(Config{Dir: dir, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func eventually(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// TestSecuredClusterEndToEnd runs two secured nodes and a client built
// from Scratch material: the client learns the nodes from signed gossip,
// polls them with authenticated polls and calls them over mutual TLS, and
// all of it survives a key rotation applied from the keyring file.
func TestSecuredClusterEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if err := Scratch(dir, "prod", "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	m1, m2 := load(t, dir, pki.Identity{Role: pki.RoleNode, Name: "n1"}), load(t, dir, pki.Identity{Role: pki.RoleNode, Name: "n2"})
	mc := load(t, dir, pki.Identity{Role: pki.RoleClient, Name: "client"})
	if m1.Label != "prod" {
		t.Fatalf("label %q, want the CA's cluster name", m1.Label)
	}
	n1 := startNode(t, ctx, m1, "n1", nil)
	startNode(t, ctx, m2, "n2", []string{n1.gossip.Addr()})

	ccfg := membership.Config{NodeID: "client-1", BindAddr: "127.0.0.1", Join: []string{n1.gossip.Addr()}, TTL: time.Second}
	mc.Gossip(&ccfg)
	cg, err := membership.Start(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	poller, err := transport.NewPoller(slog.New(slog.DiscardHandler), mc.PollerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer poller.Close()
	conns, err := mc.Transport().NewConns()
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()

	works := func(what string) {
		t.Helper()
		var reps []membership.Replica
		if !eventually(ctx, 10*time.Second, func() bool { reps = cg.Replicas("kv", 0).Replicas; return len(reps) == 2 }) {
			t.Fatalf("%s: client sees %v", what, reps)
		}
		var targets []transport.PollTarget
		for _, r := range reps {
			targets = append(targets, transport.PollTarget{Replica: r.Node, Addr: r.PollAddr})
		}
		if got := poller.Poll(ctx, targets, "kv", 0, "", 2*time.Second); len(got) != 2 {
			t.Fatalf("%s: %d poll answers", what, len(got))
		}
		for _, r := range reps {
			cl, err := conns.ClientFor(r.Node, r.RPCAddr)
			if err != nil {
				t.Fatal(err)
			}
			out, err := cl.Call(ctx, &pb.CallRequest{Service: "kv"})
			if err != nil || string(out.Body) != r.Node+" answers client/client" {
				t.Fatalf("%s: call %s: %v %q", what, r.Node, err, out.GetBody())
			}
		}
	}
	works("start")

	// Rotate: install, use, remove, each applied by every member.
	file := filepath.Join(dir, KeyringFileName)
	old, err := membership.ReadKeyringFile(file)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := membership.GenerateKey()
	for _, step := range []func() error{
		func() error { return membership.InstallKey(file, k2) },
		func() error { return membership.UseKey(file, k2) },
		func() error { return membership.RemoveKey(file, old[0]) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*Material{m1, m2, mc} {
			if err := m.ReloadKeyring(); err != nil {
				t.Fatal(err)
			}
		}
		works("rotation")
	}
}

func TestLoadRequiresMaterialOrInsecure(t *testing.T) {
	if _, err := Load(Config{}); err == nil {
		t.Fatal("Load with nothing succeeded")
	}
	m, err := Load(Config{Insecure: true})
	if err != nil || !m.Insecure() || !m.Transport().Insecure {
		t.Fatalf("insecure: %v", err)
	}
	var cfg membership.Config
	m.Gossip(&cfg)
	if cfg.Keyring != nil || cfg.Certs != nil || m.PollServerOptions() != nil || m.PollerOptions() != nil {
		t.Fatal("insecure material configured something")
	}
	if err := m.SetKeys(nil); err == nil {
		t.Fatal("insecure member took keys")
	}
	dir := t.TempDir()
	if err := Scratch(dir, "c", "n1"); err != nil {
		t.Fatal(err)
	}
	// A node id the certificate does not name.
	if _, err := Load(Config{Dir: dir, Identity: pki.Identity{Role: pki.RoleNode, Name: "n9"}}); err == nil {
		t.Fatal("loaded material for a node without a certificate")
	}
	// A missing keyring.
	if _, err := Load(Config{Dir: dir, Identity: pki.Identity{Role: pki.RoleNode, Name: "n1"}, KeyringFile: filepath.Join(dir, "none")}); err == nil {
		t.Fatal("loaded material without a keyring")
	}
}

func TestWatchKeyringAppliesFileChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	if err := Scratch(dir, "c", "n1"); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	m, err := Load(Config{Dir: dir, Identity: pki.Identity{Role: pki.RoleNode, Name: "n1"}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	watching, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.WatchKeyring(watching); close(done) }()
	defer func() { stop(); <-done }()

	k2, _ := membership.GenerateKey()
	file := filepath.Join(dir, KeyringFileName)
	if err := membership.InstallKey(file, k2); err != nil {
		t.Fatal(err)
	}
	if err := membership.UseKey(file, k2); err != nil {
		t.Fatal(err)
	}
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultKeyringCheck)
	if !eventually(ctx, 5*time.Second, func() bool {
		keys := *m.keys.Load()
		return len(keys) == 2 && string(keys[0]) == string(k2) && string(m.Keyring.GetPrimaryKey()) == string(k2)
	}) {
		t.Fatal("the watcher did not apply the new primary")
	}
	// A broken file is skipped; the keys stay.
	if err := os.WriteFile(file, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultKeyringCheck)
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // back waiting: the check ran
		t.Fatal(err)
	}
	if keys := *m.keys.Load(); len(keys) != 2 {
		t.Fatalf("a broken file changed the keys: %d", len(keys))
	}
}
