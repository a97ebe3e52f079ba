package cli

import (
	"bufio"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
)

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create the cluster CA and certificates for nodes, clients, operators and gateways",
		Long: `Create the cluster's certificate authority and the certificates it issues.

Every node, client, operator and gateway holds a certificate signed by the
cluster CA. The certificate names its holder as a URI, neptune://<role>/<name>:
neptune://node/n1 for node n1, neptune://client/web for a client,
neptune://operator/alice for an operator, neptune://gateway/gw1 for a
gateway. Nodes accept calls from every role, replication only from nodes
(and only for the node the certificate names), and promote only from
operators; gateways accept demand gossip only from gateway certificates.

Files (PEM; private keys are written with mode 0600):
  ca.pem, ca-key.pem                 the CA; keep ca-key.pem off the nodes
  node-<id>.pem, node-<id>-key.pem   a node's certificate and key
  client-<name>.pem …                a client's
  operator-<name>.pem …              an operator's
  gateway-<name>.pem …               a gateway's
  scraper-<name>.pem …               a scraper's (it may only read /metrics)
  revoked-tokens                     bearer tokens revoked early (tls token revoke)
Every member also needs ca.pem. Nodes re-read their files when they
change, so a certificate is renewed by writing new files in place.`,
		Example: `  neptune tls ca create --dir pki --cluster prod
  neptune tls cert create --dir pki --node n1
  neptune tls cert create --dir pki --operator alice`,
	}
	ca := &cobra.Command{Use: "ca", Short: "Manage the cluster CA"}
	ca.AddCommand(newCACreateCmd())
	cert := &cobra.Command{Use: "cert", Short: "Manage member certificates"}
	cert.AddCommand(newCertCreateCmd())
	token := &cobra.Command{Use: "token", Short: "Issue and revoke bearer tokens for the HTTP listeners (dashboard, /metrics)"}
	token.AddCommand(newTokenCreateCmd(), newTokenRevokeCmd())
	cmd.AddCommand(ca, cert, token, newTLSInitCmd())
	return cmd
}

