package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
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

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/record"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/apps/micro"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/gateway"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/bench/appendbench"
	"github.com/neptune-cluster/neptune/lab/bench/elasticbench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The helpers every cluster test shares, in one place.

// startPython runs adapter/testdata/pykv.py, a standard-library Python
// key-value service, and returns its base URL.
func startPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is missing but CI is set: .ci/run installs it")
		}
		t.Skip("python3 not found: skipping the Python service test")
	}
	cmd := exec.Command(py, filepath.Join(repoRoot, "adapter", "testdata", "pykv.py"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("pykv.py said %q, %v", line, err)
	}
	return "http://127.0.0.1:" + port
}

// nodeConfig is the YAML of one node: the Python service and grep over
// its partitions' files, plus (on the first node) a program that hangs.
func nodeConfig(pyURL, dataDir string, parts string, hang bool) string {
	c := fmt.Sprintf(`services:
  - name: pykv
    partitions: %[3]s
    http:
      base_url: %[1]s
      check_route: /check
      timeout: 5s
      methods:
        - {name: put, mode: write, route: /put}
        - {name: get, mode: read, route: /get}
  - name: grep
    partitions: %[3]s
    exec:
      command: grep
      args: [-r, -h, -F, -f, /dev/stdin, .]
      data_dir: %[2]s
      ok_exit_codes: [0, 1]
      methods: [{name: search, mode: read}]
`, pyURL, filepath.Join(dataDir, "grep"), parts)
	if hang {
		c += fmt.Sprintf(`  - name: hang
    partitions: [0]
    exec: {command: sh, args: [-c, "sleep 60 & wait"], data_dir: %s, timeout: 300ms, methods: [{name: run, mode: read}]}
`, filepath.Join(dataDir, "hang"))
	}
	return c
}

// sumService is an aggregation service whose partition p contributes p+1;
// the local operator of a partition in stuck blocks until its caller gives
// up, as on a hung node. Reductions take about 50 µs.
func sumService(stuck ...int) neptune.Service {
	agg := micro.AggConfig{Reduce: 50 * time.Microsecond}.Aggregator()
	agg.Local = map[string]neptune.LocalFunc{"work": func(ctx context.Context, p int, _ []byte) ([]byte, error) {
		if slices.Contains(stuck, p) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		time.Sleep(time.Millisecond)
		return micro.Encode(uint64(p) + 1), nil
	}}
	return neptune.Service{Name: "sum", Workers: 4, Aggregate: agg}
}

// startAggCluster starts n in-process nodes; node i hosts partitions 2i
// and 2i+1 of sumService(stuck...).
func startAggCluster(t *testing.T, n int, stuck ...int) []*neptune.Node {
	t.Helper()
	return startNodes(t, n, "a", func(nd *neptune.Node, i int) error {
		return nd.Register(sumService(stuck...), 2*i, 2*i+1)
	})
}

func sumOf(parts []int) uint64 {
	var s uint64
	for _, p := range parts {
		s += uint64(p) + 1
	}
	return s
}

func countPart[T any](xs []T, p int, part func(T) int) int {
	n := 0
	for _, x := range xs {
		if part(x) == p {
			n++
		}
	}
	return n
}

