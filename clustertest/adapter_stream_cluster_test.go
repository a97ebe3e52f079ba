package clustertest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestProgramServesAStreamThroughTheGateway: an unmodified Python HTTP
// program (adapter/testdata/pykv.py, standard library only) on a node
// process serves a read stream as one chunked request whose lines it
// answers as they come, and a write stream whose messages are its plain
// /put writes; an HTTP/2 client reaches both through a gateway process.
func TestProgramServesAStreamThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node and gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	py := startPython(t)
	cl := localcluster.New(neptuneBinary(t), dir)
	defer cl.Close()
	cfg := filepath.Join(dir, "n1.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`services:
  - name: pykv
    partitions: [0, 1]
    http:
      base_url: %s
      methods:
        - {name: talk, mode: read, route: /talk, stream: true}
        - {name: put-stream, mode: write, route: /put, stream: true}
        - {name: get, mode: read, route: /get}
`, py)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "n1", Args: []string{"-config", cfg, "-announce-interval", "200ms", "-announce-ttl", "2s"}}); err != nil {
		t.Fatal(err)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gw := startGateway(t, ctx, dir, "gw", fmt.Sprintf(`
listen: 127.0.0.1:0
metrics: 127.0.0.1:0
gossip: 127.0.0.1:0
join: [%s]
capacity_grps: 100
routes:
  - {path_prefix: /talk, service: pykv, method: talk, stream: true, partition: {segment: 2}}
  - {path_prefix: /put, service: pykv, method: put-stream, stream: true, partition: {segment: 2}}
`, strings.Join(cl.Seeds(), ", ")), cl.SecurityArgs("")...)
	waitFor(t, 15*time.Second, func() bool {
		s, err := c.OpenStream(ctx, "pykv", 1, "talk")
		if err != nil {
			return false
		}
		s.Close()
		return true
	})

	// Full duplex through the gateway, the node and the program: each
	// answer comes before the next message is sent; "bye" ends the stream
	// from the program's side.
	in, frames := h2Stream(t, ctx, "http://"+gw.http+"/talk/1", "")
	for _, m := range []string{"hello", "streams", "été"} {
		io.WriteString(in, msgLine(m))
		if f := <-frames; f.Error != nil || f.body() != "1:"+strings.ToUpper(m) {
			t.Fatalf("answer to %q: %+v", m, f)
		}
	}
	io.WriteString(in, msgLine("bye"))
	if f := <-frames; !f.End || f.Error != nil {
		t.Fatalf("last frame: %+v", f)
	}
	in.Close()

	// A write stream: each message one /put, answered in order.
	in, frames = h2Stream(t, ctx, "http://"+gw.http+"/put/0", "")
	const n = 20
	go func() {
		for i := 1; i <= n; i++ {
			io.WriteString(in, msgLine(fmt.Sprintf("k%d=v%d", i, i)))
		}
		io.WriteString(in, msgLine("novalue"))
		in.Close()
	}()
	for i := uint64(1); i <= n; i++ {
		if f := <-frames; f.Message != i || f.body() != "ok" || f.Error != nil {
			t.Fatalf("answer %d: %+v", i, f)
		}
	}
	// The program's refusal of message n+1 ends the stream, saying so
	// (502 with its words, as a call's would).
	f := <-frames
	if !f.End || f.Error == nil || f.Error.Status != 502 || !strings.Contains(f.Error.Text, "put wants key=value") ||
		f.Error.Outcome == nil || f.Error.Outcome.AppliedThrough != n {
		t.Fatalf("last frame: %+v %+v", f, f.Error)
	}
	for i := 1; i <= n; i++ {
		resp, err := c.Call(ctx, "pykv", 0, "get", []byte(fmt.Sprint("k", i)))
		if err != nil || string(resp.Body) != fmt.Sprint("v", i) {
			t.Fatalf("get k%d: %v %v", i, resp, err)
		}
	}
}
