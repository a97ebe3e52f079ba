package clustertest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestSecuredClusterRefusesOutsiders runs three secured node processes
// replicating kv partition 0 and attacks them: with no certificate, with
// certificates of another CA (holding the stolen gossip key), with a node
// certificate used for another node id, with a client certificate where a
// node's or an operator's is needed, with a forged UDP announcement and
// with forged poll replies. Nothing gets in; the cluster keeps serving.
func TestSecuredClusterRefusesOutsiders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "s", "kv", 1, 2, "metrics: 127.0.0.1:0\n")
	if _, err := c.Call(ctx, "kv", 0, "put", []byte("k=v")); err != nil {
		t.Fatal(err)
	}
	addrs := nodeAddrs(ctx, c)
	// Every refusal is counted by reason on the node that refused it and
	// logged there at WARN.
	metricsAddrs := map[string]string{}
	for _, m := range c.Members(ctx, 0) {
		metricsAddrs[m.Node] = m.MetricsAddr
	}
	// /metrics is HTTPS on a secured cluster and admits scrapers.
	scraper, scheme, err := cl.HTTP("scraper/prom")
	if err != nil {
		t.Fatal(err)
	}
	refused := func(t *testing.T, reason string) float64 {
		t.Helper()
		return refusedCount(t, ctx, scraper, scheme, metricsAddrs, reason)
	}
	// A healthy cluster refuses nobody: whatever is counted below comes
	// from the attacks.
	if n := refused(t, ""); n != 0 {
		t.Fatalf("the cluster counted %v refusals before any attack", n)
	}
	mustCount := func(t *testing.T, reason string, before float64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); refused(t, reason) <= before; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("neptune_security_refused_total{reason=%q} stayed at %v", reason, before)
			}
		}
	}
	get := &pb.CallRequest{Service: "kv", Partition: 0, Method: "get", Mode: pb.Mode_MODE_READ, Body: []byte("k")}
	forged := &pb.ReplicaBatch{From: "s1", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: 0, From: "s1"}}}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Second) }

	// The outsider: another CA for a cluster of the same name, with the
	// cluster's gossip key copied in.
	outside := t.TempDir()
	if err := security.Scratch(outside, "test", "s1", "evil"); err != nil {
		t.Fatal(err)
	}
	copyFile(t, cl.KeyringFile(), filepath.Join(outside, security.KeyringFileName))

	t.Run("no certificate", func(t *testing.T) {
		handshakes, gossip := refused(t, "tls_handshake"), refused(t, "gossip_label")+refused(t, "gossip_key")
		plain := transport.NewConns()
		defer plain.Close()
		for _, id := range []string{"s1", "s2"} {
			nc, err := plain.Client(addrs[id])
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := short()
			_, err = nc.Call(cctx, get)
			mustRefuse(t, "plaintext call", err, codes.OK)
			_, err = nc.Replicate(cctx, forged)
			mustRefuse(t, "plaintext replicate", err, codes.OK)
			_, err = nc.Promote(cctx, &pb.PromoteRequest{Service: "kv", Partition: 0})
			mustRefuse(t, "plaintext promote", err, codes.OK)
			cancel()
		}
		_, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds()})
		if err == nil || !strings.Contains(err.Error(), "ClientConfig.Security.Dir") {
			t.Fatalf("Dial without Security: %v, want an error naming ClientConfig.Security.Dir", err)
		}
		// A node process without certificate or key cannot join: the
		// members drop its gossip, so its join times out and it exits
		// saying what to check; it never enters the yellow pages.
		_, err = cl.Start(ctx, localcluster.Spec{ID: "plain", Services: []string{"kv:0"}, SecurityArgs: []string{"--insecure"}})
		if err == nil || !strings.Contains(err.Error(), "ignores gossip from a member without its keyring") {
			t.Fatalf("an insecure node joining the secured cluster: %v, want its join refused", err)
		}
		if _, ok := nodeAddrs(ctx, c)["plain"]; ok {
			t.Fatal("the node without a certificate entered the yellow pages")
		}
		mustCount(t, "tls_handshake", handshakes)
		if refused(t, "gossip_label")+refused(t, "gossip_key") <= gossip {
			t.Fatal("the insecure node's gossip was not counted as refused")
		}
		mustLog(t, nodes[1], "reason=tls_handshake")
	})

	t.Run("another CA", func(t *testing.T) {
		handshakes, announcements := refused(t, "tls_refused_by_peer"), refused(t, "announcement_unknown_ca")
		for _, id := range []pki.Identity{{Role: pki.RoleNode, Name: "s1"}, {Role: pki.RoleOperator, Name: "operator"}} {
			nc, err := secConns(t, outside, id).Client(addrs["s2"])
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := short()
			_, err = nc.Call(cctx, get)
			mustRefuse(t, id.String()+" of another CA: call", err, codes.OK)
			_, err = nc.Replicate(cctx, forged)
			mustRefuse(t, id.String()+" of another CA: replicate", err, codes.OK)
			_, err = nc.Promote(cctx, &pb.PromoteRequest{Service: "kv", Partition: 0})
			mustRefuse(t, id.String()+" of another CA: promote", err, codes.OK)
			cancel()
		}
		// A node process of the other CA holding the gossip key joins
		// memberlist, but its announcements are refused: it never enters
		// the yellow pages, and its client cannot call.
		evil, err := cl.Start(ctx, localcluster.Spec{ID: "evil", Services: []string{"echo:0"},
			SecurityArgs: []string{"--tls-dir", outside}, Args: []string{"--announce-interval", "200ms", "--announce-ttl", "1s"}})
		if err != nil {
			t.Fatal(err)
		}
		oc, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), AnnounceTTL: time.Second,
			Security: neptune.Security{Dir: outside, Cert: "client/client"}})
		if err != nil {
			t.Fatal(err)
		}
		defer oc.Close()
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if _, ok := nodeAddrs(ctx, c)["evil"]; ok {
				t.Fatal("the other CA's node entered the yellow pages")
			}
			time.Sleep(100 * time.Millisecond)
		}
		cctx, cancel := short()
		defer cancel()
		_, err = oc.Call(cctx, "kv", 0, "get", []byte("k"))
		if err == nil {
			t.Fatal("a client of another CA called the cluster")
		}
		// It is told in words: not a member, which CA the nodes present.
		if !errors.Is(err, neptune.ErrNotMember) || !strings.Contains(err.Error(), "not a member of this cluster") ||
			!strings.Contains(err.Error(), "node/s1") || !strings.Contains(err.Error(), `cluster "test"`) {
			t.Fatalf("a client of another CA is told %q, want that it is not a member, naming the nodes' CA", err)
		}
		t.Logf("the outsider's client is told: %v", err)
		mustCount(t, "tls_refused_by_peer", handshakes)
		mustCount(t, "announcement_unknown_ca", announcements)
		mustLog(t, nodes[0], "reason=announcement_unknown_ca")
		// The outsider's node says it too, in its own log.
		mustLog(t, evil, "reason=announcement_unknown_ca")
	})

	t.Run("certificate for another node id", func(t *testing.T) {
		// A genuine certificate of the cluster CA, for node s4.
		ca, err := pki.LoadCA(cl.PKIDir())
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		copyFile(t, filepath.Join(cl.PKIDir(), pki.CACertFile), filepath.Join(dir, pki.CACertFile))
		copyFile(t, cl.KeyringFile(), filepath.Join(dir, security.KeyringFileName))
		s4 := pki.Identity{Role: pki.RoleNode, Name: "s4"}
		f, err := ca.IssueFiles(dir, s4, false, pki.IssueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims, roles := refused(t, "grpc_claim"), refused(t, "grpc_role")
		// Replication that claims to come from s1 is refused to s4.
		nc, err := secConns(t, dir, s4).Client(addrs["s2"])
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := short()
		defer cancel()
		_, err = nc.Replicate(cctx, forged)
		mustRefuse(t, "s4 replicating as s1", err, codes.PermissionDenied)
		_, err = nc.Promote(cctx, &pb.PromoteRequest{Service: "kv", Partition: 0})
		mustRefuse(t, "s4 (a node) promoting", err, codes.PermissionDenied)
		mustCount(t, "grpc_claim", claims)
		mustCount(t, "grpc_role", roles)
		mustLog(t, nodes[1], "source=node/s4")
		// A process started as s1 with s4's certificate refuses to run
		// (it cannot announce or serve as s1).
		imp := filepath.Join(dir, "imp")
		if err := os.MkdirAll(imp, 0o700); err != nil {
			t.Fatal(err)
		}
		s1 := pki.FilesFor(imp, pki.Identity{Role: pki.RoleNode, Name: "s1x"})
		copyFile(t, f.CA, s1.CA)
		copyFile(t, f.Cert, s1.Cert)
		copyFile(t, f.Key, s1.Key)
		copyFile(t, cl.KeyringFile(), filepath.Join(imp, security.KeyringFileName))
		_, err = cl.Start(ctx, localcluster.Spec{ID: "s1x", Services: []string{"kv:0"}, SecurityArgs: []string{"--tls-dir", imp}})
		if err == nil || !strings.Contains(err.Error(), "s4") {
			t.Fatalf("a node started with another node's certificate: %v", err)
		}
		// A connection that expects node s1 refuses s2's server: an
		// address cannot stand in for a node.
		nc, err = secConns(t, cl.PKIDir(), pki.Identity{Role: pki.RoleNode, Name: "s3"}).ClientFor("s1", addrs["s2"])
		if err != nil {
			t.Fatal(err)
		}
		_, err = nc.Call(cctx, get)
		mustRefuse(t, "s2 answering as s1", err, codes.OK)
	})

	t.Run("roles", func(t *testing.T) {
		cctx, cancel := short()
		defer cancel()
		primary := primaryOf(c, 0)
		_, err := c.Promote(cctx, primary, "kv", 0)
		mustRefuse(t, "client promoting", err, codes.OK)
		if !strings.Contains(err.Error(), "PermissionDenied") && !strings.Contains(err.Error(), "role client") {
			t.Fatalf("client promoting: %v, want a permission error", err)
		}
		nc, err := secConns(t, cl.PKIDir(), pki.Identity{Role: pki.RoleClient, Name: "client"}).ClientFor(primary, addrs[primary])
		if err != nil {
			t.Fatal(err)
		}
		_, err = nc.Replicate(cctx, forged)
		mustRefuse(t, "client replicating", err, codes.PermissionDenied)
		op, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Security: cl.ClientSecurity("operator/operator")})
		if err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		waitFor(t, 10*time.Second, func() bool { return primaryOf(op, 0) != "" })
		if _, err := op.Promote(cctx, primary, "kv", 0); err != nil {
			t.Fatalf("operator promoting the primary: %v", err)
		}
	})

	t.Run("forged UDP announcement", func(t *testing.T) {
		labels := refused(t, "gossip_label")
		// The packet that used to rewrite a node's entry cluster-wide: a
		// memberlist user message (type 8) carrying an announcement for s1.
		ann, err := proto.Marshal(&pb.Announcement{NodeId: "s1", RpcAddr: "127.0.0.1:1", Seq: 1 << 40, Incarnation: 1 << 40,
			Services: []*pb.HostedService{{Name: "kv", Partitions: []int32{0}}}})
		if err != nil {
			t.Fatal(err)
		}
		pkt := append([]byte{8}, ann...)
		for _, seed := range cl.Seeds() {
			conn, err := net.Dial("udp", seed)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				_, _ = conn.Write(pkt)
			}
			conn.Close()
		}
		want := addrs["s1"]
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if got := nodeAddrs(ctx, c)["s1"]; got != want {
				t.Fatalf("s1's entry became %q (was %q)", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cctx, cancel := short()
		defer cancel()
		if _, err := c.Call(cctx, "kv", 0, "get", []byte("k")); err != nil {
			t.Fatalf("call after forged announcements: %v", err)
		}
		// The packet carries no cluster label: memberlist drops it first.
		mustCount(t, "gossip_label", labels)
	})

	t.Run("polls", func(t *testing.T) {
		m, err := security.Load(security.Config{Dir: cl.PKIDir(), Identity: pki.Identity{Role: pki.RoleClient, Name: "client"}})
		if err != nil {
			t.Fatal(err)
		}
		ic, err := client.New(ctx, client.Config{Client: config.Client{Join: cl.Seeds()}, Material: m})
		if err != nil {
			t.Fatal(err)
		}
		defer ic.Close()
		var target transport.PollTarget
		waitFor(t, 10*time.Second, func() bool {
			for _, e := range ic.Gossip().Snapshot() {
				if e.Ann.NodeId == "s1" {
					target = transport.PollTarget{Replica: "s1", Addr: e.Ann.PollAddr}
				}
			}
			return target.Addr != ""
		})
		poll := func(p *transport.Poller, to transport.PollTarget) int {
			return len(p.Poll(ctx, []transport.PollTarget{to}, "kv", 0, "", 300*time.Millisecond))
		}
		authed, err := transport.NewPoller(slog.New(slog.DiscardHandler), m.PollerOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer authed.Close()
		plain, err := transport.NewPoller(slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		if n := poll(authed, target); n != 1 {
			t.Fatalf("authenticated poll of s1: %d answers, want 1", n)
		}
		hmacs := refused(t, "poll_hmac")
		if n := poll(plain, target); n != 0 {
			t.Fatal("s1 answered an unauthenticated poll")
		}
		mustCount(t, "poll_hmac", hmacs)
		// A forger without the key answers every poll with an idle queue;
		// the member's poller drops its replies.
		fake, err := transport.ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { return 0, true }, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer fake.Close()
		if n := poll(plain, transport.PollTarget{Replica: "s1", Addr: fake.Addr()}); n != 1 {
			t.Fatalf("the forger does not answer plain polls (%d answers): the test proves nothing", n)
		}
		if n := poll(authed, transport.PollTarget{Replica: "s1", Addr: fake.Addr()}); n != 0 {
			t.Fatal("a forged poll reply was accepted")
		}
	})
}

// TestKeyRotationOnALiveClusterLosesNoCall rotates the gossip and poll key
// of three secured node processes and a client through the keyring file
// they all watch (install the new key, make it primary, remove the old
// one) while calls run, then starts a fourth node with only the new key.
// No call fails.
func TestKeyRotationOnALiveClusterLosesNoCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := localcluster.NewSecure(neptuneBinary(t), t.TempDir(), "rot")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	args := []string{"--announce-interval", "200ms", "--announce-ttl", "2s"}
	for i := range 3 {
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("k", i+1), Services: []string{"echo:0"}, Args: args}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), AnnounceTTL: 2 * time.Second, Security: cl.ClientSecurity("client/client")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 15*time.Second, func() bool { return len(memberIDs(ctx, c)) == 3 })

	var calls, failed atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Call(cctx, "echo", 0, "echo", []byte("x"))
			cancel()
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				lastErr.Store(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	file := cl.KeyringFile()
	old, err := membership.ReadKeyringFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := membership.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	// Each step waits out the watchers' check interval, so every member
	// has applied it before the next.
	settle := security.DefaultKeyringCheck + 1500*time.Millisecond
	for _, step := range []struct {
		name string
		keys [][]byte
	}{{"install", [][]byte{old[0], fresh}}, {"use", [][]byte{fresh, old[0]}}, {"remove", [][]byte{fresh}}} {
		if err := membership.WriteKeyringFile(file, step.keys); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d keys", step.name, len(step.keys))
		time.Sleep(settle)
	}
	// A node that holds only the new key joins.
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "k4", Services: []string{"echo:0"}, Args: args}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return len(memberIDs(ctx, c)) == 4 })
	close(stop)
	<-done
	t.Logf("%d calls during the rotation, %d failed", calls.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d of %d calls failed during key rotation; last: %v", failed.Load(), calls.Load(), lastErr.Load())
	}
	if calls.Load() < 100 {
		t.Fatalf("only %d calls ran", calls.Load())
	}
}

