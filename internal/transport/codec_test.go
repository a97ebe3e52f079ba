package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// unmarshalCall decodes what proto.Unmarshal decodes, and refuses what
// it refuses: requests with and without a body, unknown fields, a body
// sent twice (the last counts), bodies under other field types, and
// every prefix of a valid message.
func TestUnmarshalCallMatchesProtobuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	full, err := proto.Marshal(&pb.CallRequest{Service: "kv", Partition: 3, Method: "put", Body: bytes.Repeat([]byte("x"), 70<<10),
		Mode: pb.Mode_MODE_WRITE, ClientId: "c", Seq: 9, IdempotencyKey: "k", Class: "gold"})
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{full, {}, protowire.AppendTag(nil, callBodyField, protowire.VarintType)}
	twice := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), full...), callBodyField, protowire.BytesType), []byte("second"))
	unknown := protowire.AppendString(protowire.AppendTag(append([]byte(nil), full...), 999, protowire.BytesType), "later")
	wrongType := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), full...), callBodyField, protowire.VarintType), 7)
	inputs = append(inputs, twice, unknown, wrongType)
	for range 200 {
		inputs = append(inputs, full[:rng.IntN(len(full))])
	}
	for range 200 {
		b := append([]byte(nil), full[:64]...)
		b[rng.IntN(len(b))] = byte(rng.IntN(256))
		inputs = append(inputs, b)
	}
	for _, b := range inputs {
		want, got := &pb.CallRequest{}, &pb.CallRequest{Method: "stale"}
		werr := proto.Unmarshal(b, want)
		gerr := unmarshalCall(append([]byte(nil), b...), got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("% x: protobuf %v, unmarshalCall %v", b[:min(len(b), 32)], werr, gerr)
		}
		if werr == nil && !proto.Equal(want, got) {
			t.Fatalf("% x: protobuf %v, unmarshalCall %v", b[:min(len(b), 32)], want, got)
		}
	}
}

// A large body is not copied: it lies in the received message.
func TestUnmarshalCallKeepsTheBodyInPlace(t *testing.T) {
	b, err := proto.Marshal(&pb.CallRequest{Service: "kv", Method: "put", Body: bytes.Repeat([]byte("x"), 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	in := &pb.CallRequest{}
	if err := unmarshalCall(b, in); err != nil {
		t.Fatal(err)
	}
	end := &b[len(b)-1]
	*end = 'y'
	if in.Body[len(in.Body)-1] != 'y' || cap(in.Body) != len(in.Body) {
		t.Fatalf("the body was copied out of the message (or may grow into it)")
	}
}

// FuzzUnmarshalCall: whatever the bytes, unmarshalCall agrees with
// proto.Unmarshal (a large CallRequest reaches the node through it).
func FuzzUnmarshalCall(f *testing.F) {
	full, _ := proto.Marshal(&pb.CallRequest{Service: "kv", Partition: 3, Method: "put", Body: []byte("k=v"), ClientId: "c", Seq: 9})
	f.Add(full)
	f.Add(protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), full...), callBodyField, protowire.BytesType), []byte("again")))
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, got := &pb.CallRequest{}, &pb.CallRequest{}
		werr := proto.Unmarshal(b, want)
		gerr := unmarshalCall(append([]byte(nil), b...), got)
		if (werr == nil) != (gerr == nil) || werr == nil && !proto.Equal(want, got) {
			t.Fatalf("protobuf %v %v, unmarshalCall %v %v", want, werr, got, gerr)
		}
	})
}
