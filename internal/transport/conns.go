package transport

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Conns reuses one gRPC connection per node address. It is safe for
// concurrent use.
type Conns struct {
	mu    sync.Mutex
	conns map[connKey]*grpc.ClientConn
	opts  []grpc.DialOption
	// tls, when set, secures every connection with mutual TLS; nil is
	// plaintext (NewConns).
	tls *pki.Source
}

// connKey names a cached connection: the address, with TLS the node id
// the server must prove it is ("" accepts any node), and the lane: 0 is
// the connection every caller shares, others are connections of their
// own (ClientOnLane).
type connKey struct {
	node, addr string
	lane       int
}

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

// Fast heal. After a network partition a connection must not sit in TCP
// retransmission backoff (RTOs of 13 s and 52 s were observed) nor a
// redial in gRPC's reconnect backoff (up to 120 s by default):
//
//   - keepalive on every connection. gRPC raises a client's ping interval
//     to at least 10 s, so the ping alone finds an idle dead connection in
//     ~11 s; what finds a busy one fast is the TCP_USER_TIMEOUT gRPC sets
//     to the keepalive Timeout: data unacknowledged for keepaliveTimeout
//     (heartbeats go out every 50 ms) makes the kernel drop the connection.
//   - a redial at most every redialMax, each attempt given connectTimeout,
//     so a connection comes back within ~redialMax + connectTimeout of the
//     network healing (the goal is 2 s).
//
// The server must permit the pings (serverKeepalive), or it would close
// the connection with "too many pings".
const (
	keepaliveTime    = 10 * time.Second // gRPC's minimum for a client
	keepaliveTimeout = time.Second
	redialBase       = 100 * time.Millisecond
	redialMax        = time.Second
	connectTimeout   = time.Second
)

// clientKeepalive and reconnect are the dial options of Fast heal above.
var (
	clientKeepalive = grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true})
	reconnect = grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: redialBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: redialMax},
		MinConnectTimeout: connectTimeout})
	// serverKeepalive permits the clients' pings, idle connections
	// included, down to half their interval.
	serverKeepalive = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: keepaliveTime / 2, PermitWithoutStream: true})
)

// ServerOptions are the gRPC server options every node uses, for a
// plaintext server; Security.ServerOptions adds mutual TLS and
// authorisation to them.
func ServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(nerr.MaxMessageBytes), grpc.MaxSendMsgSize(nerr.MaxMessageBytes),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.NumStreamWorkers(streamWorkers),
		serverKeepalive,
		bodyCodec(),
	}, obs.ServerOptions()...) // the caller's request id into the handler's context
}

// SizeOptions set a server's message limits to a body of max bytes plus
// the call's envelope (nerr.WireOverhead); they override ServerOptions'
// nerr.MaxMessageBytes when appended after them.
func SizeOptions(max int) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(max + nerr.WireOverhead), grpc.MaxSendMsgSize(max + nerr.WireOverhead)}
}

// CallSizeOptions are SizeOptions for a dialer.
func CallSizeOptions(max int) grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max+nerr.WireOverhead), grpc.MaxCallSendMsgSize(max+nerr.WireOverhead))
}

// NewConns returns an empty connection cache of plaintext connections.
// Extra dial options are appended to the defaults (plaintext,
// nerr.MaxMessageBytes). Secured nodes and clients use Security.NewConns.
func NewConns(opts ...grpc.DialOption) *Conns {
	return &Conns{
		conns: map[connKey]*grpc.ClientConn{},
		opts:  append(DialOptions(), opts...),
	}
}

// DialOptions are the gRPC dial options of every plaintext connection
// Conns makes, for a caller that dials itself (the overhead bench's
// round_robin baseline) on equal terms.
func DialOptions() []grpc.DialOption {
	return dialDefaults(grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func dialDefaults(creds grpc.DialOption) []grpc.DialOption {
	return append([]grpc.DialOption{
		creds,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(nerr.MaxMessageBytes), grpc.MaxCallSendMsgSize(nerr.MaxMessageBytes)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		clientKeepalive, reconnect,
		grpc.WithChainUnaryInterceptor(declareSize),
	}, obs.DialOptions()...) // the call's request id goes with it
}

// Client returns a Node client for addr, creating the connection once.
// With TLS, the server must prove it is a node of the cluster, any node;
// use ClientFor where the node id is known.
func (c *Conns) Client(addr string) (pb.NodeClient, error) {
	return c.ClientFor("", addr)
}

// ClientFor returns a Node client for node at addr, creating the
// connection once. With TLS, the server must prove it is that node (its
// certificate names the node id), so an address that now belongs to
// another process cannot receive node's calls. Without TLS it is Client.
func (c *Conns) ClientFor(node, addr string) (pb.NodeClient, error) {
	return c.ClientOnLane(node, addr, 0)
}

// ClientOnLane is ClientFor on a connection of its own: each lane > 0 to
// an address is a separate TCP connection, so a segment lost on one
// stalls (until TCP retransmits it) only the calls on that one. The
// replication runtime sends its small control messages (heartbeats,
// acknowledgements, votes) over a few such lanes, so a lossy link
// delays them only when every lane is stalled at once. Lane 0 is
// ClientFor's shared connection.
func (c *Conns) ClientOnLane(node, addr string, lane int) (pb.NodeClient, error) {
	if c.tls == nil {
		node = ""
	}
	k := connKey{node, addr, lane}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[k]; ok {
		return pb.NewNodeClient(cc), nil
	}
	opts := c.opts
	if c.tls != nil {
		opts = append(slices.Clip(opts), grpc.WithTransportCredentials(credentials.NewTLS(c.tls.ClientConfig(node))))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: connect %s: %w", addr, err)
	}
	c.conns[k] = cc
	return pb.NewNodeClient(cc), nil
}

// Forget closes and drops the connections to addr (its node went away).
func (c *Conns) Forget(addr string) {
	c.mu.Lock()
	var gone []*grpc.ClientConn
	for k, cc := range c.conns {
		if k.addr == addr {
			gone = append(gone, cc)
			delete(c.conns, k)
		}
	}
	c.mu.Unlock()
	for _, cc := range gone {
		_ = cc.Close()
	}
}

// Close closes every connection.
func (c *Conns) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, k)
	}
	return nil
}
