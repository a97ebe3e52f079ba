package replication

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func appendMsg(epoch uint64, lsns ...uint64) *pb.ReplicaMessage {
	pm := &pb.ReplicaMessage{Service: "kv", Partition: 0, Type: int32(replica.MsgAppend), Epoch: epoch}
	for _, l := range lsns {
		pm.Entries = append(pm.Entries, &pb.ReplicaEntry{Lsn: l, Epoch: epoch, Body: []byte("x")})
	}
	return pm
}

// TestDeliveredEntriesAreNotRetransmitted: entries a peer's node accepted
// are not sent again for redeliverAfter under the same epoch; new
// entries, another epoch, an expired window and a reject all let them go.
func TestDeliveredEntriesAreNotRetransmitted(t *testing.T) {
	var d delivered
	d.note([]*pb.ReplicaMessage{appendMsg(3, 5, 6, 7)}, t0)
	at := t0.Add(redeliverAfter / 2)
	for _, c := range []struct {
		name string
		pm   *pb.ReplicaMessage
		now  time.Time
		want bool
	}{
		{"the same entries", appendMsg(3, 5, 6, 7), at, true},
		{"a suffix of them", appendMsg(3, 7), at, true},
		{"new entries", appendMsg(3, 7, 8), at, false},
		{"another epoch", appendMsg(4, 5, 6, 7), at, false},
		{"after the window", appendMsg(3, 5, 6, 7), t0.Add(redeliverAfter), false},
		{"a heartbeat", appendMsg(3), at, false},
	} {
		if got := d.covers(c.pm, c.now); got != c.want {
			t.Errorf("%s: covered %v, want %v", c.name, got, c.want)
		}
	}
	k := partKey{"kv", 0}
	d.forget(&k, at)
	if d.covers(appendMsg(3, 5), at) {
		t.Error("entries the peer rejected are still held back")
	}
	// A call that started before the reject arrived may be what the peer
	// rejected, even if its answer comes after.
	d.note([]*pb.ReplicaMessage{appendMsg(3, 8)}, at.Add(-time.Millisecond))
	if d.covers(appendMsg(3, 8), at) {
		t.Error("a call that started before the reject counts as delivered")
	}
	d.note([]*pb.ReplicaMessage{appendMsg(3, 8)}, at.Add(time.Millisecond))
	if !d.covers(appendMsg(3, 8), at.Add(2*time.Millisecond)) {
		t.Error("a call that started after the reject does not count as delivered")
	}
	d.forget(nil, at)
	if d.covers(appendMsg(3, 8), at.Add(2*time.Millisecond)) {
		t.Error("forgetting every partition (the peer may have restarted) kept a delivery")
	}
}

// TestInboxBoundsEntryBytes: a partition's inbox takes entries up to
// inboxBytes (one message always), refuses more until the loop takes
// some, and a Replicate call whose entries were refused fails, so the
// sender does not count them delivered; messages without entries are
// never refused for bytes.
func TestInboxBoundsEntryBytes(t *testing.T) {
	rt, p := registerOnly(t)
	body := bytes.Repeat([]byte("v"), 24<<20) // shared by every entry: the test allocates it once
	big := func(lsn uint64) *pb.ReplicaMessage {
		pm := appendMsg(1, lsn)
		pm.Entries[0].Body = body
		return pm
	}
	huge := big(1)
	huge.Entries = append(huge.Entries, &pb.ReplicaEntry{Lsn: 2, Epoch: 1, Body: body}, &pb.ReplicaEntry{Lsn: 3, Epoch: 1, Body: body})
	if err := rt.Replicate(&pb.ReplicaBatch{From: "b", Messages: []*pb.ReplicaMessage{huge}}); err != nil {
		t.Fatalf("an empty inbox refused one message of %d MiB: %v", 3*len(body)>>20, err)
	}
	p.took(<-p.inbox)
	for lsn := uint64(1); lsn <= 2; lsn++ {
		if err := rt.Replicate(&pb.ReplicaBatch{From: "b", Messages: []*pb.ReplicaMessage{big(lsn)}}); err != nil {
			t.Fatalf("entry %d (%d MiB queued): %v", lsn, p.inboxHeld.Load()>>20, err)
		}
	}
	err := rt.Replicate(&pb.ReplicaBatch{From: "b", Messages: []*pb.ReplicaMessage{appendMsg(1), big(3)}})
	if !errors.Is(err, errInboxFull) {
		t.Fatalf("a third 24 MiB entry over a 64 MiB bound: err %v, want errInboxFull", err)
	}
	if got := len(p.inbox); got != 3 {
		t.Fatalf("inbox holds %d messages, want 3 (two entries and the heartbeat)", got)
	}
	p.took(<-p.inbox)
	p.took(<-p.inbox)
	if err := rt.Replicate(&pb.ReplicaBatch{From: "b", Messages: []*pb.ReplicaMessage{big(3)}}); err != nil {
		t.Fatalf("after the loop took two messages: %v", err)
	}
}

