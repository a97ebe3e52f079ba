package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
)

// snapshot reads every file of dir by name.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func TestTLSInitCreatesWhatIsMissingAndKeepsWhatExists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	args := []string{"tls", "init", "--dir", dir, "--cluster", "demo", "--nodes", "n1,n2,n3", "--gateways", "gateway", "--clients", "client", "--operators", "operator"}
	code, stdout, stderr := run(t, args)
	if code != ExitOK || !strings.Contains(stdout, `created CA for cluster "demo"`) || strings.Count(stdout, "issued") != 6 {
		t.Fatalf("first init: exit %d, %q, %q", code, stdout, stderr)
	}
	for _, id := range []pki.Identity{{Role: pki.RoleNode, Name: "n1"}, {Role: pki.RoleNode, Name: "n3"}, {Role: pki.RoleGateway, Name: "gateway"},
		{Role: pki.RoleClient, Name: "client"}, {Role: pki.RoleOperator, Name: "operator"}} {
		src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, id), Expect: id})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if src.Cluster() != "demo" {
			t.Fatalf("%s: cluster %q", id, src.Cluster())
		}
	}
	if keys, err := membership.ReadKeyringFile(filepath.Join(dir, "keyring.json")); err != nil || len(keys) != 1 {
		t.Fatalf("keyring: %d keys, %v", len(keys), err)
	}
	before := snapshot(t, dir)

	// Again: nothing changes, and it says so.
	code, stdout, stderr = run(t, args)
	if code != ExitOK || strings.Contains(stdout, "created") || strings.Contains(stdout, "issued") || strings.Count(stdout, "kept") != 8 {
		t.Fatalf("second init: exit %d, %q, %q", code, stdout, stderr)
	}
	after := snapshot(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files %d, then %d", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("%s changed on the second init", name)
		}
	}

	// One more node, and a lost certificate: only those are issued.
	if err := os.Remove(filepath.Join(dir, "client-client.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "client-client-key.pem")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run(t, append(args, "--nodes", "n4"))
	if code != ExitOK || strings.Count(stdout, "issued") != 2 || !strings.Contains(stdout, "issued  neptune://node/n4") || !strings.Contains(stdout, "issued  neptune://client/client") {
		t.Fatalf("third init: exit %d, %q, %q", code, stdout, stderr)
	}
	if !bytes.Equal(snapshot(t, dir)["ca.pem"], before["ca.pem"]) {
		t.Fatal("the CA changed")
	}
}

func TestTLSInitRefusesWhatItWouldHaveToReplace(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, []string{"tls", "init", "--dir", dir, "--cluster", "demo", "--nodes", "n1"}); code != ExitOK {
		t.Fatal(stderr)
	}
	other := t.TempDir()
	if code, _, stderr := run(t, []string{"tls", "init", "--dir", other, "--cluster", "demo", "--nodes", "n1"}); code != ExitOK {
		t.Fatal(stderr)
	}
	for _, tc := range []struct {
		name  string
		setup func()
		args  []string
		code  int
		want  string
	}{
		{"another cluster name", nil, []string{"--cluster", "prod"}, ExitFailed, `the CA in ` + dir + ` is of cluster "demo"`},
		{"a bad name", nil, []string{"--nodes", "a b"}, ExitUsage, `--nodes "a b"`},
		{"no dir", nil, nil, ExitUsage, `"dir" not set`},
		{"a certificate of another CA", func() {
			for _, f := range []string{"node-n1.pem", "node-n1-key.pem"} {
				b, _ := os.ReadFile(filepath.Join(other, f))
				_ = os.WriteFile(filepath.Join(dir, f), b, 0o600)
			}
		}, nil, ExitFailed, "not issued by the CA"},
		{"half a pair", func() { _ = os.Remove(filepath.Join(dir, "node-n1-key.pem")) }, nil, ExitFailed, "only one of"},
		{"a CA without its key", func() { _ = os.Remove(filepath.Join(dir, "ca-key.pem")) }, nil, ExitFailed, "only one of ca.pem and ca-key.pem"},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		before := snapshot(t, dir)
		args := []string{"tls", "init", "--cluster", "demo", "--nodes", "n1,n2"}
		if tc.name != "no dir" {
			args = append(args, "--dir", dir)
		}
		code, stdout, stderr := run(t, append(args, tc.args...))
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Fatalf("%s: exit %d, %q, %q; want %d and %q", tc.name, code, stdout, stderr, tc.code, tc.want)
		}
		if after := snapshot(t, dir); len(after) != len(before) {
			t.Fatalf("%s: a refused init wrote files: %d, then %d", tc.name, len(before), len(after))
		}
	}
}
