package clustertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// gwFrame is a frame the gateway sends on a stream (docs/architecture/
// gateway.md, "Streams").
type gwFrame struct {
	Message uint64 `json:"message"`
	Version uint64 `json:"version"`
	Data    *string
	Base64  []byte
	End     bool
	Error   *struct {
		Status    int
		Text      string
		RequestID string `json:"request_id"`
		Outcome   *struct {
			StreamID            string `json:"stream_id"`
			AppliedThrough      uint64 `json:"applied_through"`
			MaybeAppliedThrough uint64 `json:"maybe_applied_through"`
			SentThrough         uint64 `json:"sent_through"`
		}
	}
}

func (f gwFrame) body() string {
	if f.Data != nil {
		return *f.Data
	}
	return string(f.Base64)
}

// msgLine is one message as a client sends it.
func msgLine(body string) string {
	b, _ := json.Marshal(map[string]string{"data": body})
	return string(b) + "\n"
}

// h2Stream opens a stream route over HTTP/2 (h2c): the request body is
// the pipe the test writes lines to, the frames come back as they are
// answered.
func h2Stream(t *testing.T, ctx context.Context, url, key string) (io.WriteCloser, <-chan gwFrame) {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, "POST", url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("open %s: %s %s %s", url, resp.Proto, resp.Status, b)
	}
	frames := make(chan gwFrame, 1024)
	go func() {
		defer close(frames)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var f gwFrame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Errorf("frame %q: %v", sc.Bytes(), err)
				return
			}
			frames <- f
		}
	}()
	return pw, frames
}

