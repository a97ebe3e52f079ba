package clustertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
)

// appendProgram is an unmodified HTTP program: POST /append adds the body
// to a log and answers the log's length; it knows nothing of Neptune.
type appendProgram struct {
	mu  sync.Mutex
	log []string
}

func (p *appendProgram) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, string(b))
	fmt.Fprintf(w, "%d", len(p.log))
}

func (p *appendProgram) entries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.log))
}

// TestAdapterProgramRetriedWriteRunsOnce: a program behind the HTTP
// adapter, replicated on three in-process nodes (each with its own copy of
// the program). A write retried with the same identity (what a caller does
// after ErrUnknownOutcome) gets the original answer and reaches every
// program once: the dedup table is in the replication layer, so an
// adapted program needs no change. At level 1 the retry may land on
// another replica; it runs there at most once too.
func TestAdapterProgramRetriedWriteRunsOnce(t *testing.T) {
	for _, level := range []int{1, 2} {
		t.Run(fmt.Sprintf("level%d", level), func(t *testing.T) {
			ids := []string{"d0", "d1", "d2"}
			rep := neptune.Replication{Level: level, Nodes: ids, Degree: 3}
			var nodes []*neptune.Node
			var progs []*appendProgram
			var join []string
			for _, id := range ids {
				prog := &appendProgram{}
				srv := httptest.NewServer(prog)
				t.Cleanup(srv.Close)
				svc, err := adapter.NewHTTP("applog", adapter.HTTPConfig{BaseURL: srv.URL,
					Methods: []adapter.MethodConfig{{Name: "append", Mode: "write", Route: "/append"}}})
				if err != nil {
					t.Fatal(err)
				}
				r := rep
				svc.Replication = &r
				nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join,
					AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, DataDir: filepath.Join(t.TempDir(), id)})
				if err != nil {
					t.Fatal(err)
				}
				if err := nd.Register(svc, rep.PartitionsOn(id, []int{0})...); err != nil {
					t.Fatal(err)
				}
				if err := nd.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nd.Close() })
				nodes, progs = append(nodes, nd), append(progs, prog)
				join = []string{nodes[0].GossipAddr()}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := nodes[2].Client()
			call := func(body string, opts ...neptune.CallOption) string {
				t.Helper()
				for {
					resp, err := c.Call(ctx, "applog", 0, "append", []byte(body), opts...)
					if err == nil {
						return string(resp.Body)
					}
					if !neptune.Retryable(err) || ctx.Err() != nil {
						t.Fatalf("append %q: %v", body, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			first := call("x", neptune.WithIdempotencyKey("order-17"))
			again := call("x", neptune.WithIdempotencyKey("order-17"))
			if again != first {
				t.Errorf("the retry answered %q, the original %q", again, first)
			}
			call("y")
			want := []string{"x", "y"}
			waitFor(t, 10*time.Second, func() bool {
				for _, p := range progs {
					if !slices.Equal(p.entries(), want) {
						return false
					}
				}
				return true
			})
			time.Sleep(300 * time.Millisecond) // a late second copy would show now
			for i, p := range progs {
				if got := p.entries(); !slices.Equal(got, want) {
					t.Errorf("program on %s ran %q, want %q (x once)", ids[i], got, want)
				}
			}
		})
	}
}
