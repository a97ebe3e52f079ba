package cli

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
	"strings"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/internal/localcluster"
)

// benchApps is `neptune bench apps`: the forum on SQLite versus
// PostgreSQL, and an HTTP service called through Neptune's HTTP adapter
// versus called directly; contenders interleave in rounds in one run.
// Then auction and pcache throughput versus replication degree (Figs 5.5,
// 5.6).
func benchApps(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench apps", "[-cell 1s] [-rounds 3] [-concurrency 8] [-pg-dsn URL] [-work 1ms]")
	var (
		cell        = fs.Duration("cell", time.Second, "measuring time per contender per round")
		rounds      = fs.Int("rounds", 3, "interleaved rounds")
		concurrency = fs.Int("concurrency", 8, "callers in the concurrent forum and adapter cells")
		pgDSN       = fs.String("pg-dsn", os.Getenv("NEPTUNE_TEST_PG_DSN"), "PostgreSQL server for the forum (default $NEPTUNE_TEST_PG_DSN); empty skips PostgreSQL")
		work        = fs.Duration("work", time.Millisecond, "service time of the adapter's second HTTP route")
		sections    = fs.String("sections", "storage,adapter,replication", "what to run: storage (forum SQLite vs PostgreSQL), adapter, replication (Figs 5.5/5.6)")
		degrees     = fs.String("degrees", "1-4", "replication degrees (of 4 nodes) for Figs 5.5/5.6")
		replCell    = fs.Duration("repl-cell", 2*time.Second, "measuring time per Figs 5.5/5.6 cell")
		clients     = fs.Int("clients", 16, "closed-loop clients in the Figs 5.5/5.6 cells")
		out         = fs.String("out", "out", "directory for the Figs 5.5/5.6 CSV and SVG")
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "neptune-bench-apps-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		if s = strings.TrimSpace(s); s != "storage" && s != "adapter" && s != "replication" {
			return usagef("-sections: unknown section %q (storage, adapter, replication)", s)
		}
		run[strings.TrimSpace(s)] = true
	}
	degs, err := ParsePartitions(*degrees)
	if err != nil {
		return usagef("-degrees: %v", err)
	}
	if run["storage"] {
		if err := benchForumStorage(ctx, stdout, dir, *pgDSN, *cell, *rounds, *concurrency); err != nil {
			return err
		}
	}
	if run["adapter"] {
		if err := benchAdapter(ctx, stdout, dir, *work, *cell, *rounds, *concurrency); err != nil {
			return err
		}
	}
	if run["replication"] {
		return benchAppsReplication(ctx, stdout, dir, *out, degs, *clients, *replCell)
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
		fmt.Fprintln(stdout, "bench apps: no -pg-dsn or NEPTUNE_TEST_PG_DSN: the forum runs on SQLite only")
	}
	var contenders []contender
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
			contenders = append(contenders, contender{be.name + " " + m.method, func(ctx context.Context, _ []byte) error {
				_, err := h(ctx, &neptune.Request{Partition: int(n.Add(1) % parts), Body: m.body})
				return err
			}})
		}
	}
	fmt.Fprintf(stdout, "bench apps: forum storage, handlers in-process, %d partitions, %d-message topics read, %d-way concurrent, %d rounds of %v\n", parts, preload, conc, rounds, cell)
	results, err := runRounds(ctx, contenders, nil, conc, cell, rounds)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-24s %10s %9s %9s %9s %10s\n", "contender", "calls/s", "mean", "p50", "p99", "tput×sqlite")
	for _, c := range contenders {
		res := results[c.name]
		method := c.name[strings.Index(c.name, " ")+1:]
		base := results["sqlite "+method]
		fmt.Fprintf(stdout, "%-24s %10.0f %9s %9s %9s %10.2f\n", c.name, res.rate(), res.mean(), res.pct(0.5), res.pct(0.99), res.rate()/base.rate())
	}
	return nil
}

// pgSchema creates a scratch schema on the server and returns a DSN using
// it and a function that drops it.
func pgSchema(ctx context.Context, dsn string) (string, func(), error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", nil, fmt.Errorf("bench: -pg-dsn: %w", err)
	}
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("bench: -pg-dsn: %w", err)
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

