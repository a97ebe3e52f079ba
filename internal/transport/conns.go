package transport

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Conns reuses one gRPC connection per node address. It is safe for
// concurrent use.
type Conns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	opts  []grpc.DialOption
}

// MaxMessage is the largest gRPC message a node sends or accepts. gRPC's
// default of 4 MiB would refuse a large request body or a replication batch
// of large writes; the limit stays as a guard against runaway messages.
const MaxMessage = 64 << 20

// window is the HTTP/2 flow-control window of every stream and connection.
// A fixed window turns off gRPC's bandwidth-delay probing, whose pings and
// window updates cost extra writes on every small call; 4 MiB lets a
// loopback or LAN stream run without waiting for window updates.
const window = 4 << 20

// streamWorkers long-lived goroutines serve incoming calls (gRPC spawns
// more when all are busy; it is not a limit). A fresh goroutine per call
// grew its stack several times on a node's handler path (gRPC, dispatch,
// an adapter's HTTP client): ~17% of a node's CPU in a profile.
const streamWorkers = 64

// ServerOptions are the gRPC server options every node uses.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.NumStreamWorkers(streamWorkers),
	}
}

// NewConns returns an empty connection cache. Extra dial options are
// appended to the defaults (plaintext, MaxMessage).
func NewConns(opts ...grpc.DialOption) *Conns {
	return &Conns{
		conns: map[string]*grpc.ClientConn{},
		opts: append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)),
			grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		}, opts...),
	}
}

// Client returns a Node client for addr, creating the connection once.
func (c *Conns) Client(addr string) (pb.NodeClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return pb.NewNodeClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: connect %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return pb.NewNodeClient(cc), nil
}

// Forget closes and drops the connection to addr (its node went away).
func (c *Conns) Forget(addr string) {
	c.mu.Lock()
	cc, ok := c.conns[addr]
	delete(c.conns, addr)
	c.mu.Unlock()
	if ok {
		_ = cc.Close()
	}
}

// Close closes every connection.
func (c *Conns) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, addr)
	}
	return nil
}
