package node

import (
	"context"
	"fmt"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// serveBounded is serve with the node's message limit: a body over it is
// refused before anything runs or is logged for replication (so a large
// write never reaches the write log or a replication batch), and a
// response over it becomes ErrTooLarge instead of a transport failure the
// client would take for a dead node.
func (n *Node) serveBounded(ctx context.Context, in *pb.CallRequest) (*service.Response, error) {
	if max := n.cfg.MaxMessageBytes; len(in.Body) > max {
		return nil, fmt.Errorf("%w: request body of %d bytes exceeds node %s's limit of %d (NodeConfig.MaxMessageBytes); the call never ran",
			nerr.ErrTooLarge, len(in.Body), n.cfg.ID, max)
	}
	resp, err := n.serve(ctx, in)
	if err == nil && len(resp.Body) > n.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: response of %s.%s is %d bytes, over node %s's limit of %d (NodeConfig.MaxMessageBytes); the call ran",
			nerr.ErrTooLarge, in.Service, in.Method, len(resp.Body), n.cfg.ID, n.cfg.MaxMessageBytes)
	}
	return resp, err
}
