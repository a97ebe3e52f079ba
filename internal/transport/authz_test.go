package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

var (
	idN1  = pki.Identity{Role: pki.RoleNode, Name: "n1"}
	idN2  = pki.Identity{Role: pki.RoleNode, Name: "n2"}
	idWeb = pki.Identity{Role: pki.RoleClient, Name: "web"}
	idOps = pki.Identity{Role: pki.RoleOperator, Name: "alice"}
	idGw  = pki.Identity{Role: pki.RoleGateway, Name: "gw1"}
	idScr = pki.Identity{Role: pki.RoleScraper, Name: "prom"}
)

// recorder is a Node server that answers every method and records the
// caller the authorisation layer vouched for.
type recorder struct {
	pb.UnimplementedNodeServer
	callers chan pki.Identity
}

func (r *recorder) seen(ctx context.Context) {
	id, _ := Caller(ctx)
	select {
	case r.callers <- id:
	default:
	}
}

func (r *recorder) Call(ctx context.Context, _ *pb.CallRequest) (*pb.CallResponse, error) {
	r.seen(ctx)
	return &pb.CallResponse{Body: []byte("ok")}, nil
}

func (r *recorder) Stream(_ *pb.CallRequest, s grpc.ServerStreamingServer[pb.Chunk]) error {
	r.seen(s.Context())
	return s.Send(&pb.Chunk{Body: []byte("ok")})
}

func (r *recorder) BidiStream(s grpc.BidiStreamingServer[pb.StreamFrame, pb.StreamFrame]) error {
	r.seen(s.Context())
	return s.Send(&pb.StreamFrame{})
}

func (r *recorder) Aggregate(ctx context.Context, _ *pb.AggregateRequest) (*pb.AggregateResponse, error) {
	r.seen(ctx)
	return &pb.AggregateResponse{}, nil
}

func (r *recorder) AggregateStream(_ *pb.AggregateRequest, s grpc.ServerStreamingServer[pb.AggregateResponse]) error {
	r.seen(s.Context())
	return s.Send(&pb.AggregateResponse{Final: true})
}

func (r *recorder) Replicate(ctx context.Context, _ *pb.ReplicaBatch) (*pb.ReplicaBatchAck, error) {
	r.seen(ctx)
	return &pb.ReplicaBatchAck{}, nil
}

func (r *recorder) Promote(ctx context.Context, _ *pb.PromoteRequest) (*pb.PromoteReply, error) {
	r.seen(ctx)
	return &pb.PromoteReply{}, nil
}

func (r *recorder) ChangeReplicas(ctx context.Context, _ *pb.ChangeReplicasRequest) (*pb.ChangeReplicasReply, error) {
	r.seen(ctx)
	return &pb.ChangeReplicasReply{}, nil
}

func (r *recorder) Drain(ctx context.Context, _ *pb.DrainRequest) (*pb.DrainReply, error) {
	r.seen(ctx)
	return &pb.DrainReply{}, nil
}

func (r *recorder) Backup(_ *pb.BackupRequest, s grpc.ServerStreamingServer[pb.BackupChunk]) error {
	r.seen(s.Context())
	return s.Send(&pb.BackupChunk{Lsn: 1})
}

func (r *recorder) Debug(_ *pb.DebugRequest, s grpc.ServerStreamingServer[pb.DebugChunk]) error {
	r.seen(s.Context())
	return s.Send(&pb.DebugChunk{Data: []byte("ok")})
}

func (r *recorder) InstallSnapshot(s grpc.ClientStreamingServer[pb.SnapshotChunk, pb.SnapshotAck]) error {
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
	}
	r.seen(s.Context())
	return s.SendAndClose(&pb.SnapshotAck{Installed: true})
}

// secureRig is node n1 serving with mutual TLS on loopback, and the
// material of the other members of its cluster and of a stranger's.
type secureRig struct {
	t        *testing.T
	ctx      context.Context
	dir      string // the cluster's PKI directory
	stranger string // another cluster's PKI directory
	addr     string
	rec      *recorder
	server   *pki.Source // n1's certificate source
	refused  *refusalLog // what the server reported refusing
}

// refusalLog is a Refuser that remembers the reasons it was told.
type refusalLog struct {
	mu      sync.Mutex
	reasons map[string]int
	sources map[string]bool
}

func (l *refusalLog) Refuse(reason, source string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reasons == nil {
		l.reasons, l.sources = map[string]int{}, map[string]bool{}
	}
	l.reasons[reason]++
	l.sources[source] = true
}

