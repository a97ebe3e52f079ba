package transport

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

var (
	keyA = bytes.Repeat([]byte{0xA}, 32)
	keyB = bytes.Repeat([]byte{0xB}, 32)
)

func pollAuth(t testing.TB, clk clock.Clock, label string, keys ...[]byte) *PollAuth {
	t.Helper()
	a, err := NewPollAuth(PollAuthConfig{Keys: func() [][]byte { return keys }, Label: label, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// authServer answers authenticated polls for "kv" with queue 5.
func (r *pollRig) authServer(a *PollAuth, opts ...PollOption) *PollServer {
	srv, err := ListenPoll("127.0.0.1:0", func(s string, _ int32, _ string) (int, bool) { return 5, s == "kv" }, slog.New(slog.DiscardHandler),
		append([]PollOption{WithPollAuth(a), WithServerClock(r.clock)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { srv.Close() })
	return srv
}

// authPoller is a poller on the rig's clock authenticating with a.
func (r *pollRig) authPoller(a *PollAuth, opts ...PollerOption) *Poller {
	pl, err := NewPoller(slog.New(slog.DiscardHandler), append([]PollerOption{WithClock(r.clock), WithPollerAuth(a)}, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { pl.Close() })
	return pl
}

// pollWith runs one poll of "kv" on pl until the deadline and returns the
// answers. A poll whose answer came back before it waited on the clock
// (its timer made and stopped before the test looked: a loaded machine)
// has returned already; waiting for it to block would wait forever.
func (r *pollRig) pollWith(pl *Poller, addr string, settle func()) []PollAnswer {
	r.t.Helper()
	done := make(chan []PollAnswer, 1)
	go func() { done <- pl.Poll(r.ctx, []PollTarget{{"n", addr}}, "kv", 0, "", 50*time.Millisecond) }()
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	blocked := make(chan error, 1)
	go func() { blocked <- r.clock.BlockUntilContext(ctx, 1) }()
	select {
	case got := <-done:
		return got
	case err := <-blocked:
		if err != nil {
			r.t.Fatal(err)
		}
	}
	settle()
	r.clock.Advance(50 * time.Millisecond)
	return r.answers(done)
}

// until waits (in real time, for UDP delivery) until cond holds.
func (r *pollRig) until(what string, cond func() bool) {
	r.t.Helper()
	if !eventuallyReal(r.ctx, 5*time.Second, cond) {
		r.t.Fatalf("never: %s", what)
	}
}

func eventuallyReal(ctxDone interface{ Done() <-chan struct{} }, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctxDone.Done():
			return cond()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return true
}

func TestAuthenticatedPollsAreAnswered(t *testing.T) {
	r := newPollRig(t)
	a := pollAuth(t, r.clock, "c", keyA)
	srv := r.authServer(a)
	pl := r.authPoller(a)
	got := r.pollWith(pl, srv.Addr(), func() { r.outstandingOn(pl, 0) })
	if len(got) != 1 || got[0].Queue != 5 {
		t.Fatalf("answers = %+v", got)
	}
}

func TestPollServerDropsUnauthenticatedPolls(t *testing.T) {
	r := newPollRig(t)
	refused := &refusalLog{}
	srv := r.authServer(pollAuth(t, r.clock, "c", keyA), WithPollRefusals(refused))
	for name, pl := range map[string]*Poller{
		"plain":         r.pl,
		"wrong key":     r.authPoller(pollAuth(t, r.clock, "c", keyB)),
		"other cluster": r.authPoller(pollAuth(t, r.clock, "other", keyA)),
	} {
		before := srv.Stats().Unauthenticated
		got := r.pollWith(pl, srv.Addr(), func() {
			r.until(name+" dropped", func() bool { return srv.Stats().Unauthenticated == before+1 })
		})
		if len(got) != 0 || srv.Stats().Answered != 0 {
			t.Fatalf("%s: answered %+v", name, got)
		}
	}
	// The server counts a drop before it reports it: the third report
	// may come just after the count the loop waited for.
	eventuallyReal(r.ctx, 5*time.Second, func() bool { return refused.count("poll_hmac") >= 3 })
	if got := refused.count("poll_hmac"); got != 3 || !refused.named("127.0.0.1") {
		t.Fatalf("reported %d poll_hmac refusals (from 127.0.0.1: %v), want 3 naming 127.0.0.1", got, refused.named("127.0.0.1"))
	}
}

func TestPollKeysRotateWithTheKeyring(t *testing.T) {
	r := newPollRig(t)
	// The server still uses A as primary and already has B; the poller
	// switched to B. Both directions verify.
	srv := r.authServer(pollAuth(t, r.clock, "c", keyA, keyB))
	pl := r.authPoller(pollAuth(t, r.clock, "c", keyB, keyA))
	got := r.pollWith(pl, srv.Addr(), func() { r.outstandingOn(pl, 0) })
	if len(got) != 1 {
		t.Fatalf("answers across a key rotation = %+v", got)
	}
}

// rawUDP is a socket the test writes datagrams from.
func (r *pollRig) rawUDP() *net.UDPConn {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

func (r *pollRig) send(c *net.UDPConn, b []byte, to string) {
	r.t.Helper()
	ua, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := c.WriteToUDP(b, ua); err != nil {
		r.t.Fatal(err)
	}
}

func request(a *PollAuth, instance, counter uint64) []byte {
	b, _ := proto.Marshal(&pb.PollRequest{Id: counter, Service: "kv"})
	return a.seal(pollKindRequest, b, pollNonce{instance, counter})
}

func TestPollServerRefusesReplayedAndStaleRequests(t *testing.T) {
	r := newPollRig(t)
	a := pollAuth(t, r.clock, "c", keyA)
	refused := &refusalLog{}
	srv := r.authServer(a, WithPollRefusals(refused))
	c := r.rawUDP()
	req := request(a, 77, 1)
	r.send(c, req, srv.Addr())
	r.until("first answered", func() bool { return srv.Stats().Answered == 1 })
	r.send(c, req, srv.Addr())
	r.until("replay dropped", func() bool { return srv.Stats().Replayed == 1 })

	stale := request(a, 77, 2)
	r.clock.Advance(DefaultPollWindow + time.Millisecond)
	r.send(c, stale, srv.Addr())
	r.until("stale dropped", func() bool { return srv.Stats().Replayed == 2 })
	if srv.Stats().Answered != 1 {
		t.Fatalf("stats %+v", srv.Stats())
	}
	if got := refused.count("poll_replay"); got != 2 {
		t.Fatalf("reported %d poll_replay refusals, want 2", got)
	}
}

func TestPollServerLimitsEachSource(t *testing.T) {
	r := newPollRig(t)
	a := pollAuth(t, r.clock, "c", keyA)
	srv := r.authServer(a, WithPollRateLimit(1, 2))
	c := r.rawUDP()
	for i := range 5 {
		r.send(c, request(a, 9, uint64(i+1)), srv.Addr())
	}
	r.until("3 limited", func() bool { return srv.Stats().Limited == 3 })
	if srv.Stats().Answered != 2 {
		t.Fatalf("stats %+v, want 2 answered", srv.Stats())
	}
	r.clock.Advance(time.Second)
	r.send(c, request(a, 9, 6), srv.Addr())
	r.until("answered after a second", func() bool { return srv.Stats().Answered == 3 })
}

// TestPollerIgnoresForgedReplies answers an authenticated poll from a test
// socket with forgeries before the genuine reply: only that one counts.
func TestPollerIgnoresForgedReplies(t *testing.T) {
	r := newPollRig(t)
	a := pollAuth(t, r.clock, "c", keyA)
	refused := &refusalLog{}
	pl := r.authPoller(a, WithPollerRefusals(refused))
	fake := r.rawUDP()
	done := make(chan []PollAnswer, 1)
	go func() {
		done <- pl.Poll(r.ctx, []PollTarget{{"n", fake.LocalAddr().String()}}, "kv", 0, "", 50*time.Millisecond)
	}()
	buf := make([]byte, 2048)
	if err := fake.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, from, err := fake.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	payload, nonce, _, err := a.open(pollKindRequest, buf[:n])
	if err != nil {
		t.Fatalf("the poller's request does not authenticate: %v", err)
	}
	var req pb.PollRequest
	if err := proto.Unmarshal(payload, &req); err != nil || req.Id != nonce.counter || nonce.instance != pl.instance {
		t.Fatalf("request %v, nonce %+v: %v", &req, nonce, err)
	}
	reply := func(queue int32, id uint64) []byte {
		b, _ := proto.Marshal(&pb.PollReply{Id: id, Queue: queue, Known: true})
		return b
	}
	other := pollAuth(t, r.clock, "c", keyB)
	forgeries := [][]byte{
		reply(0, req.Id), // no trailer: the unauthenticated protocol
		other.seal(pollKindReply, reply(0, req.Id), nonce),                               // wrong key
		a.seal(pollKindRequest, reply(0, req.Id), nonce),                                 // a request's trailer
		a.seal(pollKindReply, reply(0, req.Id), pollNonce{nonce.instance + 1, req.Id}),   // another poller's
		a.seal(pollKindReply, reply(0, req.Id+1), pollNonce{nonce.instance, req.Id + 1}), // another poll
		a.seal(pollKindReply, reply(0, req.Id), pollNonce{nonce.instance, req.Id + 1}),   // id and nonce disagree
		append(a.seal(pollKindReply, reply(0, req.Id), nonce)[:5], make([]byte, 60)...),  // truncated
		flip(a.seal(pollKindReply, reply(0, req.Id), nonce), 2),                          // tampered payload
	}
	for _, f := range forgeries {
		if _, err := fake.WriteToUDP(f, from); err != nil {
			t.Fatal(err)
		}
	}
	r.until("forgeries rejected", func() bool { return pl.Rejected() == uint64(len(forgeries)) })
	// All but the authentic reply to another poll (a late answer looks
	// the same) are reported as forged.
	if got := refused.count("poll_reply_forged"); got != len(forgeries)-1 {
		t.Fatalf("reported %d forged replies, want %d", got, len(forgeries)-1)
	}
	if _, err := fake.WriteToUDP(a.seal(pollKindReply, reply(8, req.Id), nonce), from); err != nil {
		t.Fatal(err)
	}
	r.outstandingOn(pl, 0)
	r.clock.Advance(50 * time.Millisecond)
	got := r.answers(done)
	if len(got) != 1 || got[0].Queue != 8 {
		t.Fatalf("answers = %+v, want only the genuine queue 8", got)
	}
}

func (r *pollRig) outstandingOn(pl *Poller, n int) {
	r.t.Helper()
	r.until("outstanding", func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.waiting) == n
	})
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 1
	return b
}

func TestReplayGuardWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	g := replayGuard{window: time.Second}
	admit := func(c uint64) error { return g.admit(now, now, pollNonce{1, c}) }
	for _, c := range []uint64{10, 12, 11, 9, 100} {
		if err := admit(c); err != nil {
			t.Fatalf("counter %d refused: %v", c, err)
		}
	}
	for _, c := range []uint64{12, 100, 36} { // replays, and one below the window
		if admit(c) == nil {
			t.Fatalf("counter %d admitted twice or too old", c)
		}
	}
	if err := admit(37); err != nil {
		t.Fatalf("counter 37 (inside the window) refused: %v", err)
	}
	if err := g.admit(now, now.Add(-2*time.Second), pollNonce{2, 1}); err == nil {
		t.Fatal("stale request admitted")
	}
	// An idle instance is forgotten after three windows.
	later := now.Add(4 * time.Second)
	_ = g.admit(later, later, pollNonce{3, 1})
	if _, ok := g.seen[1]; ok {
		t.Fatal("idle instance kept")
	}
}

// FuzzPollAuthRequest feeds the server's decoder: arbitrary datagrams
// never panic and never authenticate; sealed ones round-trip, and any
// flipped bit makes them fail.
func FuzzPollAuthRequest(f *testing.F) { fuzzPollAuth(f, pollKindRequest) }

// FuzzPollAuthReply is the same for the poller's decoder.
func FuzzPollAuthReply(f *testing.F) { fuzzPollAuth(f, pollKindReply) }

func fuzzPollAuth(f *testing.F, kind byte) {
	a := pollAuth(f, clock.NewManual(time.Unix(1_000_000, 0)), "c", keyA)
	req, _ := proto.Marshal(&pb.PollRequest{Id: 3, Service: "kv", Partition: 2})
	f.Add(req, uint64(1), uint64(3), uint16(0))
	f.Add(a.seal(kind, req, pollNonce{1, 3}), uint64(0), uint64(0), uint16(70))
	f.Add([]byte{}, uint64(0), uint64(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, instance, counter uint64, bit uint16) {
		if payload, _, _, err := a.open(kind, data); err == nil && !bytes.Equal(payload, data[:len(data)-PollTrailerSize]) {
			t.Fatalf("payload %x is not the datagram %x without its trailer", payload, data)
		}
		sealed := a.seal(kind, bytes.Clone(data), pollNonce{instance, counter})
		payload, n, _, err := a.open(kind, sealed)
		if err != nil || !bytes.Equal(payload, data) || n != (pollNonce{instance, counter}) {
			t.Fatalf("round trip: %v, payload %x, nonce %+v", err, payload, n)
		}
		if _, _, _, err := a.open(kind, flip(sealed, int(bit)%len(sealed))); err == nil {
			t.Fatalf("bit %d flipped and still authentic", int(bit)%len(sealed))
		}
		var r pb.PollRequest
		_ = proto.Unmarshal(payload, &r)
		var rep pb.PollReply
		_ = proto.Unmarshal(payload, &rep)
	})
}
