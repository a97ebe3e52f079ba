package node

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The fuzz targets below feed raw bytes, as a peer could send them, through
// proto.Unmarshal into the gRPC envelopes and then into the node's
// handlers, in process (the authorisation interceptor is the transport's
// and is tested there). A handler must answer with a response or a gRPC
// status, never panic or hang.

var (
	fuzzOnce sync.Once
	fuzzNd   *Node
	fuzzErr  error
)

// fuzzNode is one started node per fuzzing process, hosting a plain
// service (reads, writes, a stream), an aggregation service and a
// replicated service, so that every handler has something to reach.
func fuzzNode(tb testing.TB) *nodeServer {
	tb.Helper()
	fuzzOnce.Do(func() {
		dir, err := os.MkdirTemp("", "neptune-fuzz-node-")
		if err != nil {
			fuzzErr = err
			return
		}
		n, err := New(Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: "f", DataDir: dir,
			AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second, MaxMessageBytes: 1 << 16}})
		if err != nil {
			fuzzErr = err
			return
		}
		echo := func(_ context.Context, r *service.Request) (*service.Response, error) {
			return &service.Response{Body: r.Body}, nil
		}
		stream := func(_ context.Context, r *service.Request, s service.ServerStream) error {
			for i := 0; i < 3 && i < len(r.Body); i++ {
				if err := s.Send(r.Body[i:]); err != nil {
					return err
				}
			}
			return nil
		}
		// talk answers each message of a stream with itself.
		talk := func(_ context.Context, _ *service.Request, s service.ServerStream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
				if err := s.Send(m); err != nil {
					return err
				}
			}
		}
		plain := service.Service{Name: "echo", Workers: 2, QueueLimit: 8, Methods: []service.Method{
			{Name: "get", Mode: service.Read, Handler: echo},
			{Name: "put", Mode: service.Write, Handler: echo},
			{Name: "watch", Mode: service.Read, Stream: stream},
			{Name: "talk", Mode: service.Read, Stream: talk},
			{Name: "puts", Mode: service.Write, Stream: talk},
		}}
		replicated := service.Service{Name: "kv", Methods: []service.Method{
			{Name: "get", Mode: service.Read, Handler: echo},
			{Name: "put", Mode: service.Write, Handler: echo},
			{Name: "puts", Mode: service.Write, Stream: talk},
		}, Replication: &service.Replication{Level: 2, Replicas: map[int][]service.ReplicaSpec{
			0: {{Node: "f", Priority: 1}}, 1: {{Node: "f", Priority: 1}}}}}
		for _, r := range []struct {
			svc        service.Service
			partitions []int
		}{{plain, []int{0, 1}}, {sumService(2, 0), []int{0, 1, 2}}, {replicated, []int{0, 1}}} {
			if fuzzErr = n.Register(r.svc, r.partitions...); fuzzErr != nil {
				return
			}
		}
		if fuzzErr = n.Start(context.Background()); fuzzErr != nil {
			return
		}
		fuzzNd = n // shared by every iteration of this process; never closed
	})
	if fuzzErr != nil {
		tb.Fatal(fuzzErr)
	}
	return &nodeServer{n: fuzzNd}
}

// checkAnswer fails unless exactly one of resp and err is set and err is
// a gRPC status (what the transport sends the peer).
func checkAnswer(t *testing.T, what string, resp any, err error) {
	t.Helper()
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			t.Fatalf("%s: error %v (%T) is not a gRPC status", what, err, err)
		}
		return
	}
	if resp == nil {
		t.Fatalf("%s: neither a response nor an error", what)
	}
}

// fakeStream is the server side of a Stream call.
type fakeStream struct {
	grpc.ServerStream
	ctx    context.Context
	chunks int
}

func (s *fakeStream) Context() context.Context { return s.ctx }
func (s *fakeStream) Send(*pb.Chunk) error     { s.chunks++; return nil }

func marshalSeed(f *testing.F, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// FuzzCallRequest: any CallRequest to Call and Stream gets a response or
// a typed status.
func FuzzCallRequest(f *testing.F) {
	for _, m := range []*pb.CallRequest{
		{Service: "echo", Partition: 0, Method: "get", Mode: pb.Mode_MODE_READ, Body: []byte("x")},
		{Service: "echo", Partition: 1, Method: "put", Mode: pb.Mode_MODE_WRITE, Body: []byte("y"), ClientId: "c", Seq: 1},
		{Service: "echo", Partition: 0, Method: "watch", Mode: pb.Mode_MODE_READ, Body: []byte("abc")},
		{Service: "kv", Partition: 0, Method: "put", Mode: pb.Mode_MODE_WRITE, Body: []byte("v"), IdempotencyKey: "k"},
		{Service: "kv", Partition: 1, Method: "get", Mode: pb.Mode_MODE_READ, MinVersion: 1 << 40},
		{Service: "echo", Partition: -1, Method: "get", Class: "nope"},
		{Service: "sum", Partition: 0, Method: "work"},
	} {
		marshalSeed(f, m)
	}
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := fuzzNode(t)
		var in pb.CallRequest
		if proto.Unmarshal(b, &in) != nil {
			return // gRPC refuses the frame before the handler
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := s.Call(ctx, &in)
		if resp == nil {
			checkAnswer(t, "Call", nil, err)
		} else {
			checkAnswer(t, "Call", resp, err)
		}
		if err != nil && status.Code(err) == codes.Unknown {
			t.Fatalf("Call: untyped error %v (the hosted handlers never fail)", err)
		}
		st := &fakeStream{ctx: ctx}
		if err := s.Stream(&in, st); err != nil {
			checkAnswer(t, "Stream", nil, err)
			if status.Code(err) == codes.Unknown {
				t.Fatalf("Stream: untyped error %v", err)
			}
		}
	})
}

