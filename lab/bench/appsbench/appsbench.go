// Package appsbench is `neptune bench apps`: what the applications cost
// on their storage and behind the HTTP adapter, and how auction and pcache
// scale with the replication degree (dissertation Figs 5.5, 5.6).
package appsbench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Sections are the parts of `neptune bench apps`, in the order they run:
// storage (the forum on SQLite vs PostgreSQL), adapter (an HTTP program
// direct vs through a node), replication (Figs 5.5/5.6).
var Sections = []string{"storage", "adapter", "replication"}

// Config are the knobs of `neptune bench apps`.
type Config struct {
	// Sections lists the parts to run, of Sections.
	Sections []string
	// Cell is the measuring time per contender per round of the storage
	// and adapter sections, which run Concurrency callers in their
	// concurrent cells. Every section runs Rounds interleaved rounds.
	Cell        time.Duration
	Rounds      int
	Concurrency int
	// PGDSN is the PostgreSQL server for the forum; empty skips PostgreSQL.
	PGDSN string
	// Work is the service time of the adapter's second HTTP route.
	Work time.Duration
	// Degrees, Nodes (the node counts), ReplCell and Clients (per 4
	// nodes) shape Figs 5.5/5.6; a degree above a node count skips that
	// cell.
	Degrees  []int
	Nodes    []int
	ReplCell time.Duration
	Clients  int
	// CPU, when positive, runs Figs 5.5/5.6 on node processes each
	// confined to this many cores (lab/cpuquota; root only), so that a
	// node is CPU-bound as the paper's machines were, and judges them;
	// zero runs them on in-process nodes, which share the machine's cores
	// (not judged: a replica there adds work and no capacity).
	CPU float64
	// Out is the directory for the Figs 5.5/5.6 CSV and SVG (it must
	// exist).
	Out string
}

// DefaultConfig runs every section; PostgreSQL comes from
// $NEPTUNE_TEST_PG_DSN.
func DefaultConfig() Config {
	return Config{Sections: Sections, Cell: time.Second, Rounds: 3, Concurrency: 8, PGDSN: os.Getenv("NEPTUNE_TEST_PG_DSN"),
		Work: time.Millisecond, Degrees: []int{1, 2, 3, 4}, Nodes: []int{4}, ReplCell: 2 * time.Second, Clients: 16, Out: "out"}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, s := range c.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("appsbench: unknown section %q (want %v)", s, Sections)
		}
	}
	switch {
	case c.Cell <= 0 || c.ReplCell <= 0 || c.Rounds < 1 || c.Concurrency < 1 || c.Clients < 1:
		return errors.New("appsbench: cells must be > 0, rounds, concurrency and clients >= 1")
	case len(c.Degrees) == 0 || slices.Min(c.Degrees) < 1 || len(c.Nodes) == 0 || slices.Min(c.Degrees) > slices.Max(c.Nodes):
		return errors.New("appsbench: degrees and nodes must not be empty, and some degree in 1..the most nodes")
	case c.CPU < 0:
		return errors.New("appsbench: cpu must not be negative")
	}
	if c.CPU > 0 && slices.Contains(c.Sections, "replication") {
		n := slices.Max(c.Nodes)
		if err := cpuquota.Fits(slices.Repeat([]float64{c.CPU}, n), bench.QuotaReserve); err != nil {
			return fmt.Errorf("appsbench: --cpu %v for %d nodes: %w", c.CPU, n, err)
		}
	}
	return nil
}

// Run is `neptune bench apps`: the forum on SQLite versus PostgreSQL, and
// an HTTP service called through Neptune's HTTP adapter versus called
// directly; contenders interleave in rounds in one run. Then auction and
// pcache throughput versus replication degree and node count (Figs 5.5,
// 5.6), on in-process nodes or on CPU-limited node processes.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "neptune-bench-apps-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := func(s string) bool { return slices.Contains(cfg.Sections, s) }
	if run("storage") {
		if err := benchForumStorage(ctx, stdout, dir, cfg.PGDSN, cfg.Cell, cfg.Rounds, cfg.Concurrency); err != nil {
			return err
		}
	}
	if run("adapter") {
		if err := benchAdapter(ctx, stdout, dir, cfg.Work, cfg.Cell, cfg.Rounds, cfg.Concurrency); err != nil {
			return err
		}
	}
	if run("replication") {
		return benchAppsReplication(ctx, stdout, dir, cfg)
	}
	return nil
}

