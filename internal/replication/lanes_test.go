package replication

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// blockingSender holds every call that carries entries until its context
// ends (a multi-MiB batch on a slow link), and reports the others at once.
type blockingSender struct {
	bulk    chan int // entries of a bulk call that started
	control chan *pb.ReplicaMessage
}

func (s *blockingSender) Replicate(ctx context.Context, _, _ string, b *pb.ReplicaBatch) error {
	for _, m := range b.Messages {
		if len(m.Entries) > 0 {
			s.bulk <- len(m.Entries)
			<-ctx.Done()
			return ctx.Err()
		}
	}
	for _, m := range b.Messages {
		s.control <- m
	}
	return nil
}

func (s *blockingSender) Forward(context.Context, string, string, *pb.CallRequest) (*pb.CallResponse, error) {
	panic("no forwarding in this test")
}

// A heartbeat queued after a large batch is delivered while that batch is
// still in flight (its call blocked; the manual clock does not move, so it
// cannot time out), and the batch's eventual failure does not make the
// peer look dead: only the control lane feeds the failure detector.
func TestHeartbeatIsDeliveredWhileALargeBatchIsInFlight(t *testing.T) {
	clk := clock.NewManual(t0)
	s := &blockingSender{bulk: make(chan int, 8), control: make(chan *pb.ReplicaMessage, 8)}
	rt := New(Config{Self: "a", DataDir: t.TempDir(), Directory: &fakeDir{hosts: []string{"a", "b"}}, Sender: s, Clock: clk})
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	k := partKey{"kv", 0}
	big := replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1, PrevLSN: 0}
	for i := range 4 {
		big.Entries = append(big.Entries, replica.Entry{Epoch: 1, LSN: replica.LSN(i + 1), Method: "put", Body: make([]byte, 4<<20)})
	}
	rt.send(k, big)
	select {
	case <-s.bulk:
	case <-time.After(5 * time.Second):
		t.Fatal("the large batch was never sent")
	}
	// The batch is in flight and blocked; a heartbeat and an ack follow.
	rt.send(k, replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1, PrevLSN: 4, PrevEpoch: 1, Commit: 0})
	rt.send(k, replica.Message{Type: replica.MsgVote, From: "a", To: "b", Epoch: 2})
	for _, want := range []replica.MsgType{replica.MsgAppend, replica.MsgVote} {
		select {
		case m := <-s.control:
			if replica.MsgType(m.Type) != want || len(m.Entries) != 0 {
				t.Fatalf("control lane delivered %v with %d entries, want %v", replica.MsgType(m.Type), len(m.Entries), want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v not delivered while the large batch is in flight", want)
		}
	}
	// Sending the batch again while it is on its way is needless: dropped.
	rt.send(k, big)
	if e, _ := rt.Resent(); e != 0 {
		t.Fatalf("%d entries resent while the first copy was in flight", e)
	}
	// Time passes: the call times out (its timer was set before it
	// started); heartbeats still go through; the retransmission after it
	// is sent, and times out in turn.
	clk.Advance(time.Minute)
	pl := rt.peers["b"]
	for deadline := time.Now().Add(5 * time.Second); ; {
		pl.bulk.mu.Lock()
		idle := pl.bulk.inflight == nil
		pl.bulk.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timed-out call never ended")
		}
		time.Sleep(time.Millisecond)
	}
	rt.send(k, big)
	select {
	case <-s.bulk:
	case <-time.After(5 * time.Second):
		t.Fatal("the retransmission was never sent")
	}
	rt.send(k, replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1, PrevLSN: 4, PrevEpoch: 1})
	select {
	case <-s.control:
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat not delivered")
	}
	clk.Advance(time.Minute)
	if !rt.det.alive("b", clk.Now(), true, false, 500*time.Millisecond) {
		t.Fatal("failed bulk calls made the peer look dead while its heartbeats got through")
	}
	if e, b := rt.Resent(); e != 4 || b != 4*4<<20 {
		t.Fatalf("Resent() = %d entries, %d bytes; want the 4 entries sent twice, once", e, b)
	}
}

// stallingSender is a ControlSender whose control connection 0 is stalled
// (a TCP segment lost: every call on it waits), while the others deliver.
type stallingSender struct {
	stalled chan struct{} // a call started on the stalled connection
	control chan int      // the connection a control message came over
}

func (s *stallingSender) Replicate(context.Context, string, string, *pb.ReplicaBatch) error {
	panic("control messages must go over the control connections")
}

func (s *stallingSender) ReplicateControl(ctx context.Context, conn int, _, _ string, b *pb.ReplicaBatch) error {
	if conn == 0 {
		s.stalled <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	for range b.Messages {
		s.control <- conn
	}
	return nil
}

func (s *stallingSender) Forward(context.Context, string, string, *pb.CallRequest) (*pb.CallResponse, error) {
	panic("no forwarding in this test")
}

// Heartbeats go around a stalled control connection (issue 28: on a lossy
// link one lost segment stalls a TCP connection for a retransmission
// timeout, and a heartbeat queued behind it would be late everywhere):
// while one call waits on the stalled connection, every later heartbeat
// is delivered over the others, and the peer stays alive.
func TestHeartbeatsGoAroundAStalledConnection(t *testing.T) {
	clk := clock.NewManual(t0)
	s := &stallingSender{stalled: make(chan struct{}, 8), control: make(chan int, 64)}
	rt := New(Config{Self: "a", DataDir: t.TempDir(), Directory: &fakeDir{hosts: []string{"a", "b"}}, Sender: s, Clock: clk})
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	k := partKey{"kv", 0}
	beat := replica.Message{Type: replica.MsgAppend, From: "a", To: "b", Epoch: 1}
	// Send until one heartbeat is stuck on the stalled connection.
	stuck := false
	for i := 0; !stuck; i++ {
		if i > 100 {
			t.Fatal("no call ever used control connection 0")
		}
		rt.send(k, beat)
		select {
		case <-s.stalled:
			stuck = true
		case <-s.control:
		case <-time.After(5 * time.Second):
			t.Fatal("heartbeat not delivered")
		}
	}
	// The clock does not move: the stalled call never times out. Every
	// heartbeat from now on must still arrive, over connections 1 and 2.
	for i := range 20 {
		rt.send(k, beat)
		select {
		case conn := <-s.control:
			if conn == 0 {
				t.Fatalf("heartbeat %d delivered over the stalled connection", i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("heartbeat %d not delivered while one control connection is stalled", i)
		}
	}
	if !rt.det.alive("b", clk.Now(), true, false, 500*time.Millisecond) {
		t.Fatal("a stalled connection made the peer look dead while heartbeats got through")
	}
}