// FuzzReplicaBatch: any batch of replication messages is taken or
// refused with a status; the replication runtime must survive it.
func FuzzReplicaBatch(f *testing.F) {
	entry := &pb.ReplicaEntry{Epoch: 1, Lsn: 1, Method: "put", Body: []byte("v"), Origin: "f", WriteId: "c/1", Time: time.Now().UnixNano()}
	for _, m := range []*pb.ReplicaBatch{
		{From: "g", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: 0, Type: 1, From: "g", To: "f", Epoch: 1, Entries: []*pb.ReplicaEntry{entry}, Commit: 1}}},
		{From: "g", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: 1, Type: 2, From: "g", To: "f", Epoch: 2, Lsn: 5, Granted: true}}},
		{From: "g", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: 0, Type: 3, From: "g", To: "f", Epoch: 3, LastEpoch: 2, Versions: map[string]uint64{"g": 4}}}},
		{From: "g", Messages: []*pb.ReplicaMessage{{Service: "nope", Partition: 7, Type: 99}}},
		{From: "g", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: 0, Type: 1, PrevLsn: 1 << 62, Trunc: 1 << 62, Hint: 3, Reject: true}}},
	} {
		marshalSeed(f, m)
	}
	for ty := int32(0); ty < 12; ty++ {
		marshalSeed(f, &pb.ReplicaBatch{From: "g", Messages: []*pb.ReplicaMessage{{Service: "kv", Partition: ty % 2, Type: ty, From: "g", To: "f", Epoch: 1, Commit: 1, InSync: true}}})
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := fuzzNode(t)
		var in pb.ReplicaBatch
		if proto.Unmarshal(b, &in) != nil {
			return
		}
		resp, err := s.Replicate(context.Background(), &in)
		checkAnswer(t, "Replicate", resp, err)
	})
}

// FuzzAggregateRequest: any aggregation subtree gets a partial result or
// a status, within the request's context.
func FuzzAggregateRequest(f *testing.F) {
	enc := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	self := []*pb.ReplicaAddr{{Node: "f", RpcAddr: "127.0.0.1:1"}}
	for _, m := range []*pb.AggregateRequest{
		{CallId: "a", Service: "sum", Local: "work", Reduce: "sum", Self: 0, DeadlineNs: int64(50 * time.Millisecond),
			Participants: []*pb.Participant{{Index: 0, Partition: 0, Parent: -1, DeadlineNs: int64(50 * time.Millisecond), Replicas: self}}},
		{CallId: "b", Service: "sum", Local: "work", Reduce: "sum", Self: 0, DeadlineNs: int64(50 * time.Millisecond), Hedge: true,
			Participants: []*pb.Participant{{Index: 0, Partition: 0, Parent: -1, Replicas: self}, {Index: 1, Partition: 1, Parent: 0, Replicas: self}}},
		{CallId: "c", Service: "sum", Local: "work", Reduce: "sum", Self: -1, ReduceParams: enc(1), Blocking: true,
			Participants: []*pb.Participant{{Index: 3, Partition: 2, Parent: 7}}},
		{CallId: "d", Service: "echo", Local: "get", Reduce: "x", Self: 5, ElapsedNs: -1, DeadlineNs: -1, GraceNs: 1 << 62},
		{Service: "sum", Local: "nope", Reduce: "nope"},
	} {
		marshalSeed(f, m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := fuzzNode(t)
		var in pb.AggregateRequest
		if proto.Unmarshal(b, &in) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done := make(chan struct{})
		var resp *pb.AggregateResponse
		var err error
		go func() { defer close(done); resp, err = s.Aggregate(ctx, &in) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Aggregate ignored its context for 5 s: %v", &in)
		}
		if resp == nil {
			checkAnswer(t, "Aggregate", nil, err)
		} else {
			checkAnswer(t, "Aggregate", resp, err)
		}

		// The same request at the top of a streaming aggregation: frames,
		// the last one final, or a status.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel2()
		st := &fakeAggStream{ctx: ctx2}
		done = make(chan struct{})
		go func() { defer close(done); err = s.AggregateStream(&in, st) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("AggregateStream ignored its context for 5 s: %v", &in)
		}
		if err != nil {
			checkAnswer(t, "AggregateStream", nil, err)
		} else if len(st.sent) == 0 || !st.sent[len(st.sent)-1].Final {
			t.Fatalf("AggregateStream succeeded without a final frame: %v", st.sent)
		}
	})
}

