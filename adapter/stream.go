package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/neptune-cluster/neptune"
)

// stream is the handler of a stream method (MethodConfig.Stream).
func (h *httpService) stream(mode neptune.Mode, verb, route string) neptune.StreamHandler {
	if mode == neptune.Write {
		// The node runs a write stream's handler once per message, each
		// its own write with its own LSN: one request each, as a write
		// method's.
		return func(ctx context.Context, r *neptune.Request, s neptune.ServerStream) error {
			for {
				b, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				out, err := h.do(ctx, verb, route, r.Method, r.Partition, r.LSN, b)
				if err != nil {
					return err
				}
				if err := s.Send(out); err != nil {
					return err
				}
			}
		}
	}
	return func(ctx context.Context, r *neptune.Request, s neptune.ServerStream) error {
		return h.duplex(ctx, verb, route, r, s)
	}
}

// duplex runs a read stream as one full-duplex request: the caller's
// messages go out as NDJSON frames in the chunked request body while the
// program's answer, NDJSON frames too, comes back as it writes them. The
// program ends the stream by ending its answer; a status other than 2xx
// before it fails the stream as a failed call would. The stream's own
// deadline bounds it, not http.timeout (which is for one call).
func (h *httpService) duplex(ctx context.Context, verb, route string, r *neptune.Request, s neptune.ServerStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	target := h.base + route
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, verb, target, pr)
	if err != nil {
		return fmt.Errorf("adapter: %s %s: %w", verb, route, err)
	}
	req.Header.Set(HeaderPartition, strconv.Itoa(r.Partition))
	req.Header.Set(HeaderLSN, strconv.FormatUint(r.LSN, 10))
	req.Header.Set(HeaderMethod, r.Method)
	req.Header.Set("Content-Type", ContentTypeNDJSON)
	traceHeaders(ctx, req.Header)
	up := make(chan error, 1)
	go func() { up <- h.pump(s, pw) }()
	resp, err := h.client.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %s %s: %v", neptune.ErrDeadline, verb, target, err)
		}
		return fmt.Errorf("%w: %s %s: %v", ErrUnreachable, verb, target, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp.StatusCode); err != nil {
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%w: %s %s: status %d: %s", err, verb, target, resp.StatusCode, strings.TrimSpace(string(out)))
	}
	fr := NewFrameReader(resp.Body, int(h.cfg.MaxResponse))
	for {
		b, err := fr.Next()
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, ErrBadFrame), errors.Is(err, ErrFrameTooLarge):
			return fmt.Errorf("%w: %s %s: answer: %v", ErrProgram, verb, target, err)
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			select {
			case uerr := <-up:
				if uerr != nil {
					return uerr // why the request was cut off
				}
			default:
			}
			return fmt.Errorf("%w: %s %s: the answer broke off: %v", ErrProgram, verb, target, err)
		}
		if err := s.Send(b); err != nil {
			return err
		}
	}
}

// pump writes the caller's messages to the program as frames until the
// caller ends its side (the request body ends) or the stream fails (the
// request is cut off, and pump returns why).
func (h *httpService) pump(s neptune.ServerStream, pw *io.PipeWriter) error {
	var line []byte
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return pw.Close()
		}
		if err == nil && int64(len(b)) > h.cfg.MaxRequest {
			err = fmt.Errorf("%w: stream message of %d bytes exceeds http.max_request (%d); not sent", neptune.ErrTooLarge, len(b), h.cfg.MaxRequest)
		}
		if err != nil {
			pw.CloseWithError(err)
			return err
		}
		line = AppendFrame(line[:0], b)
		if _, err := pw.Write(line); err != nil {
			return nil // the request is over
		}
	}
}