// callRetrying retries a call while its error is retryable (failover).
func callRetrying(ctx context.Context, c *neptune.Client, sess *neptune.Session, service string, p int, method string, body []byte) (*neptune.Response, error) {
	for {
		resp, err := c.Call(ctx, service, p, method, body, neptune.WithSession(sess))
		if err == nil || !neptune.Retryable(err) || ctx.Err() != nil {
			return resp, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// echoClient starts one in-process node hosting echo whose own client uses
// policy, secured with throwaway material if secure, and returns that
// client once it sees the node.
func echoClient(b *testing.B, policy string, secure bool) *neptune.Client {
	b.Helper()
	ctx := context.Background()
	sec := neptune.Security{Insecure: true}
	if secure {
		dir := b.TempDir()
		if err := security.Scratch(dir, "bench", "b1"); err != nil {
			b.Fatal(err)
		}
		sec = neptune.Security{Dir: dir}
	}
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: sec, ID: "b1", Balance: neptune.Balancing{Policy: policy}})
	if err != nil {
		b.Fatal(err)
	}
	if err := nd.Register(echo.Service(), 0); err != nil {
		b.Fatal(err)
	}
	if err := nd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nd.Close() })
	c := nd.Client()
	for len(c.Members(ctx, 0)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// neptuneBinary is cmd/neptune, built at the first call of the test
// binary into a directory TestMain removes.
func neptuneBinary(t *testing.T) string {
	t.Helper()
	buildBinary()
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func memberIDs(ctx context.Context, c *neptune.Client) []string {
	var ids []string
	for _, m := range c.Members(ctx, 0) {
		ids = append(ids, m.Node)
	}
	slices.Sort(ids)
	return ids
}

// waitCaughtUp waits until node id announces a replica of every
// partition that is neither recovering nor behind its primary.
func waitCaughtUp(ctx context.Context, cl *appendbench.Cluster, id string) error {
	return localcluster.Wait(ctx, 30*time.Second, func(context.Context) error {
		for _, pi := range cl.C.Partitions() {
			i := slices.IndexFunc(pi.Replicas, func(r client.ReplicaInfo) bool { return r.Node == id })
			if i < 0 || pi.Replicas[i].Role == "recovering" {
				return fmt.Errorf("%s has not rejoined partition %d", id, pi.Partition)
			}
		}
		return nil
	})
}

func startElastic(t *testing.T, ctx context.Context, nodes, parts int) *elasticbench.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node processes")
	}
	dir := t.TempDir()
	cfg := elasticbench.Config{Exe: neptuneBinary(t), Dir: dir, Service: listappend.Name, Nodes: nodes, Parts: parts,
		Grace: 2 * time.Second, Interval: 500 * time.Millisecond}
	t.Cleanup(func() { dumpLogsOnFailure(t, dir) })
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cl, err := elasticbench.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func judge(t *testing.T, ctx context.Context, cl *elasticbench.Cluster, appends []check.AppendOp) {
	t.Helper()
	rep, err := cl.Check(ctx, appends)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d appends\n%v", len(appends), rep)
	if rep.Count(check.Duplicated) != 0 || rep.Count(check.Lost) != 0 || rep.Count(check.Divergent) != 0 || !rep.Valid() {
		t.Errorf("list-append anomalies:\n%v", rep)
	}
	if rep.Acked < 300 {
		t.Errorf("only %d acknowledged appends: too little to judge", rep.Acked)
	}
}

// watchStale watches partition p's replicas as c lists them (what
// `neptune status` shows) from since until node's primary claim is
// marked stale or 5 s passed.
func watchStale(c *neptune.Client, p int, node string, since time.Time) <-chan staleMark {
	out := make(chan staleMark, 1)
	go func() {
		for time.Since(since) < 5*time.Second {
			for _, pi := range c.Partitions() {
				for _, r := range pi.Replicas {
					if pi.Partition == p && r.Node == node && r.Role == "primary" && r.Stale != "" {
						out <- staleMark{after: time.Since(since), why: r.Stale}
						return
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		out <- staleMark{after: -1}
	}()
	return out
}

func respBody(r *neptune.Response) string {
	if r == nil {
		return ""
	}
	return string(r.Body)
}

// appProcs starts three node processes prefix1..prefix3 hosting service (a
// built-in app, on storage under each node's own data dir) partitions
// 0-(parts-1), replicated over all three at level with the given extra YAML
// lines, and waits until every partition has a primary (level 1: is known).
func appProcs(t *testing.T, ctx context.Context, prefix, service string, parts, level int, extra string) (*localcluster.Cluster, []*localcluster.Node, *neptune.Client) {
	t.Helper()
	return seededProcs(t, ctx, prefix, service, parts, level, extra, nil, nil)
}

func startGateway(t *testing.T, ctx context.Context, dir, name, config string, args ...string) *gatewayProc {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(neptuneBinary(t), append([]string{"gateway", "--config", path, "--log-level", "info"}, args...)...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
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
		if !ok {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("gateway %s exited before it was up:\n%s", name, b)
		}
		return &gatewayProc{cmd: cmd, http: m[1], metrics: m[2], goss: m[3]}
	case <-time.After(15 * time.Second):
		t.Fatalf("gateway %s not up after 15s", name)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return nil
}

// gatewayStatus reads a gateway's status as an operator (HTTPS on a
// secured cluster).
func gatewayStatus(cl *localcluster.Cluster, addr string) (gateway.Status, error) {
	var st gateway.Status
	hc, scheme, err := cl.HTTP("operator/operator")
	if err != nil {
		return st, err
	}
	resp, err := hc.Get(scheme + "://" + addr + gateway.StatusPath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// load sends rate requests per second of sub through the gateways, with
// weights (one per gateway), until ctx ends; outcomes go to out.
func load(ctx context.Context, wg *sync.WaitGroup, hc *http.Client, sub string, rate float64, gws []string, weights []float64, body []byte, out chan<- outcome) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		credit := make([]float64, len(gws))
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Weighted round robin over the gateways still listed.
			best := 0
			for i := range gws {
				credit[i] += weights[i]
				if credit[i] > credit[best] {
					best = i
				}
			}
			credit[best]--
			gw := gws[best]
			wg.Add(1)
			go func() {
				defer wg.Done()
				at := time.Now()
				req, _ := http.NewRequest("POST", "http://"+gw+"/echo", bytes.NewReader(body))
				req.Header.Set("X-API-Key", sub+"-key")
				code := 0
				if resp, err := hc.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				out <- outcome{sub, gw, at, code}
			}()
		}
	}()
}

func drain(c chan outcome) []outcome {
	var out []outcome
	for {
		select {
		case o := <-c:
			out = append(out, o)
		default:
			return out
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// startKV starts one in-process node hosting kv with rep's partitions for
// id (all of p0 when rep is nil), joining join.
func startKV(t *testing.T, id, dataDir string, rep *neptune.Replication, join []string, mut func(*neptune.NodeConfig)) (*neptune.Node, error) {
	t.Helper()
	cfg := neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, DataDir: dataDir}
	if mut != nil {
		mut(&cfg)
	}
	nd, err := neptune.NewNode(cfg)
	if err != nil {
		return nil, err
	}
	svc := kv.New().Service()
	parts := []int{0}
	if rep != nil {
		r := *rep
		svc.Replication = &r
		parts = r.PartitionsOn(id, parts)
	}
	if err := nd.Register(svc, parts...); err != nil {
		return nil, err
	}
	if err := nd.Start(context.Background()); err != nil {
		nd.Close()
		return nil, err
	}
	t.Cleanup(func() { nd.Close() })
	return nd, nil
}

// runListAppend runs the list-append workload on three node processes at
// level while primaries are SIGKILLed and restarted, and checks the
// history: no duplicate, no lost acknowledged append, identical replicas.
func runListAppend(t *testing.T, level int, d, killEvery time.Duration) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
	defer cancel()
	cfg := appendbench.Config{Exe: neptuneBinary(t), Dir: t.TempDir(), Level: level, Parts: 2, Appenders: 24, Keys: 8,
		Duration: d, KillEvery: killEvery, Down: 400 * time.Millisecond}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cl, err := appendbench.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("level %d: %d appends, %d kills, %d retries in %v\n%v", level, res.Appends, res.Kills, res.Retries, res.Elapsed.Round(time.Millisecond), res.Report)
	rep := res.Report
	if rep.Count(check.Duplicated) != 0 || rep.Count(check.Lost) != 0 || rep.Count(check.Divergent) != 0 || !rep.Valid() {
		t.Errorf("list-append anomalies:\n%v", rep)
	}
	if res.Kills < 2 || rep.Acked < 1000 {
		t.Errorf("too little happened to judge: %d kills, %d acknowledged appends", res.Kills, rep.Acked)
	}
}

// replicasOf lists the nodes announcing a replica of kv partition p.
func replicasOf(c *neptune.Client, p int) []string {
	var out []string
	for _, pi := range c.Partitions() {
		if pi.Service == "kv" && pi.Partition == p {
			for _, r := range pi.Replicas {
				out = append(out, r.Node)
			}
		}
	}
	return out
}

// verifyOn waits until the replicas of p on nodes have one digest, then
// checks that each holds every acknowledged key.
func verifyOn(t *testing.T, ctx context.Context, cl *localcluster.Cluster, c *neptune.Client, p int, nodes []string, acked []string) {
	t.Helper()
	conns, err := cl.Conns("client/client")
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	addrs := nodeAddrs(ctx, c)
	var digests map[string]string
	for deadline := time.Now().Add(15 * time.Second); ; {
		digests = map[string]string{}
		for _, id := range nodes {
			d := "unreachable"
			if cc, err := conns.ClientFor(id, addrs[id]); err == nil {
				out, err := cc.Call(ctx, &pb.CallRequest{Service: "kv", Partition: int32(p), Method: "digest", Mode: pb.Mode_MODE_READ})
				if d = ""; err != nil {
					d = err.Error()
				} else {
					d = string(out.Body)
				}
			}
			digests[id] = d
		}
		if len(check.Convergence(digests)) == 0 && !strings.Contains(digests[nodes[0]], "rror") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d did not converge on %v: %v", p, nodes, digests)
		}
		time.Sleep(100 * time.Millisecond)
	}
	have := map[string]map[string]bool{}
	for _, id := range nodes {
		got, err := present(ctx, cl, id, addrs[id], p, acked)
		if err != nil {
			t.Fatal(err)
		}
		have[id] = got
	}
	if vs := check.Durability(acked, have); len(vs) > 0 {
		t.Fatalf("partition %d: %d violations, first: %v", p, len(vs), vs[0])
	}
	t.Logf("partition %d: %d acknowledged writes on %v, digests %v", p, len(acked), nodes, digests)
}

// largeWrites fires n concurrent 15 MiB kv puts of one key (each under
// the 16 MiB message limit) at partition 0 and sorts how they ended.
func largeWrites(ctx context.Context, c *neptune.Client, n int) (ok int, refused, other []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			body := append([]byte("big="), bytes.Repeat([]byte{'x'}, 15<<20)...)
			_, err := c.Call(ctx, "kv", 0, "put", body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, neptune.ErrOverloaded):
				refused = append(refused, err)
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	return ok, refused, other
}

// startEchoNodes starts one node per registerer (IDs m0, m1, ...), each
// hosting echo partition i and serving /metrics, and waits until the
// first sees them all.
func startEchoNodes(t *testing.T, regs ...prometheus.Registerer) []*neptune.Node {
	t.Helper()
	var nodes []*neptune.Node
	var join []string
	for i, reg := range regs {
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: fmt.Sprint("m", i), Join: join, AnnounceInterval: 100 * time.Millisecond,
			AnnounceTTL: time.Second, MetricsAddr: "127.0.0.1:0", Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(echo.Service(), i); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	c := nodes[0].Client()
	waitFor(t, 5*time.Second, func() bool { return len(c.Members(context.Background(), 50*time.Millisecond)) == len(regs) })
	for i := range regs {
		if _, err := c.Call(context.Background(), "echo", i, "echo", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

func scrape(t *testing.T, nd *neptune.Node) string {
	t.Helper()
	resp, err := http.Get("http://" + nd.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startCluster starts n in-process nodes hosting echo (all partitions 0..1)
// and kv partition i on node i; it waits until every node sees every other.
func startCluster(t *testing.T, n int) []*neptune.Node {
	t.Helper()
	return startNodes(t, n, "n", func(nd *neptune.Node, i int) error {
		if err := nd.Register(echo.Service(), 0, 1); err != nil {
			return err
		}
		return nd.Register(kv.New().Service(), i)
	})
}

// startNodes starts n in-process nodes named prefix0..., lets register
// host their services, and waits until every node sees every other.
func startNodes(t *testing.T, n int, prefix string, register func(nd *neptune.Node, i int) error) []*neptune.Node {
	t.Helper()
	ctx := context.Background()
	var nodes []*neptune.Node
	var join []string
	for i := range n {
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: fmt.Sprintf("%s%d", prefix, i), Join: join, AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := register(nd, i); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	waitFor(t, 5*time.Second, func() bool {
		for _, nd := range nodes {
			if len(nd.Client().Members(ctx, 50*time.Millisecond)) != n {
				return false
			}
		}
		return true
	})
	return nodes
}

func waitFor(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replProcs starts three node processes r1..r3 hosting kv partitions 0-1,
// each replicated on all three at level.
func replProcs(t *testing.T, ctx context.Context, level int) (*localcluster.Cluster, []*localcluster.Node, *neptune.Client) {
	t.Helper()
	return appProcs(t, ctx, "r", "kv", 2, level, "")
}

// primaryOf is partition p's announced primary of the highest epoch.
// waitPrimary waits up to 10 s for c to know partition p's primary (it
// may be electing after a kill or a restart) and returns it.
func waitPrimary(t *testing.T, c *neptune.Client, p int) string {
	t.Helper()
	var primary string
	waitFor(t, 10*time.Second, func() bool { primary = primaryOf(c, p); return primary != "" })
	return primary
}

// dialMembers dials an insecure client to cl's insecure nodes (entries
// living 10 s, as the nodes announce them), closed at t's end, and waits
// up to limit for it to see members of them.
func dialMembers(t *testing.T, ctx context.Context, cl *localcluster.Cluster, members int, limit time.Duration) *neptune.Client {
	t.Helper()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(), AnnounceTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitFor(t, limit, func() bool { return len(memberIDs(ctx, c)) == members })
	return c
}

func primaryOf(c *neptune.Client, p int) string {
	best, epoch := "", uint64(0)
	for _, pi := range c.Partitions() {
		if pi.Partition != p {
			continue
		}
		for _, r := range pi.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				best, epoch = r.Node, r.Epoch
			}
		}
	}
	return best
}

// present asks one node directly which of keys its replica of p holds.
func present(ctx context.Context, lc *localcluster.Cluster, node, addr string, p int, keys []string) (map[string]bool, error) {
	conns, err := lc.Conns("client/client")
	if err != nil {
		return nil, err
	}
	defer conns.Close()
	cl, err := conns.ClientFor(node, addr)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, k := range keys {
		// Only the store's own "not found" says a key is absent; any other
		// error (a connection still being set up on a loaded machine) is
		// retried, and reported if it persists, never counted as a loss.
		var err error
		for try := 0; try < 20; try++ {
			_, err = cl.Call(ctx, &pb.CallRequest{Service: "kv", Partition: int32(p), Method: "get", Mode: pb.Mode_MODE_READ, Body: []byte(k)})
			if err == nil || strings.Contains(err.Error(), kv.ErrNotFound.Error()) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		switch {
		case err == nil:
			out[k] = true
		case strings.Contains(err.Error(), kv.ErrNotFound.Error()):
			out[k] = false
		default:
			return nil, fmt.Errorf("read %q at %s (%s): %w", k, node, addr, err)
		}
	}
	return out, nil
}

func nodeAddrs(ctx context.Context, c *neptune.Client) map[string]string {
	out := map[string]string{}
	for _, m := range c.Members(ctx, 0) {
		out[m.Node] = m.RPCAddr
	}
	return out
}

// verifyReplicas waits until every replica of partitions 0 and 1 has the
// same digest, then checks with the history checker that it holds every
// acknowledged write.
func verifyReplicas(t *testing.T, ctx context.Context, cl *localcluster.Cluster, c *neptune.Client, acked map[int][]string, local bool) {
	t.Helper()
	var addrs map[string]string
	conns, err := cl.Conns("client/client")
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	for p := range 2 {
		var digests map[string]string
		began := time.Now()
		deadline := began.Add(15 * time.Second)
		for {
			addrs = nodeAddrs(ctx, c)
			digests = map[string]string{}
			var failed []string // a digest not read is never "converged"
			for id, a := range addrs {
				d, err := digestOf(ctx, conns, id, a, p)
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", id, err))
					continue
				}
				if local && strings.Contains(d, "sha256") {
					d = d[strings.Index(d, "sha256"):]
				}
				digests[id] = d
			}
			if len(failed) == 0 && len(digests) == 3 && len(check.Convergence(digests)) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d did not converge: %v; digests not read: %v", p, check.Convergence(digests), failed)
			}
			time.Sleep(100 * time.Millisecond)
		}
		have := map[string]map[string]bool{}
		for id, a := range addrs {
			got, err := present(ctx, cl, id, a, p, acked[p])
			if err != nil {
				t.Fatal(err)
			}
			have[id] = got
		}
		if vs := check.Durability(acked[p], have); len(vs) > 0 {
			t.Fatalf("partition %d: %d violations, first: %v", p, len(vs), vs[0])
		}
		t.Logf("partition %d: converged after %v; %d acknowledged writes on all 3 replicas; digests %v", p, time.Since(began).Round(time.Millisecond), len(acked[p]), digests)
	}
}

// replicatedCluster starts n in-process nodes hosting kv with rep (placed
// over all nodes), each with its own data dir.
func replicatedCluster(t *testing.T, n int, rep neptune.Replication, partitions []int) []*neptune.Node {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		rep.Nodes = append(rep.Nodes, fmt.Sprintf("r%d", i))
	}
	var nodes []*neptune.Node
	var join []string
	for i := range n {
		id := rep.Nodes[i]
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond,
			AnnounceTTL: time.Second, DataDir: filepath.Join(t.TempDir(), id)})
		if err != nil {
			t.Fatal(err)
		}
		svc := kv.New().Service()
		r := rep
		svc.Replication = &r
		if err := nd.Register(svc, rep.PartitionsOn(id, partitions)...); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	return nodes
}

// writeRetrying retries a write while the error is retryable (failover).
func writeRetrying(ctx context.Context, c *neptune.Client, sess *neptune.Session, p int, body string) (*neptune.Response, error) {
	for {
		resp, err := c.Call(ctx, "kv", p, "put", []byte(body), neptune.WithSession(sess))
		if err == nil || !neptune.Retryable(err) || ctx.Err() != nil {
			return resp, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// digestAt asks one insecure node directly for a partition's digest.
func digestAt(ctx context.Context, rpcAddr string, p int) (string, error) {
	conns := transport.NewConns()
	defer conns.Close()
	return digestOf(ctx, conns, "", rpcAddr, p)
}

// digestOf asks node at rpcAddr through conns (secured or not) for a
// partition's digest.
func digestOf(ctx context.Context, conns *transport.Conns, node, rpcAddr string, p int) (string, error) {
	cl, err := conns.ClientFor(node, rpcAddr)
	if err != nil {
		return "", err
	}
	out, err := cl.Call(ctx, &pb.CallRequest{Service: "kv", Partition: int32(p), Method: "digest", Mode: pb.Mode_MODE_READ})
	if err != nil {
		return "", err
	}
	return string(out.Body), nil
}

func rpcAddrs(nodes []*neptune.Node) []string {
	var out []string
	for _, nd := range nodes {
		out = append(out, nd.RPCAddr())
	}
	return out
}

// converged reports whether every replica of p holds wantKeys keys and the
// same contents (at levels 2 and 3 also the same LSN; LSNs are local
// positions at level 1, so local says to ignore them).
func converged(ctx context.Context, addrs []string, p, wantKeys int, local bool) (bool, []string) {
	var ds []string
	for _, a := range addrs {
		d, err := digestAt(ctx, a, p)
		if err != nil {
			return false, append(ds, err.Error())
		}
		ds = append(ds, d)
	}
	want := fmt.Sprintf("keys=%d ", wantKeys)
	for _, d := range ds {
		if !strings.HasPrefix(d, want) {
			return false, ds
		}
		if local {
			d = d[strings.Index(d, "sha256"):]
		}
		first := ds[0]
		if local {
			first = first[strings.Index(first, "sha256"):]
		}
		if d != first {
			return false, ds
		}
	}
	return true, ds
}

// copyFile copies src to dst (mode 0600).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// conns returns connections presenting id's certificate from dir.
func secConns(t *testing.T, dir string, id pki.Identity) *transport.Conns {
	t.Helper()
	m, err := security.Load(security.Config{Dir: dir, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Transport().NewConns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mustRefuse fails unless err is set and, if code is not OK, carries it.
func mustRefuse(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted", what)
	}
	if code != codes.OK && status.Code(err) != code && !strings.Contains(err.Error(), code.String()) {
		t.Fatalf("%s: refused with %v, want %v", what, err, code)
	}
}

// refusedCount sums neptune_security_refused_total{reason} over the nodes'
// /metrics (every reason if reason is "").
func refusedCount(t *testing.T, ctx context.Context, hc *http.Client, scheme string, metricsAddrs map[string]string, reason string) float64 {
	t.Helper()
	want := fmt.Sprintf("neptune_security_refused_total{reason=%q} ", reason)
	if reason == "" {
		want = "neptune_security_refused_total{"
	}
	sum := 0.0
	for node, addr := range metricsAddrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s /metrics: %v", node, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, want); ok {
				if reason == "" {
					_, v, _ = strings.Cut(v, "} ")
				}
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %q: %v", node, line, err)
				}
				sum += f
			}
		}
	}
	return sum
}

// mustLog waits until n's log holds a WARN line about a refusal
// containing what.
func mustLog(t *testing.T, n *localcluster.Node, what string) {
	t.Helper()
	found := func() bool {
		b, _ := os.ReadFile(n.LogPath)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "security: refused a peer") && strings.Contains(line, what) {
				t.Logf("%s logs: %s", n.Spec.ID, line)
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); !found(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's log has no WARN refusal line with %q", n.Spec.ID, what)
		}
	}
}

// startNodeProcess runs the neptune binary with args, its stderr to
// logPath; up is closed at its "up" line, exited receives Wait's result.
// The process is killed when the test ends.
func startNodeProcess(t *testing.T, logPath string, args ...string) (*exec.Cmd, <-chan struct{}, <-chan error) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(neptuneBinary(t), args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " up: ") {
				close(up)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	return cmd, up, exited
}

// newestFile is the last file in dir, by name, ending in suffix.
func newestFile(t *testing.T, dir, suffix string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) && e.Name() > last {
			last = e.Name()
		}
	}
	if last == "" {
		t.Fatalf("no *%s in %s", suffix, dir)
	}
	return filepath.Join(dir, last)
}

// middleRecord is where the middle record of WAL segment path (contents
// b) starts.
func middleRecord(t *testing.T, path string, b []byte) int64 {
	t.Helper()
	num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	r := record.NewReader(bytes.NewReader(b), pebble.FileNum(num))
	var offs []int64
	for {
		off := r.Offset()
		rec, err := r.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil {
			break
		}
		offs = append(offs, off)
	}
	if len(offs) < 3 {
		t.Fatalf("%d records in %s", len(offs), path)
	}
	return offs[len(offs)/2]
}

// tourLines returns the lines of the README's shell blocks marked as the
// tour: a ```sh fence right after a line starting "<!-- tour", in order.
func tourLines(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	marked, in := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case in && strings.HasPrefix(l, "```"):
			in = false
		case in:
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		case marked && l == "```sh":
			in, marked = true, false
		default:
			marked = strings.HasPrefix(l, "<!-- tour")
		}
	}
	return lines
}

func ptr(s string) *string { return &s }

// runTourLine runs one foreground line in bash and returns its stdout and
// stderr; an error for a non-zero exit or after a minute. With quit, it
// types q once stdout shows quit.
func runTourLine(dir string, env []string, line, quit string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", line)
	c.Dir, c.Env = dir, env
	var mu sync.Mutex
	var out, errOut bytes.Buffer
	c.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	c.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return errOut.Write(p) })
	stdin, err := c.StdinPipe()
	if err != nil {
		return "", "", err
	}
	if err := c.Start(); err != nil {
		return "", "", err
	}
	if quit == "" {
		stdin.Close()
	} else {
		go func() {
			defer stdin.Close()
			for ctx.Err() == nil {
				mu.Lock()
				seen := strings.Contains(out.String(), quit)
				mu.Unlock()
				if seen {
					io.WriteString(stdin, "q")
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	err = c.Wait()
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after a minute")
	}
	return out.String(), errOut.String(), err
}

// waitTour waits, for up to 30 s, until a background line's ports
// accept, its URLs answer 200 and, if asked, every partition on n1's
// dashboard has a primary; it fails at once if the process exits.
func waitTour(exited <-chan struct{}, s tourStep, pkiDir string) error {
	ready := func() error {
		for _, a := range s.ports {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				return err
			}
			conn.Close()
		}
		hc := &http.Client{Timeout: time.Second}
		for _, u := range s.urls {
			resp, err := hc.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
		}
		if s.primaries {
			// The dashboard is HTTPS on the tour's secured cluster and
			// admits operators: the tour's alice.
			alice := pki.Identity{Role: pki.RoleOperator, Name: "alice"}
			src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(pkiDir, alice), Expect: alice})
			if err != nil {
				return err
			}
			hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: src.HTTPSClientConfig()}}
			resp, err := hc.Get("https://127.0.0.1:9100/api/dashboard/partitions")
			if err != nil {
				return err
			}
			var v struct {
				Total     int `json:"total"`
				NoPrimary int `json:"no_primary"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if v.Total == 0 || v.NoPrimary > 0 {
				return fmt.Errorf("partitions: %d, %d without a primary", v.Total, v.NoPrimary)
			}
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bgLogs is the output of every background line so far, for a failure.
func bgLogs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "bg-*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "\n--- %s:\n%s", filepath.Base(f), data)
	}
	return b.String()
}

// listappendNodes starts n in-process nodes hosting listappend partition
// 0, replicated at level on all of them, each durable in its own data dir.
func listappendNodes(t *testing.T, n, level int) []*neptune.Node {
	t.Helper()
	rep := neptune.Replication{Level: level, Degree: n}
	for i := range n {
		rep.Nodes = append(rep.Nodes, fmt.Sprintf("la%d", i))
	}
	var nodes []*neptune.Node
	var join []string
	for i := range n {
		id := rep.Nodes[i]
		dir := filepath.Join(t.TempDir(), id)
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join,
			AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		st, err := listappend.Open(filepath.Join(dir, "store"))
		if err != nil {
			t.Fatal(err)
		}
		svc := st.Service()
		r := rep
		svc.Replication = &r
		if err := nd.Register(svc, 0); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close(); st.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	c := nodes[0].Client()
	waitFor(t, 10*time.Second, func() bool {
		for _, p := range c.Partitions() {
			for _, r := range p.Replicas {
				if r.Role == "primary" {
					return true
				}
			}
		}
		return false
	})
	return nodes
}

// listOf reads key's list of partition 0 (from the primary: a write
// stream's answers mean applied there).
func listOf(ctx context.Context, t *testing.T, c *neptune.Client, key string, opts ...neptune.CallOption) []uint64 {
	t.Helper()
	resp, err := c.Call(ctx, listappend.Name, 0, "read", []byte(key), opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := listappend.DecodeList(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func seqList(from, to int) []uint64 {
	var l []uint64
	for i := from; i <= to; i++ {
		l = append(l, uint64(i))
	}
	return l
}

// securedKVCluster starts three secured in-process nodes (a1..a3) hosting
// kv partitions 0 and 1 at level 3 on all of them, serving their HTTP
// listener, and returns them with the directory of the cluster's
// material (a CA, node, operator and scraper certificates).
func securedKVCluster(t *testing.T) ([]*neptune.Node, string) {
	t.Helper()
	dir := t.TempDir()
	if err := security.Scratch(dir, "alerts", "a1", "a2", "a3"); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.IssueFiles(dir, pki.Identity{Role: pki.RoleScraper, Name: "prom"}, false, pki.IssueOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := neptune.Replication{Level: 3, Degree: 3, Nodes: []string{"a1", "a2", "a3"}}
	var nodes []*neptune.Node
	var join []string
	for _, id := range rep.Nodes {
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Dir: dir}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond,
			AnnounceTTL: time.Second, DataDir: filepath.Join(t.TempDir(), id), MetricsAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		svc := kv.New().Service()
		r := rep
		svc.Replication = &r
		if err := nd.Register(svc, 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	return nodes, dir
}

// httpsAs is a client presenting id's certificate from dir.
func httpsAs(t *testing.T, dir string, id pki.Identity) *http.Client {
	t.Helper()
	src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(dir, id), Expect: id})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: src.HTTPSClientConfig()}}
}

func getStatus(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrapeFamilies reads an instance's /metrics as the scraper.
func scrapeFamilies(t *testing.T, hc *http.Client, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := hc.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func constant(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64) + "+0x" + strconv.Itoa(steps)
}

// withKey is labels plus k=v.
func withKey(labels map[string]string, k, v string) map[string]string {
	out := maps.Clone(labels)
	out[k] = v
	return out
}

// seededProcs is appProcs with seed, if set, called with each node's
// data directory before the node starts (a restore test seeds it), and
// storage, if set, naming node i's (0-2) storage for the service (a
// database of its own: services[0].storage).
func seededProcs(t *testing.T, ctx context.Context, prefix, service string, parts, level int, extra string, seed func(dataDir string), storage func(i int) string) (*localcluster.Cluster, []*localcluster.Node, *neptune.Client) {
	t.Helper()
	dir := t.TempDir()
	config := func(storageLine string) string {
		return fmt.Sprintf("services:\n  - name: %[1]s\n    partitions: 0-%[2]d\n%[6]s    replication:\n      level: %[3]d\n      nodes: [%[4]s1, %[4]s2, %[4]s3]\n      degree: 3\n%[5]s",
			service, parts-1, level, prefix, extra, storageLine)
	}
	cfgs := make([]string, 3)
	for i := range cfgs {
		cfgs[i] = filepath.Join(dir, service+".yaml")
		line := ""
		if storage != nil {
			cfgs[i] = filepath.Join(dir, fmt.Sprintf("%s-%s%d.yaml", service, prefix, i+1))
			line = fmt.Sprintf("    storage: %q\n", storage(i))
		}
		if err := os.WriteFile(cfgs[i], []byte(config(line)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := localcluster.NewSecure(neptuneBinary(t), dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var nodes []*localcluster.Node
	for i := range 3 {
		id := fmt.Sprintf("%s%d", prefix, i+1)
		if seed != nil {
			seed(filepath.Join(dir, id))
		}
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"-config", cfgs[i], "-data-dir", filepath.Join(dir, id),
			"-announce-interval", "200ms", "-announce-ttl", "1s"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: cl.ClientSecurity("client/client"), Join: cl.Seeds(), AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitFor(t, 20*time.Second, func() bool {
		if level == 1 {
			return len(c.Partitions()) == parts
		}
		for p := range parts {
			if primaryOf(c, p) == "" {
				return false
			}
		}
		return true
	})
	return cl, nodes, c
}

func testBackupRestore(t *testing.T, prefix string, w backupWorkload) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	// On PostgreSQL every node has a database (schema) of its own; the
	// restored cluster's nodes get the lost ones' databases back as they
	// were left, writes after the backup included: restoring replaces a
	// partition's rows.
	var storage func(i int) string
	if w.postgres {
		dsns := []string{pgSchema(t), pgSchema(t), pgSchema(t)}
		storage = func(i int) string { return dsns[i] }
	}
	exe := neptuneBinary(t)
	cl, nodes, c := seededProcs(t, ctx, prefix, w.service, backupParts, 2, "", nil, storage)
	neptuneCmd := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
		return string(out), err
	}

	// Writers under load; each write's start and acknowledgement times.
	var (
		mu      sync.Mutex
		started = map[int]time.Time{}
		acked   = map[int]time.Time{}
		next    atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1))
				mu.Lock()
				started[i] = time.Now()
				mu.Unlock()
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := w.write(callCtx, c, i)
				cancel()
				if err == nil {
					mu.Lock()
					acked[i] = time.Now()
					mu.Unlock()
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)

	file := filepath.Join(t.TempDir(), w.service+".nbk")
	began := time.Now()
	out, err := neptuneCmd(append([]string{"backup", "--join", strings.Join(cl.Seeds(), ","), "--service", w.service, "--file", file},
		cl.SecurityArgs("operator/operator")...)...)
	ended := time.Now()
	t.Logf("neptune backup (%v):\n%s", ended.Sub(began).Round(time.Millisecond), out)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("neptune backup: %v", err)
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	var before, after int
	for i, at := range acked {
		if at.Before(began) {
			before++
		}
		if started[i].After(ended) {
			after++
		}
	}
	mu.Unlock()
	t.Logf("%d writes acknowledged before the backup began, %d started after it ended, %d in all", before, after, len(acked))
	if before < 50 || after < 10 {
		t.Fatalf("too little load to judge: %d before, %d after", before, after)
	}

	// A damaged backup is refused before anything is written.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]byte{
		"flipped":   append([]byte(nil), b...),
		"truncated": b[:len(b)-len(b)/3],
	}
	damaged["flipped"][len(b)-len(b)/4] ^= 0x40
	for name, bad := range damaged {
		path := filepath.Join(t.TempDir(), name+".nbk")
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		dd := filepath.Join(t.TempDir(), "data")
		out, err := neptuneCmd("restore", "--file", path, "--data-dir", dd)
		t.Logf("neptune restore of a %s backup: %v\n%s", name, err, out)
		if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, "backup file damaged") {
			t.Errorf("restore of a %s backup: err %v, output %q: want it refused as damaged", name, err, out)
		}
		if _, err := os.Stat(replication.RestoreFile(dd, w.service)); err == nil {
			t.Errorf("restore of a %s backup seeded %s", name, dd)
		}
	}

	// The cluster is lost: every node and its data.
	c.Close()
	for _, n := range nodes {
		n.Kill()
	}
	cl.Close()
	for _, n := range nodes {
		if err := os.RemoveAll(filepath.Join(filepath.Dir(n.LogPath), n.Spec.ID)); err != nil {
			t.Fatal(err)
		}
	}

	// A new cluster, seeded from the backup.
	_, _, c2 := seededProcs(t, ctx, prefix+"r", w.service, backupParts, 2, "", func(dataDir string) {
		out, err := neptuneCmd("restore", "--file", file, "--data-dir", dataDir)
		if err != nil {
			t.Fatalf("neptune restore: %v\n%s", err, out)
		}
		t.Logf("neptune restore --data-dir %s:\n%s", filepath.Base(dataDir), out)
	}, storage)
	counts, err := w.count(ctx, c2, int(next.Load()))
	if err != nil {
		t.Fatal(err)
	}
	var missing, doubled, later []int
	mu.Lock()
	for i, at := range acked {
		if at.Before(began) && counts[i] == 0 {
			missing = append(missing, i)
		}
	}
	for i, n := range counts {
		if n > 1 {
			doubled = append(doubled, i)
		}
		if started[i].After(ended) {
			later = append(later, i)
		}
	}
	mu.Unlock()
	t.Logf("restored: %d writes; %d acknowledged before the backup missing, %d doubled, %d started after it present", len(counts), len(missing), len(doubled), len(later))
	if len(missing) > 0 || len(doubled) > 0 || len(later) > 0 {
		t.Errorf("missing %v, doubled %v, from after the backup %v", head(missing), head(doubled), head(later))
	}

	// A client's retry of a write the backup holds is not applied again.
	var retried []int
	mu.Lock()
	for i, at := range acked {
		if at.Before(began) && len(retried) < 20 {
			retried = append(retried, i)
		}
	}
	mu.Unlock()
	for _, i := range retried {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := w.write(callCtx, c2, i)
		cancel()
		if err != nil {
			t.Fatalf("retry of write %d: %v", i, err)
		}
	}
	if counts, err = w.count(ctx, c2, int(next.Load())); err != nil {
		t.Fatal(err)
	}
	for _, i := range retried {
		if counts[i] != 1 {
			t.Errorf("write %d is in the state %d times after its retry, want once", i, counts[i])
		}
	}
}

// head is at most the first 10 of xs.
func head(xs []int) []int { return xs[:min(len(xs), 10)] }

func spansOf(all tracetest.SpanStubs, traceID string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range all {
		if s.SpanContext.TraceID().String() == traceID {
			out = append(out, s)
		}
	}
	return out
}

func dumpSpans(spans tracetest.SpanStubs, byID map[trace.SpanID]tracetest.SpanStub) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s (%v) parent %q\n", s.Name, s.SpanKind, byID[s.Parent.SpanID()].Name)
	}
	return b.String()
}

// gauge is the value of name's series with labels in nd's /metrics (plain
// HTTP: an insecure node), and whether there is one.
func gauge(t *testing.T, nd *neptune.Node, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + nd.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
metric:
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue metric
			}
		}
		if mfs[name].GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// dumpLogsOnFailure prints, when t failed, each node log's lines about
// replica roles, learners, snapshots and errors (the last 40 of each), so a
// failure seen once in CI can be read afterwards.
func dumpLogsOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	keepDir := os.Getenv("NEPTUNE_TEST_KEEP_LOGS") // whole logs, for a failure too rare to rerun
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		if keepDir != "" {
			name := strings.NewReplacer("/", "_").Replace(t.Name()) + "-" + filepath.Base(f)
			if err := os.WriteFile(filepath.Join(keepDir, name), b, 0o644); err == nil {
				t.Logf("kept %s", filepath.Join(keepDir, name))
			}
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "learner") || strings.Contains(l, "snapshot") || strings.Contains(l, "role changed") ||
				strings.Contains(l, "replica set") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
				keep = append(keep, l)
			}
		}
		t.Logf("--- %s (%d lines kept):\n%s", filepath.Base(f), len(keep), strings.Join(keep[max(0, len(keep)-40):], "\n"))
	}
}

// pgSchema is a DSN naming a fresh schema on the PostgreSQL server of
// NEPTUNE_TEST_PG_DSN, dropped at t's end; without the variable the test
// is skipped, or fails when CI is set: CI must run the PostgreSQL tests
// (as apps/internal/appkit/appkittest does for the apps' own tests).
func pgSchema(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("NEPTUNE_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("NEPTUNE_TEST_PG_DSN is not set but CI is: the PostgreSQL tests must run in CI (.ci/run starts a server)")
		}
		t.Skip("PostgreSQL tests skipped: set NEPTUNE_TEST_PG_DSN (e.g. postgres://neptune:neptune@127.0.0.1:5432/neptune) to run them")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("NEPTUNE_TEST_PG_DSN: %v", err)
	}
	defer db.Close()
	schema := fmt.Sprintf("ct_%d_%d", os.Getpid(), pgSeq.Add(1))
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema on NEPTUNE_TEST_PG_DSN: %v", err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("pgx", dsn); err == nil {
			_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
			db.Close()
		}
	})
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

var pgSeq atomic.Int64

// microProcs starts four node processes n1..n4 hosting micro partitions
// 0-7, two each, and a client that sees them all; the cluster and the
// client close with the test.
func microProcs(t *testing.T, ctx context.Context) ([]*localcluster.Node, *neptune.Client) {
	t.Helper()
	cl := localcluster.New(neptuneBinary(t), t.TempDir())
	t.Cleanup(cl.Close)
	var nodes []*localcluster.Node
	for i := range 4 {
		n, err := cl.Start(ctx, localcluster.Spec{
			ID:       fmt.Sprintf("n%d", i+1),
			Services: []string{fmt.Sprintf("micro:%d-%d", 2*i, 2*i+1)},
			Args:     []string{"-announce-interval", "200ms", "-announce-ttl", "10s"},
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes, dialMembers(t, ctx, cl, 4, 10*time.Second)
}