// benchForumStorage calls the forum's handlers in-process (no network), so
// the difference is the storage engine.
func benchForumStorage(ctx context.Context, stdout io.Writer, dir, pgDSN string, cell time.Duration, rounds, conc int) error {
	const parts, preload = 8, 50
	backends := []struct{ name, dsn string }{{"sqlite", filepath.Join(dir, "forum.sqlite")}}
	if pgDSN != "" {
		schemaDSN, drop, err := pgSchema(ctx, pgDSN)
		if err != nil {
			return err
		}
		defer drop()
		backends = append(backends, struct{ name, dsn string }{"postgres", schemaDSN})
	} else {
		fmt.Fprintln(stdout, "bench apps: no --pg-dsn or NEPTUNE_TEST_PG_DSN: the forum runs on SQLite only")
	}
	var contenders []bench.Contender
	for _, be := range backends {
		f, err := forum.Open(ctx, be.dsn)
		if err != nil {
			return err
		}
		defer f.Close()
		svc := f.Service()
		handler := map[string]neptune.Handler{}
		for _, m := range svc.Methods {
			handler[m.Name] = m.Handler
		}
		for p := range parts {
			for i := range preload {
				body, _ := json.Marshal(forum.AddMsgRequest{Topic: "read", ReplyTo: int64(i / 2), Author: "bench", Subject: fmt.Sprint("s", i), Body: strings.Repeat("x", 200)})
				if _, err := handler["AddMsg"](ctx, &neptune.Request{Partition: p, Body: body}); err != nil {
					return fmt.Errorf("bench: preload %s: %w", be.name, err)
				}
			}
		}
		var n atomic.Int64
		addBody, _ := json.Marshal(forum.AddMsgRequest{Topic: "write", Author: "bench", Subject: "s", Body: strings.Repeat("x", 200)})
		readBody, _ := json.Marshal(forum.ViewHeadersRequest{Topic: "read"})
		for _, m := range []struct {
			method string
			body   []byte
		}{{"AddMsg", addBody}, {"ViewHeaders", readBody}} {
			h := handler[m.method]
			contenders = append(contenders, bench.Contender{Name: be.name + " " + m.method, Call: func(ctx context.Context, _ []byte) error {
				_, err := h(ctx, &neptune.Request{Partition: int(n.Add(1) % parts), Body: m.body})
				return err
			}})
		}
	}
	fmt.Fprintf(stdout, "bench apps: forum storage, handlers in-process, %d partitions, %d-message topics read, %d-way concurrent, %d rounds of %v\n", parts, preload, conc, rounds, cell)
	results, err := bench.RunRounds(ctx, contenders, nil, conc, cell, rounds)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-24s %10s %9s %9s %9s %10s\n", "contender", "calls/s", "mean", "p50", "p99", "tput×sqlite")
	for _, c := range contenders {
		res := results[c.Name]
		lat := res.Latency()
		method := c.Name[strings.Index(c.Name, " ")+1:]
		base := results["sqlite "+method]
		fmt.Fprintf(stdout, "%-24s %10.0f %9s %9s %9s %10.2f\n", c.Name, res.Rate(), lat.Mean, lat.Fmt(lat.P50), lat.Fmt(lat.P99), res.Rate()/base.Rate())
	}
	return nil
}

// pgSchema creates a scratch schema on the server and returns a DSN using
// it and a function that drops it.
func pgSchema(ctx context.Context, dsn string) (string, func(), error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", nil, fmt.Errorf("appsbench: PostgreSQL: %w", err)
	}
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("appsbench: PostgreSQL: %w", err)
	}
	sep := " "
	if strings.Contains(dsn, "://") {
		sep = "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
	}
	return dsn + sep + "search_path=" + schema, func() {
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
		db.Close()
	}, nil
}

// HTTPProgramVerb is the hidden `neptune bench` verb that runs
// HTTPProgram, and HTTPProgramLine what it prints when it is up, with its
// address.
const (
	HTTPProgramVerb = "http-program"
	HTTPProgramLine = "http program up: %s\n"
)

