package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/security"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGatewayCommandLineErrors(t *testing.T) {
	good := writeFile(t, "gw.yaml", "capacity_grps: 100\nroutes: [{service: echo, method: echo}]\n")
	bad := writeFile(t, "bad.yaml", "capacity_grps: 100\nroutes: [{service: echo, method: echo, partition: {hash: true, query: k}}]\n")
	gossiping := writeFile(t, "gossip.yaml", "capacity_grps: 100\ngossip: 127.0.0.1:0\nroutes: [{service: echo, method: echo}]\n")
	pkiDir := t.TempDir()
	if err := security.Scratch(pkiDir, "test"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gateway"}, ExitUsage, `"config" not set`},
		{[]string{"gateway", "--config", good}, ExitUsage, "no node to join"},
		{[]string{"gateway", "--config", bad, "--join", "127.0.0.1:1"}, ExitFailed, "routes[0].partition.count: "},
		{[]string{"gateway", "--config", good, "--join", "127.0.0.1:1", "--listen", "nowhere", "--insecure"}, ExitFailed, "listen: "},
		{[]string{"gateway", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, ExitFailed, "missing.yaml"},
		{[]string{"gateway", "--config", good, "extra"}, ExitUsage, `unexpected argument "extra"`},
		// Demand gossip is signed with a gateway certificate: a client's
		// is refused before the gateway joins anything.
		{[]string{"gateway", "--config", gossiping, "--join", "127.0.0.1:1", "--tls-dir", pkiDir, "--cert", "client/client"}, ExitFailed, "needs a gateway certificate"},
	} {
		code, stdout, stderr := run(t, tc.args)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("neptune %v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

func TestGatewayHashKey(t *testing.T) {
	cmd := newHashKeyCmd()
	var out bytes.Buffer
	cmd.SetIn(strings.NewReader("s3cret\n"))
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != gage.HashKey("s3cret") {
		t.Errorf("hash-key printed %q", got)
	}
	cmd = newHashKeyCmd()
	cmd.SetIn(strings.NewReader(""))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err == nil {
		t.Error("an empty key was hashed")
	}
}

// neptune gateway joins a cluster, serves a route, and drains and exits 0
// when interrupted.
func TestGatewayServes(t *testing.T) {
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "n0", AnnounceInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Register(echo.Service(), 0); err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	path := writeFile(t, "gw.yaml", "capacity_grps: 100\nroutes: [{service: echo, method: echo}]\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- execute(ctx, []string{"gateway", "--config", path, "--join", nd.GossipAddr(), "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-level", "error", "--insecure"}, outW, io.Discard)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("no start line: %v", err)
	}
	go io.Copy(io.Discard, outR)
	f := strings.Fields(line) // gateway up: http ADDR, metrics ADDR, ...
	if len(f) < 6 || f[2] != "http" || f[4] != "metrics" {
		t.Fatalf("start line %q", line)
	}
	addr, metrics := strings.TrimSuffix(f[3], ","), strings.TrimSuffix(f[5], ",")
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) { // gossip not there yet: 404 or 503
			t.Fatalf("echo through the gateway: %d %q", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body != "hello" {
		t.Errorf("echo through the gateway: %q", body)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`neptune_gateway_served_total{subscriber="default"}`, "neptune_gateway_reserved_grps", "neptune_client_calls_total", "go_goroutines"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if c := <-code; c != ExitOK {
		t.Errorf("exit %d after interrupt, want 0", c)
	}
}
