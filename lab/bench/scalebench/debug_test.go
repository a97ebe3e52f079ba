package scalebench

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/memnet"
)

func TestJoinDebug(t *testing.T) {
	ctx := context.Background()
	const n = 256
	mat, err := newMaterial(t.TempDir(), n, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	nw := memnet.New(1)
	t0 := time.Now()
	ms, err := startMembers(ctx, nw, mat, n, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMembers(ms)
	t.Logf("started in %v", time.Since(t0))
	for i := 0; i < 20 && !converged(ms, n); i++ {
		time.Sleep(time.Second)
		hist := map[int]int{}
		for _, m := range ms {
			hist[len(m.g.Snapshot())/16]++
		}
		t.Logf("%v entries/16 %v", time.Since(t0).Round(time.Second), hist)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
