package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/pki"
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
	fs                          *pflag.FlagSet // says whether --cert was given
}

// add registers the flags; cert is the default of --cert, "" for a node
// (which presents its own certificate and has no --cert).
func (o *securityFlags) add(fs *pflag.FlagSet, cert, what string) {
	o.fs = fs
	fs.StringVar(&o.dir, "tls-dir", "", "`directory` with ca.pem and "+what+"'s certificate and key (config: security.tls_dir)")
	fs.StringVar(&o.keyring, "keyring", "", "gossip keyring `file`, watched for changes; default <tls-dir>/"+security.KeyringFileName+" (config: security.keyring)")
	fs.StringVar(&o.cluster, "cluster", "", "cluster `name` (gossip label; a node's data directory records it); must match the CA's, default the one it records (config: security.cluster)")
	if cert != "" {
		role, _, _ := strings.Cut(cert, "/")
		fs.StringVar(&o.cert, "cert", cert, "certificate to present, as `role/name` (files <role>-<name>.pem in --tls-dir); by default "+cert+", or the only "+role+" certificate in --tls-dir")
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

// clientFiles is client, for a command about to load the files: it
// checks them first (see checkFiles), and picks the certificate --cert
// defaults to.
func (o *securityFlags) clientFiles() (neptune.Security, error) {
	sec, err := o.client()
	if err != nil || sec.Insecure {
		return sec, err
	}
	if err := o.checkFiles(); err != nil {
		return neptune.Security{}, err
	}
	sec.Cert = o.cert
	return sec, nil
}

// checkFiles checks that --tls-dir holds the CA and the certificate
// --cert names before the client loads them, so a missing file is
// reported with the flag to fix. Without --cert, the only certificate of
// the default's role in the directory is presented (the quick start
// issues client/web, not the default client/client).
func (o *securityFlags) checkFiles() error {
	if _, err := os.Stat(filepath.Join(o.dir, "ca.pem")); err != nil {
		return fmt.Errorf("--tls-dir %s: no ca.pem there (%v): give the directory with the cluster's ca.pem and your certificate (neptune tls ca create, neptune tls cert create)", o.dir, err)
	}
	role, name, ok := strings.Cut(o.cert, "/")
	if !ok || role == "" || name == "" {
		return Usagef("--cert %q: want role/name, e.g. client/web or operator/alice", o.cert)
	}
	if _, err := os.Stat(filepath.Join(o.dir, role+"-"+name+".pem")); err == nil {
		return nil
	}
	have := certNames(o.dir, role)
	given := o.fs != nil && o.fs.Changed("cert")
	if !given && len(have) == 1 {
		o.cert = role + "/" + have[0]
		return nil
	}
	there := role + "/" + strings.Join(have, ", "+role+"/")
	switch {
	case given:
		if len(have) == 0 {
			there = "none"
		}
		return fmt.Errorf("--cert %s: no %s-%s.pem in --tls-dir %s (%s certificates there: %s): issue it with neptune tls cert create --dir %s --%s %s, or name another with --cert",
			o.cert, role, name, o.dir, role, there, o.dir, role, name)
	case len(have) == 0:
		return fmt.Errorf("--tls-dir %s holds no %s certificate (the default --cert is %s): issue one with neptune tls cert create --dir %s --%s NAME, or name the certificate to present with --cert ROLE/NAME",
			o.dir, role, o.cert, o.dir, role)
	}
	return fmt.Errorf("--tls-dir %s holds several %s certificates (%s) and no %s-%s.pem: choose one with --cert, e.g. --cert %s/%s",
		o.dir, role, there, role, name, role, have[0])
}

// certNames lists the names of dir's certificates of role, sorted.
func certNames(dir, role string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, role+"-*.pem"))
	var names []string
	for _, f := range files {
		n := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), role+"-"), ".pem")
		if !strings.HasSuffix(n, "-key") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// dialAndListen joins the cluster as a client with these credentials and
// listens to announcements for wait, so the yellow pages are filled before
// an operator's command looks up a partition.
func (o *securityFlags) dialAndListen(ctx context.Context, join []string, wait time.Duration) (*neptune.Client, error) {
	sec, err := o.clientFiles()
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

// httpClient is the client of a command that reads a member's HTTP
// listener (neptune top) and the scheme to use: over HTTPS presenting
// --cert from --tls-dir on a secured cluster, plain HTTP with --insecure
// or when no --tls-dir is given.
func (o *securityFlags) httpClient() (*http.Client, string, error) {
	if o.insecure || o.dir == "" {
		return &http.Client{Timeout: 5 * time.Second}, "http", nil
	}
	sec, err := o.clientFiles()
	if err != nil {
		return nil, "", err
	}
	role, name, _ := strings.Cut(sec.Cert, "/")
	id := pki.Identity{Role: pki.Role(role), Name: name}
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(sec.Dir, id), Expect: id})
	if err != nil {
		return nil, "", fmt.Errorf("--tls-dir %s, --cert %s: %w", sec.Dir, sec.Cert, err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: src.HTTPSClientConfig()}}, "https", nil
}