func (l *refusalLog) count(reason string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reasons[reason]
}

// snapshot copies the reasons counted so far.
func (l *refusalLog) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.reasons)
}

func (l *refusalLog) named(source string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sources[source]
}

func newSecureRig(t *testing.T, rules map[string]Rule) *secureRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	r := &secureRig{t: t, ctx: ctx, dir: t.TempDir(), stranger: t.TempDir(), rec: &recorder{callers: make(chan pki.Identity, 1)}, refused: &refusalLog{}}
	if _, err := pki.Bootstrap(r.dir, "c", idN1, idN2, idWeb, idOps, idGw, idScr); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Bootstrap(r.stranger, "c", idN2, idOps); err != nil {
		t.Fatal(err)
	}
	r.server = r.source(r.dir, idN1)
	opts, err := Security{TLS: r.server, Rules: rules, Refusals: r.refused}.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterNodeServer(srv, r.rec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	r.addr = ln.Addr().String()
	return r
}

func (r *secureRig) source(dir string, id pki.Identity) *pki.Source {
	r.t.Helper()
	s, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, id)})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// as returns a Node client authenticated as id of the cluster, expecting
// to reach node n1.
func (r *secureRig) as(id pki.Identity) pb.NodeClient {
	r.t.Helper()
	conns, err := Security{TLS: r.source(r.dir, id)}.NewConns()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conns.Close() })
	cl, err := conns.ClientFor("n1", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	return cl
}

// raw returns a Node client with a hand-made TLS configuration.
func (r *secureRig) raw(cfg *tls.Config) pb.NodeClient {
	r.t.Helper()
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cc.Close() })
	return pb.NewNodeClient(cc)
}

// call invokes method on cl with a request that is valid for caller.
func (r *secureRig) call(cl pb.NodeClient, method string, from string) error {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	var err error
	switch method {
	case pb.Node_Call_FullMethodName:
		_, err = cl.Call(ctx, &pb.CallRequest{Service: "kv"})
	case pb.Node_Stream_FullMethodName:
		var s grpc.ServerStreamingClient[pb.Chunk]
		if s, err = cl.Stream(ctx, &pb.CallRequest{Service: "kv"}); err == nil {
			_, err = s.Recv()
		}
	case pb.Node_BidiStream_FullMethodName:
		var s grpc.BidiStreamingClient[pb.StreamFrame, pb.StreamFrame]
		if s, err = cl.BidiStream(ctx); err == nil {
			if err = s.Send(&pb.StreamFrame{Open: &pb.CallRequest{Service: "kv"}}); err == nil || errors.Is(err, io.EOF) {
				_, err = s.Recv()
			}
		}
	case pb.Node_Aggregate_FullMethodName:
		_, err = cl.Aggregate(ctx, &pb.AggregateRequest{Service: "kv"})
	case pb.Node_AggregateStream_FullMethodName:
		var s grpc.ServerStreamingClient[pb.AggregateResponse]
		if s, err = cl.AggregateStream(ctx, &pb.AggregateRequest{Service: "kv"}); err == nil {
			_, err = s.Recv()
		}
	case pb.Node_Replicate_FullMethodName:
		_, err = cl.Replicate(ctx, &pb.ReplicaBatch{From: from, Messages: []*pb.ReplicaMessage{{Service: "kv", From: from, To: "n1"}}})
	case pb.Node_Promote_FullMethodName:
		_, err = cl.Promote(ctx, &pb.PromoteRequest{Service: "kv"})
	case pb.Node_ChangeReplicas_FullMethodName:
		_, err = cl.ChangeReplicas(ctx, &pb.ChangeReplicasRequest{Service: "kv", Add: "n9"})
	case pb.Node_Drain_FullMethodName:
		_, err = cl.Drain(ctx, &pb.DrainRequest{})
	case pb.Node_Backup_FullMethodName:
		var s grpc.ServerStreamingClient[pb.BackupChunk]
		if s, err = cl.Backup(ctx, &pb.BackupRequest{Service: "kv"}); err == nil {
			_, err = s.Recv()
		}
	case pb.Node_Debug_FullMethodName:
		var s grpc.ServerStreamingClient[pb.DebugChunk]
		if s, err = cl.Debug(ctx, &pb.DebugRequest{Item: "status"}); err == nil {
			_, err = s.Recv()
		}
	case pb.Node_InstallSnapshot_FullMethodName:
		var s grpc.ClientStreamingClient[pb.SnapshotChunk, pb.SnapshotAck]
		if s, err = cl.InstallSnapshot(ctx); err == nil {
			// Send returns io.EOF when the server has already ended the
			// stream (a refusal); its status comes with CloseAndRecv.
			if err = s.Send(&pb.SnapshotChunk{From: from, Service: "kv", To: "n1"}); err == nil || errors.Is(err, io.EOF) {
				_, err = s.CloseAndRecv()
			}
		}
	default:
		r.t.Fatalf("no request for %s", method)
	}
	return err
}

