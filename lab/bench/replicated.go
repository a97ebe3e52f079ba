package bench

import (
	"context"
	"io"
	"path/filepath"
	"time"

	"github.com/neptune-cluster/neptune"
)

// OpenService builds one node's instance of a service, keeping its state
// under dir; the closer (nil if none) releases it after the node stops.
type OpenService func(ctx context.Context, dir string) (neptune.Service, io.Closer, error)

// Replicated starts an in-process node for every id of rep.Nodes
// (announcing every 200 ms, entries living 1 s, data under dir/<id>), each
// hosting its share (rep.PartitionsOn) of partitions 0..parts-1 of the
// service open builds, replicated as rep says. It returns the first node's
// client and the function that stops the nodes and closes the services.
func Replicated(ctx context.Context, dir string, rep neptune.Replication, parts int, open OpenService) (*neptune.Client, func(), error) {
	var (
		nodes   []*neptune.Node
		closers []io.Closer
	)
	stop := func() {
		for _, n := range nodes {
			n.Close()
		}
		for _, c := range closers {
			c.Close()
		}
	}
	all := make([]int, parts)
	for p := range all {
		all[p] = p
	}
	var join []string
	for _, id := range rep.Nodes {
		n, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: id, Join: join, AnnounceInterval: 200 * time.Millisecond,
			AnnounceTTL: time.Second, DataDir: filepath.Join(dir, id)})
		if err != nil {
			stop()
			return nil, nil, err
		}
		nodes = append(nodes, n)
		if ps := rep.PartitionsOn(id, all); len(ps) > 0 {
			svc, closer, err := open(ctx, filepath.Join(dir, id, "service"))
			if err != nil {
				stop()
				return nil, nil, err
			}
			if closer != nil {
				closers = append(closers, closer)
			}
			r := rep
			svc.Replication = &r
			if err := n.Register(svc, ps...); err != nil {
				stop()
				return nil, nil, err
			}
		}
		if err := n.Start(ctx); err != nil {
			stop()
			return nil, nil, err
		}
		join = []string{nodes[0].GossipAddr()}
	}
	return nodes[0].Client(), stop, nil
}
