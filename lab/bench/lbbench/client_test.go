package lbbench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/sim/lbsim"
)

// TestClientReplaysItsShareOfTheTrace runs the client process's code on a
// job as runLBCell sends it, against two in-process nodes hosting work.
func TestClientReplaysItsShareOfTheTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var join []string
	for _, id := range []string{"s01", "s02"} {
		n, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		svc := work.Service()
		svc.Workers = 1
		if err := n.Register(svc, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		join = []string{n.GossipAddr()}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: join})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, 2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var srv []lbServer
	for _, m := range c.Members(ctx, 0) {
		srv = append(srv, lbServer{ID: m.Node, RPC: m.RPCAddr, Poll: m.PollAddr})
	}
	def := balance.DefaultConfig()
	// polling waits for its polls; push subscribes and never polls.
	for _, policy := range []string{balance.NamePolling, balance.NamePush} {
		cell := lbCell{Label: policy, Workload: "exp", Load: 0.3, Policy: policy, PollSize: 2, Discard: def.Discard,
			Clients: 2, Procs: 2, Duration: 400 * time.Millisecond, Scale: 0.1, Capacity: 2, Broadcast: def.BroadcastInterval, Seed: 3}
		job, err := json.Marshal(clientJob{Cell: cell, Servers: srv, Proc: 1, Start: time.Now().Add(100 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Client(ctx, bytes.NewReader(job), &out); err != nil {
			t.Fatal(err)
		}
		var res lbResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		var mine int // the requests of client 1, the share of process 1
		for _, a := range lbTrace(lbsim.PoissonExp, cell.Load, cell.Capacity, cell.Scale, cell.Clients, cell.Duration, cell.Seed) {
			if a.Client == 1 {
				mine++
			}
		}
		if res.Errors != 0 || len(res.Lat) != mine || len(res.Poll) != mine || len(res.Lag) != mine || mine == 0 {
			t.Fatalf("%s: measured %d requests (%d errors, first %q); its share of the trace is %d", policy, len(res.Lat), res.Errors, res.FirstErr, mine)
		}
	}
}