func code(err error) codes.Code { return status.Code(err) }

// TestAuthorisationTable runs every method of the Node service as every
// role against a real server and compares what was admitted with the
// policy as the docs state it, written out here on its own (not derived
// from Rules), so that a wrong rule fails the test.
func TestAuthorisationTable(t *testing.T) {
	const (
		node, client, operator, gateway = pki.RoleNode, pki.RoleClient, pki.RoleOperator, pki.RoleGateway
	)
	want := map[string][]pki.Role{
		pb.Node_Call_FullMethodName:            {node, client, operator, gateway},
		pb.Node_Stream_FullMethodName:          {node, client, operator},
		pb.Node_Aggregate_FullMethodName:       {node, client, operator},
		pb.Node_AggregateStream_FullMethodName: {node, client, operator},
		pb.Node_Replicate_FullMethodName:       {node},
		pb.Node_Promote_FullMethodName:         {operator},
		pb.Node_InstallSnapshot_FullMethodName: {node},
		pb.Node_ChangeReplicas_FullMethodName:  {node, operator},
		pb.Node_Drain_FullMethodName:           {operator},
		pb.Node_BidiStream_FullMethodName:      {node, client, operator, gateway},
		pb.Node_Backup_FullMethodName:          {operator},
		pb.Node_Debug_FullMethodName:           {operator},
	}
	var methods []string
	for _, m := range pb.Node_ServiceDesc.Methods {
		methods = append(methods, "/"+pb.Node_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for _, s := range pb.Node_ServiceDesc.Streams {
		methods = append(methods, "/"+pb.Node_ServiceDesc.ServiceName+"/"+s.StreamName)
	}
	if len(methods) != len(want) {
		t.Fatalf("the Node service has %d methods, the expected table %d: add the new method's roles here", len(methods), len(want))
	}

	r := newSecureRig(t, nil)
	// A scraper may only read /metrics over HTTPS: no method admits it.
	members := map[pki.Role]pki.Identity{node: idN2, client: idWeb, operator: idOps, gateway: idGw, pki.RoleScraper: idScr}
	if len(members) != len(pki.Roles) {
		t.Fatalf("the test covers %d of the %d roles", len(members), len(pki.Roles))
	}
	clients := map[pki.Role]pb.NodeClient{}
	for role, id := range members {
		clients[role] = r.as(id)
	}
	denied := 0
	for _, method := range methods {
		roles, ok := want[method]
		if !ok {
			t.Errorf("%s: not in the expected table", method)
			continue
		}
		for role, id := range members {
			admitted := slices.Contains(roles, role)
			if !admitted {
				denied++
			}
			err := r.call(clients[role], method, id.Name)
			switch {
			case admitted && err != nil:
				t.Errorf("%s as %s: %v, want admitted", method, id, err)
			case admitted:
				if got := <-r.rec.callers; got != id {
					t.Errorf("%s as %s: handler saw caller %s", method, id, got)
				}
			case code(err) != codes.PermissionDenied:
				t.Errorf("%s as %s: %v, want PermissionDenied", method, id, err)
			}
		}
	}
	// Every call the table refused was reported, by role.
	if got := r.refused.count("grpc_role"); got != denied {
		t.Errorf("%d refusals reported as grpc_role, want %d", got, denied)
	}
}

// TestBlockingAggregationOnlyForOperators: a blocking aggregation holds a
// worker on every node of its tree for the whole call, so only an
// operator (running an experiment) may ask for one, and a node forwarding
// a subtree of it; a client is refused before the handler runs, and its
// non-blocking calls still pass. (A gateway may not aggregate at all:
// TestAuthorisationTable.)
func TestBlockingAggregationOnlyForOperators(t *testing.T) {
	r := newSecureRig(t, nil)
	for _, tc := range []struct {
		id      pki.Identity
		allowed bool
	}{{idWeb, false}, {idOps, true}, {idN2, true}} {
		cl := r.as(tc.id)
		_, err := cl.Aggregate(r.ctx, &pb.AggregateRequest{Service: "kv", Blocking: true})
		switch {
		case tc.allowed && err != nil:
			t.Errorf("blocking as %s: %v, want admitted", tc.id, err)
		case tc.allowed:
			<-r.rec.callers
		case code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "operator certificate"):
			t.Errorf("blocking as %s: %v, want PermissionDenied naming the operator certificate", tc.id, err)
		}
	}
	if _, err := r.as(idWeb).Aggregate(r.ctx, &pb.AggregateRequest{Service: "kv"}); err != nil {
		t.Errorf("non-blocking as a client: %v", err)
	}
	<-r.rec.callers
}

func TestReplicateOnlyForTheCertificatesNode(t *testing.T) {
	r := newSecureRig(t, nil)
	n2 := r.as(idN2)
	ctx := r.ctx
	for name, batch := range map[string]*pb.ReplicaBatch{
		"batch from another node":   {From: "n3", Messages: []*pb.ReplicaMessage{{From: "n3"}}},
		"message from another node": {From: "n2", Messages: []*pb.ReplicaMessage{{From: "n2"}, {From: "n3"}}},
		"empty from":                {Messages: []*pb.ReplicaMessage{{From: "n2"}}},
	} {
		if _, err := n2.Replicate(ctx, batch); code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", name, err)
		}
	}
	if _, err := n2.Replicate(ctx, &pb.ReplicaBatch{From: "n2", Messages: []*pb.ReplicaMessage{{From: "n2", Entries: []*pb.ReplicaEntry{{Origin: "n3"}}}}}); err != nil {
		t.Errorf("n2's own batch (relaying n3's write): %v", err)
	}
	if got := r.refused.count("grpc_claim"); got != 3 {
		t.Errorf("%d refusals reported as grpc_claim, want the 3 batches", got)
	}
	if !r.refused.named("node/n2") {
		t.Error("the refusals do not name the caller's certificate")
	}
}

