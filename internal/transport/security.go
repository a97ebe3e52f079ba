package transport

import (
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// Security says how a node's gRPC server and a member's connections
// authenticate peers. Exactly one of its fields is set: TLS for mutual TLS
// with certificates from the cluster CA and the authorisation table
// (Rules), or Insecure for plaintext without either. The zero value is
// refused, so running without security is always an explicit choice.
type Security struct {
	// Insecure runs plaintext, unauthenticated gRPC: anyone who reaches
	// the port may call any method. Only when explicitly asked.
	Insecure bool
	// TLS is this member's certificate source.
	TLS *pki.Source
	// Rules replaces the authorisation table (tests); nil is Rules.
	Rules map[string]Rule
	// Refusals, if set, learns of every failed TLS handshake and every
	// call the authorisation table refuses.
	Refusals Refuser
}

// Refuser learns of each peer a member refuses (security.Refusals counts
// and logs them): reason is the metric label, source who was refused, err
// why in words.
type Refuser interface {
	Refuse(reason, source string, err error)
}

// ErrNoSecurity is returned for a Security with neither TLS nor Insecure.
var ErrNoSecurity = errors.New("transport: no TLS certificate source and Insecure not set")

func (s Security) validate() error {
	switch {
	case s.Insecure && s.TLS != nil:
		return errors.New("transport: both Insecure and a TLS certificate source set")
	case !s.Insecure && s.TLS == nil:
		return ErrNoSecurity
	}
	return nil
}

// ServerOptions are a node's gRPC server options (see the package-level
// ServerOptions) with, under TLS, the server credentials and the
// authorisation interceptors.
func (s Security) ServerOptions() ([]grpc.ServerOption, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	opts := ServerOptions()
	if s.Insecure {
		return opts, nil
	}
	rules := s.Rules
	if rules == nil {
		rules = Rules
	}
	var creds credentials.TransportCredentials = credentials.NewTLS(s.TLS.ServerConfig())
	if s.Refusals != nil {
		creds = reportingCreds{TransportCredentials: creds, refusals: s.Refusals}
	}
	return append(opts,
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(UnaryAuthorizer(rules, s.Refusals)),
		grpc.ChainStreamInterceptor(StreamAuthorizer(rules, s.Refusals)),
	), nil
}

// reportingCreds are the server's TLS credentials reporting every failed
// handshake: gRPC only logs them, at its own level, without a count.
type reportingCreds struct {
	credentials.TransportCredentials
	refusals Refuser
}

func (c reportingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		if reason := handshakeRefusal(err); reason != "" {
			c.refusals.Refuse(reason, hostOf(conn.RemoteAddr()), err)
		}
	}
	return out, info, err
}

func (c reportingCreds) Clone() credentials.TransportCredentials {
	return reportingCreds{TransportCredentials: c.TransportCredentials.Clone(), refusals: c.refusals}
}

// handshakeRefusal is the reason a server's TLS handshake failed, or ""
// when the peer only went away (a port probe, a dial given up): nobody
// was refused.
func handshakeRefusal(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, os.ErrDeadlineExceeded):
		return ""
	case errors.As(err, new(x509.UnknownAuthorityError)):
		return "tls_unknown_ca"
	case strings.Contains(msg, "didn't provide a certificate"):
		return "tls_no_certificate"
	case strings.Contains(msg, "remote error: tls:"):
		// TLS 1.3: the client verifies the server first, so a member of
		// another CA aborts before it shows its own certificate.
		return "tls_refused_by_peer"
	}
	return "tls_handshake"
}

// hostOf is addr without its port: a source's connections come from
// many ports.
func hostOf(addr net.Addr) string {
	if addr == nil {
		return "?"
	}
	if h, _, err := net.SplitHostPort(addr.String()); err == nil {
		return h
	}
	return addr.String()
}

// NewConns returns a connection cache whose connections use mutual TLS
// with this member's certificate (or plaintext if Insecure). Extra dial
// options are appended to the defaults.
func (s Security) NewConns(opts ...grpc.DialOption) (*Conns, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.Insecure {
		return NewConns(opts...), nil
	}
	// The credentials on each connection carry the node id it expects
	// (ClientFor); this placeholder is replaced there.
	return &Conns{
		conns: map[connKey]*grpc.ClientConn{},
		opts:  append(dialDefaults(grpc.WithTransportCredentials(credentials.NewTLS(s.TLS.ClientConfig("")))), opts...),
		tls:   s.TLS,
	}, nil
}
