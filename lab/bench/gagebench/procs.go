package gagebench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune/internal/gateway"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// proc is a helper process the benchmark started: a `neptune gateway` or
// nginx.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	// http is where clients send requests; metrics serves the gateway's
	// status (empty for nginx); gossip is its demand gossip address.
	http, metrics, gossip string
}

var gatewayUp = regexp.MustCompile(`gateway up: http (\S+), metrics (\S+), gossip (\S+)`)

// startGateway runs `neptune gateway` with config (YAML), GOMAXPROCS
// procs (0: Go's default), and waits for its "gateway up" line.
func startGateway(ctx context.Context, exe, dir, name, config string, secArgs []string, procs int) (*proc, error) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(exe, append([]string{"gateway", "--config", path, "--log-level", "warn"}, secArgs...)...)
	p.cmd.Stderr = logf
	if procs > 0 {
		p.cmd.Env = append(os.Environ(), fmt.Sprint("GOMAXPROCS=", procs))
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("gagebench: start gateway %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	up := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := gatewayUp.FindStringSubmatch(sc.Text()); m != nil {
				up <- m
			}
		}
		close(up)
	}()
	select {
	case m, ok := <-up:
		if ok {
			p.http, p.metrics = m[1], m[2]
			if g, _, _ := strings.Cut(m[3], " as "); g != "off" {
				p.gossip = g
			}
			return p, nil
		}
		err = errors.New("exited before it was up")
	case <-time.After(15 * time.Second):
		err = errors.New("not up after 15s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.kill()
	b, _ := os.ReadFile(p.log)
	return nil, fmt.Errorf("gagebench: gateway %s %w:\n%s", name, err, b)
}

// kill sends SIGKILL (the process dies without a drain).
func (p *proc) kill() {
	if p != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// stopAll ends ps, each with SIGTERM and, if still running after bound,
// SIGKILL. A gateway so stopped leaves the membership: killed, it would
// be a dead member the nodes probe and gossip about for seconds, CPU
// they spend in the next section's first cells.
func stopAll(ps []*proc, bound time.Duration) {
	for _, p := range ps {
		if p != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(bound)
	for _, p := range ps {
		if p == nil || p.cmd.Process == nil {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
			p.kill()
		}
	}
}

// status reads a gateway's /api/subscribers.
func (p *proc) status(hc *http.Client) (gateway.Status, error) {
	var st gateway.Status
	resp, err := hc.Get("http://" + p.metrics + gateway.StatusPath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// sub finds a subscriber in a status.
func sub(st gateway.Status, name string) gateway.SubscriberStatus {
	for _, s := range st.Subscribers {
		if s.Name == name {
			return s
		}
	}
	return gateway.SubscriberStatus{}
}

// nginxLimit is one subscriber's limit_req zone: requests whose Host is
// host are held to rate requests per minute, with burst waiting.
type nginxLimit struct {
	name, host string
	perMinute  int
	burst      int
}

// findNginx resolves the nginx executable, "" if there is none.
func findNginx(name string) string {
	if name == "" {
		return ""
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// startNginx runs nginx in the foreground as a reverse proxy to upstream
// on a fresh port, with limit_req zones per subscriber when limits are
// given, and waits until it accepts connections.
func startNginx(ctx context.Context, bin, dir, name, upstream string, limits []nginxLimit) (*proc, error) {
	root := filepath.Join(dir, name)
	for _, d := range []string{"tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	var maps, zones, uses strings.Builder
	for _, l := range limits {
		fmt.Fprintf(&maps, "  map $host $key_%s { %s $host; default \"\"; }\n", l.name, l.host)
		fmt.Fprintf(&zones, "  limit_req_zone $key_%s zone=%s:1m rate=%dr/m;\n", l.name, l.name, l.perMinute)
		fmt.Fprintf(&uses, "      limit_req zone=%s burst=%d;\n", l.name, l.burst)
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp/body;
  proxy_temp_path %[1]s/tmp/proxy;
  fastcgi_temp_path %[1]s/tmp/fastcgi;
  uwsgi_temp_path %[1]s/tmp/uwsgi;
  scgi_temp_path %[1]s/tmp/scgi;
  keepalive_requests 100000;
  limit_req_status 429;
%[2]s%[3]s  upstream backend { server %[4]s; keepalive 256; }
  server {
    listen 127.0.0.1:%[5]d;
    location / {
%[6]s      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_read_timeout 30s;
    }
  }
}
`, root, maps.String(), zones.String(), upstream, port, uses.String())
	path := filepath.Join(root, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p := &proc{name: name, log: filepath.Join(root, "logs", "error.log"), http: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-p", root, "-c", path)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("gagebench: start nginx: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	if err := localcluster.WaitTCP(ctx, p.http, 10*time.Second); err != nil {
		p.kill()
		b, _ := os.ReadFile(p.log)
		return nil, fmt.Errorf("gagebench: nginx %s: %w\n%s", name, err, b)
	}
	return p, nil
}
