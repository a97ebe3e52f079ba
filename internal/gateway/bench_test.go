package gateway

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// BenchmarkServe is the gateway's own cost per request, in one process,
// with reservations (credit, tag) and without (fifo): a fake cluster that
// echoes, a capacity far above the load, requests from parallel clients.
// The difference between the schedulers is all the end-to-end overhead
// goal (issue 12: throughput with reservations >= 0.98x without) can see.
func BenchmarkServe(b *testing.B) {
	for _, sched := range Schedulers {
		b.Run(sched, func(b *testing.B) {
			g, _ := start(b, `
scheduler: `+sched+`
capacity_grps: 1000000
queue: 4096
subscribers:
  - {name: site1, reservation: 50, rules: [{host: site1.example}]}
routes:
  - {path_prefix: /echo, service: echo, method: echo}
`, &fakeCaller{}, nil)
			body := bytes.Repeat([]byte("x"), 100)
			b.ReportAllocs()
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest("POST", "/echo", bytes.NewReader(body))
					r.Host = "site1.example"
					w := httptest.NewRecorder()
					g.ServeHTTP(w, r)
					if w.Code != 200 {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
