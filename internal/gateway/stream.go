package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/obs"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// Streamer opens the bidirectional streams of stream routes; a
// *neptune.Client is one.
type Streamer interface {
	OpenStream(ctx context.Context, service string, partition int, method string, opts ...neptune.CallOption) (*neptune.BidiStream, error)
}

// Why a stream ended, when the gateway ended it.
var (
	errIdle      = errors.New("gateway: no message either way within the idle bound")
	errClientEnd = errors.New("gateway: the client went away")
	errDraining  = errors.New("gateway: shutting down")
)

// frameConn is the client's side of a stream: HTTP (NDJSON lines) or
// WebSocket.
type frameConn interface {
	// read returns the next message's body; adapter.ErrFrameTooLarge and
	// adapter.ErrBadFrame concern that frame only; io.EOF: the client closed its
	// side; any other error: the connection is gone.
	read() ([]byte, error)
	// write sends one frame, within the idle bound.
	write(f outFrame) error
	// finish ends the connection after the last frame, and any read
	// still blocked.
	finish()
}

// serveStream serves a stream route once the route, the subscriber and
// the partition are known. The open takes a turn, as a call does; refused,
// or failing to open, the answer is an HTTP status as for a call. Then
// every message the client sends takes a turn (at most max_wait: the
// stream's reading waits meanwhile, so the client's sends are held by
// flow control) and goes to the node; a message refused its turn, too
// large or malformed is answered with an error frame naming it, and the
// stream goes on. The last frame is {"end":true}, with the error that
// ended the stream if any.
func (g *Gateway) serveStream(w http.ResponseWriter, r *http.Request, rt *route, sub string, part int, start time.Time) int {
	if g.streams == nil {
		return g.fail(w, http.StatusBadGateway, "this gateway cannot open streams")
	}
	ws := isWebSocket(r)
	if !ws && r.Method == http.MethodGet {
		return g.fail(w, http.StatusBadRequest, "a stream is a WebSocket, or a request whose body is its messages (POST, "+adapter.ContentTypeNDJSON+")")
	}
	bound := time.Duration(g.cfg.Streams.MaxDuration)
	if rt.Timeout > 0 {
		bound = time.Duration(rt.Timeout)
	}
	g.streaming.Add(1)
	defer g.streaming.Done()
	base, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stopDrain := context.AfterFunc(g.draining, func() { cancel(errDraining) })
	defer stopDrain()
	ctx, cancelD := clock.WithDeadline(base, g.clk, start.Add(bound))
	defer cancelD()
	acct := &streamCharge{g: g, sub: sub}
	defer acct.close()
	maxWait := time.Duration(g.cfg.MaxWait)
	if err := g.loop.wait(ctx, sub, maxWait); err != nil {
		return g.refused(w, r, rt, sub, err)
	}
	acct.turn(0)
	class := rt.Class
	if c := g.classOf[sub]; c != "" {
		class = c
	}
	s, err := g.streams.OpenStream(transport.WithSubscriber(ctx, sub), rt.Service, part, rt.Method, neptune.WithClass(class))
	if err != nil {
		return g.callFailed(w, r, rt, sub, err)
	}
	defer s.Close()

	idleFor := time.Duration(g.cfg.Streams.Idle)
	var conn frameConn
	if ws {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.cfg.Streams.Origins})
		if err != nil {
			// Accept answered the handshake with its reason.
			g.log.DebugContext(r.Context(), "gateway: websocket handshake refused", "route", rt.field, "subscriber", sub, "err", err)
			return http.StatusBadRequest
		}
		c.SetReadLimit(int64(g.cfg.Streams.MaxMessage))
		conn = &wsConn{c: c, idle: idleFor}
	} else {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex() // HTTP/1.1; HTTP/2 always is
		h := w.Header()
		h.Set("Content-Type", adapter.ContentTypeNDJSON)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		conn = &httpConn{w: w, rc: rc, in: adapter.NewFrameReader(r.Body, int(g.cfg.Streams.MaxMessage)), idle: idleFor}
	}
	idle := g.clk.AfterFunc(idleFor, func() { cancel(errIdle) })
	defer idle.Stop()
	out := &frameOut{conn: conn, id: w.Header().Get(obs.HeaderRequestID), write: s.ID() != ""}

	up := make(chan struct{})
	go func() {
		defer close(up)
		g.streamUp(ctx, cancel, conn, s, out, acct, sub, func() { idle.Reset(idleFor) })
	}()
	code := g.streamDown(ctx, s, out, acct, func() { idle.Reset(idleFor) })
	// The request's body may not be read once the handler returns: end
	// the stream, unblock the reader and wait for it.
	s.Close()
	conn.finish()
	<-up
	if r.Context().Err() != nil && code != http.StatusOK {
		return statusClientGone
	}
	return code
}