func TestSnapshotOnlyFromTheCertificatesNode(t *testing.T) {
	r := newSecureRig(t, nil)
	n2 := r.as(idN2)
	for name, chunks := range map[string][]*pb.SnapshotChunk{
		"first chunk from another node": {{From: "n3", Service: "kv"}},
		"a later chunk from another":    {{From: "n2", Service: "kv"}, {From: "n3", Data: []byte("x")}},
	} {
		s, err := n2.InstallSnapshot(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			if err := s.Send(c); err != nil {
				break
			}
		}
		if _, err := s.CloseAndRecv(); code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", name, err)
		}
	}
}

func TestConnectionsWithoutAClusterCertificateAreRefused(t *testing.T) {
	r := newSecureRig(t, nil)
	for name, cl := range map[string]pb.NodeClient{
		"no certificate": r.raw(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}),
		"another CA's node": r.raw(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{*r.source(r.stranger, idN2).Certificate()}}),
		"another CA's operator": r.raw(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
			Certificates: []tls.Certificate{*r.source(r.stranger, idOps).Certificate()}}),
	} {
		for _, m := range []string{pb.Node_Call_FullMethodName, pb.Node_Replicate_FullMethodName, pb.Node_Promote_FullMethodName} {
			if err := r.call(cl, m, "n2"); err == nil {
				t.Errorf("%s: %s admitted", name, m)
			}
		}
	}
	// Plaintext against a TLS server fails too.
	conns := NewConns()
	defer conns.Close()
	cl, _ := conns.Client(r.addr)
	if err := r.call(cl, pb.Node_Call_FullMethodName, ""); err == nil {
		t.Error("plaintext call admitted")
	}
	// Each handshake the server refused was reported with its reason. The
	// server reports from its own goroutine, which may finish after the
	// client has its error: wait for the reports a moment.
	for _, reason := range []string{"tls_no_certificate", "tls_unknown_ca", "tls_handshake"} {
		for deadline := time.Now().Add(5 * time.Second); r.refused.count(reason) == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if r.refused.count(reason) == 0 {
			t.Errorf("no refusal reported as %s: %v", reason, r.refused.snapshot())
		}
	}
	if !r.refused.named("127.0.0.1") {
		t.Error("the handshake refusals do not name the source address")
	}
}

