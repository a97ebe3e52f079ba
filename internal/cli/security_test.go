package cli

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
)

func TestTLSCommandsBootstrapACluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if code, stdout, stderr := run(t, []string{"tls", "ca", "create", "--dir", dir, "--cluster", "prod"}); code != ExitOK || !strings.Contains(stdout, `cluster "prod"`) {
		t.Fatalf("ca create: exit %d, %q, %q", code, stdout, stderr)
	}
	for _, tc := range []struct {
		flag string
		id   pki.Identity
	}{
		{"--node", pki.Identity{Role: pki.RoleNode, Name: "n1"}},
		{"--client", pki.Identity{Role: pki.RoleClient, Name: "web"}},
		{"-operator", pki.Identity{Role: pki.RoleOperator, Name: "alice"}}, // Go-style flags still work
		{"--gateway", pki.Identity{Role: pki.RoleGateway, Name: "gw1"}},
	} {
		code, stdout, stderr := run(t, []string{"tls", "cert", "create", "--dir", dir, tc.flag, tc.id.Name})
		if code != ExitOK || !strings.Contains(stdout, tc.id.URI().String()) {
			t.Fatalf("cert create %s: exit %d, %q, %q", tc.flag, code, stdout, stderr)
		}
		src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, tc.id), Expect: tc.id})
		if err != nil {
			t.Fatal(err)
		}
		if src.Cluster() != "prod" {
			t.Fatalf("cluster %q", src.Cluster())
		}
		if fi, err := os.Stat(pki.FilesFor(dir, tc.id).Key); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v, %v", fi.Mode(), err)
		}
	}
}

func TestTLSCommandErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, []string{"tls", "ca", "create", "--dir", dir}); code != ExitOK {
		t.Fatal(stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tls", "ca", "create"}, ExitUsage, `"dir" not set`},
		{[]string{"tls", "ca", "create", "--dir", dir}, ExitFailed, "--force"},
		{[]string{"tls", "ca", "create", "--dir", t.TempDir(), "--cluster", "a b"}, ExitUsage, `--cluster "a b"`},
		{[]string{"tls", "cert", "create", "--dir", dir}, ExitUsage, "[node client operator gateway scraper]"},
		{[]string{"tls", "cert", "create", "--dir", dir, "--node", "n1", "--client", "c"}, ExitUsage, "[node client operator gateway scraper]"},
		{[]string{"tls", "cert", "create", "--dir", dir, "--node", "n/1"}, ExitUsage, `--node "n/1"`},
		{[]string{"tls", "cert", "create", "--dir", dir, "--client", "c", "--valid-for", "-1h"}, ExitUsage, "--valid-for"},
		{[]string{"tls", "cert", "create", "--dir", t.TempDir(), "--node", "n1"}, ExitFailed, "--dir"},
	} {
		code, stdout, stderr := run(t, tc.args)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want %d naming %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
	if code, _, _ := run(t, []string{"tls", "cert", "create", "--dir", dir, "--node", "n1"}); code != ExitOK {
		t.Fatal("first certificate")
	}
	if code, _, stderr := run(t, []string{"tls", "cert", "create", "--dir", dir, "--node", "n1"}); code != ExitFailed || !strings.Contains(stderr, "--force") {
		t.Fatalf("second certificate: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, []string{"tls", "cert", "create", "--dir", dir, "--node", "n1", "--force"}); code != ExitOK {
		t.Fatalf("forced: exit %d, %q", code, stderr)
	}
}

func TestKeyringCommandsRotateAKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keyring.json")
	code, stdout, _ := run(t, []string{"keyring", "generate"})
	newKey := strings.TrimSpace(stdout)
	if _, err := membership.DecodeKey(newKey); code != ExitOK || err != nil {
		t.Fatalf("generate printed %q: %v", stdout, err)
	}
	if code, _, stderr := run(t, []string{"keyring", "generate", "--file", file}); code != ExitOK {
		t.Fatal(stderr)
	}
	if code, _, stderr := run(t, []string{"keyring", "generate", "--file", file}); code != ExitFailed || !strings.Contains(stderr, "--file") {
		t.Fatalf("generate over a file: exit %d, %q", code, stderr)
	}
	list := func() []string {
		t.Helper()
		code, stdout, stderr := run(t, []string{"keyring", "list", "--file", file})
		if code != ExitOK {
			t.Fatal(stderr)
		}
		return strings.Split(strings.TrimSpace(stdout), "\n")
	}
	oldKey := strings.Fields(list()[0])[1]
	steps := []struct {
		args []string
		want []string
	}{
		{[]string{"install", "--key", newKey}, []string{"primary    " + oldKey, "secondary  " + newKey}},
		{[]string{"use", "--key", newKey}, []string{"primary    " + newKey, "secondary  " + oldKey}},
		{[]string{"remove", "--key", oldKey}, []string{"primary    " + newKey}},
	}
	for _, s := range steps {
		args := append([]string{"keyring"}, append(s.args, "--file", file)...)
		if code, _, stderr := run(t, args); code != ExitOK {
			t.Fatalf("%v: exit %d, %q", args, code, stderr)
		}
		if got := list(); !slices.Equal(got, s.want) {
			t.Fatalf("after %v: %q, want %q", s.args, got, s.want)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"keyring", "remove", "--file", file, "--key", newKey}, ExitFailed, "primary key cannot be removed"},
		{[]string{"keyring", "use", "--file", file, "--key", oldKey}, ExitFailed, "not in the keyring"},
		{[]string{"keyring", "install", "--file", file, "--key", "not-base64!"}, ExitUsage, "--key"},
		{[]string{"keyring", "install", "--file", file, "--key", "AAAA"}, ExitUsage, "--key"},
		{[]string{"keyring", "install", "--file", file}, ExitUsage, `"key" not set`},
		{[]string{"keyring", "list"}, ExitUsage, `"file" not set`},
		{[]string{"keyring", "list", "--file", filepath.Join(t.TempDir(), "none")}, ExitFailed, "--file"},
	} {
		code, _, stderr := run(t, tc.args)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("neptune %v: exit %d, stderr %q; want %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
		if strings.Contains(stderr, newKey) {
			t.Errorf("neptune %v echoed the key on stderr", tc.args)
		}
	}
}

func TestKeyFlagReadsStandardInput(t *testing.T) {
	k, _ := membership.GenerateKey()
	got, err := readKeyFlag("-", strings.NewReader(membership.EncodeKey(k)+"\n"))
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("readKeyFlag(-) = %x, %v", got, err)
	}
	if _, err := readKeyFlag("-", strings.NewReader("")); err == nil {
		t.Fatal("empty standard input accepted")
	}
}

