package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The gateway's API key for the subscriber "tour" (deploy/gateway.yaml).
const apiKey = "neptune-tour-key"

// Bounds of the workload: it never sends more than maxAppends, nor runs
// longer than maxRun, whatever the phases take.
const (
	workers    = 4
	pause      = 50 * time.Millisecond // between one worker's calls
	maxAppends = 20000
	maxRun     = 240 * time.Second
	partitions = 4
)

var nodes = []string{"n1", "n2", "n3"}

func TestComposeClusterSurvivesKillNewAddressAndRollingRestart(t *testing.T) {
	compose := requireDocker(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	project := fmt.Sprintf("neptunetest%d%s", os.Getpid(), hex.EncodeToString(suffix))
	image := "neptune:" + project
	d := &deployment{t: t, composeCmd: compose, root: root, project: project, image: image}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	d.run(ctx, "build the image", filepath.Join(root, "deploy", "build-image.sh"), image)
	t.Logf("image %s built in %v", image, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() { d.quiet("docker", "rmi", "-f", image) })
	t.Cleanup(d.down)

	// docker compose up, then the first call through the gateway.
	upAt := time.Now()
	d.compose(ctx, "up", "-d")
	gw := "http://" + d.port(ctx, "gateway", "8080")
	httpc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers + 2}}
	var firstCall time.Duration
	for {
		if code, _, err := do(ctx, httpc, http.MethodPut, gw+"/kv/0/", "probe=1", true); err == nil && code == http.StatusOK {
			firstCall = time.Since(upAt)
			break
		}
		if time.Since(upAt) > 90*time.Second {
			t.Fatalf("no successful call through the gateway within 90 s of docker compose up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("FIGURE time from docker compose up to the first successful call through the gateway: %v", firstCall.Round(time.Millisecond))
	for _, n := range nodes {
		d.waitReady(ctx, n, 60*time.Second)
	}
	material := d.copyPKI(ctx)

	// The workload: unique elements appended through the gateway.
	w := newWorkload(httpc, gw)
	wctx, stopWork := context.WithTimeout(ctx, maxRun)
	defer stopWork()
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx, i) }()
	}
	stopAll := func() { stopWork(); wg.Wait() }
	defer stopAll()
	time.Sleep(3 * time.Second)

	// Kill a node's container and bring it back on a new address, with
	// its id and data volume. Compose would give it its old address back
	// (the lowest free one), so a stand-in container holds that address
	// meanwhile, as another process might.
	victim := "n2"
	oldID := d.containerID(ctx, victim)
	oldIP := d.ip(ctx, oldID)
	w.phase.Store(phaseKill)
	killAt := time.Now()
	d.run(ctx, "kill "+victim, "docker", "kill", oldID)
	placeholder := project + "-placeholder"
	t.Cleanup(func() { d.quiet("docker", "rm", "-f", placeholder) })
	d.run(ctx, "hold the old address", "docker", "run", "-d", "--name", placeholder, "--network", project+"_default",
		"--entrypoint", "/neptune", image, "node", "--id", "placeholder", "--insecure", "--host", "127.0.0.1", "--service", "echo:0")
	time.Sleep(2 * time.Second) // down a while, as a crashed container
	d.compose(ctx, "up", "-d", "--force-recreate", "--no-deps", victim)
	newIP := d.ip(ctx, d.containerID(ctx, victim))
	readyAfter := d.waitReady(ctx, victim, 90*time.Second)
	d.quiet("docker", "rm", "-f", placeholder)
	t.Logf("FIGURE %s killed at %s, back on %s (was %s), ready %v after the kill", victim, killAt.Format("15:04:05.000"), newIP, oldIP, readyAfter.Sub(killAt).Round(time.Millisecond))
	if newIP == oldIP {
		t.Errorf("%s came back on its old address %s: the test meant to give it a new one", victim, oldIP)
	}
	time.Sleep(2 * time.Second)

	// Rolling restart: SIGTERM (docker compose stop), start, wait for
	// /readyz, then the next node.
	w.phase.Store(phaseRolling)
	drains := map[string]time.Duration{}
	for _, n := range nodes {
		id := d.containerID(ctx, n)
		stopAt := time.Now()
		d.compose(ctx, "stop", n)
		stopped := time.Since(stopAt)
		exit, finished := d.exited(ctx, id)
		drain := finished.Sub(stopAt)
		if drain <= 0 || drain > stopped {
			drain = stopped // the daemon's clock disagrees: the command's time bounds it
		}
		drains[n] = drain
		t.Logf("FIGURE drain of %s: %v from docker compose stop to exit (exit code %d; the stop command took %v)", n, drain.Round(time.Millisecond), exit, stopped.Round(time.Millisecond))
		if exit != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", n, exit)
		}
		d.compose(ctx, "start", n)
		ready := d.waitReady(ctx, n, 90*time.Second)
		t.Logf("%s ready %v after its stop", n, ready.Sub(stopAt).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	w.phase.Store(phaseAfter)
	time.Sleep(2 * time.Second)
	if wctx.Err() != nil || w.next.Load() >= maxAppends {
		t.Errorf("the workload reached its bound (%v or %d appends) before the phases ended: the counts cover only part of them", maxRun, maxAppends)
	}
	stopAll()

	// Figures.
	for _, p := range []int32{phaseSteady, phaseKill, phaseRolling, phaseAfter} {
		ok, failed := w.ok[p].Load(), w.failed[p].Load()
		t.Logf("FIGURE %-36s %5d acknowledged appends, %3d failed calls", phaseNames[p]+":", ok, failed)
	}
	var drainList []string
	for _, n := range nodes {
		drainList = append(drainList, fmt.Sprintf("%s %v", n, drains[n].Round(time.Millisecond)))
	}
	t.Logf("FIGURE drain (docker compose stop to exit): %s", strings.Join(drainList, ", "))
	for _, e := range w.errorSample() {
		t.Logf("  failed call: %s", e)
	}
	if n := w.failed[phaseKill].Load(); n > 0 {
		t.Errorf("%d calls failed during the kill and the return on a new address, want 0", n)
	}
	if n := w.failed[phaseRolling].Load(); n > 0 {
		t.Errorf("%d calls failed during the rolling restart, want 0", n)
	}
	if w.acked() == 0 {
		t.Fatal("no append was acknowledged")
	}

	// A second docker compose up runs the init service again: it keeps
	// the CA and every certificate.
	d.compose(ctx, "up", "-d")
	if again := d.copyPKI(ctx); !bytes.Equal(again["ca.pem"], material["ca.pem"]) || !bytes.Equal(again["node-n1.pem"], material["node-n1.pem"]) {
		t.Errorf("a second docker compose up replaced the CA or a certificate")
	}

	// The history: wait until every replica reports the same version,
	// then read every key at every replica directly.
	d.waitConverged(ctx, 60*time.Second)
	replicas := d.readReplicas(ctx, w.keys())
	checkHistory(t, w, replicas)
	if t.Failed() {
		return
	}
	t.Logf("FIGURE history: %d acknowledged appends (%d attempted) checked on %d replicas: each present exactly once, no duplicate, replicas identical",
		w.acked(), w.attempted.Load(), len(nodes))

	d.checkHTTPIdentities(ctx)
}