// registerOnly registers kv partition 0 on node a without starting its
// loop: the test plays the loop.
func registerOnly(t *testing.T) (*Runtime, *part) {
	t.Helper()
	rt := New(Config{Self: "a", DataDir: t.TempDir(), Directory: &fakeDir{}, Sender: &fakeSender{}})
	rep := &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{0: {{Node: "a", Priority: 2}, {Node: "b", Priority: 1}}}}
	spec := Partition{Service: "kv", Partition: 0, Replication: rep}
	if err := rt.Register(spec); err != nil {
		t.Fatal(err)
	}
	// Opened, not started: the test plays the loop.
	p, err := rt.open(spec, nil)
	if err != nil || p == nil {
		t.Fatalf("open: %v, %v", p, err)
	}
	t.Cleanup(func() { _ = p.log.Close() })
	rt.parts[partKey{"kv", 0}] = p
	return rt, p
}

// TestMemoryReleasedAfterABurst: once releaseAfterBytes of entries were
// persisted and none for releaseIdle, memory is released, and once more
// at releaseSettled; small steady traffic never releases.
func TestMemoryReleasedAfterABurst(t *testing.T) {
	var r releaser
	r.add(releaseAfterBytes/2, t0)
	if r.due(t0.Add(time.Hour)) {
		t.Fatal("released after less than releaseAfterBytes")
	}
	r.add(releaseAfterBytes/2, t0.Add(time.Second))
	if r.due(t0.Add(time.Second + releaseIdle/2)) {
		t.Fatal("released while writes were still coming")
	}
	quiet := t0.Add(time.Second)
	if !r.due(quiet.Add(releaseIdle)) {
		t.Fatal("not released after the burst went quiet")
	}
	if r.due(quiet.Add(releaseIdle)) || r.due(quiet.Add(releaseSettled-time.Millisecond)) {
		t.Fatal("released again before the burst settled")
	}
	if !r.due(quiet.Add(releaseSettled)) {
		t.Fatal("not released again once the burst settled (a slow replica's entries freed)")
	}
	if r.due(t0.Add(time.Hour)) {
		t.Fatal("released three times for one burst")
	}
}

// TestBulkLaneDropsSupersededMessages: a message with entries for a
// partition drops the queued ones of that partition from an older epoch
// (an old primary's appends), which their receiver would refuse anyway;
// other partitions' and the same epoch's stay, in order.
func TestBulkLaneDropsSupersededMessages(t *testing.T) {
	pq := newPeerQueue()
	app := func(part int32, epoch uint64) *pb.ReplicaMessage {
		pm := appendMsg(epoch, 1, 2)
		pm.Partition = part
		return pm
	}
	pq.push(app(0, 5))
	pq.push(app(1, 5))
	pq.push(app(0, 6))
	pq.push(appendMsg(6, 3)) // partition 0, the same epoch
	pq.push(app(0, 7))
	var got []string
	total := 0
	for _, m := range pq.q {
		got = append(got, fmt.Sprintf("p%d@%d", m.Partition, m.Epoch))
	}
	for _, n := range pq.sizes {
		total += n
	}
	want := []string{"p1@5", "p0@7"}
	if !slices.Equal(got, want) || len(pq.sizes) != len(pq.q) || total != pq.bytes {
		t.Errorf("queue %v (sizes %v, bytes %d), want %v with matching sizes", got, pq.sizes, pq.bytes, want)
	}
}

// TestPeerQueuesCountTheirBytes: a runtime's count of queued replication
// bytes (HeldBytes, which the node's in-flight budget covers) follows its
// queues through pushes, drops beyond the byte bound, superseded
// messages, a call in flight and its end.
func TestPeerQueuesCountTheirBytes(t *testing.T) {
	var held atomic.Int64
	pq := newPeerQueue()
	pq.held = &held
	check := func(when string) {
		t.Helper()
		if want := int64(pq.bytes + pq.inflightBytes); held.Load() != want {
			t.Fatalf("%s: counted %d bytes, the queue holds %d (%d queued, %d in flight)", when, held.Load(), want, pq.bytes, pq.inflightBytes)
		}
	}
	big := func(epoch uint64, lsn uint64) *pb.ReplicaMessage {
		pm := appendMsg(epoch, lsn)
		pm.Entries[0].Body = make([]byte, 12<<20)
		return pm
	}
	pq.push(big(1, 1))
	pq.push(big(1, 2))
	check("two pushed")
	pq.push(big(1, 3)) // over peerQueueBytes: the oldest is dropped
	check("one dropped")
	batch, _ := pq.take(batchBytes)
	check("one in flight")
	pq.push(big(2, 3)) // supersedes the queued epoch-1 message
	check("superseded")
	pq.done()
	check("call done")
	for len(pq.q) > 0 {
		pq.take(batchBytes)
		pq.done()
	}
	if len(batch) != 1 || held.Load() != 0 {
		t.Fatalf("all sent: %d bytes still counted", held.Load())
	}
}