// HTTPProgram is the program of the adapter section, the hidden `neptune
// bench http-program`, run in a process of its own as a real service would
// be: POST /echo returns the body, POST /work sleeps work first.
func HTTPProgram(ctx context.Context, work time.Duration, stdout io.Writer) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
	mux.HandleFunc("POST /work", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(work)
		_, _ = io.Copy(w, r.Body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	fmt.Fprintf(stdout, HTTPProgramLine, ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// benchAdapter compares an HTTP program called directly with the same
// program called through a Neptune node process hosting it with the HTTP
// adapter: a no-op echo route and a route that takes work. The program, the
// node and the benchmark's callers are three processes, as in a real
// deployment (a program inside the caller's process would answer the
// direct calls without a cross-process wakeup and flatter them).
func benchAdapter(ctx context.Context, stdout io.Writer, dir string, work, cell time.Duration, rounds, conc int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	addr, stopProgram, err := bench.StartHelper(ctx, exe, HTTPProgramLine, HTTPProgramVerb, "--work", work.String())
	if err != nil {
		return err
	}
	defer stopProgram()
	base := "http://" + addr
	cfg := filepath.Join(dir, "adapter.yaml")
	yaml := fmt.Sprintf("services:\n  - name: web\n    partitions: [0]\n    workers: 64\n    http:\n      base_url: %s\n      methods:\n        - {name: echo, mode: read, route: /echo}\n        - {name: work, mode: read, route: /work}\n", base)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return err
	}
	cl := localcluster.New(exe, dir)
	defer cl.Close()
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "adapter1", Services: []string{"echo:0"}, Args: []string{"--config", cfg}}); err != nil {
		return err
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, 1, 10*time.Second); err != nil {
		return err
	}
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	viaDirect := func(route string) func(context.Context, []byte) error {
		return func(ctx context.Context, b []byte) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+route, strings.NewReader(string(b)))
			if err != nil {
				return err
			}
			resp, err := direct.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
	}
	viaNeptune := func(method string) func(context.Context, []byte) error {
		return func(ctx context.Context, b []byte) error {
			_, err := c.Call(ctx, "web", 0, method, b)
			return err
		}
	}
	workName := "work " + work.String()
	// Pairs: each contender's latency is divided by the one before it.
	// The built-in echo (a Go handler in the node) separates Neptune's own
	// hop from the adapter's HTTP hop.
	contenders := []bench.Contender{
		{Name: "direct echo", Call: viaDirect("/echo")}, {Name: "neptune echo", Call: viaNeptune("echo")},
		{Name: "direct " + workName, Call: viaDirect("/work")}, {Name: "neptune " + workName, Call: viaNeptune("work")},
		{Name: "neptune built-in echo", Call: func(ctx context.Context, b []byte) error {
			_, err := c.Call(ctx, "echo", 0, "echo", b)
			return err
		}}, {Name: "neptune echo", Call: viaNeptune("echo")},
	}
	fmt.Fprintf(stdout, "\nbench apps: HTTP service direct vs through a Neptune node (HTTP adapter), 1 KiB body, %d rounds of %v per cell\n", rounds, cell)
	fmt.Fprintf(stdout, "%-22s %5s %10s %9s %9s %9s %9s\n", "contender", "conc", "calls/s", "mean", "p50", "p99", "lat×prev")
	body := []byte(strings.Repeat("x", 1024))
	var goal *report.Check
	for _, n := range []int{1, conc} {
		// Rounds one at a time, merged, so the goal can see each round.
		results := map[string]*bench.Cell{}
		var ratios []float64
		probe := bench.StartLagProbe(5 * time.Millisecond)
		for range rounds {
			round, err := bench.RunRounds(ctx, contenders, body, n, cell, 1)
			if err != nil {
				return err
			}
			ratios = append(ratios, float64(round["neptune "+workName].Latency().Mean)/float64(round["direct "+workName].Latency().Mean))
			for name, c := range round {
				if results[name] == nil {
					results[name] = &bench.Cell{}
				}
				results[name].Add(c)
			}
		}
		starved := probe.Stop()
		if n == 1 {
			pooled := float64(results["neptune "+workName].Latency().Mean) / float64(results["direct "+workName].Latency().Mean)
			goal = adapterGoal(work, pooled, ratios, starved)
		}
		for i, ct := range contenders {
			if i == 5 {
				fmt.Fprintf(stdout, "%-22s %5d %47s %9.2f\n", "adapter×built-in echo", n, "", float64(results["neptune echo"].Latency().Mean)/float64(results["neptune built-in echo"].Latency().Mean))
				continue
			}
			res := results[ct.Name]
			lat := res.Latency()
			baseLat := results[contenders[i&^1].Name].Latency()
			fmt.Fprintf(stdout, "%-22s %5d %10.0f %9s %9s %9s %9.2f\n", ct.Name, n, res.Rate(), lat.Mean, lat.Fmt(lat.P50), lat.Fmt(lat.P99), float64(lat.Mean)/float64(baseLat.Mean))
		}
	}
	fmt.Fprintln(stdout, goal)
	return nil
}

// adapterGoalRatio bounds what the adapter adds to a program's sequential
// latency on its work route (a 1 ms service by default): Neptune's hop and
// the adapter's HTTP hop together at most 30%.
const adapterGoalRatio = 1.3

// adapterGoal judges the sequential work route: mean latency through the
// node over direct, pooled and per round (which must agree); a starved
// run cannot decide it.
func adapterGoal(work time.Duration, pooled float64, rounds []float64, st bench.Starvation) *report.Check {
	var met []bool
	for _, r := range rounds {
		met = append(met, r <= adapterGoalRatio)
	}
	c := report.AtMost(fmt.Sprintf("adapter: a %v service's sequential latency through the node ≤ %.1f× direct", work, adapterGoalRatio), pooled, adapterGoalRatio,
		fmt.Sprintf("%.2f×", pooled))
	return st.Doubt(report.Rounds(c, met), "the sequential adapter cells")
}
