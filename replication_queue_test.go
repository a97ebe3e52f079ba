package neptune

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// appendOf is an append carrying a full MaxBatch window of 1 KiB bodies,
// about 270 KiB encoded: what a lagging replica is sent.
func appendOf(lsn replica.LSN) *pb.ReplicaMessage {
	m := replica.Message{Type: replica.MsgAppend, From: "a", To: "b", PrevLSN: lsn - 1}
	for i := range 256 {
		m.Entries = append(m.Entries, replica.Entry{LSN: lsn + replica.LSN(i), Method: "put", Body: make([]byte, 1024)})
	}
	return toPBMessage(partKey{"kv", 0}, m)
}

// The queue to a slow peer must stay bounded in bytes, not only in
// messages, and each Replicate call must fit gRPC's 4 MiB receive limit.
func TestPeerQueueBoundsBytesAndBatches(t *testing.T) {
	pq := &peerQueue{wake: make(chan struct{}, 1)}
	const pushed = 400 // ~100 MiB if kept
	for i := range pushed {
		pq.push(appendOf(replica.LSN(1 + 256*i)))
	}
	if pq.bytes > peerQueueBytes || len(pq.q) == pushed {
		t.Fatalf("queue holds %d messages, %d bytes; byte bound %d", len(pq.q), pq.bytes, peerQueueBytes)
	}
	if len(pq.q) == 0 || pq.q[len(pq.q)-1].PrevLsn != 256*(pushed-1) {
		t.Fatal("the newest message was dropped")
	}
	held := len(pq.q)
	got := 0
	for {
		batch := pq.take(replBatchBytes)
		if len(batch) == 0 {
			break
		}
		size := 0
		for _, pm := range batch {
			size += proto.Size(pm)
		}
		if size > replBatchBytes {
			t.Fatalf("one call carries %d bytes, cap %d", size, replBatchBytes)
		}
		got += len(batch)
	}
	if got != held || pq.bytes != 0 {
		t.Fatalf("took %d of %d messages, %d bytes left", got, held, pq.bytes)
	}
	// A message larger than the cap still goes, alone.
	big := appendOf(1)
	big.Entries[0].Body = make([]byte, 2*replBatchBytes)
	pq.push(big)
	pq.push(appendOf(257))
	if b := pq.take(replBatchBytes); len(b) != 1 || b[0] != big {
		t.Fatalf("oversized message: took %d messages", len(b))
	}
}
