package transport

import (
	"errors"

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
	return append(opts,
		grpc.Creds(credentials.NewTLS(s.TLS.ServerConfig())),
		grpc.ChainUnaryInterceptor(UnaryAuthorizer(rules)),
		grpc.ChainStreamInterceptor(StreamAuthorizer(rules)),
	), nil
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
