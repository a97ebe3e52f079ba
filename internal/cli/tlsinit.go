package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
)

const tlsInitLong = `Create, in --dir, whatever of a cluster's material is missing and keep
what exists: the CA (ca.pem, ca-key.pem), the gossip keyring
(keyring.json, or --keyring) and a certificate for each node, gateway,
client, operator and scraper named. Running it again changes nothing; running it
with one more name issues only that certificate. It is what a container's
init step runs before the nodes start (deploy/compose.yaml), where there
is no shell to test for files.

It never replaces anything: an existing CA of another cluster name, a
certificate the CA in --dir did not issue, or half a pair (a certificate
without its key, a key without its certificate) is an error naming the
file, and nothing is written. Use 'neptune tls ca create --force' and
'neptune tls cert create --force' to replace material on purpose.`

func newTLSInitCmd() *cobra.Command {
	var (
		dir, cluster, keyring               string
		nodes, gateways, clients, operators []string
		scrapers                            []string
	)
	cmd := &cobra.Command{
		Use:   "init --dir D [--cluster NAME] [--nodes n1,n2] [--gateways g] [--clients c] [--operators o] [--scrapers s]",
		Short: "Create the missing CA, keyring and certificates in a directory, keeping what exists",
		Long:  tlsInitLong,
		Example: `  neptune tls init --dir pki --cluster prod --nodes n1,n2,n3 --gateways gateway --clients client --operators operator
  NEPTUNE_DIR=/pki NEPTUNE_NODES=n1,n2,n3 neptune tls init`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pki.ValidateName(cluster); err != nil {
				return Usagef("--cluster %q: %v", cluster, err)
			}
			var ids []pki.Identity
			for _, g := range []struct {
				flag  string
				role  pki.Role
				names []string
			}{{"--nodes", pki.RoleNode, nodes}, {"--gateways", pki.RoleGateway, gateways}, {"--clients", pki.RoleClient, clients}, {"--operators", pki.RoleOperator, operators}, {"--scrapers", pki.RoleScraper, scrapers}} {
				for _, n := range g.names {
					if err := pki.ValidateName(n); err != nil {
						return Usagef("%s %q: %v", g.flag, n, err)
					}
					ids = append(ids, pki.Identity{Role: g.role, Name: n})
				}
			}
			if keyring == "" {
				keyring = filepath.Join(dir, "keyring.json")
			}
			return tlsInit(cmd.OutOrStdout(), dir, cluster, keyring, ids)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&dir, "dir", "", "`directory` for the CA, keyring and certificates; created if missing (required)")
	fs.StringVar(&cluster, "cluster", "neptune", "cluster `name` of a new CA; an existing CA must record the same")
	fs.StringVar(&keyring, "keyring", "", "gossip keyring `file` (default <dir>/keyring.json)")
	fs.StringSliceVar(&nodes, "nodes", nil, "node `ids` to issue certificates for; list")
	fs.StringSliceVar(&gateways, "gateways", nil, "gateway `names`; list")
	fs.StringSliceVar(&clients, "clients", nil, "client `names`; list")
	fs.StringSliceVar(&operators, "operators", nil, "operator `names`; list")
	fs.StringSliceVar(&scrapers, "scrapers", nil, "scraper `names` (a Prometheus server: it may only read /metrics); list")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// tlsInit checks everything that exists first and writes only when all
// of it is consistent, so a refused run leaves the directory as it was.
func tlsInit(w io.Writer, dir, cluster, keyringFile string, ids []pki.Identity) error {
	caCert, caKey := filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile)
	if err := errors.Join(exists(caCert), exists(caKey)); err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	if present(caCert) != present(caKey) {
		return fmt.Errorf("--dir %s: only one of %s and %s exists; restore the other, or remove both to create a new CA", dir, pki.CACertFile, pki.CAKeyFile)
	}
	var ca *pki.CA
	if present(caCert) {
		var err error
		if ca, err = pki.LoadCA(dir); err != nil {
			return fmt.Errorf("--dir %s: %w", dir, err)
		}
		if ca.Cluster() != cluster {
			return fmt.Errorf("--cluster %q: the CA in %s is of cluster %q; pass --cluster %s (init never replaces a CA)", cluster, dir, ca.Cluster(), ca.Cluster())
		}
	}
	var missing []pki.Identity
	for _, id := range ids {
		f := pki.FilesFor(dir, id)
		hasCert, hasKey := present(f.Cert), present(f.Key)
		switch {
		case hasCert != hasKey:
			return fmt.Errorf("%s: only one of %s and %s exists; remove it or issue it again with 'neptune tls cert create --force'", id, f.Cert, f.Key)
		case !hasCert:
			missing = append(missing, id)
		case ca == nil:
			return fmt.Errorf("%s: %s exists but the CA does not; it cannot be verified, so init will not create a CA beside it: remove it or restore the CA", id, f.Cert)
		default:
			if err := issuedBy(ca, f.Cert); err != nil {
				return fmt.Errorf("%s: %s: %w; issue it again with 'neptune tls cert create --force'", id, f.Cert, err)
			}
		}
	}
	if ca == nil {
		var err error
		if ca, err = pki.CreateCA(dir, cluster, false, pki.CAOptions{}); err != nil {
			return err
		}
		fmt.Fprintf(w, "created CA for cluster %q in %s (valid until %s)\n", cluster, dir, ca.Cert.NotAfter.Format(time.DateOnly))
	} else {
		fmt.Fprintf(w, "kept    CA for cluster %q in %s\n", ca.Cluster(), dir)
	}
	if present(keyringFile) {
		if _, err := membership.ReadKeyringFile(keyringFile); err != nil {
			return fmt.Errorf("--keyring %s: %w", keyringFile, err)
		}
		fmt.Fprintf(w, "kept    keyring %s\n", keyringFile)
	} else {
		if err := os.MkdirAll(filepath.Dir(keyringFile), 0o755); err != nil {
			return fmt.Errorf("--keyring: %w", err)
		}
		if _, err := membership.CreateKeyringFile(keyringFile); err != nil {
			return fmt.Errorf("--keyring: %w", err)
		}
		fmt.Fprintf(w, "created keyring %s\n", keyringFile)
	}
	for _, id := range ids {
		if !slices.Contains(missing, id) {
			fmt.Fprintf(w, "kept    %s\n", id.URI())
			continue
		}
		if _, err := ca.IssueFiles(dir, id, false, pki.IssueOptions{}); err != nil {
			return err
		}
		fmt.Fprintf(w, "issued  %s\n", id.URI())
	}
	return nil
}

// exists reports an error other than "does not exist" for path.
func exists(path string) error {
	if _, err := os.Lstat(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func present(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// issuedBy checks that the certificate file was signed by ca.
func issuedBy(ca *pki.CA, certFile string) error {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	certs, err := pki.ParseCerts(b)
	if err != nil {
		return err
	}
	if err := certs[0].CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("not issued by the CA in this directory (%v)", err)
	}
	return nil
}
