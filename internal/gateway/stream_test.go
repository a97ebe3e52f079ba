package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/internal/obs"
)

// streamGateway serves a gateway in front of an in-process node with
// echo on an h2c and HTTP/1.1 listener.
func streamGateway(t *testing.T, extra string) *httptest.Server {
	nd := startNode(t, echo.Service())
	g, _ := start(t, `
capacity_grps: 10000
streams: {max_message: 64}
routes:
  - {path_prefix: /talk, service: echo, method: talk, stream: true, partition: {segment: 2}}
  - {path_prefix: /echo, service: echo, method: echo}
`+extra, nd.Client(), nil)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// A read stream over HTTP/2, and over HTTP/1.1, is full duplex: each
// answer arrives before the next message is sent; a message over the
// limit and a malformed one are refused by number and the stream goes on;
// the end frame follows the client's end.
func TestStreamOverHTTP(t *testing.T) {
	srv := streamGateway(t, "")
	for _, major := range []int{2, 1} {
		t.Run(fmt.Sprint("HTTP/", major), func(t *testing.T) { testStreamOverHTTP(t, srv, major) })
	}
}

func testStreamOverHTTP(t *testing.T, srv *httptest.Server, major int) {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if major == 2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	hc := &http.Client{Transport: tr}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", srv.URL+"/talk/0", pr)
	req.Header.Set("Content-Type", adapter.ContentTypeNDJSON)
	req.Header.Set("X-Request-Id", "stream-test-1")
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() { resp, err := hc.Do(req); got <- result{resp, err} }()
	// The headers come before any message: the stream is open.
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.resp.Body.Close()
	if res.resp.ProtoMajor != major || res.resp.StatusCode != 200 || res.resp.Header.Get("Content-Type") != adapter.ContentTypeNDJSON {
		t.Fatalf("open: %s %d %v", res.resp.Proto, res.resp.StatusCode, res.resp.Header)
	}
	sc := bufio.NewScanner(res.resp.Body)
	read := func() outFrame {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended early: %v", sc.Err())
		}
		var f outFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		return f
	}
	for _, m := range []string{"one", "two", "\xff\x00"} {
		pw.Write(adapter.AppendFrame(nil, []byte(m)))
		f := read()
		if got := answerBody(f); got != m || f.Error != nil {
			t.Fatalf("answer to %q: %+v", m, f)
		}
	}
	pw.Write(adapter.AppendFrame(nil, bytes.Repeat([]byte("x"), 100)))
	if f := read(); f.Message != 4 || f.Error == nil || f.Error.Status != 413 || f.Error.RequestID != "stream-test-1" {
		t.Fatalf("message over the limit: %+v %+v", f, f.Error)
	}
	pw.Write([]byte("{\"data\": 5}\n"))
	if f := read(); f.Message != 5 || f.Error == nil || f.Error.Status != 400 {
		t.Fatalf("malformed message: %+v", f)
	}
	pw.Write(adapter.AppendFrame(nil, []byte("six")))
	if f := read(); answerBody(f) != "six" {
		t.Fatalf("after refusals: %+v", f)
	}
	pw.Close()
	if f := read(); !f.End || f.Error != nil {
		t.Fatalf("last frame: %+v", f)
	}
	if sc.Scan() {
		t.Fatalf("a frame after the last: %q", sc.Text())
	}
}

func answerBody(f outFrame) string {
	if f.Data != nil {
		return *f.Data
	}
	return string(f.Base64)
}

// The same stream over WebSocket; {"end":true} ends the client's side,
// and a stream route on a unary method ends with an error frame.
func TestStreamOverWebSocket(t *testing.T) {
	srv := streamGateway(t, "  - {path_prefix: /notstream, service: echo, method: echo, stream: true}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/talk/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no request id on the handshake's answer")
	}
	read := func() outFrame {
		t.Helper()
		typ, b, err := c.Read(ctx)
		if err != nil || typ != websocket.MessageText {
			t.Fatalf("read: %v %v", typ, err)
		}
		var f outFrame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	c.Write(ctx, websocket.MessageText, adapter.AppendFrame(nil, []byte("hello")))
	if f := read(); answerBody(f) != "hello" {
		t.Fatalf("answer: %+v", f)
	}
	c.Write(ctx, websocket.MessageBinary, []byte{0, 1, 2})
	if f := read(); answerBody(f) != "\x00\x01\x02" {
		t.Fatalf("binary: %+v", f)
	}
	c.Write(ctx, websocket.MessageText, []byte(`{"end":true}`))
	if f := read(); !f.End || f.Error != nil {
		t.Fatalf("last frame: %+v", f)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the last frame: %v", err)
	}

	// The gateway refuses a stream whose method is unary before the
	// handshake: the client sees the status.
	_, resp, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/notstream", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("stream route on a unary method: %v %v", resp, err)
	}
}

