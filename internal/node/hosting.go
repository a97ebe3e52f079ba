package node

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/internal/dispatch"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// hosted is one service on this node.
type hosted struct {
	svc        service.Service
	partitions []int32
	methods    map[string]*service.Method
	pool       *dispatch.Pool
	// ledger is the aggregation load index (nil without Aggregate).
	ledger *dac.Ledger
	clock  clock.Clock
	tracer trace.Tracer // nil: tracing off
}

// lookup finds the method a request names, with the precise error if none.
func (n *Node) lookup(svc string, partition int32, method string, mode service.Mode) (*hosted, *service.Method, error) {
	h, ok := n.services[svc]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q on node %s", nerr.ErrUnknownService, svc, n.cfg.ID)
	}
	if !n.hostsPartition(h, partition) {
		return nil, nil, fmt.Errorf("%w %d of service %q on node %s", nerr.ErrUnknownPartition, partition, svc, n.cfg.ID)
	}
	m, ok := h.methods[method]
	if !ok {
		return nil, nil, fmt.Errorf("%w %q in service %q", nerr.ErrUnknownMethod, method, svc)
	}
	if mode != m.Mode {
		return nil, nil, fmt.Errorf("%w: %s.%s is %s, called as %s", nerr.ErrWrongMode, svc, method, m.Mode, mode)
	}
	return h, m, nil
}

func toRequest(in *pb.CallRequest) *service.Request {
	return &service.Request{Service: in.Service, Partition: int(in.Partition), Method: in.Method, Mode: service.Mode(in.Mode), Class: in.Class, Body: in.Body}
}

// serve runs a call: through the replication runtime on a replicated
// partition, on the service's workers otherwise.
func (n *Node) serve(ctx context.Context, in *pb.CallRequest) (*service.Response, error) {
	h, m, err := n.lookup(in.Service, in.Partition, in.Method, service.Mode(in.Mode))
	if err != nil {
		return nil, err
	}
	in.Class = h.classOf(ctx, in.Class)
	handler := m.Handler
	if handler == nil {
		if m.Mode != service.Write {
			return nil, fmt.Errorf("%w: %s.%s is a stream method; use Client.Stream or Client.OpenStream", nerr.ErrWrongMode, in.Service, in.Method)
		}
		// A write stream's message arrives here as a write
		// (serveWriteStream, or a replica forwarding it to the primary).
		handler = messageHandler(m.Stream)
	}
	if h.svc.Replication != nil {
		return n.repl.Serve(ctx, in, func(ctx context.Context) (*service.Response, error) { return h.serveLocal(ctx, handler, in) })
	}
	return h.serveLocal(ctx, handler, in)
}

// classOf is the class a call from ctx's caller is served in: the one
// the service maps the caller's verified certificate identity to
// (Service.IdentityClasses), else named, the call's own. A call a replica
// forwards to the primary carries the class its first node chose.
func (h *hosted) classOf(ctx context.Context, named string) string {
	if len(h.svc.IdentityClasses) == 0 {
		return named
	}
	if id, ok := transport.Caller(ctx); ok {
		if c, ok := h.svc.IdentityClasses[id.String()]; ok {
			return c
		}
	}
	return named
}

// serveLocal runs handler for in through the service's pool.
func (h *hosted) serveLocal(ctx context.Context, handler service.Handler, in *pb.CallRequest) (*service.Response, error) {
	var resp *service.Response
	var herr error
	if err := h.run(ctx, in.Class, in.Method, func(ctx context.Context) *service.Response {
		resp, herr = runHandler(ctx, handler, toRequest(in))
		return resp
	}); err != nil {
		return nil, err
	}
	if herr != nil {
		return nil, herr
	}
	if resp == nil {
		resp = &service.Response{}
	}
	return resp, nil
}