// httpProgram is the program of `bench apps -sections adapter`, run in a
// process of its own as a real service would be: POST /echo returns the
// body, POST /work sleeps -work first.
func httpProgram(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench http-program", "[-work 1ms]")
	work := fs.Duration("work", time.Millisecond, "service time of POST /work")
	if err := parse(fs, args); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
	mux.HandleFunc("POST /work", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(*work)
		_, _ = io.Copy(w, r.Body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	fmt.Fprintf(stdout, "http program up: %s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// benchAdapter compares an HTTP program called directly with the same
// program called through a Neptune node process hosting it with the HTTP
// adapter: a no-op echo route and a route that takes -work. The program,
// the node and the benchmark's callers are three processes, as in a real
// deployment (a program inside the caller's process would answer the
// direct calls without a cross-process wakeup and flatter them).
func benchAdapter(ctx context.Context, stdout io.Writer, dir string, work, cell time.Duration, rounds, conc int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	addr, stopProgram, err := startHelper(ctx, exe, "http program up: %s\n", "http-program", "-work", work.String())
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
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "adapter1", Services: []string{"echo:0"}, Args: []string{"-config", cfg}}); err != nil {
		return err
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds()})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitMembers(ctx, c, 1, 10*time.Second); err != nil {
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
			_, err := c.Call(ctx, nil, "web", 0, method, neptune.Read, b)
			return err
		}
	}
	workName := "work " + work.String()
	// Pairs: each contender's latency is divided by the one before it.
	// The built-in echo (a Go handler in the node) separates Neptune's own
	// hop from the adapter's HTTP hop.
	contenders := []contender{
		{"direct echo", viaDirect("/echo")}, {"neptune echo", viaNeptune("echo")},
		{"direct " + workName, viaDirect("/work")}, {"neptune " + workName, viaNeptune("work")},
		{"neptune built-in echo", func(ctx context.Context, b []byte) error {
			_, err := c.Call(ctx, nil, "echo", 0, "echo", neptune.Read, b)
			return err
		}}, {"neptune echo", viaNeptune("echo")},
	}
	fmt.Fprintf(stdout, "\nbench apps: HTTP service direct vs through a Neptune node (HTTP adapter), 1 KiB body, %d rounds of %v per cell\n", rounds, cell)
	fmt.Fprintf(stdout, "%-22s %5s %10s %9s %9s %9s %9s\n", "contender", "conc", "calls/s", "mean", "p50", "p99", "lat×prev")
	body := []byte(strings.Repeat("x", 1024))
	for _, n := range []int{1, conc} {
		results, err := runRounds(ctx, contenders, body, n, cell, rounds)
		if err != nil {
			return err
		}
		for i, ct := range contenders {
			if i == 5 {
				fmt.Fprintf(stdout, "%-22s %5d %47s %9.2f\n", "adapter×built-in echo", n, "", float64(results["neptune echo"].mean())/float64(results["neptune built-in echo"].mean()))
				continue
			}
			res := results[ct.name]
			baseRes := results[contenders[i&^1].name]
			fmt.Fprintf(stdout, "%-22s %5d %10.0f %9s %9s %9s %9.2f\n", ct.name, n, res.rate(), res.mean(), res.pct(0.5), res.pct(0.99), float64(res.mean())/float64(baseRes.mean()))
		}
	}
	return nil
}

// runRounds runs every contender for cell in each of rounds
// rounds, interleaved, so drift in the machine affects all alike.
func runRounds(ctx context.Context, cs []contender, body []byte, conc int, cell time.Duration, rounds int) (map[string]*cellResult, error) {
	results := map[string]*cellResult{}
	for r := range rounds {
		for _, c := range cs {
			if results[c.name] == nil {
				results[c.name] = &cellResult{}
			}
			if err := runCell(ctx, c.call, body, conc, cell, results[c.name]); err != nil {
				return nil, fmt.Errorf("bench: %s (round %d): %w", c.name, r+1, err)
			}
		}
	}
	return results, nil
}