func newCACreateCmd() *cobra.Command {
	var (
		dir, cluster string
		validFor     time.Duration
		force        bool
	)
	cmd := &cobra.Command{
		Use:   "create --dir D [--cluster NAME]",
		Short: "Create a cluster CA (ca.pem, ca-key.pem) in a directory",
		Long: `Create a cluster CA: a fresh ECDSA P-256 key and a self-signed certificate
recording the cluster name, written to ca.pem and ca-key.pem (mode 0600)
in --dir. The cluster name is also the gossip label, so two clusters on
one network never merge. An existing CA is never replaced without --force:
replacing it means issuing every certificate again.`,
		Example: "  neptune tls ca create --dir pki --cluster prod",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if validFor <= 0 {
				return Usagef("--valid-for must be > 0, got %v", validFor)
			}
			if err := pki.ValidateName(cluster); err != nil {
				return Usagef("--cluster %q: %v", cluster, err)
			}
			ca, err := pki.CreateCA(dir, cluster, force, pki.CAOptions{ValidFor: validFor})
			if errors.Is(err, pki.ErrExists) {
				return fmt.Errorf("%w; pass --force to replace the CA (every certificate must then be issued again)", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created CA for cluster %q in %s (valid until %s)\n", ca.Cluster(), dir, ca.Cert.NotAfter.Format(time.DateOnly))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&dir, "dir", "", "`directory` to write ca.pem and ca-key.pem into (required)")
	fs.StringVar(&cluster, "cluster", "neptune", "cluster `name`, also the gossip label")
	fs.DurationVar(&validFor, "valid-for", pki.DefaultCAValidity, "how long the CA is valid")
	fs.BoolVar(&force, "force", false, "replace an existing CA")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func newCertCreateCmd() *cobra.Command {
	var (
		dir, out               string
		node, client, operator string
		gatewayName, scraper   string
		hosts                  []string
		validFor               time.Duration
		force                  bool
	)
	cmd := &cobra.Command{
		Use:   "create --dir D (--node ID | --client NAME | --operator NAME | --gateway NAME | --scraper NAME)",
		Short: "Issue a node, client, operator, gateway or scraper certificate signed by the CA in a directory",
		Long: `Issue a certificate signed by the CA in --dir (ca.pem, ca-key.pem) and
write it and its key (mode 0600) into --dir: node-<id>.pem and
node-<id>-key.pem for --node, client-<name>… for --client,
operator-<name>… for --operator, gateway-<name>… for --gateway.

--out writes them into another directory instead, with a copy of the
CA's ca.pem, so that directory is all a member needs (never ca-key.pem)
and --dir may be read-only: a Kubernetes init container issues its pod's
certificate from the CA mounted from a Secret into an emptyDir.

A node's certificate names its node id: the node must run with that
--id, and its peers check the id when they dial it and when it sends
replication messages or announcements. A gateway's certificate names
the gateway: it may only call services, and the other gateways accept
its demand datagrams only under that name. A scraper's may only read the
members' /metrics over HTTPS. Names use letters, digits and
. _ - ~ : @.`,
		Example: `  neptune tls cert create --dir pki --node n1
  neptune tls cert create --dir pki --client web
  neptune tls cert create --dir pki --gateway gw1
  neptune tls cert create --dir pki --node n2 --host n2.example.net,10.0.0.2
  neptune tls cert create --dir /etc/neptune/ca --out /var/run/neptune/tls --node n3 --force`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var id pki.Identity
			var flag string
			switch {
			case node != "":
				id, flag = pki.Identity{Role: pki.RoleNode, Name: node}, "--node"
			case client != "":
				id, flag = pki.Identity{Role: pki.RoleClient, Name: client}, "--client"
			case gatewayName != "":
				id, flag = pki.Identity{Role: pki.RoleGateway, Name: gatewayName}, "--gateway"
			case scraper != "":
				id, flag = pki.Identity{Role: pki.RoleScraper, Name: scraper}, "--scraper"
			default:
				id, flag = pki.Identity{Role: pki.RoleOperator, Name: operator}, "--operator"
			}
			if err := pki.ValidateName(id.Name); err != nil {
				return Usagef("%s %q: %v", flag, id.Name, err)
			}
			if validFor <= 0 {
				return Usagef("--valid-for must be > 0, got %v", validFor)
			}
			ca, err := pki.LoadCA(dir)
			if err != nil {
				return fmt.Errorf("--dir %s: %w (create the CA with 'neptune tls ca create --dir %s')", dir, err, dir)
			}
			dest := dir
			if out != "" {
				dest = out
			}
			f, err := ca.IssueFiles(dest, id, force, pki.IssueOptions{ValidFor: validFor, Hosts: hosts})
			if errors.Is(err, pki.ErrExists) {
				return fmt.Errorf("%w; pass --force to replace the certificate", err)
			}
			if err != nil {
				return err
			}
			if err := copyCACert(dir, dest); err != nil {
				return fmt.Errorf("--out %s: %w", dest, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued %s of cluster %q:\n  certificate %s\n  key         %s\n  CA          %s\n", id.URI(), ca.Cluster(), f.Cert, f.Key, f.CA)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&dir, "dir", "", "`directory` holding the CA; the certificate is written there unless --out is given (required)")
	fs.StringVar(&out, "out", "", "`directory` to write the certificate, its key and a copy of ca.pem into instead of --dir (--dir may then be read-only)")
	fs.StringVar(&node, "node", "", "issue a node certificate for node `id`")
	fs.StringVar(&client, "client", "", "issue a client certificate for `name`")
	fs.StringVar(&operator, "operator", "", "issue an operator certificate for `name`")
	fs.StringVar(&gatewayName, "gateway", "", "issue a gateway certificate for gateway `name` (its config's name:)")
	fs.StringVar(&scraper, "scraper", "", "issue a scraper certificate for `name`: it may only read /metrics (a Prometheus server)")
	fs.StringSliceVar(&hosts, "host", nil, "extra DNS `names` or IP addresses for tools that check host names; list")
	fs.DurationVar(&validFor, "valid-for", pki.DefaultCertValidity, "how long the certificate is valid (never beyond the CA)")
	fs.BoolVar(&force, "force", false, "replace existing files")
	_ = cmd.MarkFlagRequired("dir")
	cmd.MarkFlagsOneRequired("node", "client", "operator", "gateway", "scraper")
	cmd.MarkFlagsMutuallyExclusive("node", "client", "operator", "gateway", "scraper")
	return cmd
}

// copyCACert copies ca.pem (every CA certificate it holds, as a cluster
// moving to a new CA trusts both) from the CA's directory into dest, so
// dest holds what a member reads; nothing is done when they are one.
func copyCACert(caDir, dest string) error {
	from, to := filepath.Join(caDir, pki.CACertFile), filepath.Join(dest, pki.CACertFile)
	if filepath.Clean(from) == filepath.Clean(to) {
		return nil
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(to, b, 0o644)
}

const keyringLong = `Manage a gossip keyring file: a JSON list of base64 keys, the primary
first (the one members send with; every listed key is accepted). The
same keys authenticate load polls. Files are written with mode 0600.

Rotating the key of a live cluster goes through each member's file
(nodes, gateways and long-running clients each read their own) in three
rounds; finish a round on every member before starting the next:
  1. install the new key         neptune keyring install --file F --key NEW
  2. make it the primary         neptune keyring use --file F --key NEW
  3. remove the old key          neptune keyring remove --file F --key OLD
A running member checks its file every 5 seconds and applies a change
without a restart (it logs "keyring reloaded"; a file that does not
parse is logged and the keys in use are kept), so wait that long after
the last file of a round. At every step each member accepts the key the
others send with, so no gossip, poll or gateway datagram is lost.`

func newKeyringCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keyring",
		Short: "Generate gossip keys and manage keyring files",
		Long:  keyringLong,
		Example: `  neptune keyring generate --file keyring.json
  neptune keyring list --file keyring.json`,
	}
	cmd.AddCommand(newKeyringGenerateCmd(), newKeyringListCmd(),
		newKeyringEditCmd("install", "Add a key to a keyring file (accepted, not yet sent with)",
			`Add --key to the keyring file as a secondary key: accepted from others,
not yet used to send. A missing file is created with the key as its
primary. Installing a key already there changes nothing.`, membership.InstallKey),
		newKeyringEditCmd("use", "Make an installed key the primary (the key members send with)",
			`Make --key, already installed, the keyring's primary: the key this member
sends with. Install it on every node first.`, membership.UseKey),
		newKeyringEditCmd("remove", "Remove a secondary key from a keyring file",
			`Remove --key from the keyring file. The primary cannot be removed; use
another key first, on every node.`, membership.RemoveKey),
	)
	return cmd
}

func newKeyringGenerateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "generate [--file F]",
		Short: "Print a new random gossip key, or create a keyring file with one",
		Long: `Print a new random 32-byte gossip key (base64). With --file, create that
keyring file holding the key as its primary instead; an existing file is
never replaced (use 'keyring install' to add the key to it).`,
		Example: `  neptune keyring generate
  neptune keyring generate --file keyring.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				k, err := membership.GenerateKey()
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), membership.EncodeKey(k))
				return nil
			}
			if _, err := membership.CreateKeyringFile(file); err != nil {
				if errors.Is(err, membership.ErrKeyringExists) {
					return fmt.Errorf("--file: %w; add a key with 'neptune keyring install'", err)
				}
				return fmt.Errorf("--file: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created keyring %s with a new primary key\n", file)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "keyring `file` to create")
	return cmd
}

func newKeyringListCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "list --file F",
		Short: "List the keys of a keyring file, the primary first",
		Long: `List the keys of a keyring file, the primary first. Keys are secrets:
the output is for copying a key to another node's keyring.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := membership.ReadKeyringFile(file)
			if err != nil {
				return fmt.Errorf("--file: %w", err)
			}
			for i, k := range keys {
				role := "secondary"
				if i == 0 {
					role = "primary"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-9s  %s\n", role, membership.EncodeKey(k))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "keyring `file` (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// newKeyringEditCmd builds install, use and remove: each changes a
// keyring file with one key.
func newKeyringEditCmd(name, short, long string, edit func(path string, key []byte) error) *cobra.Command {
	var file, key string
	cmd := &cobra.Command{
		Use:     name + " --file F --key KEY",
		Short:   short,
		Long:    long + "\n\n--key - reads the key from standard input, so it stays out of the shell's\nhistory and the process list.",
		Example: "  neptune keyring " + name + " --file keyring.json --key \"$(cat new.key)\"",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := readKeyFlag(key, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if err := edit(file, k); err != nil {
				return fmt.Errorf("--file %s: %w", file, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: done in %s\n", name, file)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&file, "file", "", "keyring `file` (required)")
	fs.StringVar(&key, "key", "", "the `key` in base64, or - to read it from standard input (required)")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// readKeyFlag decodes --key, reading the first line of stdin for "-".
// A bad key is a usage error naming the flag; the key itself is never
// echoed.
func readKeyFlag(value string, stdin io.Reader) ([]byte, error) {
	if value == "-" {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("--key -: read standard input: %w", err)
		}
		value = strings.TrimSpace(line)
	}
	k, err := membership.DecodeKey(value)
	if err != nil {
		return nil, Usagef("--key: %v", err)
	}
	return k, nil
}

func newTokenCreateCmd() *cobra.Command {
	var (
		dir, operator, scraper string
		validFor               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --dir D (--operator NAME | --scraper NAME) [--valid-for 24h]",
		Short: "Issue a bearer token for the dashboard (operator) or /metrics (scraper), signed by the CA in a directory",
		Long: `Print a bearer token signed with the CA's key in --dir (ca-key.pem): a JWT
naming neptune://operator/<name> or neptune://scraper/<name> and the
cluster. On a secured cluster the members' HTTP listeners (dashboard, its
JSON, /metrics) are HTTPS and want an identity: a client certificate, or
this token in an "Authorization: Bearer" header (a Prometheus server's
authorization: credentials_file, curl -H). An operator's token opens the
dashboard and /metrics, a scraper's only /metrics. Members verify it with
the CA certificate they already hold. The token's id goes to standard
error: "neptune tls token revoke" revokes the token by it (or by the
token itself) before it expires; still, keep --valid-for short.`,
		Example: `  neptune tls token create --dir pki --operator alice --valid-for 8h
  curl --cacert pki/ca.pem -H "Authorization: Bearer $(neptune tls token create --dir pki --scraper prom)" https://n1.example.net:9100/metrics`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, flag := pki.Identity{Role: pki.RoleOperator, Name: operator}, "--operator"
			if scraper != "" {
				id, flag = pki.Identity{Role: pki.RoleScraper, Name: scraper}, "--scraper"
			}
			if err := pki.ValidateName(id.Name); err != nil {
				return Usagef("%s %q: %v", flag, id.Name, err)
			}
			if validFor <= 0 {
				return Usagef("--valid-for must be > 0, got %v", validFor)
			}
			ca, err := pki.LoadCA(dir)
			if err != nil {
				return fmt.Errorf("--dir %s: %w (tokens are signed with the CA's key, ca-key.pem)", dir, err)
			}
			tok, err := ca.IssueToken(id, validFor, time.Now())
			if err != nil {
				return err
			}
			t, err := pki.InspectToken(tok, []*x509.Certificate{ca.Cert})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s for %s, expires %s (revoke: neptune tls token revoke --dir %s %s)\n",
				t.ID, t.Identity, t.Expires.UTC().Format(time.RFC3339), dir, t.ID)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&dir, "dir", "", "`directory` holding the CA (ca.pem, ca-key.pem) (required)")
	fs.StringVar(&operator, "operator", "", "issue an operator token for `name`: dashboard and /metrics")
	fs.StringVar(&scraper, "scraper", "", "issue a scraper token for `name`: /metrics only")
	fs.DurationVar(&validFor, "valid-for", pki.DefaultTokenValidity, "how long the token is valid (never beyond the CA)")
	_ = cmd.MarkFlagRequired("dir")
	cmd.MarkFlagsOneRequired("operator", "scraper")
	cmd.MarkFlagsMutuallyExclusive("operator", "scraper")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "revoke --dir D (ID | TOKEN)...",
		Short: "Revoke bearer tokens before they expire",
		Long: `Add tokens to the revocation file of a TLS directory, --dir/revoked-tokens,
by their id (what "tls token create" prints on standard error) or by the
token itself (verified against --dir/ca.pem, expired or not). Copy the
file to every member's TLS directory, as you copy certificates: members
re-read it when it changes (within 10 s, no restart) and answer a revoked
token with 401 saying it was revoked. Lines of tokens that have expired
are dropped as the file is rewritten; a token revoked by its id alone
stays listed.`,
		Example: `  neptune tls token revoke --dir pki 3f9a0c…
  neptune tls token revoke --dir pki "$(cat prom.token)"
  for n in n1 n2 n3; do scp pki/revoked-tokens $n:/etc/neptune/tls/; done`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			path := filepath.Join(dir, pki.RevokedTokensFile)
			var cas []*x509.Certificate
			for _, arg := range args {
				r := pki.Revocation{ID: arg, Revoked: now}
				if strings.Count(arg, ".") == 2 { // a JWT: header.claims.signature
					if cas == nil {
						b, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
						if err != nil {
							return fmt.Errorf("--dir %s: %w (a token is checked against the CA certificate before it is revoked)", dir, err)
						}
						if cas, err = pki.ParseCerts(b); err != nil {
							return fmt.Errorf("--dir %s: %s: %w", dir, pki.CACertFile, err)
						}
					}
					t, err := pki.InspectToken(arg, cas)
					if err != nil {
						return Usagef("a token this CA did not sign, or not a token: %v", err)
					}
					if t.ID == "" {
						return fmt.Errorf("the token of %s was issued before tokens carried an id and cannot be revoked; it expires %s (or replace the CA)",
							t.Identity, t.Expires.UTC().Format(time.RFC3339))
					}
					r = pki.Revocation{ID: t.ID, Subject: t.Identity.URI().String(), Expires: t.Expires, Revoked: now}
				} else if err := pki.ValidateTokenID(arg); err != nil {
					return Usagef("%v", err)
				}
				added, err := pki.Revoke(path, r, now)
				if err != nil {
					return err
				}
				what := "token " + r.ID
				if r.Subject != "" {
					what += " of " + r.Subject
				}
				if added {
					fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", what)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "%s was revoked already\n", what)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "copy %s to every member's TLS directory; members re-read it when it changes\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the TLS `directory` (ca.pem; its revoked-tokens file is written) (required)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}