// checkHTTPIdentities reaches the members' HTTPS listeners as
// deploy/prometheus.yml and an operator do: the scraper certificate
// "prometheus" reads every member's /metrics, verifying each member's
// certificate against ca.pem by its service name, and not the dashboard;
// an operator's token made in n1's container opens every member's
// dashboard until it is revoked with the init service (which mounts the
// pki volume writable), after which every member refuses it, without a
// restart, saying it was revoked.
func (d *deployment) checkHTTPIdentities(ctx context.Context) {
	d.t.Helper()
	dir := filepath.Join(d.pkiDir, "pki")
	caPEM, err := os.ReadFile(filepath.Join(dir, pki.CACertFile))
	if err != nil {
		d.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		d.t.Fatal("ca.pem holds no certificate")
	}
	scraper, err := tls.LoadX509KeyPair(filepath.Join(dir, "scraper-prometheus.pem"), filepath.Join(dir, "scraper-prometheus-key.pem"))
	if err != nil {
		d.t.Fatalf("the scraper certificate compose's init issues: %v", err)
	}
	get := func(member string, cert *tls.Certificate, token, path string) (int, string) {
		d.t.Helper()
		cfg := &tls.Config{RootCAs: roots, ServerName: member}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+d.port(ctx, member, "9100")+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			d.t.Fatalf("GET %s %s: %v", member, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	members := append(slices.Clone(nodes), "gateway")
	for _, m := range members {
		if code, body := get(m, &scraper, "", "/metrics"); code != http.StatusOK || !strings.Contains(body, "neptune_build_info") {
			d.t.Errorf("%s /metrics as the scraper: %d %.200q", m, code, body)
		}
	}
	if code, _ := get("n1", &scraper, "", "/cluster"); code != http.StatusForbidden {
		d.t.Errorf("n1's dashboard as the scraper: %d, want 403", code)
	}

	token := strings.TrimSpace(d.run(ctx, "create a token", "docker", "exec", d.containerID(ctx, "n1"),
		"/neptune", "tls", "token", "create", "--dir", "/pki", "--operator", "operator"))
	for _, m := range members {
		if code, body := get(m, nil, token, "/api/dashboard/self"); code != http.StatusOK {
			d.t.Errorf("%s's dashboard with an operator token: %d %.200q", m, code, body)
		}
	}
	d.compose(ctx, "run", "--rm", "-T", "init", "tls", "token", "revoke", "--dir", "/pki", token)
	start := time.Now()
	for _, m := range members {
		var code int
		var body string
		// Members look at their files every 10 s; a request that failed
		// outright (code 0: a loaded machine's timeout) is asked again.
		for time.Since(start) < 45*time.Second {
			if code, body = get(m, nil, token, "/api/dashboard/self"); code != http.StatusOK && code != 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if code != http.StatusUnauthorized || !strings.Contains(body, "was revoked") {
			d.t.Errorf("%s with the revoked token: %d %.200q; want 401 saying it was revoked", m, code, body)
		}
	}
	d.t.Logf("FIGURE a revoked token refused by every member %v after neptune tls token revoke", time.Since(start).Round(100*time.Millisecond))
}

// requireDocker returns the compose command (docker compose, else
// docker-compose), failing the test on CI and skipping it elsewhere when
// docker or compose is missing.
func requireDocker(t *testing.T) []string {
	t.Helper()
	missing := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and %s: the container test must run on CI (its daemon is preinstalled)", msg)
		}
		t.Skipf("SKIPPED, NOT RUN: %s; the container and Compose test needs a docker daemon and docker compose (or docker-compose 1.29+)", msg)
	}
	if testing.Short() {
		t.Skip("SKIPPED, NOT RUN: -short; the container and Compose test builds an image and starts 5 containers")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		missing("the docker daemon is not reachable (docker version: %v: %s)", err, bytes.TrimSpace(out))
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if exec.Command("docker-compose", "version").Run() == nil {
		return []string{"docker-compose"}
	}
	missing("neither docker compose nor docker-compose runs")
	return nil
}

// deployment runs docker and compose commands for one project.
type deployment struct {
	t                            *testing.T
	composeCmd                   []string
	root, project, image, pkiDir string
	ports                        sync.Map // "service/port" -> host:port, cleared on a restart
}

func (d *deployment) env() []string {
	return append(os.Environ(), "NEPTUNE_IMAGE="+d.image, "COMPOSE_PROJECT_NAME="+d.project,
		// Free loopback ports, so the test never collides with a cluster
		// started by hand on the documented ones.
		"N1_DASHBOARD=127.0.0.1:", "N2_DASHBOARD=127.0.0.1:", "N3_DASHBOARD=127.0.0.1:",
		"GATEWAY_HTTP=127.0.0.1:", "GATEWAY_DASHBOARD=127.0.0.1:")
}

func (d *deployment) composeArgs(args ...string) []string {
	base := append(slices.Clone(d.composeCmd), "-p", d.project,
		"-f", filepath.Join(d.root, "deploy", "compose.yaml"), "-f", filepath.Join(d.root, "lab", "compose", "testdata", "rpc-ports.yaml"))
	return append(base, args...)
}

// output runs a command and returns its standard output.
func (d *deployment) output(ctx context.Context, what string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = d.env()
	cmd.Dir = d.root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %s %s: %v\n%s%s", what, name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func (d *deployment) run(ctx context.Context, what string, name string, args ...string) string {
	d.t.Helper()
	out, err := d.output(ctx, what, name, args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d *deployment) compose(ctx context.Context, args ...string) string {
	d.t.Helper()
	if args[0] != "ps" && args[0] != "port" {
		d.ports.Clear()
	}
	a := d.composeArgs(args...)
	return d.run(ctx, strings.Join(args, " "), a[0], a[1:]...)
}

// quiet runs a cleanup command, logging a failure.
func (d *deployment) quiet(name string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := d.output(ctx, "cleanup", name, args...); err != nil {
		d.t.Logf("cleanup: %v", err)
	}
}

// down prints the containers' last log lines if the test failed, then
// removes the containers, network and volumes.
func (d *deployment) down() {
	if d.t.Failed() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		a := d.composeArgs("logs", "--no-color", "--tail", "40")
		if out, err := d.output(ctx, "logs", a[0], a[1:]...); err == nil {
			d.t.Logf("container logs (last lines):\n%s", out)
		}
		cancel()
	}
	a := d.composeArgs("down", "-v", "--remove-orphans", "--timeout", "5")
	d.quiet(a[0], a[1:]...)
}

// containerID is a service's container, running or not (compose v2's ps
// lists only running ones without -a; the init service has exited).
func (d *deployment) containerID(ctx context.Context, service string) string {
	d.t.Helper()
	id := strings.TrimSpace(d.compose(ctx, "ps", "-a", "-q", service))
	if id == "" {
		d.t.Fatalf("no container for %s", service)
	}
	return id
}

// port is the host address a service's container port is published on.
func (d *deployment) port(ctx context.Context, service, port string) string {
	d.t.Helper()
	if v, ok := d.ports.Load(service + "/" + port); ok {
		return v.(string)
	}
	addr := strings.TrimSpace(d.compose(ctx, "port", service, port))
	if addr == "" || strings.HasSuffix(addr, ":0") {
		d.t.Fatalf("%s:%s is not published (%q)", service, port, addr)
	}
	d.ports.Store(service+"/"+port, addr)
	return addr
}

func (d *deployment) ip(ctx context.Context, id string) string {
	d.t.Helper()
	return strings.TrimSpace(d.run(ctx, "ip", "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id))
}

// exited returns a stopped container's exit code and when it exited.
func (d *deployment) exited(ctx context.Context, id string) (int, time.Time) {
	d.t.Helper()
	f := strings.Fields(d.run(ctx, "inspect", "docker", "inspect", "-f", "{{.State.ExitCode}} {{.State.FinishedAt}}", id))
	if len(f) != 2 {
		d.t.Fatalf("docker inspect %s: %q", id, f)
	}
	code, _ := strconv.Atoi(f[0])
	at, err := time.Parse(time.RFC3339Nano, f[1])
	if err != nil {
		d.t.Fatalf("docker inspect %s: FinishedAt %q: %v", id, f[1], err)
	}
	return code, at
}

// waitReady polls a node's /readyz on its published metrics port until
// it answers 200, and returns when it did.
func (d *deployment) waitReady(ctx context.Context, node string, limit time.Duration) time.Time {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	url := "http://" + d.port(ctx, node, "9100") + "/readyz"
	c := &http.Client{Timeout: 2 * time.Second}
	start, last := time.Now(), ""
	var seen []string // each answer that differs from the one before, and when
	for time.Now().Before(deadline) {
		now := ""
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			now = strings.TrimSpace(string(b))
		} else {
			now = "no answer"
		}
		if now != last {
			seen = append(seen, fmt.Sprintf("+%v %s", time.Since(start).Round(10*time.Millisecond), now))
			last = now
		}
		if err == nil && resp.StatusCode == http.StatusOK {
			if len(seen) > 1 {
				d.t.Logf("%s /readyz: %s", node, strings.Join(seen, " | "))
			}
			return time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("%s not ready within %v: %s", node, limit, strings.Join(seen, " | "))
	return time.Time{}
}

// waitConverged waits until `neptune status`, run in n1's container,
// shows every listappend partition with three replicas at one version,
// none recovering.
func (d *deployment) waitConverged(ctx context.Context, limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		out, err := d.output(ctx, "status", "docker", "exec", d.containerID(ctx, "n1"), "/neptune", "status", "--wait", "2s")
		switch why := converged(out); {
		case err != nil:
			last = err.Error()
		case why == "":
			return
		default:
			last = why + "\n" + out
		}
		time.Sleep(time.Second)
	}
	d.t.Fatalf("replicas did not converge within %v: %s", limit, last)
}

// converged reads status's partition table: "listappend 1 2 n2 2
// n1:secondary@4 n2:primary@4+lease n3:secondary@4". It returns "" if
// every listappend partition has three replicas at one version and one
// primary, else what is not so.
func converged(status string) string {
	seen := 0
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != listappend.Name {
			continue
		}
		seen++
		versions, primaries := map[string]bool{}, 0
		for _, r := range f[5:] {
			_, roleVersion, _ := strings.Cut(r, ":")
			role, version, _ := strings.Cut(roleVersion, "@")
			version, _, _ = strings.Cut(version, "+")
			if role == "primary" {
				primaries++
			} else if role != "secondary" {
				return fmt.Sprintf("partition %s: replica %s", f[1], r)
			}
			versions[version] = true
		}
		if len(f[5:]) != len(nodes) || len(versions) != 1 || primaries != 1 {
			return fmt.Sprintf("partition %s: %s", f[1], strings.Join(f[5:], " "))
		}
	}
	if seen != partitions {
		return fmt.Sprintf("%d listappend partitions in the table, want %d", seen, partitions)
	}
	return ""
}

// copyPKI copies the pki volume out of the init container into a fresh
// directory (d.pkiDir) and returns its files by name.
func (d *deployment) copyPKI(ctx context.Context) map[string][]byte {
	d.t.Helper()
	d.pkiDir = d.t.TempDir()
	d.run(ctx, "copy the certificates", "docker", "cp", d.containerID(ctx, "init")+":/pki", d.pkiDir)
	files := map[string][]byte{}
	ents, err := os.ReadDir(filepath.Join(d.pkiDir, "pki"))
	if err != nil {
		d.t.Fatal(err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(d.pkiDir, "pki", e.Name())); err == nil {
			files[e.Name()] = b
		}
	}
	if len(files["ca.pem"]) == 0 {
		d.t.Fatalf("no ca.pem in the pki volume: %d files", len(files))
	}
	return files
}

// readReplicas reads every key at every node directly (its published RPC
// port, mutual TLS with the client certificate the init service made):
// node -> "partition/key" -> list.
func (d *deployment) readReplicas(ctx context.Context, keys []pkey) map[string]map[pkey][]uint64 {
	d.t.Helper()
	mat, err := security.Load(security.Config{Dir: filepath.Join(d.pkiDir, "pki"), Identity: pki.Identity{Role: pki.RoleClient, Name: "client"}})
	if err != nil {
		d.t.Fatal(err)
	}
	conns, err := mat.Transport().NewConns()
	if err != nil {
		d.t.Fatal(err)
	}
	defer conns.Close()
	out := map[string]map[pkey][]uint64{}
	for _, n := range nodes {
		rpc, err := conns.ClientFor(n, d.port(ctx, n, "7947"))
		if err != nil {
			d.t.Fatal(err)
		}
		out[n] = map[pkey][]uint64{}
		for _, k := range keys {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := rpc.Call(cctx, &pb.CallRequest{Service: listappend.Name, Partition: int32(k.partition), Method: "read", Mode: pb.Mode_MODE_READ, Body: []byte(k.key)})
			cancel()
			if err != nil {
				d.t.Fatalf("read %v at %s: %v", k, n, err)
			}
			list, err := listappend.DecodeList(resp.Body)
			if err != nil {
				d.t.Fatalf("read %v at %s: %v", k, n, err)
			}
			out[n][k] = list
		}
	}
	return out
}

// checkHistory: on every replica, every acknowledged append is present
// exactly once, no element twice, nothing that was never sent; and the
// replicas hold the same lists.
func checkHistory(t *testing.T, w *workload, replicas map[string]map[pkey][]uint64) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range nodes {
		for k, list := range replicas[n] {
			count := map[uint64]int{}
			for _, e := range list {
				count[e]++
				if count[e] == 2 {
					t.Errorf("%s %v: element %d appended twice", n, k, e)
				}
				if _, sent := w.sent[k][e]; !sent {
					t.Errorf("%s %v: element %d was never sent", n, k, e)
				}
			}
			lost := 0
			for e, ok := range w.sent[k] {
				if ok && count[e] == 0 {
					if lost++; lost <= 5 {
						t.Errorf("%s %v: acknowledged element %d is missing", n, k, e)
					}
				}
			}
			if lost > 5 {
				t.Errorf("%s %v: %d acknowledged elements missing in all", n, k, lost)
			}
			if n != nodes[0] && !slices.Equal(list, replicas[nodes[0]][k]) {
				t.Errorf("%v: %s holds %d elements, %s %d, or in another order", k, n, len(list), nodes[0], len(replicas[nodes[0]][k]))
			}
		}
	}
}

// Phases of the run, for counting calls.
const (
	phaseSteady int32 = iota
	phaseKill
	phaseRolling
	phaseAfter
	phases
)

var phaseNames = [phases]string{"before the kill", "kill and return on a new address", "rolling restart", "after"}

// pkey is a list: a key in a partition.
type pkey struct {
	partition int
	key       string
}

// workload appends unique elements through the gateway and records what
// it sent and what was acknowledged.
type workload struct {
	httpc     *http.Client
	gw        string
	next      atomic.Uint64
	attempted atomic.Int64
	phase     atomic.Int32
	ok        [phases]atomic.Int64
	failed    [phases]atomic.Int64

	mu     sync.Mutex
	sent   map[pkey]map[uint64]bool // element -> acknowledged
	errors []string
}

func newWorkload(httpc *http.Client, gw string) *workload {
	return &workload{httpc: httpc, gw: gw, sent: map[pkey]map[uint64]bool{}}
}

func (w *workload) run(ctx context.Context, worker int) {
	for ctx.Err() == nil {
		e := w.next.Add(1)
		if e > maxAppends {
			return
		}
		k := pkey{partition: int(e % partitions), key: fmt.Sprintf("w%d", worker)}
		w.mu.Lock()
		if w.sent[k] == nil {
			w.sent[k] = map[uint64]bool{}
		}
		w.sent[k][e] = false
		w.mu.Unlock()
		phase := w.phase.Load()
		w.attempted.Add(1)
		code, body, err := do(ctx, w.httpc, http.MethodPost, fmt.Sprintf("%s/listappend/%d/", w.gw, k.partition), string(listappend.EncodeAppend(k.key, e)), true)
		if ctx.Err() != nil && err != nil {
			return // stopped mid-call: neither acknowledged nor failed
		}
		if err == nil && code == http.StatusOK {
			w.ok[phase].Add(1)
			w.mu.Lock()
			w.sent[k][e] = true
			w.mu.Unlock()
		} else {
			w.failed[phase].Add(1)
			w.mu.Lock()
			if len(w.errors) < 20 {
				w.errors = append(w.errors, fmt.Sprintf("[%s] %v append %d: %d %v %s", phaseNames[phase], k, e, code, err, strings.TrimSpace(body)))
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (w *workload) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.sent {
		for _, ok := range m {
			if ok {
				n++
			}
		}
	}
	return n
}

func (w *workload) keys() []pkey {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ks []pkey
	for k := range w.sent {
		ks = append(ks, k)
	}
	return ks
}

func (w *workload) errorSample() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errors)
}

// do sends one request to the gateway, with the API key if withKey.
func do(ctx context.Context, c *http.Client, method, url, body string, withKey bool) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if withKey {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(b), errors.New(resp.Status)
	}
	return resp.StatusCode, string(b), nil
}