// A stream on which nothing moves ends at the idle bound with a 504
// frame; a client that goes away ends the stream on the node (its
// handler's context ends).
func TestStreamIdleAndClientGone(t *testing.T) {
	ended := make(chan struct{}, 4)
	ids := make(chan string, 4)
	hold := neptune.Service{Name: "hold", Methods: []neptune.Method{{Name: "wait", Mode: neptune.Read,
		Stream: func(ctx context.Context, _ *neptune.Request, s neptune.ServerStream) error {
			ids <- obs.RequestID(ctx)
			s.Send([]byte("open"))
			<-ctx.Done()
			ended <- struct{}{}
			return ctx.Err()
		}}}}
	nd := startNode(t, hold)
	g, _ := start(t, `
capacity_grps: 10000
streams: {idle: 300ms}
routes:
  - {path_prefix: /hold, service: hold, method: wait, stream: true}
`, nd.Client(), nil)
	srv := httptest.NewServer(g)
	defer srv.Close()

	open := func(ctx context.Context) *bufio.Scanner {
		pr, _ := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/hold", pr)
		req.Header.Set("X-Request-Id", "held-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		sc := bufio.NewScanner(resp.Body)
		if !sc.Scan() || !strings.Contains(sc.Text(), `"open"`) {
			t.Fatalf("first frame: %q %v", sc.Text(), sc.Err())
		}
		if id := <-ids; id != "held-stream" {
			t.Errorf("the node's handler sees request id %q, want the client's", id)
		}
		return sc
	}
	bounded, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	sc := open(bounded)
	if !sc.Scan() {
		t.Fatalf("no last frame: %v", sc.Err())
	}
	var f outFrame
	if err := json.Unmarshal(sc.Bytes(), &f); err != nil || !f.End || f.Error == nil || f.Error.Status != http.StatusGatewayTimeout || !strings.Contains(f.Error.Text, "idle") {
		t.Fatalf("idle stream's last frame: %q %v", sc.Bytes(), err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle stream's handler never ended")
	}

	ctx, cancel := context.WithCancel(context.Background())
	open(ctx)
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler of a stream whose client went away never ended")
	}
}

// A write stream's outcome in the client's numbers: refused messages
// (never sent) leave gaps the node's seqs do not have.
func TestWriteStreamOutcomeNumbers(t *testing.T) {
	o := &frameOut{write: true}
	o.sending(1)
	o.sending(3) // 2 was refused
	o.sending(4)
	o.unsent() // 4 was too large for the node: never sent
	o.sending(5)
	o.sending(6)
	if n := o.answered(); n != 1 {
		t.Fatalf("first answer numbered %d, want 1", n)
	}
	got := o.outcome(&neptune.StreamOutcomeError{StreamID: "s", Applied: 1, MaybeApplied: 3, Sent: 4})
	want := outcome{StreamID: "s", AppliedThrough: 1, MaybeAppliedThrough: 5, SentThrough: 6}
	if *got != want {
		t.Fatalf("outcome %+v, want %+v", *got, want)
	}
	if n := o.answered(); n != 3 {
		t.Fatalf("second answer numbered %d, want 3", n)
	}
}

// Draining ends the streams at once, each with its last frame, over
// HTTP and WebSocket alike, and Serve returns well within its bound;
// a stream left running would hold it to the bound and its error.
func TestDrainEndsStreams(t *testing.T) {
	nd := startNode(t, echo.Service())
	g := build(t, `
capacity_grps: 10000
drain: 20s
routes: [{path_prefix: /talk, service: echo, method: talk, stream: true}]
`, nd.Client())
	ctx, cancel := context.WithCancel(context.Background())
	addr, result := serve(t, g, ctx)

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", "http://"+addr+"/talk", pr)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pw.Write(adapter.AppendFrame(nil, []byte("hi")))
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"hi"`) {
		t.Fatalf("answer: %q %v", sc.Text(), sc.Err())
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	ws, _, err := websocket.Dial(wctx, "ws://"+addr+"/talk", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()

	cancel()
	for _, last := range []func() []byte{
		func() []byte { sc.Scan(); return sc.Bytes() },
		func() []byte { _, b, _ := ws.Read(wctx); return b },
	} {
		var f outFrame
		b := last()
		if err := json.Unmarshal(b, &f); err != nil || !f.End || f.Error == nil || f.Error.Status != http.StatusServiceUnavailable {
			t.Errorf("last frame at drain: %q %v", b, err)
		}
	}
	if _, _, err := ws.Read(wctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the WebSocket's last frame: %v", err)
	}
	if err := <-result; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