// streamUp carries the client's messages to the node, each after its
// turn, until the client closes its side (CloseSend), goes away, or the
// stream ends.
func (g *Gateway) streamUp(ctx context.Context, cancel context.CancelCauseFunc, conn frameConn, s *neptune.BidiStream, out *frameOut, acct *streamCharge, sub string, active func()) {
	maxWait := time.Duration(g.cfg.MaxWait)
	var n uint64 // the client's message number
	for {
		body, err := conn.read()
		switch {
		case errors.Is(err, adapter.ErrFrameTooLarge):
			n++
			out.refuse(n, http.StatusRequestEntityTooLarge, fmt.Sprintf("message %d: %v; it was not sent", n, err))
			continue
		case errors.Is(err, adapter.ErrBadFrame):
			n++
			out.refuse(n, http.StatusBadRequest, fmt.Sprintf("message %d: %v; it was not sent", n, err))
			continue
		case err == io.EOF:
			s.CloseSend()
			return
		case err != nil:
			cancel(errClientEnd)
			return
		}
		n++
		active()
		g.metrics.onDemand(sub) // each message is a request to the scheduler
		if err := g.loop.wait(ctx, sub, maxWait); err != nil {
			if ctx.Err() != nil {
				return // the stream is ending; streamDown says why
			}
			status, text, why := refusal(err)
			if why != "" {
				g.metrics.onDrop(sub, why)
			}
			out.refuse(n, status, fmt.Sprintf("message %d: %s; it was not sent", n, text))
			continue
		}
		acct.turn(len(body))
		out.sending(n)
		if err := s.Send(body); err != nil {
			out.unsent()
			if errors.Is(err, neptune.ErrTooLarge) {
				out.refuse(n, http.StatusRequestEntityTooLarge, fmt.Sprintf("message %d: %v", n, err))
				continue
			}
			return // the stream has ended: streamDown reports why
		}
	}
}

// streamDown carries the node's answers to the client until the stream
// ends, then writes the last frame; it returns the status to record.
func (g *Gateway) streamDown(ctx context.Context, s *neptune.BidiStream, out *frameOut, acct *streamCharge, active func()) int {
	for {
		f, err := s.RecvFrame()
		if err == io.EOF {
			if out.final(outFrame{End: true}) != nil {
				return statusClientGone
			}
			return http.StatusOK
		}
		if err != nil {
			fe := g.streamError(ctx, err, out)
			if out.final(outFrame{End: true, Error: fe}) != nil {
				return statusClientGone
			}
			return fe.Status
		}
		active()
		acct.add(len(f.Body))
		of := answerFrame(f.Body)
		if out.write {
			of.Message, of.Version = out.answered(), f.Version
		}
		if out.send(of) != nil {
			return statusClientGone
		}
	}
}

// streamError is the error frame of a stream that failed with err.
func (g *Gateway) streamError(ctx context.Context, err error, out *frameOut) *frameError {
	fe := &frameError{Status: StatusOf(err), RequestID: out.id}
	var remote *transport.RemoteError
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errIdle):
		fe.Status, fe.Text = http.StatusGatewayTimeout, "no message either way within the idle bound"
	case errors.Is(cause, errDraining):
		fe.Status, fe.Text = http.StatusServiceUnavailable, "the gateway is shutting down: open the stream again"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		fe.Status, fe.Text = http.StatusGatewayTimeout, "the stream's deadline passed"
	case errors.As(err, &remote):
		fe.Text = remote.Message
		if fe.Status == http.StatusBadGateway {
			fe.Text = "the service failed: " + fe.Text
		}
	default:
		fe.Text = streamText(fe.Status)
	}
	var se *neptune.StreamOutcomeError
	if errors.As(err, &se) {
		fe.Outcome = out.outcome(se)
		fe.Text += "; " + fe.Outcome.String()
	}
	return fe
}

func streamText(status int) string {
	switch status {
	case http.StatusNotFound:
		return "no such service, method or partition"
	case http.StatusServiceUnavailable:
		return "service unavailable: the replica failed or is overloaded"
	case http.StatusGatewayTimeout:
		return "deadline passed"
	}
	return "the stream failed"
}

