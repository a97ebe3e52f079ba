package cli

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune/internal/dashboard"
)

// A client command without --cert presents the only certificate of its
// role in --tls-dir (the quick start issues client/web, not the default
// client/client); when there is none or several, or --cert names a
// missing one, the error names --cert and --tls-dir and what is there,
// never a Go field.
func TestClientCertDefaultsToTheOnlyOneOfItsRole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	mk := func(args ...string) {
		t.Helper()
		if code, _, stderr := run(t, append([]string{"tls"}, args...)); code != ExitOK {
			t.Fatal(stderr)
		}
	}
	mk("ca", "create", "--dir", dir, "--cluster", "prod")
	mk("cert", "create", "--dir", dir, "--client", "web")
	mk("cert", "create", "--dir", dir, "--operator", "alice")
	client := func(args ...string) (string, error) {
		var o securityFlags
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		o.add(fs, "client/client", "your client")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		sec, err := o.clientFiles()
		return sec.Cert, err
	}
	if cert, err := client("--tls-dir", dir); err != nil || cert != "client/web" {
		t.Fatalf("--tls-dir alone: %q, %v; want client/web", cert, err)
	}
	if cert, err := client("--tls-dir", dir, "--cert", "operator/alice"); err != nil || cert != "operator/alice" {
		t.Fatalf("--cert operator/alice: %q, %v", cert, err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--tls-dir", dir, "--cert", "client/app"}, []string{"--cert client/app", "--tls-dir " + dir, "client/web", "neptune tls cert create --dir " + dir + " --client app"}},
		{[]string{"--tls-dir", t.TempDir()}, []string{"--tls-dir", "ca.pem"}},
		{[]string{"--tls-dir", dir, "--cert", "web"}, []string{"--cert", "role/name"}},
	} {
		_, err := client(tc.args...)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %v, want one naming %q", tc.args, err, w)
			}
		}
	}
	mk("cert", "create", "--dir", dir, "--client", "app")
	if _, err := client("--tls-dir", dir); err == nil || !strings.Contains(err.Error(), "--cert") || !strings.Contains(err.Error(), "client/app, client/web") {
		t.Errorf("two client certificates, no --cert: %v; want an error naming --cert and both", err)
	}
}

// Errors the library words for Go callers reach the command line with
// the flags and keys that set the fields.
func TestErrorsNameFlagsNotGoFields(t *testing.T) {
	for in, want := range map[string]string{
		"neptune: ClientConfig.Security: pki: stat pki/client-client.pem":                         "neptune: --tls-dir, --cert: pki: stat pki/client-client.pem",
		"neptune: NodeConfig.Security.Dir is required, or set NodeConfig.Security.Insecure":       "neptune: security.tls_dir (--tls-dir) is required, or set security.insecure (--insecure)",
		"neptune: host \"x\" (NodeConfig.Host, --host): no such host":                             "neptune: host \"x\" (host, --host): no such host",
		"config: services[0].replication: Replication.MinLive 3 exceeds partition 0's 2 replicas": "config: services[0].replication: replication.min_live 3 exceeds partition 0's 2 replicas",
		"neptune: ClientConfig.Security.Cert \"web\": want role/name":                             "neptune: --cert \"web\": want role/name",
		"neptune: register \"kv\": NodeConfig.DataDir is required":                                "neptune: register \"kv\": data_dir (--data-dir) is required",
	} {
		if got := flagWords(in); got != want {
			t.Errorf("flagWords(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

// A join that nobody answers says nothing listens there; it does not
// send the user to check keyrings.
func TestRefusedJoinSaysNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := run(t, []string{"call", "--insecure", "--join", addr, "--service", "kv", "--method", "get", "--timeout", "1s"})
	if code != ExitFailed || !strings.Contains(stderr, "nothing listens at that address") || strings.Contains(stderr, "keyring") {
		t.Errorf("exit %d, %q; want a failure saying nothing listens, and no keyring", code, stderr)
	}
}

// A replica-set change or promote of a service that is not replicated is
// refused at once, saying so (it used to wait for a primary until the
// timeout and then say none answered).
func TestPartitionCommandsRefuseAnUnreplicatedService(t *testing.T) {
	n := startEcho(t, "a")
	for _, args := range [][]string{
		{"partition", "move", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms", "--timeout", "2s", "echo", "0", "a", "b"},
		{"partition", "add", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms", "--timeout", "2s", "echo", "0", "b"},
		{"partition", "promote", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms", "--service", "echo", "--partition", "0"},
	} {
		code, _, stderr := run(t, args)
		if code != ExitFailed || !strings.Contains(stderr, "service echo is not replicated") {
			t.Errorf("%v: exit %d, %q; want 1 saying echo is not replicated", args, code, stderr)
		}
	}
	code, _, stderr := run(t, []string{"partition", "move", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms", "--timeout", "2s", "nope", "0", "a", "b"})
	if code != ExitFailed || !strings.Contains(stderr, "no node in the yellow pages hosts service nope") {
		t.Errorf("unknown service: exit %d, %q", code, stderr)
	}
}

// q quits top (from a pipe here; at once on a terminal).
func TestTopQuitsOnQ(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{Self: "a"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- executeIn(context.Background(), []string{"top", "--addr", strings.TrimPrefix(srv.URL, "http://"), "--interval", "100ms"},
			strings.NewReader("q"), &out, &errOut)
	}()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("top --count 0 still running 30 s after q was typed")
	}
}

// status on a cluster without replicated services says why it shows no
// partition table, rather than leaving it out silently.
func TestStatusSaysWhyNoPartitionTable(t *testing.T) {
	n := startEcho(t, "a")
	code, out, stderr := run(t, []string{"status", "--insecure", "--join", n.GossipAddr(), "--wait", "300ms"})
	if code != ExitOK || !strings.Contains(out, "No replicated partition announced") || !strings.Contains(out, "1 nodes") {
		t.Errorf("exit %d, %q, %q", code, out, stderr)
	}
}

// A node whose certificate is not in --tls-dir says which file and the
// command that issues it, naming the key and flag.
func TestNodeWithoutItsCertificateSaysHowToIssueIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if code, _, stderr := run(t, []string{"tls", "ca", "create", "--dir", dir}); code != ExitOK {
		t.Fatal(stderr)
	}
	code, _, stderr := run(t, []string{"node", "--id", "n9", "--tls-dir", dir, "--service", "echo:0"})
	if code != ExitFailed || !strings.Contains(stderr, "--tls-dir") || !strings.Contains(stderr, "neptune tls cert create --dir "+dir+" --node n9") || goFieldRe.MatchString(stderr) {
		t.Errorf("exit %d, %q", code, stderr)
	}
}

var goFieldRe = regexp.MustCompile(`\b(NodeConfig|ClientConfig|Security|Replication)\.[A-Z]`)
