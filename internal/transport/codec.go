package transport

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// aliasBodyFrom is the size from which a received CallRequest's body is
// not copied out of the message (below it, gRPC's codec as it is).
const aliasBodyFrom = 64 << 10

// callBodyField is CallRequest.body's field number.
var callBodyField = (&pb.CallRequest{}).ProtoReflect().Descriptor().Fields().ByName("body").Number()

// callCodec is gRPC's proto codec, except for a large CallRequest, whose
// body aliases the received message instead of being copied from it.
// gRPC's codec gathers a message's frames into one pooled buffer and
// protobuf copies a bytes field out of it: a 15 MiB write was in memory
// three times while decoded (frames, buffer, body) and its buffer stayed
// in gRPC's pool after; here the gathered buffer is the body's own.
type callCodec struct{ encoding.CodecV2 }

// bodyCodec is the server option of callCodec.
func bodyCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(callCodec{encoding.GetCodecV2("proto")})
}

func (c callCodec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*pb.CallRequest)
	if !ok || data.Len() < aliasBodyFrom {
		return c.CodecV2.Unmarshal(data, v)
	}
	return unmarshalCall(data.Materialize(), in)
}

// unmarshalCall is proto.Unmarshal(b, in), with in.Body a slice of b:
// the fields other than the body are decoded by protobuf from a copy of
// them, and the last body field (protobuf's rule for a repeated scalar)
// is kept where it lies.
func unmarshalCall(b []byte, in *pb.CallRequest) error {
	var rest, body []byte
	seen := false
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return fmt.Errorf("transport: CallRequest: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if m < 0 {
			return fmt.Errorf("transport: CallRequest: %w", protowire.ParseError(m))
		}
		if num == callBodyField && typ == protowire.BytesType {
			body, _ = protowire.ConsumeBytes(p[n:])
			seen = true
		} else {
			rest = append(rest, p[:n+m]...)
		}
		p = p[n+m:]
	}
	if err := proto.Unmarshal(rest, in); err != nil {
		return err
	}
	if seen {
		in.Body = body[:len(body):len(body)]
	}
	return nil
}