// frameOut writes a stream's frames, one at a time from either
// direction, nothing after the last. For a write stream it maps the
// node's seqs (1, 2, ... over the messages sent) to the client's message
// numbers (refused messages are never sent).
type frameOut struct {
	conn  frameConn
	id    string // the request id
	write bool   // a write stream: answers are numbered

	// wmu serialises writes (which may wait for a slow client) apart
	// from mu, so numbering a message never waits for one.
	wmu  sync.Mutex
	done bool

	mu      sync.Mutex
	pending []uint64 // numbers of the messages sent and not answered, in order
	applied uint64   // the number of the last answered message
}

func (o *frameOut) sending(n uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = append(o.pending, n)
}

// unsent takes back the last message sending recorded: it never left.
func (o *frameOut) unsent() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = o.pending[:len(o.pending)-1]
}

// answered is the number of the message the next answer is for.
func (o *frameOut) answered() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) > 0 {
		o.applied, o.pending = o.pending[0], o.pending[1:]
	}
	return o.applied
}

// outcome translates se's seqs into message numbers.
func (o *frameOut) outcome(se *neptune.StreamOutcomeError) *outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	through := func(seq uint64) uint64 {
		// pending[0] is seq Applied+1 (the client's own accounting
		// agrees with the answers it let through).
		if seq <= se.Applied || len(o.pending) == 0 {
			return o.applied
		}
		i := min(int(seq-se.Applied), len(o.pending)) - 1
		return o.pending[i]
	}
	return &outcome{StreamID: se.StreamID, AppliedThrough: o.applied, MaybeAppliedThrough: through(se.MaybeApplied),
		SentThrough: through(se.Sent), HandlerFailed: se.HandlerFailed}
}

func (o *frameOut) send(f outFrame) error {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.done {
		return io.ErrClosedPipe
	}
	return o.conn.write(f)
}

// refuse answers message n with an error; the stream goes on.
func (o *frameOut) refuse(n uint64, status int, text string) {
	_ = o.send(outFrame{Message: n, Error: &frameError{Status: status, Text: text, RequestID: o.id}})
}

// final writes the last frame.
func (o *frameOut) final(f outFrame) error {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.done {
		return io.ErrClosedPipe
	}
	o.done = true
	return o.conn.write(f)
}

// streamCharge charges a stream to its subscriber: the open and each
// message are one request each, which took its turn, and is reported
// once the next one takes its turn (or the stream ends) with the bytes
// the gateway carried for it: its message's and the answers' that came
// meanwhile. Nodes do not measure stream messages, so a stream costs its
// subscriber network only.
type streamCharge struct {
	g   *Gateway
	sub string

	mu     sync.Mutex
	open   bool // a request is outstanding
	bytes  int
	closed bool
}

// turn starts the next request, one of size bytes.
func (a *streamCharge) turn(size int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.report()
	a.open, a.bytes = true, size
	if a.closed {
		a.report()
	}
}

// add charges answer bytes to the request outstanding.
func (a *streamCharge) add(size int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bytes += size
}

func (a *streamCharge) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.report()
	a.closed = true
}

func (a *streamCharge) report() {
	if !a.open {
		return
	}
	used := gage.Res(0, 0, int64(a.bytes))
	a.g.loop.done(gage.Usage{Subscriber: a.sub, Requests: 1, Used: used})
	a.g.metrics.onUsed(a.sub, a.g.unit, used)
	a.open, a.bytes = false, 0
}

// isWebSocket reports whether r asks to become a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") && headerHasToken(r.Header, "Connection", "upgrade")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// httpConn is a stream over HTTP: NDJSON lines both ways.
type httpConn struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	in   *adapter.FrameReader
	idle time.Duration
}

func (c *httpConn) read() ([]byte, error) { return c.in.Next() }

func (c *httpConn) write(f outFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	// A client that reads nothing for the idle bound is gone.
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.idle))
	if _, err := c.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return c.rc.Flush()
}

func (c *httpConn) finish() { _ = c.rc.SetReadDeadline(time.Now()) }

// wsConn is a stream over WebSocket: one JSON frame per text message both
// ways; a binary message from the client is a message's body as it is.
type wsConn struct {
	c    *websocket.Conn
	idle time.Duration
}

// read is not bound by the stream's context: a Read whose context ends
// closes the connection, and the last frame must still go out. finish
// ends a read still blocked.
func (c *wsConn) read() ([]byte, error) {
	typ, b, err := c.c.Read(context.Background())
	var ce websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure:
		return nil, io.EOF
	case err != nil:
		return nil, err
	case typ == websocket.MessageBinary:
		return b, nil
	}
	return adapter.DecodeFrame(b)
}

func (c *wsConn) write(f outFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.idle)
	defer cancel()
	return c.c.Write(ctx, websocket.MessageText, b)
}

func (c *wsConn) finish() { c.c.Close(websocket.StatusNormalClosure, "") }
