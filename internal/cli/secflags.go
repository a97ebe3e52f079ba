package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/security"
)

// SecurityConfig is the config file's `security:` block: the node's
// certificate directory and gossip keyring, or an explicit insecure.
type SecurityConfig struct {
	// Insecure runs without any protection (and the node says so in its
	// log); the only way to run without tls_dir.
	Insecure bool `yaml:"insecure"`
	// TLSDir holds ca.pem and node-<id>.pem / node-<id>-key.pem.
	TLSDir string `yaml:"tls_dir"`
	// Keyring is the gossip keyring file (default tls_dir/keyring.json),
	// watched for changes.
	Keyring string `yaml:"keyring"`
	// Cluster is the cluster's name: the gossip label and, for a node,
	// the name its data directory records; it must match the CA's
	// (default: the cluster the CA names).
	Cluster string `yaml:"cluster"`
}

// toSecurity converts the block for a node, naming the YAML keys (and
// flags) in errors.
func (s SecurityConfig) toSecurity() (neptune.Security, error) {
	switch {
	case s.Insecure && (s.TLSDir != "" || s.Keyring != ""):
		return neptune.Security{}, fmt.Errorf("config: security.insecure (--insecure) together with security.tls_dir or security.keyring (--tls-dir, --keyring): choose one")
	case !s.Insecure && s.TLSDir == "":
		return neptune.Security{}, fmt.Errorf("config: security.tls_dir (--tls-dir) is required: the directory with ca.pem and this node's certificate (neptune tls ca create, neptune tls cert create); or run without protection with security.insecure: true (--insecure)")
	}
	return neptune.Security{Insecure: s.Insecure, Dir: s.TLSDir, KeyringFile: s.Keyring, Cluster: s.Cluster}, nil
}

// securityFlags are the security flags of every command that joins a
// cluster.
type securityFlags struct {
	dir, keyring, cluster, cert string
	insecure                    bool
}

// add registers the flags; cert is the default of --cert, "" for a node
// (which presents its own certificate and has no --cert).
func (o *securityFlags) add(fs *pflag.FlagSet, cert, what string) {
	fs.StringVar(&o.dir, "tls-dir", "", "`directory` with ca.pem and "+what+"'s certificate and key (config: security.tls_dir)")
	fs.StringVar(&o.keyring, "keyring", "", "gossip keyring `file`, watched for changes; default <tls-dir>/"+security.KeyringFileName+" (config: security.keyring)")
	fs.StringVar(&o.cluster, "cluster", "", "cluster `name` (gossip label; a node's data directory records it); must match the CA's, default the one it records (config: security.cluster)")
	if cert != "" {
		fs.StringVar(&o.cert, "cert", cert, "certificate to present, as `role/name` (files <role>-<name>.pem in --tls-dir)")
	}
	fs.BoolVar(&o.insecure, "insecure", false, "run without TLS, gossip keys or poll authentication: anyone on the network may join and call (config: security.insecure)")
}

// apply overrides sc's keys with the flags set on the command line.
func (o *securityFlags) apply(fs *pflag.FlagSet, sc *SecurityConfig) {
	if fs.Changed("tls-dir") {
		sc.TLSDir = o.dir
	}
	if fs.Changed("keyring") {
		sc.Keyring = o.keyring
	}
	if fs.Changed("cluster") {
		sc.Cluster = o.cluster
	}
	if fs.Changed("insecure") {
		sc.Insecure = o.insecure
	}
}

// client is the security of a client command.
func (o *securityFlags) client() (neptune.Security, error) {
	switch {
	case o.insecure && o.dir != "":
		return neptune.Security{}, Usagef("--insecure and --tls-dir: choose one")
	case o.insecure:
		return neptune.Security{Insecure: true}, nil
	case o.dir == "":
		return neptune.Security{}, Usagef("--tls-dir is required (the directory with ca.pem and your %s certificate), or --insecure for a cluster running without protection", o.cert)
	}
	return neptune.Security{Dir: o.dir, Cert: o.cert, KeyringFile: o.keyring, Cluster: o.cluster}, nil
}

// dialAndListen joins the cluster as a client with these credentials and
// listens to announcements for wait, so the yellow pages are filled before
// an operator's command looks up a partition.
func (o *securityFlags) dialAndListen(ctx context.Context, join []string, wait time.Duration) (*neptune.Client, error) {
	sec, err := o.client()
	if err != nil {
		return nil, err
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join, Security: sec})
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, wait); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
