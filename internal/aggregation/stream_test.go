package aggregation

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// assess says what a frame holds of the call: the partitions in and
// missing, the coverage and whether ρ is met; a frame naming a partition
// outside the call, or one twice, is refused.
func TestAssessJudgesQualitySoFar(t *testing.T) {
	req := dac.Request{Service: "s", Partitions: []int{9, 3, 5, 7}, Quality: 0.5, Deadline: time.Second}
	p, err := assess(req, &pb.AggregateResponse{Partitions: []int32{7, 3}, Data: []byte("x")}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Contributing, []int{3, 7}) || !slices.Equal(p.Missing, []int{5, 9}) || p.Coverage != 0.5 || !p.QualityMet || p.Final || string(p.Data) != "x" {
		t.Fatalf("got %+v", p)
	}
	p, err = assess(req, &pb.AggregateResponse{Partitions: []int32{5}}, true)
	if err != nil || p.QualityMet || p.Coverage != 0.25 || !p.Final {
		t.Fatalf("one of four at ρ=0.5: %+v, %v", p, err)
	}
	if p, err := assess(req, nil, true); err != nil || len(p.Contributing) != 0 || len(p.Missing) != 4 || p.QualityMet {
		t.Fatalf("nothing: %+v, %v", p, err)
	}
	for _, bad := range [][]int32{{3, 4}, {3, 3}, {-1}} {
		if _, err := assess(req, &pb.AggregateResponse{Partitions: bad}, false); err == nil {
			t.Errorf("frame with partitions %v accepted", bad)
		}
	}
}

// FuzzAssess: whatever frame a peer sends, assess never panics, and what
// it accepts splits the call's partitions into contributing and missing.
func FuzzAssess(f *testing.F) {
	for _, seed := range []*pb.AggregateResponse{
		{Partitions: []int32{1, 2}, Data: []byte("ab")},
		{Partitions: []int32{2, 2}},
		{Partitions: []int32{1 << 30}, Final: true},
	} {
		b, _ := proto.Marshal(seed)
		f.Add(b)
	}
	req := dac.Request{Service: "s", Partitions: []int{0, 1, 2, 3, 5}, Quality: 0.6, Deadline: time.Second}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr pb.AggregateResponse
		if proto.Unmarshal(b, &fr) != nil {
			return
		}
		p, err := assess(req, &fr, fr.Final)
		if err != nil {
			return
		}
		all := slices.Concat(p.Contributing, p.Missing)
		slices.Sort(all)
		if !slices.Equal(all, req.Partitions) || p.QualityMet != (len(p.Contributing) >= 3) {
			t.Fatalf("frame %v assessed as %+v", fr.Partitions, p)
		}
	})
}

// frames is a fake AggregateStream: it sends its frames, then fails with
// err (or ends).
type frames struct {
	grpc.ServerStreamingClient[pb.AggregateResponse]
	out []*pb.AggregateResponse
	err error
}

func (f *frames) Recv() (*pb.AggregateResponse, error) {
	if len(f.out) == 0 {
		if f.err != nil {
			return nil, f.err
		}
		return nil, io.EOF
	}
	r := f.out[0]
	f.out = f.out[1:]
	return r, nil
}

// tops answers AggregateStream per node with a script of frames.
type tops map[string]*frames

func (t tops) ClientFor(node, _ string) (pb.NodeClient, error) { return topClient{f: t[node]}, nil }

type topClient struct {
	pb.NodeClient
	f *frames
}

func (c topClient) AggregateStream(context.Context, *pb.AggregateRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.AggregateResponse], error) {
	return c.f, nil
}

func frame(final bool, parts ...int32) *pb.AggregateResponse {
	return &pb.AggregateResponse{Partitions: parts, Data: []byte{byte(len(parts))}, Final: final}
}