// TestCertCreateOut: --out issues a member's certificate from a CA in a
// read-only directory (a mounted Secret) into another one, with a copy of
// ca.pem and without ca-key.pem, so that directory is a member's
// --tls-dir; --force makes issuing again (a restarted init container)
// succeed.
func TestCertCreateOut(t *testing.T) {
	caDir, out := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "tls")
	if code, _, stderr := run(t, []string{"tls", "ca", "create", "--dir", caDir, "--cluster", "k8s"}); code != ExitOK {
		t.Fatal(stderr)
	}
	if err := os.Chmod(caDir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(caDir, 0o755) })
	id := pki.Identity{Role: pki.RoleNode, Name: "neptune-0"}
	args := []string{"tls", "cert", "create", "--dir", caDir, "--out", out, "--node", id.Name}
	code, stdout, stderr := run(t, args)
	if code != ExitOK || !strings.Contains(stdout, filepath.Join(out, "ca.pem")) {
		t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
	}
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(out, id), Expect: id})
	if err != nil {
		t.Fatal(err)
	}
	if src.Cluster() != "k8s" {
		t.Fatalf("cluster %q", src.Cluster())
	}
	if _, err := os.Stat(filepath.Join(out, pki.CAKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("ca-key.pem in --out: %v", err)
	}
	entries, _ := os.ReadDir(caDir)
	if len(entries) != 2 {
		t.Fatalf("--dir changed: %v", entries)
	}
	if code, _, stderr := run(t, args); code != ExitFailed || !strings.Contains(stderr, "--force") {
		t.Fatalf("again without --force: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, append(args, "--force")); code != ExitOK {
		t.Fatalf("again with --force: exit %d, %q", code, stderr)
	}
}

// TestFlagEnvNames: the variables of a command's flags, as its help
// names them; nil for a command that does not exist.
func TestFlagEnvNames(t *testing.T) {
	node := FlagEnvNames("node")
	for _, want := range []string{"NEPTUNE_ID", "NEPTUNE_TLS_DIR", "NEPTUNE_DATA_DIR", "NEPTUNE_JOIN", "NEPTUNE_ADVERTISE"} {
		if !slices.Contains(node, want) {
			t.Errorf("node: no %s in %v", want, node)
		}
	}
	if slices.Contains(node, "NEPTUNE_HELP") || slices.Contains(node, "NEPTUNE_CERT") {
		t.Errorf("node: %v", node)
	}
	if got := FlagEnvNames("tls", "cert", "create"); !slices.Contains(got, "NEPTUNE_OUT") {
		t.Errorf("tls cert create: %v", got)
	}
	if got := FlagEnvNames("no-such"); got != nil {
		t.Errorf("no-such: %v", got)
	}
}

// TestTLSTokenCreate: a token from tls token create verifies against the
// CA as the role and name asked for; the flags' errors name them.
func TestTLSTokenCreate(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, []string{"tls", "ca", "create", "--dir", dir, "--cluster", "prod"}); code != 0 {
		t.Fatal(stderr)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag string
		want pki.Identity
	}{{"--scraper", pki.Identity{Role: pki.RoleScraper, Name: "prom"}}, {"--operator", pki.Identity{Role: pki.RoleOperator, Name: "alice"}}} {
		code, stdout, stderr := run(t, []string{"tls", "token", "create", "--dir", dir, tc.flag, tc.want.Name, "--valid-for", "1h"})
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.flag, code, stderr)
		}
		id, err := pki.VerifyToken(strings.TrimSpace(stdout), []*x509.Certificate{ca.Cert}, time.Now())
		if err != nil || id != tc.want {
			t.Errorf("%s: token names %v (%v), want %v", tc.flag, id, err, tc.want)
		}
		if _, err := pki.VerifyToken(strings.TrimSpace(stdout), []*x509.Certificate{ca.Cert}, time.Now().Add(2*time.Hour)); !errors.Is(err, pki.ErrBadToken) {
			t.Errorf("%s: a token past --valid-for verified: %v", tc.flag, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls", "token", "create", "--dir", dir}, "[operator scraper]"},
		{[]string{"tls", "token", "create", "--dir", dir, "--operator", "a", "--scraper", "b"}, "[operator scraper]"},
		{[]string{"tls", "token", "create", "--dir", dir, "--operator", "a/b"}, "--operator"},
		{[]string{"tls", "token", "create", "--dir", dir, "--operator", "a", "--valid-for", "0s"}, "--valid-for"},
		{[]string{"tls", "token", "create", "--dir", t.TempDir(), "--operator", "a"}, "ca-key.pem"},
	} {
		code, stdout, stderr := run(t, tc.args)
		if code == 0 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want a failure naming %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// TestTLSTokenRevoke: a token revoked by itself or by the id create
// printed is listed in the directory's revocation file and refused by a
// member reading it; bad arguments are usage errors.
func TestTLSTokenRevoke(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, []string{"tls", "init", "--dir", dir, "--cluster", "prod", "--nodes", "n1"}); code != 0 {
		t.Fatal(stderr)
	}
	create := func() (tok, id string) {
		t.Helper()
		code, stdout, stderr := run(t, []string{"tls", "token", "create", "--dir", dir, "--operator", "alice", "--valid-for", "1h"})
		if code != 0 {
			t.Fatal(stderr)
		}
		f := strings.Fields(stderr)
		if len(f) < 2 || f[0] != "token" || !strings.Contains(stderr, "neptune tls token revoke --dir "+dir+" "+f[1]) {
			t.Fatalf("create's stderr %q names no token id and how to revoke it", stderr)
		}
		return strings.TrimSpace(stdout), f[1]
	}
	byToken, byTokenID := create()
	_, byID := create()
	kept, _ := create()
	for _, arg := range []string{byToken, byID} {
		code, stdout, stderr := run(t, []string{"tls", "token", "revoke", "--dir", dir, arg})
		if code != 0 || !strings.HasPrefix(stdout, "revoked token ") || !strings.Contains(stderr, pki.RevokedTokensFile) {
			t.Fatalf("revoke: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	}
	if code, stdout, _ := run(t, []string{"tls", "token", "revoke", "--dir", dir, byID}); code != 0 || !strings.Contains(stdout, "revoked already") {
		t.Errorf("revoking again: exit %d, %q", code, stdout)
	}
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, pki.Identity{Role: pki.RoleNode, Name: "n1"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.VerifyToken(byToken); !errors.Is(err, pki.ErrTokenRevoked) || !strings.Contains(err.Error(), byTokenID) {
		t.Errorf("the token revoked by itself: %v", err)
	}
	if _, err := src.VerifyToken(kept); err != nil {
		t.Errorf("a token not revoked: %v", err)
	}
	rs, err := pki.ReadRevocations(filepath.Join(dir, pki.RevokedTokensFile))
	if err != nil || len(rs) != 2 || rs[0].Subject != "neptune://operator/alice" || rs[1].ID != byID {
		t.Errorf("revocation file: %+v, %v", rs, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls", "token", "revoke", "--dir", dir}, "arg"},
		{[]string{"tls", "token", "revoke", "--dir", dir, "a b"}, "token id"},
		{[]string{"tls", "token", "revoke", "--dir", dir, "x.y.z"}, "not a token"},
		{[]string{"tls", "token", "revoke", "--dir", t.TempDir(), byToken}, "ca.pem"},
	} {
		code, _, stderr := run(t, tc.args)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("neptune %v: exit %d, stderr %q; want a failure naming %q", tc.args, code, stderr, tc.want)
		}
	}
}
