package node

import (
	"bufio"
	"fmt"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// backupChunk is the data one BackupChunk carries, as a snapshot chunk.
const backupChunk = 256 << 10

// Backup is the operator's `neptune backup`, at a partition's primary:
// the partition's snapshot as of a committed LSN, streamed in chunks.
func (s *nodeServer) Backup(in *pb.BackupRequest, stream grpc.ServerStreamingServer[pb.BackupChunk]) error {
	if s.n.repl == nil {
		return transport.ToStatus(fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, in.Partition, in.Service, s.n.cfg.ID))
	}
	w := bufio.NewWriterSize(chunker(func(b []byte) error { return stream.Send(&pb.BackupChunk{Data: b}) }), backupChunk)
	err := s.n.repl.Backup(stream.Context(), in.Service, in.Partition, func(lsn, lsnEpoch uint64) error {
		return stream.Send(&pb.BackupChunk{Lsn: lsn, LsnEpoch: lsnEpoch, Node: s.n.cfg.ID})
	}, w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return transport.ToStatus(err)
	}
	return nil
}

// chunker sends what is written to it in pieces of at most backupChunk
// bytes (send must not keep the slice: gRPC marshals it before Send
// returns).
type chunker func([]byte) error

func (c chunker) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), backupChunk)
		if err := c(b[:k]); err != nil {
			return n, err
		}
		n, b = n+k, b[k:]
	}
	return n, nil
}
