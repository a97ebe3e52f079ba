package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/neptune-cluster/neptune/apps/echo"
)

func TestFrameReader(t *testing.T) {
	in := "{\"data\":\"a\"}\n\n  \r\n{\"base64\":\"/w==\"}\r\n" + `{"data":"` + strings.Repeat("x", 40) + "\"}\n" +
		"not json\n" + `{"data":"a","base64":"AA=="}` + "\n" + `{"data":""}` + "\n" + `{"end":true}` + "\n" + `{"data":"last"}`
	fr := newFrameReader(strings.NewReader(in), 32)
	type res struct {
		body string
		err  error
	}
	want := []res{{"a", nil}, {"\xff", nil}, {"", errFrameTooLarge}, {"", errBadFrame}, {"", errBadFrame}, {"", nil}, {"", io.EOF}, {"last", nil}, {"", io.EOF}}
	for i, w := range want {
		b, err := fr.next()
		if string(b) != w.body || !errors.Is(err, w.err) || (w.err == nil && err != nil) {
			t.Errorf("frame %d: %q %v, want %q %v", i, b, err, w.body, w.err)
		}
	}
}

// FuzzFrameReader: whatever a client sends, the reader never panics,
// never returns a frame over its limit, goes on after a bad frame, and
// reads back exactly the messages a well-behaved client encoded.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("{\"data\":\"a\"}\n{\"base64\":\"/w==\"}\n"), []byte("hi\xff"), 8)
	f.Add([]byte("\n\r\n{\"end\":true}"), []byte(""), 1)
	f.Add([]byte(strings.Repeat("x", 100)+"\n{\"data\":1}"), []byte("\n\"\\"), 40)
	f.Fuzz(func(t *testing.T, raw, msg []byte, max int) {
		max = 1 + abs(max)%4096
		fr := newFrameReader(bytes.NewReader(raw), max)
		for range len(raw) + 2 {
			_, err := fr.next()
			if err == io.EOF {
				break
			}
			if err != nil && !errors.Is(err, errFrameTooLarge) && !errors.Is(err, errBadFrame) {
				t.Fatalf("reading %q: %v", raw, err)
			}
		}
		line := encodeFrame(msg)
		stream := append(append(append([]byte{}, line...), raw...), append([]byte("\n"), line...)...)
		fr = newFrameReader(bytes.NewReader(stream), len(line))
		got, err := fr.next()
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("first of %q: %q %v, want %q", stream, got, err, msg)
		}
		var last []byte
		for {
			b, err := fr.next()
			if err == io.EOF {
				break
			}
			if err == nil {
				last = b
			}
		}
		if !bytes.Equal(last, msg) && !bytes.Contains(raw, []byte(`"end"`)) {
			t.Fatalf("last of %q: %q, want %q", stream, last, msg)
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

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

// A read stream over HTTP/2 is full duplex: each answer arrives before
// the next message is sent; a message over the limit and a malformed one
// are refused by number and the stream goes on; the end frame follows
// the client's end.
func TestStreamOverHTTP2(t *testing.T) {
	srv := streamGateway(t, "")
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: tr}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", srv.URL+"/talk/0", pr)
	req.Header.Set("Content-Type", ContentTypeNDJSON)
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
	if res.resp.ProtoMajor != 2 || res.resp.StatusCode != 200 || res.resp.Header.Get("Content-Type") != ContentTypeNDJSON {
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
		pw.Write(encodeFrame([]byte(m)))
		f := read()
		if got := answerBody(f); got != m || f.Error != nil {
			t.Fatalf("answer to %q: %+v", m, f)
		}
	}
	pw.Write(encodeFrame(bytes.Repeat([]byte("x"), 100)))
	if f := read(); f.Message != 4 || f.Error == nil || f.Error.Status != 413 || f.Error.RequestID != "stream-test-1" {
		t.Fatalf("message over the limit: %+v %+v", f, f.Error)
	}
	pw.Write([]byte("{\"data\": 5}\n"))
	if f := read(); f.Message != 5 || f.Error == nil || f.Error.Status != 400 {
		t.Fatalf("malformed message: %+v", f)
	}
	pw.Write(encodeFrame([]byte("six")))
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
	c.Write(ctx, websocket.MessageText, encodeFrame([]byte("hello")))
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
