// Package echo is the smallest Neptune service: it answers with what it was
// sent. The paper measured middleware overhead with it.
package echo

import (
	"context"
	"fmt"
	"io"

	"github.com/neptune-cluster/neptune"
)

// Service returns the echo service: "echo" returns the body, "chunks"
// streams the body back one byte-group per chunk (split into n chunks, n
// being the first byte of the body, at least 1).
func Service() neptune.Service {
	return neptune.Service{
		Name: "echo",
		Methods: []neptune.Method{
			{Name: "echo", Mode: neptune.Read, Handler: func(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
				return &neptune.Response{Body: r.Body}, nil
			}},
			{Name: "chunks", Mode: neptune.Read, Stream: func(ctx context.Context, r *neptune.Request, s neptune.ServerStream) error {
				if len(r.Body) == 0 {
					return fmt.Errorf("echo: chunks needs a body whose first byte is the chunk count")
				}
				n := max(int(r.Body[0]), 1)
				for i := range n {
					if err := s.Send(fmt.Appendf(nil, "%d:%s", i, r.Body[1:])); err != nil {
						return err
					}
				}
				return nil
			}},
			// talk answers each message of a bidirectional stream with the
			// message itself, until the caller closes its side.
			{Name: "talk", Mode: neptune.Read, Stream: func(ctx context.Context, r *neptune.Request, s neptune.ServerStream) error {
				for {
					m, err := s.Recv()
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					if err := s.Send(m); err != nil {
						return err
					}
				}
			}},
		},
	}
}
