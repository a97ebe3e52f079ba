package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

var (
	n1  = Identity{RoleNode, "n1"}
	n2  = Identity{RoleNode, "n2"}
	web = Identity{RoleClient, "web"}
	ops = Identity{RoleOperator, "alice"}
)

func source(t *testing.T, f Files, opts ...func(*SourceConfig)) *Source {
	t.Helper()
	cfg := SourceConfig{Files: f}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIssuedCertificatesNameTheirIdentityAndKeysArePrivate(t *testing.T) {
	dir := t.TempDir()
	ca, err := Bootstrap(dir, "prod", n1, web, ops)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cluster() != "prod" {
		t.Fatalf("cluster = %q", ca.Cluster())
	}
	for _, id := range []Identity{n1, web, ops} {
		f := FilesFor(dir, id)
		s := source(t, f)
		if s.Identity() != id || s.Cluster() != "prod" {
			t.Errorf("%s: identity %s, cluster %q", id, s.Identity(), s.Cluster())
		}
		leaf := s.Certificate().Leaf
		if leaf.Subject.CommonName != id.Name || len(leaf.URIs) != 1 || leaf.URIs[0].String() != "neptune://"+string(id.Role)+"/"+id.Name {
			t.Errorf("%s: CN %q, URIs %v", id, leaf.Subject.CommonName, leaf.URIs)
		}
		serves := false
		for _, u := range leaf.ExtKeyUsage {
			serves = serves || u == x509.ExtKeyUsageServerAuth
		}
		if serves != (id.Role == RoleNode) {
			t.Errorf("%s: server authentication %v", id, serves)
		}
		fi, err := os.Stat(f.Key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: key mode %v, want 0600", f.Key, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, CAKeyFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestCreateRefusesToReplaceWithoutForce(t *testing.T) {
	dir := t.TempDir()
	ca, err := CreateCA(dir, "c", false, CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateCA(dir, "c", false, CAOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateCA = %v, want ErrExists", err)
	}
	if _, err := ca.IssueFiles(dir, n1, false, IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueFiles(dir, n1, false, IssueOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second IssueFiles = %v, want ErrExists", err)
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Fatal("LoadCA read another CA")
	}
}

func TestIdentityOfRejectsAmbiguousOrMalformedURIs(t *testing.T) {
	for _, tc := range []struct {
		uris []string
		ok   bool
	}{
		{[]string{"neptune://node/n1"}, true},
		{[]string{"neptune://operator/a@b"}, true},
		{nil, false},
		{[]string{"spiffe://x/y"}, false},
		{[]string{"neptune://node/n1", "neptune://client/n1"}, false},
		{[]string{"neptune://admin/n1"}, false},
		{[]string{"neptune://node/"}, false},
		{[]string{"neptune://node/a/b"}, false},
		{[]string{"neptune://node/n1?x=1"}, false},
		{[]string{"neptune://u@node/n1"}, false},
		{[]string{"neptune://node:1/n1"}, false},
	} {
		c := &x509.Certificate{}
		for _, s := range tc.uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			c.URIs = append(c.URIs, u)
		}
		_, err := IdentityOf(c)
		if (err == nil) != tc.ok {
			t.Errorf("IdentityOf(%v) error %v, want ok=%v", tc.uris, err, tc.ok)
		}
	}
	for _, bad := range []string{"", ".x", "a b", "a/b", strings.Repeat("x", MaxName+1)} {
		if ValidateName(bad) == nil {
			t.Errorf("ValidateName(%q) accepted", bad)
		}
	}
}

func TestSourceReloadsChangedFilesAtMostEveryInterval(t *testing.T) {
	dir := t.TempDir()
	ca, err := Bootstrap(dir, "c", n1)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	f := FilesFor(dir, n1)
	s := source(t, f, func(c *SourceConfig) { c.Clock, c.Interval = clk, time.Minute })
	first := s.Certificate().Leaf.SerialNumber

	if _, err := ca.IssueFiles(dir, n1, true, IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.Certificate().Leaf.SerialNumber.Cmp(first) != 0 {
		t.Fatal("reloaded before the interval passed")
	}
	clk.Advance(time.Minute)
	second := s.Certificate().Leaf.SerialNumber
	if second.Cmp(first) == 0 {
		t.Fatal("did not reload changed files after the interval")
	}

	// A broken file is not loaded; the source keeps the certificate.
	if err := os.WriteFile(f.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if s.Certificate().Leaf.SerialNumber.Cmp(second) != 0 {
		t.Fatal("a broken file replaced the certificate")
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a broken file succeeded")
	}

	// A certificate naming another node is refused when one is expected.
	other, err := ca.IssueFiles(t.TempDir(), n2, false, IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{other.Cert, f.Cert}, {other.Key, f.Key}} {
		b, _ := os.ReadFile(p[0])
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewSource(SourceConfig{Files: f, Expect: n1}); err == nil {
		t.Fatal("a source expecting n1 loaded n2's certificate")
	}
}

func TestSourceRefusesACertificateFromAnotherCA(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	if _, err := Bootstrap(dir, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := Bootstrap(otherDir, "c", n1); err != nil {
		t.Fatal(err)
	}
	f := FilesFor(otherDir, n1)
	f.CA = filepath.Join(dir, CACertFile)
	if _, err := NewSource(SourceConfig{Files: f}); !errors.Is(err, ErrUnverified) {
		t.Fatalf("NewSource = %v, want ErrUnverified", err)
	}
}

// handshake runs a TLS handshake between a server and a client config over
// a pipe and returns the client's error and the identity the server saw.
func handshake(t *testing.T, server, client *tls.Config) (clientErr error, peer Identity, serverErr error) {
	t.Helper()
	// Loopback TCP rather than net.Pipe: its buffers let a side write an
	// alert while the other is writing too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		id  Identity
		err error
	}
	done := make(chan res, 1)
	go func() {
		sc := tls.Server(a, server)
		err := sc.HandshakeContext(ctx)
		if err != nil {
			done <- res{err: err}
			return
		}
		id, err := PeerIdentity(sc.ConnectionState())
		done <- res{id, err}
		_, _ = sc.Read(make([]byte, 1))
	}()
	cc := tls.Client(b, client)
	clientErr = cc.HandshakeContext(ctx)
	if clientErr == nil {
		// TLS 1.3: the server verifies the client's certificate after the
		// client considers the handshake done; a write surfaces it.
		_, _ = cc.Write([]byte{0})
	}
	b.Close()
	r := <-done
	return clientErr, r.id, r.err
}

func TestMutualTLSChecksCAAndNodeID(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	if _, err := Bootstrap(dir, "c", n1, n2, web); err != nil {
		t.Fatal(err)
	}
	if _, err := Bootstrap(otherDir, "c", web); err != nil {
		t.Fatal(err)
	}
	srv := source(t, FilesFor(dir, n1))
	cl := source(t, FilesFor(dir, web))

	if cerr, id, serr := handshake(t, srv.ServerConfig(), cl.ClientConfig("n1")); cerr != nil || serr != nil || id != web {
		t.Fatalf("client to n1: client %v, server %v, peer %s", cerr, serr, id)
	}
	if cerr, _, _ := handshake(t, srv.ServerConfig(), cl.ClientConfig("n2")); cerr == nil || !strings.Contains(cerr.Error(), `want "n2"`) {
		t.Fatalf("dialling n2 reached n1: %v", cerr)
	}
	// A client whose certificate another CA signed is refused by the server.
	st := source(t, FilesFor(otherDir, web))
	stranger := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{*st.Certificate()}}
	if _, _, serr := handshake(t, srv.ServerConfig(), stranger); serr == nil || !strings.Contains(serr.Error(), "unknown authority") {
		t.Fatalf("server accepted a certificate from another CA: %v", serr)
	}
	// And a client without a certificate.
	if _, _, serr := handshake(t, srv.ServerConfig(), &tls.Config{InsecureSkipVerify: true}); serr == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	// A client (not a node) cannot pose as a server.
	clientAsServer := &tls.Config{Certificates: []tls.Certificate{*cl.Certificate()}}
	if cerr, _, _ := handshake(t, clientAsServer, cl.ClientConfig("")); cerr == nil {
		t.Fatal("a client certificate served as a node")
	}
}

func TestCARotationTrustsBothCAsInOneFile(t *testing.T) {
	oldDir, newDir := t.TempDir(), t.TempDir()
	if _, err := Bootstrap(oldDir, "c", n1); err != nil {
		t.Fatal(err)
	}
	if _, err := Bootstrap(newDir, "c", n2); err != nil {
		t.Fatal(err)
	}
	oldCA, _ := os.ReadFile(filepath.Join(oldDir, CACertFile))
	newCA, _ := os.ReadFile(filepath.Join(newDir, CACertFile))
	both := filepath.Join(t.TempDir(), "both.pem")
	if err := os.WriteFile(both, append(oldCA, newCA...), 0o644); err != nil {
		t.Fatal(err)
	}
	f1, f2 := FilesFor(oldDir, n1), FilesFor(newDir, n2)
	f1.CA, f2.CA = both, both
	s1, s2 := source(t, f1), source(t, f2)
	if cerr, id, serr := handshake(t, s1.ServerConfig(), s2.ClientConfig("n1")); cerr != nil || serr != nil || id != n2 {
		t.Fatalf("new-CA node to old-CA node: %v / %v / %s", cerr, serr, id)
	}
}

// FuzzVerifyToken: whatever a caller sends as a bearer token is refused
// with ErrBadToken, never a panic; only the CA's signature on alice's
// claims verifies, as alice.
func FuzzVerifyToken(f *testing.F) {
	dir := f.TempDir()
	ca, err := Bootstrap(dir, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	good, err := ca.IssueToken(Identity{Role: RoleOperator, Name: "alice"}, time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJuZXB0dW5lOi8vb3BlcmF0b3IvYSJ9.")
	f.Fuzz(func(t *testing.T, tok string) {
		id, err := VerifyToken(tok, []*x509.Certificate{ca.Cert}, now)
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("%q: error %v is not ErrBadToken", tok, err)
			}
			return
		}
		if id != (Identity{Role: RoleOperator, Name: "alice"}) {
			t.Fatalf("%q verified as %v", tok, id)
		}
	})
}