func TestClientRefusesAServerWithAnotherNodeID(t *testing.T) {
	r := newSecureRig(t, nil)
	conns, err := Security{TLS: r.source(r.dir, idWeb)}.NewConns()
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	cl, _ := conns.ClientFor("n2", r.addr) // n1 listens there
	if err := r.call(cl, pb.Node_Call_FullMethodName, ""); code(err) != codes.Unavailable {
		t.Fatalf("call to n2 at n1's address: %v, want Unavailable (handshake refused)", err)
	}
	// Any node will do through Client.
	cl, _ = conns.Client(r.addr)
	if err := r.call(cl, pb.Node_Call_FullMethodName, ""); err != nil {
		t.Fatalf("Client(addr): %v", err)
	}
	// And a server of another cluster is refused.
	other, err := Security{TLS: r.source(r.stranger, idOps)}.NewConns()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cl, _ = other.Client(r.addr)
	if err := r.call(cl, pb.Node_Call_FullMethodName, ""); err == nil {
		t.Fatal("a member of another cluster accepted our node")
	}
}

func TestMethodsMissingFromTheTableAreRefused(t *testing.T) {
	rules := map[string]Rule{pb.Node_Call_FullMethodName: {Roles: anyMember}}
	r := newSecureRig(t, rules)
	ops := r.as(idOps)
	if err := r.call(ops, pb.Node_Call_FullMethodName, ""); err != nil {
		t.Fatal(err)
	}
	<-r.rec.callers
	if err := r.call(ops, pb.Node_Promote_FullMethodName, ""); code(err) != codes.PermissionDenied {
		t.Fatalf("unlisted Promote: %v, want PermissionDenied", err)
	}
}

func TestSecurityMustBeChosen(t *testing.T) {
	if _, err := (Security{}).ServerOptions(); !errors.Is(err, ErrNoSecurity) {
		t.Fatalf("zero Security: %v", err)
	}
	if _, err := (Security{}).NewConns(); !errors.Is(err, ErrNoSecurity) {
		t.Fatalf("zero Security: %v", err)
	}
	dir := t.TempDir()
	if _, err := pki.Bootstrap(dir, "c", idN1); err != nil {
		t.Fatal(err)
	}
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, idN1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Security{Insecure: true, TLS: src}).ServerOptions(); err == nil {
		t.Fatal("both Insecure and TLS accepted")
	}
	if opts, err := (Security{Insecure: true}).ServerOptions(); err != nil || len(opts) != len(ServerOptions()) {
		t.Fatalf("insecure options: %d, %v", len(opts), err)
	}
}

func TestServerPresentsARotatedCertificateWithoutRestart(t *testing.T) {
	r := newSecureRig(t, nil)
	web := r.source(r.dir, idWeb)
	served := func() string {
		seen := make(chan string, 1)
		cfg := web.ClientConfig("n1")
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			select {
			case seen <- cs.PeerCertificates[0].SerialNumber.String():
			default:
			}
			return verify(cs)
		}
		if err := r.call(r.raw(cfg), pb.Node_Call_FullMethodName, ""); err != nil {
			t.Fatal(err)
		}
		<-r.rec.callers
		return <-seen
	}
	before := served()
	ca, err := pki.LoadCA(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueFiles(r.dir, idN1, true, pki.IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.server.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := served(); after == before {
		t.Fatalf("server still presents certificate %s after reload", before)
	}
}

// TestPrivilegedMethodsRoles pins who may call the methods that change
// data or roles. TestAuthorisationTable checks the server enforces the
// table; this checks the table itself, so widening a rule is a visible,
// deliberate change.
func TestPrivilegedMethodsRoles(t *testing.T) {
	want := map[string][]pki.Role{
		pb.Node_Replicate_FullMethodName:       {pki.RoleNode},
		pb.Node_InstallSnapshot_FullMethodName: {pki.RoleNode},
		pb.Node_Promote_FullMethodName:         {pki.RoleOperator},
		pb.Node_ChangeReplicas_FullMethodName:  {pki.RoleOperator, pki.RoleNode},
		pb.Node_Drain_FullMethodName:           {pki.RoleOperator},
	}
	for method, roles := range want {
		got := slices.Clone(Rules[method].Roles)
		slices.Sort(got)
		slices.Sort(roles)
		if !slices.Equal(got, roles) {
			t.Errorf("%s: roles %v, want %v", method, got, roles)
		}
	}
}