// A top that dies after showing partitions 0 and 1 is replaced by the
// next replica, which starts the tree again: its frames are shown only
// once they cover more than what was shown, and when it finishes with
// less (0 alone) the larger result stands.
func TestStreamTopFailsOverKeepingTheLargerResult(t *testing.T) {
	c := NewCaller(Config{Directory: yellow, Dialer: tops{
		"n2": {out: []*pb.AggregateResponse{frame(false, 0), frame(false, 0, 1)}, err: status.Error(codes.Unavailable, "killed")},
		"n3": {out: []*pb.AggregateResponse{frame(false, 1), frame(true, 1)}},
	}})
	top := &pb.Participant{Index: 1, Partition: 1, Parent: -1, DeadlineNs: int64(time.Second), Replicas: []*pb.ReplicaAddr{ra("n2", ""), ra("n3", "")}}
	l := &launch{req: dac.Request{Service: "svc", Partitions: []int{0, 1}, Quality: 1, Deadline: time.Second},
		start: time.Now(), base: &pb.AggregateRequest{Service: "svc", CallId: "t"}, top: top, parts: []*pb.Participant{top}, hop: time.Millisecond}
	var shown [][]int
	final, err := c.streamTop(context.Background(), l, func(p *Progress) { shown = append(shown, p.Contributing) })
	if err != nil {
		t.Fatal(err)
	}
	if len(shown) != 2 || !slices.Equal(shown[0], []int{0}) || !slices.Equal(shown[1], []int{0, 1}) {
		t.Fatalf("shown %v, want [0] then [0 1]", shown)
	}
	if !slices.Equal(final.Partitions, []int32{0, 1}) {
		t.Fatalf("final %v, want the larger [0 1]", final.Partitions)
	}

	// A frame naming a partition outside the call makes that top's
	// answer worthless: the next replica's counts.
	c = NewCaller(Config{Directory: yellow, Dialer: tops{
		"n2": {out: []*pb.AggregateResponse{frame(false, 7)}},
		"n3": {out: []*pb.AggregateResponse{frame(true, 1)}},
	}})
	if final, err := c.streamTop(context.Background(), l, func(*Progress) {}); err != nil || !slices.Equal(final.Partitions, []int32{1}) {
		t.Fatalf("after a bad frame: %v, %v; want n3's [1]", final, err)
	}
	// A top that ends without its final frame is a failure too.
	c = NewCaller(Config{Directory: yellow, Dialer: tops{"n2": {}, "n3": {}}})
	if final, err := c.streamTop(context.Background(), l, func(*Progress) {}); final != nil || err == nil {
		t.Fatalf("no final frame: %v, %v; want an error", final, err)
	}
}

// sent collects what ServeStream sends.
type sent struct{ frames []*pb.AggregateResponse }

func (s *sent) send(f *pb.AggregateResponse) error {
	s.frames = append(s.frames, proto.Clone(f).(*pb.AggregateResponse))
	return nil
}

// At the top of a streaming aggregation a node sends progress frames
// that grow, then the final frame with the whole subtree; an error from
// send (the caller went away) ends its part.
func TestServeStreamSendsGrowingProgressThenFinal(t *testing.T) {
	agg := &service.Aggregator{
		Local:  map[string]service.LocalFunc{"l": func(context.Context, int, []byte) ([]byte, error) { return []byte("a"), nil }},
		Reduce: map[string]service.ReduceFunc{"r": func(_ context.Context, a, b, _ []byte) ([]byte, error) { return append(slices.Clone(a), b...), nil }},
	}
	srv := NewServer(ServerConfig{
		Self:     "n1",
		Services: hosting{Hosted{Operators: agg, Partitions: []int32{0}, Workers: directWorkers{}, Ledger: &dac.Ledger{}}},
		Caller:   NewCaller(Config{Directory: yellow, Dialer: &recorder{}}),
	})
	sec := int64(time.Second)
	in := &pb.AggregateRequest{
		CallId: "t", Service: "svc", Local: "l", Reduce: "r", Self: 0, DeadlineNs: sec, GraceNs: int64(10 * time.Millisecond),
		Participants: []*pb.Participant{
			{Index: 0, Partition: 0, Parent: -1, DeadlineNs: sec, Replicas: []*pb.ReplicaAddr{ra("n1", "")}},
			{Index: 1, Partition: 1, Parent: 0, DeadlineNs: sec / 2, Replicas: []*pb.ReplicaAddr{ra("n2", "")}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s sent
	if err := srv.ServeStream(ctx, in, s.send); err != nil {
		t.Fatal(err)
	}
	last := s.frames[len(s.frames)-1]
	if slices.Sort(last.Partitions); !last.Final || !slices.Equal(last.Partitions, []int32{0, 1}) || len(last.Data) != 2 {
		t.Fatalf("last frame %v, want the final [0 1]", last)
	}
	size := 0
	for _, f := range s.frames[:len(s.frames)-1] {
		if f.Final || len(f.Partitions) <= size {
			t.Fatalf("frames %v: progress must grow and come before the final", s.frames)
		}
		size = len(f.Partitions)
	}

	gone := errors.New("caller gone")
	if err := srv.ServeStream(ctx, in, func(*pb.AggregateResponse) error { return gone }); !errors.Is(err, gone) {
		t.Fatalf("send failing: %v", err)
	}
}
