package transport

import (
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// WriteIDOf is the write identity call in carries (zero: none); the wire
// keeps its parts in three fields (client_id, seq, idempotency_key).
func WriteIDOf(in *pb.CallRequest) nerr.WriteID {
	return nerr.WriteID{Key: in.GetIdempotencyKey(), ClientID: in.GetClientId(), Seq: in.GetSeq()}
}

// SetWriteID makes call in carry the write identity w.
func SetWriteID(in *pb.CallRequest, w nerr.WriteID) {
	in.IdempotencyKey, in.ClientId, in.Seq = w.Key, w.ClientID, w.Seq
}