// fakeAggStream is the server side of an AggregateStream call.
type fakeAggStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*pb.AggregateResponse
}

func (s *fakeAggStream) Context() context.Context { return s.ctx }
func (s *fakeAggStream) Send(f *pb.AggregateResponse) error {
	s.sent = append(s.sent, f)
	return nil
}

// fakeBidi is the server side of a BidiStream call: it delivers frames,
// then io.EOF, and records the answers.
type fakeBidi struct {
	grpc.ServerStream
	ctx     context.Context
	in      []*pb.StreamFrame
	answers []*pb.StreamFrame
}

func (s *fakeBidi) Context() context.Context { return s.ctx }
func (s *fakeBidi) Send(f *pb.StreamFrame) error {
	s.answers = append(s.answers, f)
	return nil
}
func (s *fakeBidi) Recv() (*pb.StreamFrame, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	f := s.in[0]
	s.in = s.in[1:]
	return f, nil
}

// splitFrames reads b as frames, each a 2-byte big-endian length and that
// many bytes of an encoded StreamFrame; false if one does not decode
// (gRPC refuses such a frame before the handler).
func splitFrames(b []byte) ([]*pb.StreamFrame, bool) {
	var out []*pb.StreamFrame
	for len(b) >= 2 {
		n := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		n = min(n, len(b))
		var f pb.StreamFrame
		if proto.Unmarshal(b[:n], &f) != nil {
			return nil, false
		}
		out = append(out, &f)
		b = b[n:]
	}
	return out, true
}

func joinFrames(tb testing.TB, fs ...*pb.StreamFrame) []byte {
	var out []byte
	for _, f := range fs {
		b, err := proto.Marshal(f)
		if err != nil {
			tb.Fatal(err)
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out
}

// FuzzStreamFrames: any sequence of frames a peer sends on a BidiStream
// ends with nil or a typed status, never a panic or a hang, and a write
// stream answers only messages it took, in order, each once.
func FuzzStreamFrames(f *testing.F) {
	open := func(svc, method string, mode pb.Mode, id string) *pb.StreamFrame {
		return &pb.StreamFrame{Open: &pb.CallRequest{Service: svc, Method: method, Mode: mode, ClientId: id}}
	}
	msg := func(seq uint64, body string) *pb.StreamFrame { return &pb.StreamFrame{Seq: seq, Body: []byte(body)} }
	for _, seed := range [][]*pb.StreamFrame{
		{open("echo", "talk", pb.Mode_MODE_READ, ""), msg(1, "a"), msg(2, "b")},
		{open("echo", "talk", pb.Mode_MODE_READ, ""), msg(1, "a"), msg(1, "again")},
		{open("echo", "talk", pb.Mode_MODE_READ, ""), msg(1, "a"), open("echo", "talk", pb.Mode_MODE_READ, "")},
		{open("echo", "puts", pb.Mode_MODE_WRITE, "s1"), msg(1, "a"), msg(2, "b"), msg(4, "gap")},
		{open("kv", "puts", pb.Mode_MODE_WRITE, "s2"), msg(1, "a"), msg(2, "b")},
		{open("kv", "puts", pb.Mode_MODE_WRITE, ""), msg(1, "a")},
		{open("kv", "puts", pb.Mode_MODE_READ, "s3"), msg(1, "a")},
		{open("echo", "get", pb.Mode_MODE_READ, ""), msg(1, "a")},
		{open("echo", "watch", pb.Mode_MODE_READ, ""), msg(0, "zero")},
		{msg(1, "no open")},
		{open("echo", "talk", pb.Mode_MODE_READ, ""), {Seq: 1, Body: make([]byte, 1<<16+1)}},
	} {
		f.Add(joinFrames(f, seed...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := fuzzNode(t)
		frames, ok := splitFrames(b)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st := &fakeBidi{ctx: ctx, in: frames}
		done := make(chan error, 1)
		go func() { done <- s.BidiStream(st) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("BidiStream ignored its context for 10 s")
		}
		if err != nil {
			checkAnswer(t, "BidiStream", nil, err)
			if status.Code(err) == codes.Unknown && !strings.Contains(err.Error(), "bad request") {
				t.Fatalf("BidiStream: untyped error %v", err)
			}
		}
		if len(frames) == 0 || frames[0].Open == nil || frames[0].Open.Mode != pb.Mode_MODE_WRITE {
			return
		}
		var last uint64
		for _, a := range st.answers {
			if last != 0 && a.Seq != last+1 || a.Seq == 0 {
				t.Fatalf("write stream answered message %d after %d", a.Seq, last)
			}
			last = a.Seq
		}
	})
}