func (n *Node) serveStream(ctx context.Context, in *pb.CallRequest, send func([]byte) error) error {
	h, m, err := n.lookup(in.Service, in.Partition, in.Method, service.Read)
	if err != nil {
		return err
	}
	if m.Stream == nil {
		return fmt.Errorf("%w: %s.%s is not a stream method; use Client.Call", nerr.ErrWrongMode, in.Service, in.Method)
	}
	in.Class = h.classOf(ctx, in.Class)
	var herr error
	if err := h.run(ctx, in.Class, in.Method, func(ctx context.Context) *service.Response {
		defer recoverInto(&herr)
		herr = m.Stream(ctx, toRequest(in), sendOnly(send))
		return nil
	}); err != nil {
		return err
	}
	return herr
}

// run runs call holding one of the service's worker slots and charges the
// request's class its resource use as the service's Accounting says.
//
// A request measured for Gage (see usage.go) is also charged its thread's
// usage into the accumulator its context carries. Traced, the wait for
// the slot (the class scheduler's queue) and the handler are spans.
func (h *hosted) run(ctx context.Context, class, method string, call func(context.Context) *service.Response) (err error) {
	if h.tracer != nil {
		var queued trace.Span
		call, queued = h.traced(ctx, class, method, call)
		defer func() {
			if err != nil { // never ran: the queue's answer
				queued.RecordError(err)
				queued.SetStatus(codes.Error, err.Error())
			}
			queued.End() // a no-op if the handler started
		}()
	}
	call = measured(h.clock, ctx, call)
	switch h.svc.Accounting {
	case service.ThreadCPU:
		return h.pool.DoCharged(ctx, class, func(ctx context.Context) time.Duration {
			return threadCPU(h.clock, func() { call(ctx) })
		})
	case service.Reported:
		return h.pool.DoCharged(ctx, class, func(ctx context.Context) time.Duration {
			start := h.clock.Now()
			if resp := call(ctx); resp != nil && resp.Cost > 0 {
				return resp.Cost
			}
			return h.clock.Since(start)
		})
	}
	return h.pool.Do(ctx, class, func(ctx context.Context) { call(ctx) })
}

// traced wraps call in the spans of the wait for a worker slot (ended as
// call starts, returned so run ends it if call never does) and of the
// handler.
func (h *hosted) traced(ctx context.Context, class, method string, call func(context.Context) *service.Response) (func(context.Context) *service.Response, trace.Span) {
	_, queued := h.tracer.Start(ctx, "neptune.node.queue", trace.WithAttributes(attribute.String("neptune.class", class)))
	return func(ctx context.Context) *service.Response {
		queued.End()
		ctx, span := h.tracer.Start(ctx, "neptune.handler "+h.svc.Name+"."+method,
			trace.WithAttributes(attribute.String("neptune.service", h.svc.Name), attribute.String("neptune.method", method)))
		defer span.End()
		return call(ctx)
	}, queued
}

// runHandler calls f, turning a panic into an error so one bad request
// cannot take the node down.
func runHandler(ctx context.Context, f service.Handler, req *service.Request) (resp *service.Response, err error) {
	defer recoverInto(&err)
	return f(ctx, req)
}

func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("neptune: handler panicked: %v", r)
	}
}

// writes runs a replicated service's committed writes on its workers
// (replication.Executor).
type writes struct{ h *hosted }

func (w writes) Execute(ctx context.Context, req *service.Request) (replication.Result, error) {
	m := w.h.methods[req.Method]
	if m == nil || m.Handler == nil && (m.Stream == nil || m.Mode != service.Write) {
		return replication.Result{}, replication.ErrNoHandler
	}
	handler := m.Handler
	if handler == nil {
		handler = messageHandler(m.Stream) // one message of a write stream
	}
	var res replication.Result
	err := w.h.run(ctx, "", req.Method, func(ctx context.Context) *service.Response {
		res.Resp, res.Err = runHandler(ctx, handler, req)
		return res.Resp
	})
	return res, err
}

// Aggregation gives the aggregation runtime a hosted service
// (aggregation.Services).
func (n *Node) Aggregation(svc string) (aggregation.Hosted, bool) {
	h, ok := n.services[svc]
	if !ok {
		return aggregation.Hosted{}, false
	}
	return aggregation.Hosted{Operators: h.svc.Aggregate, Partitions: h.partitions, Workers: h.pool, Ledger: h.ledger}, true
}
