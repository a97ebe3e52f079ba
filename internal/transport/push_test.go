package transport

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// relay forwards datagrams between one poller and a server, recording what
// the server sends, so a test can replay it.
type relay struct {
	conn *net.UDPConn
	mu   sync.Mutex
	peer *net.UDPAddr // the poller, learnt from its first datagram
	got  [][]byte     // the server's datagrams, in order
}

func (r *pollRig) relay(server string) *relay {
	sa, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		r.t.Fatal(err)
	}
	x := &relay{conn: r.rawUDP()}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := x.conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			b := append([]byte(nil), buf[:n]...)
			x.mu.Lock()
			to := sa
			if from.String() == sa.String() {
				x.got, to = append(x.got, b), x.peer
			} else {
				x.peer = from
			}
			x.mu.Unlock()
			_, _ = x.conn.WriteToUDP(b, to)
		}
	}()
	return x
}

// toPoller sends b to the poller as if from the server.
func (x *relay) toPoller(t *testing.T, b []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, err := x.conn.WriteToUDP(b, x.peer); err != nil {
		t.Fatal(err)
	}
}

func (x *relay) datagrams() [][]byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([][]byte(nil), x.got...)
}

// TestSubscriptionPushesChangedLoadsUntilItsLeaseEnds: with authentication
// on, a subscribe poll's answer and then a push per change arrive; no push
// without a change or after the lease; replayed and forged pushes are
// rejected.
func TestSubscriptionPushesChangedLoadsUntilItsLeaseEnds(t *testing.T) {
	r := newPollRig(t)
	a := pollAuth(t, r.clock, "c", keyA)
	var load atomic.Int64
	load.Store(3)
	srv, err := ListenPoll("127.0.0.1:0", func(s string, _ int32, _ string) (int, bool) { return int(load.Load()), s == "kv" }, slog.New(slog.DiscardHandler),
		WithPollAuth(a), WithServerClock(r.clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	pl := r.authPoller(a)
	got := make(chan PollAnswer, 16)
	pl.OnLate(func(service string, x PollAnswer) {
		if service == "kv" {
			got <- x
		}
	})
	x := r.relay(srv.Addr())
	next := func(what string) PollAnswer {
		t.Helper()
		select {
		case x := <-got:
			return x
		case <-time.After(5 * time.Second):
			t.Fatalf("never: %s", what)
			return PollAnswer{}
		}
	}
	// round runs one push round and waits until it is over.
	round := func() {
		t.Helper()
		n := srv.subs.rounds.Load()
		srv.Notify()
		r.until("a push round", func() bool { return srv.subs.rounds.Load() > n })
	}
	none := func(what string) {
		t.Helper()
		select {
		case x := <-got:
			t.Fatalf("%s: delivered %+v", what, x)
		case <-time.After(50 * time.Millisecond): // a datagram on loopback takes microseconds
		}
	}

	pl.Subscribe([]PollTarget{{"n", x.conn.LocalAddr().String()}}, "kv", 0, "", 2*time.Second)
	if a := next("the subscribe answer"); a.Replica != "n" || a.Queue != 3 {
		t.Fatalf("subscribe answer %+v, want n with queue 3", a)
	}
	load.Store(4)
	round()
	if a := next("a push after the change"); a.Queue != 4 {
		t.Fatalf("push %+v, want queue 4", a)
	}
	round() // load still 4
	if s := srv.Stats(); s.Pushed != 1 {
		t.Fatalf("stats %+v: pushed without a change", s)
	}
	none("unchanged load")

	// The push, replayed, and forgeries of a next one.
	d := x.datagrams()
	push := d[len(d)-1]
	payload, nonce, _, err := a.open(pollKindReply, push)
	if err != nil {
		t.Fatal(err)
	}
	var rep pb.PollReply
	if err := proto.Unmarshal(payload, &rep); err != nil || rep.PushSeq != 1 || rep.Queue != 4 {
		t.Fatalf("captured push %v: %v", &rep, err)
	}
	forge := func(id, seq uint64, n pollNonce, by *PollAuth) []byte {
		b, _ := proto.Marshal(&pb.PollReply{Id: id, Queue: 0, Known: true, PushSeq: seq})
		return by.seal(pollKindReply, b, n)
	}
	bad := [][]byte{
		push, // replayed
		forge(rep.Id, 9, nonce, pollAuth(t, r.clock, "c", keyB)),                                                // wrong key
		forge(rep.Id+1, 9, pollNonce{nonce.instance, rep.Id + 1}, a),                                            // no such subscription
		forge(rep.Id, 9, pollNonce{nonce.instance + 1, rep.Id}, a),                                              // another poller's
		forge(rep.Id, 1, nonce, a),                                                                              // an old sequence number
		func() []byte { b, _ := proto.Marshal(&pb.PollReply{Id: rep.Id, Known: true, PushSeq: 9}); return b }(), // unauthenticated
	}
	before := pl.Rejected()
	for _, b := range bad {
		x.toPoller(t, b)
	}
	r.until("forged and replayed pushes rejected", func() bool { return pl.Rejected() == before+uint64(len(bad)) })
	none("forged or replayed pushes")

	load.Store(5)
	round()
	if a := next("a push after the second change"); a.Queue != 5 {
		t.Fatalf("push %+v, want queue 5", a)
	}

	// The lease ends: the server drops the subscription.
	r.clock.Advance(2 * time.Second)
	load.Store(6)
	round()
	if s := srv.Stats(); s.Pushed != 2 {
		t.Fatalf("stats %+v: pushed after the lease ended", s)
	}
	none("after the lease")
}

// TestSubscriptionsAreBounded: past the bound a subscribe poll is answered
// but not subscribed.
func TestSubscriptionsAreBounded(t *testing.T) {
	r := newPollRig(t)
	var load atomic.Int64
	srv, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { return int(load.Load()), true }, slog.New(slog.DiscardHandler),
		WithServerClock(r.clock), WithMaxSubscriptions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	target := []PollTarget{{"n", srv.Addr()}}
	r.pl.Subscribe(target, "kv", 0, "a", time.Second)
	r.pl.Subscribe(target, "kv", 0, "b", time.Second)
	r.until("both answered", func() bool { return srv.Stats().Answered == 2 })
	if s := srv.Stats(); s.Unsubscribed != 1 {
		t.Fatalf("stats %+v, want the second subscription refused", s)
	}
	load.Store(1)
	srv.Notify()
	r.until("one push", func() bool { return srv.Stats().Pushed == 1 })
	// Once the first lease ends, there is room again.
	r.clock.Advance(time.Second)
	r.pl.Subscribe(target, "kv", 0, "b", time.Second)
	r.until("answered", func() bool { return srv.Stats().Answered == 3 })
	if s := srv.Stats(); s.Unsubscribed != 1 {
		t.Fatalf("stats %+v, want room after the lease ended", s)
	}
}
