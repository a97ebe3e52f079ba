package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func TestErrorsSurviveTheWire(t *testing.T) {
	for _, w := range wireErrors {
		t.Run(w.reason, func(t *testing.T) {
			sent := fmt.Errorf("service kv: %w", w.err)
			got := FromStatus("n1", ToStatus(sent))
			if !errors.Is(got, w.err) {
				t.Fatalf("FromStatus(ToStatus(%v)) = %v, lost its identity", sent, got)
			}
			if nerr.Retryable(got) != nerr.Retryable(w.err) {
				t.Fatalf("retryability changed across the wire: %v", got)
			}
			if IsTransport(got) {
				t.Fatalf("%v is an answer, not a transport failure", got)
			}
		})
	}
}

func TestApplicationAndTransportErrors(t *testing.T) {
	got := FromStatus("n1", ToStatus(errors.New("kv: key not found")))
	var re *RemoteError
	if !errors.As(got, &re) || re.Message != "kv: key not found" || re.Node != "n1" {
		t.Fatalf("application error = %#v", got)
	}
	got = FromStatus("n2", status.Error(codes.Unavailable, "connection refused"))
	if !errors.Is(got, nerr.ErrNoReplica) || !IsTransport(got) {
		t.Fatalf("unavailable = %v, want a transport ErrNoReplica", got)
	}
	got = FromStatus("n2", ToStatus(context.DeadlineExceeded))
	if !errors.Is(got, nerr.ErrDeadline) {
		t.Fatalf("deadline = %v, want ErrDeadline", got)
	}
}

// pollRig is a poller on a manual clock and the servers it polls, so a
// test moves time past poll deadlines instead of sleeping.
type pollRig struct {
	t     *testing.T
	ctx   context.Context
	clock *clock.Manual
	pl    *Poller
	late  chan PollAnswer
}

func newPollRig(t *testing.T) *pollRig {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	r := &pollRig{t: t, ctx: ctx, clock: clock.NewManual(time.Unix(1_000_000, 0)), late: make(chan PollAnswer, 8)}
	pl, err := NewPoller(slog.New(slog.DiscardHandler), WithClock(r.clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	pl.OnLate(func(service string, a PollAnswer) { r.late <- a })
	r.pl = pl
	return r
}

// server answers polls for service "kv" with queue length p+7.
func (r *pollRig) server() string {
	srv, err := ListenPoll("127.0.0.1:0", func(s string, p int32, _ string) (int, bool) { return int(p) + 7, s == "kv" }, slog.New(slog.DiscardHandler))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { srv.Close() })
	return srv.Addr()
}

// gated returns a server whose answers (queue 4) wait until open is called.
func (r *pollRig) gated() (addr string, open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	srv, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { <-gate; return 4, true }, slog.New(slog.DiscardHandler))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { open(); srv.Close() })
	return srv.Addr(), open
}

// silent returns the address of a socket that never answers, like a
// paused node.
func (r *pollRig) silent() string {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c.LocalAddr().String()
}

// poll starts a Poll and returns the channel its answers arrive on, once
// the poll waits on its deadline.
func (r *pollRig) poll(targets []PollTarget, service string, partition int32, wait time.Duration) <-chan []PollAnswer {
	r.t.Helper()
	done := make(chan []PollAnswer, 1)
	go func() { done <- r.pl.Poll(r.ctx, targets, service, partition, "", wait) }()
	if err := r.clock.BlockUntilContext(r.ctx, 1); err != nil {
		r.t.Fatalf("the poll never waited on its deadline: %v", err)
	}
	return done
}

// outstanding waits until exactly n polls await an answer: the others'
// replies have reached the poller (UDP delivery takes real time).
func (r *pollRig) outstanding(n int) {
	r.t.Helper()
	for {
		r.pl.mu.Lock()
		got := len(r.pl.waiting)
		r.pl.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("%d polls outstanding, want %d", got, n)
		default:
			runtime.Gosched()
		}
	}
}

func (r *pollRig) answers(done <-chan []PollAnswer) []PollAnswer {
	r.t.Helper()
	select {
	case got := <-done:
		return got
	case <-r.ctx.Done():
		r.t.Fatal("the poll did not return")
		return nil
	}
}

func TestPollWaitsForItsDeadlineOnTheInjectedClock(t *testing.T) {
	r := newPollRig(t)
	done := r.poll([]PollTarget{{"fast", r.server()}, {"silent", r.silent()}}, "kv", 2, 50*time.Millisecond)
	r.outstanding(1) // fast answered; silent never will
	r.clock.Advance(49 * time.Millisecond)
	// The deadline timer is still armed: the poll keeps waiting for silent.
	if err := r.clock.BlockUntilContext(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		t.Fatalf("returned %+v before its deadline while a poll was outstanding", got)
	default:
	}
	r.clock.Advance(time.Millisecond)
	got := r.answers(done)
	if len(got) != 1 || got[0].Replica != "fast" || got[0].Queue != 9 || got[0].RTT != 0 {
		t.Fatalf("answers = %+v, want only fast with queue 9, answered before the clock moved", got)
	}
}