// Streams through a `neptune gateway` process in front of three node
// processes (listappend at level 2, echo):
//
//   - a read stream (echo.talk) over WebSocket answers each message;
//   - a write stream (listappend.append-stream) over HTTP/2, full
//     duplex, answers each of 300 messages with its number and version,
//     and the list holds 1..300 once each; the same over WebSocket;
//   - the primary SIGKILLed in the middle of a write stream: the HTTP
//     client gets a last frame whose outcome says which messages were
//     applied, and the list holds exactly those up to the ones of
//     unknown outcome, none twice;
//   - a subscriber over its limit gets messages refused with 429 frames
//     naming them, the others answered, and the stream goes on.
func TestStreamsThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node and gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, nodes, c := appProcs(t, ctx, "gs", listappend.Name, 1, 2, "  - name: echo\n    partitions: [0]\n")
	if err := cl.Issue(pki.Identity{Role: pki.RoleGateway, Name: "gw"}); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, ctx, t.TempDir(), "gw", fmt.Sprintf(`
listen: 127.0.0.1:0
metrics: 127.0.0.1:0
gossip: 127.0.0.1:0
join: [%s]
unit: {net: 1000}
capacity_grps: 100
max_wait: 100ms
subscribers:
  - {name: app, reservation: 50, api_keys: [%s]}
  - {name: tight, reservation: 2, limit: 2, api_keys: [%s]}
routes:
  - {path_prefix: /talk, service: echo, method: talk, stream: true}
  - {path_prefix: /append, service: listappend, method: append-stream, stream: true}
`, strings.Join(cl.Seeds(), ", "), gage.HashKey("app-key"), gage.HashKey("tight-key")), cl.SecurityArgs("gateway/gw")...)
	base := "http://" + gw.http

	// The gateway sees the cluster: a stream opens.
	waitFor(t, 20*time.Second, func() bool {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		conn, _, err := websocket.Dial(wctx, "ws://"+gw.http+"/talk", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"app-key"}}})
		if err != nil {
			return false
		}
		conn.CloseNow()
		return true
	})

	t.Run("read stream over WebSocket", func(t *testing.T) {
		conn, _, err := websocket.Dial(ctx, "ws://"+gw.http+"/talk", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"app-key"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		for i := range 20 {
			m := fmt.Sprint("hello ", i)
			if err := conn.Write(ctx, websocket.MessageText, []byte(msgLine(m))); err != nil {
				t.Fatal(err)
			}
			if f := wsFrame(t, ctx, conn); f.body() != m || f.Error != nil {
				t.Fatalf("answer to %q: %+v", m, f)
			}
		}
		conn.Write(ctx, websocket.MessageText, []byte(`{"end":true}`))
		if f := wsFrame(t, ctx, conn); !f.End || f.Error != nil {
			t.Fatalf("last frame: %+v", f)
		}
	})

	// list is key's list once it holds want: a level-2 read without a
	// session may reach a secondary that has not yet executed the last
	// acknowledged append (299 of 300 beside two test runs), so the read
	// is repeated for up to 5 s; a duplicate or a lost append never
	// matches.
	list := func(key string, want []uint64) []uint64 {
		t.Helper()
		var l []uint64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err := c.Call(ctx, listappend.Name, 0, "read", []byte(key), neptune.WithTimeout(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if l, err = listappend.DecodeList(resp.Body); err != nil {
				t.Fatal(err)
			}
			if slices.Equal(l, want) || time.Now().After(deadline) {
				return l
			}
		}
	}
	const total = 300
	t.Run("write stream over HTTP/2", func(t *testing.T) {
		in, frames := h2Stream(t, ctx, base+"/append", "app-key")
		// Full duplex: the first answer arrives before the second message leaves.
		io.WriteString(in, msgLine("h=1"))
		if f := <-frames; f.Message != 1 || f.Version == 0 || f.Error != nil {
			t.Fatalf("first answer: %+v", f)
		}
		go func() {
			for i := 2; i <= total; i++ {
				io.WriteString(in, msgLine(fmt.Sprint("h=", i)))
			}
			in.Close()
		}()
		last := uint64(1)
		for f := range frames {
			if f.End {
				if f.Error != nil {
					t.Fatalf("stream failed: %+v", f.Error)
				}
				break
			}
			if f.Error != nil || f.Message != last+1 {
				t.Fatalf("after answer %d: %+v", last+1, f)
			}
			last = f.Message
		}
		if last != total {
			t.Fatalf("%d of %d answered", last, total)
		}
		if got := list("h", seqList(1, total)); !slices.Equal(got, seqList(1, total)) {
			t.Fatalf("the list holds %v, want 1..%d once each", got, total)
		}
	})

	t.Run("write stream over WebSocket", func(t *testing.T) {
		conn, _, err := websocket.Dial(ctx, "ws://"+gw.http+"/append", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"app-key"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		go func() {
			for i := 1; i <= total; i++ {
				conn.Write(ctx, websocket.MessageText, []byte(msgLine(fmt.Sprint("w=", i))))
			}
			conn.Write(ctx, websocket.MessageText, []byte(`{"end":true}`))
		}()
		for i := uint64(1); ; i++ {
			f := wsFrame(t, ctx, conn)
			if f.End {
				if f.Error != nil || i != total+1 {
					t.Fatalf("last frame after %d answers: %+v", i-1, f.Error)
				}
				break
			}
			if f.Message != i || f.Error != nil {
				t.Fatalf("answer %d: %+v", i, f)
			}
		}
		if got := list("w", seqList(1, total)); !slices.Equal(got, seqList(1, total)) {
			t.Fatalf("the list holds %v, want 1..%d once each", got, total)
		}
	})

	t.Run("subscriber over its limit", func(t *testing.T) {
		in, frames := h2Stream(t, ctx, base+"/talk", "tight-key")
		const n = 30
		big := strings.Repeat("x", 1000) // about a GRU each way at unit.net 1000
		go func() {
			for range n {
				io.WriteString(in, msgLine(big))
			}
			in.Close()
		}()
		refused := map[uint64]bool{}
		answered := 0
		for f := range frames {
			switch {
			case f.End:
				if f.Error != nil {
					t.Fatalf("stream failed: %+v", f.Error)
				}
			case f.Error != nil:
				if f.Error.Status != http.StatusTooManyRequests || f.Message == 0 || f.Message > n || refused[f.Message] ||
					!strings.Contains(f.Error.Text, "over the subscriber's share") || f.Error.RequestID == "" {
					t.Fatalf("refusal: %+v %+v", f, f.Error)
				}
				refused[f.Message] = true
			default:
				if f.body() != big {
					t.Fatalf("answer of %d bytes", len(f.body()))
				}
				answered++
			}
		}
		t.Logf("%d answered, %d refused", answered, len(refused))
		if answered+len(refused) != n || len(refused) == 0 || answered == 0 {
			t.Fatalf("%d answered and %d refused of %d messages", answered, len(refused), n)
		}
	})

	t.Run("primary killed mid-stream", func(t *testing.T) {
		primary := waitPrimary(t, c, 0)
		var victim *localcluster.Node
		for _, n := range nodes {
			if n.Spec.ID == primary {
				victim = n
			}
		}
		if victim == nil {
			t.Fatalf("no primary among %v (%q)", nodes, primary)
		}
		in, frames := h2Stream(t, ctx, base+"/append", "app-key")
		go func() {
			for i := 1; i <= total; i++ {
				if _, err := io.WriteString(in, msgLine(fmt.Sprint("k=", i))); err != nil {
					return
				}
			}
			in.Close()
		}()
		var last gwFrame
		answered := uint64(0)
		for f := range frames {
			last = f
			if f.End {
				break
			}
			if f.Error != nil || f.Message != answered+1 {
				t.Fatalf("after answer %d: %+v", answered, f)
			}
			answered = f.Message
			if answered == 50 {
				if err := victim.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !last.End || last.Error == nil || last.Error.Outcome == nil {
			t.Fatalf("last frame after the primary's kill (%d answered): %+v", answered, last)
		}
		o := last.Error.Outcome
		t.Logf("last frame: %d %s %+v", last.Error.Status, last.Error.Text, *o)
		if o.StreamID == "" || o.AppliedThrough != answered || o.MaybeAppliedThrough < o.AppliedThrough || o.SentThrough < o.MaybeAppliedThrough {
			t.Fatalf("outcome %+v after %d answers", *o, answered)
		}
		// Applied: 1..answered; of unknown outcome: a prefix of the rest;
		// never twice.
		var got []uint64
		waitFor(t, 20*time.Second, func() bool {
			resp, err := c.Call(ctx, listappend.Name, 0, "read", []byte("k"), neptune.WithTimeout(3*time.Second))
			if err != nil {
				return false
			}
			got, err = listappend.DecodeList(resp.Body)
			return err == nil
		})
		if uint64(len(got)) < o.AppliedThrough || uint64(len(got)) > o.MaybeAppliedThrough || !slices.Equal(got, seqList(1, len(got))) {
			t.Fatalf("the list holds %v; want 1..n once each with %d <= n <= %d", got, o.AppliedThrough, o.MaybeAppliedThrough)
		}
	})
}

func wsFrame(t *testing.T, ctx context.Context, conn *websocket.Conn) gwFrame {
	t.Helper()
	typ, b, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("read: %v %v", typ, err)
	}
	var f gwFrame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %q: %v", b, err)
	}
	return f
}
