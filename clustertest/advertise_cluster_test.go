package clustertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestNodesBoundEverywhereAdvertiseDialableAddresses is issue 29's first
// step out of the lab: nodes bound to 0.0.0.0 (as in a container) and to
// a host name announce addresses others can dial, never [::] or 0.0.0.0,
// and serve calls; an advertised address nobody can dial is refused at
// start, naming the flag.
func TestNodesBoundEverywhereAdvertiseDialableAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := localcluster.New(neptuneBinary(t), t.TempDir())
	defer cl.Close()
	for i, host := range []string{"0.0.0.0", "::", "localhost"} {
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("b%d", i+1), Services: []string{fmt.Sprintf("echo:%d", i)},
			Args: []string{"--host", host, "--metrics", "0.0.0.0:0"}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, func() bool { return len(c.Members(ctx, 0)) == 3 })
	for _, m := range c.Members(ctx, 0) {
		for _, a := range []string{m.RPCAddr, m.PollAddr, m.MetricsAddr} {
			if strings.HasPrefix(a, "[::]") || strings.HasPrefix(a, "0.0.0.0") || strings.HasPrefix(a, ":") {
				t.Errorf("%s announces %q, which nobody can dial", m.Node, a)
			}
		}
	}
	for p := range 3 {
		if _, err := c.Call(ctx, "echo", p, "echo", []byte("x"), neptune.WithTimeout(5*time.Second)); err != nil {
			t.Fatalf("echo %d: %v", p, err)
		}
	}
	_, err = cl.Start(ctx, localcluster.Spec{ID: "bad", Services: []string{"echo:9"}, Args: []string{"--host", "0.0.0.0", "--advertise", "0.0.0.0"}})
	if err == nil || !strings.Contains(err.Error(), "--advertise") {
		t.Fatalf("advertising 0.0.0.0: %v, want a refusal naming --advertise", err)
	}
}
