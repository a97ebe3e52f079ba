package transport

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// replicateServer answers Replicate and nothing else.
type replicateServer struct{ pb.UnimplementedNodeServer }

func (replicateServer) Replicate(context.Context, *pb.ReplicaBatch) (*pb.ReplicaBatchAck, error) {
	return &pb.ReplicaBatchAck{}, nil
}

// serveOn starts a node-like gRPC server (ServerOptions) on addr ("" for
// any port) and returns it with its address.
func serveOn(t *testing.T, addr string) (*grpc.Server, string) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 50 { // a restart may find the port in TIME_WAIT briefly
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(ServerOptions()...)
	pb.RegisterNodeServer(s, replicateServer{})
	go func() { _ = s.Serve(ln) }()
	return s, ln.Addr().String()
}

func replicateOnce(cl pb.NodeClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cl.Replicate(ctx, &pb.ReplicaBatch{From: "test"})
	return err
}

// TestConnectionsGiveUpOnUnacknowledgedDataFast: every connection a Conns
// makes has TCP_USER_TIMEOUT set to keepaliveTimeout, so after a network
// partition a connection whose heartbeats go unacknowledged is dropped by
// the kernel within a second (and redialled), instead of sitting in TCP
// retransmission backoff for tens of seconds.
func TestConnectionsGiveUpOnUnacknowledgedDataFast(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_USER_TIMEOUT is Linux's")
	}
	srv, addr := serveOn(t, "")
	defer srv.Stop()
	var mu sync.Mutex
	var conns []net.Conn
	dial := grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	})
	cs := NewConns(dial)
	defer cs.Close()
	cl, err := cs.Client(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := replicateOnce(cl); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections dialled, want 1", len(conns))
	}
	raw, err := conns[0].(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if time.Duration(ms)*time.Millisecond != keepaliveTimeout {
		t.Fatalf("TCP_USER_TIMEOUT = %d ms, want %v", ms, keepaliveTimeout)
	}
}

// TestDeadConnectionIsRedialledPromptly: when a node's server goes away
// (its connection breaks) and comes back at the same address after a few
// seconds, the cached connection is redialled within about redialMax, not
// after gRPC's default reconnect backoff (which grows to 120 s).
func TestDeadConnectionIsRedialledPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("waits ~4 s of real time")
	}
	srv, addr := serveOn(t, "")
	cs := NewConns()
	defer cs.Close()
	cl, err := cs.Client(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := replicateOnce(cl); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // the connection breaks; redials are refused
	down := time.Now()
	for time.Since(down) < 3*time.Second {
		if err := replicateOnce(cl); err == nil {
			t.Fatal("a call succeeded with the server down")
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv, _ = serveOn(t, addr)
	defer srv.Stop()
	back := time.Now()
	for replicateOnce(cl) != nil {
		if time.Since(back) > 5*time.Second {
			t.Fatal("connection not redialled 5 s after the server came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Attempts come every redialMax (+20% jitter) at most; gRPC's default
	// backoff would have waited ~1.9-2.2 s here.
	if limit := redialMax * 3 / 2; time.Since(back) > limit {
		t.Fatalf("redialled %v after the server came back, want <= %v", time.Since(back), limit)
	}
	t.Logf("redialled %v after the server came back (down %v)", time.Since(back).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond))
}
