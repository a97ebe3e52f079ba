package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune"
)

// serve runs g.Serve on a loopback listener; the returned channel gets
// Serve's result.
func serve(t *testing.T, g *Gateway, ctx context.Context) (addr string, result chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	result = make(chan error, 1)
	go func() { result <- g.Serve(ctx, ln) }()
	return ln.Addr().String(), result
}

func build(t *testing.T, y string, c Caller) *Gateway {
	t.Helper()
	cfg, err := ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Deps{Caller: c, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

const echoConfig = "capacity_grps: 1000\nroutes: [{service: echo, method: echo}]\n"

// Plaintext HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port.
func TestServesHTTP1AndH2C(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, result := serve(t, build(t, echoConfig, &fakeCaller{}), ctx)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		client *http.Client
		major  int
	}{
		{&http.Client{}, 1},
		{&http.Client{Transport: &http.Transport{Protocols: &h2c}}, 2},
	} {
		resp, err := tc.client.Post("http://"+addr+"/x", "text/plain", strings.NewReader("hi"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hi" || resp.ProtoMajor != tc.major {
			t.Errorf("HTTP/%d: %d %s %q", tc.major, resp.StatusCode, resp.Proto, b)
		}
		tc.client.CloseIdleConnections()
	}
	cancel()
	if err := <-result; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// With a certificate the listener speaks TLS, and HTTP/2 by ALPN.
func TestServesTLSWithHTTP2(t *testing.T) {
	cert, key, pool := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	addr, result := serve(t, build(t, echoConfig+"tls: {cert: "+cert+", key: "+key+"}\n", &fakeCaller{}), ctx)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}, ForceAttemptHTTP2: true}
	resp, err := (&http.Client{Transport: tr}).Post("https://"+addr+"/x", "text/plain", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hi" || resp.ProtoMajor != 2 {
		t.Errorf("TLS: %d %s %q", resp.StatusCode, resp.Proto, b)
	}
	tr.CloseIdleConnections()
	cancel()
	if err := <-result; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// Shutdown drains: a request in flight when the gateway is told to stop
// is answered, new connections are refused, and Serve returns once the
// request is done.
func TestGracefulDrain(t *testing.T) {
	inCall, release := make(chan struct{}), make(chan struct{})
	f := &fakeCaller{answer: func(ctx context.Context, c call) (*neptune.Response, error) {
		close(inCall)
		<-release
		return &neptune.Response{Body: []byte("finished")}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	addr, result := serve(t, build(t, echoConfig, f), ctx)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/x", "text/plain", nil)
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- resp.Status + " " + string(b)
	}()
	<-inCall
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for { // until the listener is closed
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-result:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}
	close(release)
	if got := <-answer; got != "200 OK finished" {
		t.Errorf("in-flight request: %q", got)
	}
	if err := <-result; err != nil {
		t.Errorf("Serve after draining: %v", err)
	}
}

// Past the drain bound, requests still running are cancelled and Serve
// says so.
func TestDrainBound(t *testing.T) {
	inCall := make(chan struct{})
	f := &fakeCaller{answer: func(ctx context.Context, c call) (*neptune.Response, error) {
		close(inCall)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	addr, result := serve(t, build(t, echoConfig+"drain: 50ms\n", f), ctx)
	go http.Post("http://"+addr+"/x", "text/plain", nil)
	<-inCall
	cancel()
	if err := <-result; err == nil || !strings.Contains(err.Error(), "drain") {
		t.Errorf("Serve past the drain bound: %v", err)
	}
}

// selfSigned writes a certificate for localhost and its key, and returns
// their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}