func TestPollMeasuresRoundTripsOnTheInjectedClock(t *testing.T) {
	r := newPollRig(t)
	addr, open := r.gated()
	done := r.poll([]PollTarget{{"gated", addr}}, "kv", 0, 50*time.Millisecond)
	r.clock.Advance(20 * time.Millisecond)
	open()
	if got := r.answers(done); len(got) != 1 || got[0].Queue != 4 || got[0].RTT != 20*time.Millisecond {
		t.Fatalf("answers = %+v, want one with queue 4 and RTT 20ms", got)
	}
}

func TestPollDropsLateAnswersButReportsThem(t *testing.T) {
	r := newPollRig(t)
	addr, open := r.gated()
	done := r.poll([]PollTarget{{"slow", addr}}, "kv", 0, 5*time.Millisecond)
	r.clock.Advance(5 * time.Millisecond)
	if got := r.answers(done); len(got) != 0 {
		t.Fatalf("answers = %+v before any reply", got)
	}
	r.clock.Advance(25 * time.Millisecond)
	open()
	select {
	case a := <-r.late:
		if a.Replica != "slow" || a.Queue != 4 || a.RTT != 30*time.Millisecond {
			t.Fatalf("late answer = %+v, want slow, queue 4, RTT 30ms", a)
		}
	case <-r.ctx.Done():
		t.Fatal("late answer never reached LateFunc")
	}
}

func TestPollIgnoresNodesThatDoNotHostThePartition(t *testing.T) {
	r := newPollRig(t)
	done := r.poll([]PollTarget{{"fast", r.server()}}, "other", 0, 50*time.Millisecond)
	r.outstanding(0) // the "unknown" reply arrived
	r.clock.Advance(50 * time.Millisecond)
	if got := r.answers(done); len(got) != 0 {
		t.Fatalf("unknown service answered: %+v", got)
	}
}

func TestPollForgetsUnansweredPollsAfterTheLateHorizon(t *testing.T) {
	r := newPollRig(t)
	done := r.poll([]PollTarget{{"silent", r.silent()}}, "kv", 0, 5*time.Millisecond)
	r.clock.Advance(5 * time.Millisecond)
	r.answers(done)
	r.pl.Poll(r.ctx, nil, "kv", 0, "", 0)
	r.outstanding(1) // still awaited for LateFunc
	r.clock.Advance(lateHorizon)
	r.pl.Poll(r.ctx, nil, "kv", 0, "", 0)
	r.outstanding(0)
}

func FuzzPollRequestDecode(f *testing.F) {
	b, _ := proto.Marshal(&pb.PollRequest{Id: 3, Service: "kv", Partition: 2})
	f.Add(b)
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.PollRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		out, err := proto.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var again pb.PollRequest
		if err := proto.Unmarshal(out, &again); err != nil || !proto.Equal(&r, &again) {
			t.Fatalf("re-encoding changed the request: %v", err)
		}
	})
}

func TestProbeReturnsAtOnceAndReportsEveryAnswer(t *testing.T) {
	r := newPollRig(t)
	addr, open := r.gated()
	r.pl.Probe([]PollTarget{{"a", addr}, {"b", r.server()}}, "kv", 2, "") // returns without any answer in
	r.clock.Advance(3 * time.Millisecond)
	open()
	got := map[string]PollAnswer{}
	for len(got) < 2 {
		select {
		case a := <-r.late:
			got[a.Replica] = a
		case <-r.ctx.Done():
			t.Fatalf("probe answers reaching LateFunc: %+v, want a and b", got)
		}
	}
	if got["a"].Queue != 4 || got["b"].Queue != 9 || got["a"].RTT != 3*time.Millisecond {
		t.Fatalf("probe answers %+v, want a queue 4 after 3ms, b queue 9", got)
	}
}

// TestHandshakeWithAnotherCASaysNotAMember: a connection whose TLS
// handshake failed because the two ends trust different CAs comes back
// as ErrNotMember in words, still a transport failure; other handshake
// failures do not.
func TestHandshakeWithAnotherCASaysNotAMember(t *testing.T) {
	for msg, unrelated := range map[string]bool{
		`connection error: desc = "transport: authentication handshake failed: pki: peer certificate refused: x509: certificate signed by unknown authority"`: false,
		`connection error: desc = "error reading server preface: remote error: tls: bad certificate"`:                                                         false,
		`connection error: desc = "transport: authentication handshake failed: pki: server is node \"s2\", want \"s1\""`:                                      true,
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`:                                        true,
	} {
		err := FromStatus("s1", status.Error(codes.Unavailable, msg))
		if errors.Is(err, nerr.ErrNotMember) == unrelated || !errors.Is(err, nerr.ErrNoReplica) || !IsTransport(err) {
			t.Errorf("%s: %v (not a member: %v), want not-a-member %v and still a transport failure", msg, err, errors.Is(err, nerr.ErrNotMember), !unrelated)
		}
	}
}