// TestRevokedTokenIsRefusedWithoutRestart: running node processes admit
// an operator's token to the dashboard until `neptune tls token revoke`
// lists it in their TLS directory's revocation file; then, without a
// restart, every node answers it 401 saying it was revoked, and a token
// not revoked still opens the dashboard.
func TestRevokedTokenIsRefusedWithoutRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, _, c := appProcs(t, ctx, "v", "kv", 1, 2, "metrics: 127.0.0.1:0\n")
	ca, err := pki.LoadCA(cl.PKIDir())
	if err != nil {
		t.Fatal(err)
	}
	issue := func() string {
		tok, err := ca.IssueToken(pki.Identity{Role: pki.RoleOperator, Name: "alice"}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	revoked, kept := issue(), issue()
	// A token's holder with no certificate of its own (a browser, curl).
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(addr, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/api/dashboard/self", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var addrs []string
	for _, m := range c.Members(ctx, 0) {
		if m.MetricsAddr != "" {
			addrs = append(addrs, m.MetricsAddr)
		}
	}
	if len(addrs) != 3 {
		t.Fatalf("metrics listeners %v, want the three nodes'", addrs)
	}
	for _, a := range addrs {
		if code, body := get(a, revoked); code != http.StatusOK {
			t.Fatalf("%s before revoking: %d %.200q", a, code, body)
		}
	}

	out, err := exec.CommandContext(ctx, neptuneBinary(t), "tls", "token", "revoke", "--dir", cl.PKIDir(), revoked).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "revoked token ") {
		t.Fatalf("neptune tls token revoke: %v\n%s", err, out)
	}
	for _, a := range addrs {
		var code int
		var body string
		waitFor(t, 30*time.Second, func() bool { // the nodes look at their files every 10 s
			code, body = get(a, revoked)
			return code != http.StatusOK
		})
		if code != http.StatusUnauthorized || !strings.Contains(body, "was revoked") {
			t.Errorf("%s: the revoked token got %d %.200q; want 401 saying it was revoked", a, code, body)
		}
		if code, body := get(a, kept); code != http.StatusOK {
			t.Errorf("%s: a token not revoked got %d %.200q", a, code, body)
		}
	}
}
