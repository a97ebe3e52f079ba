package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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

func TestPollReturnsAnswersAndDropsLateOnes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	fast, err := ListenPoll("127.0.0.1:0", func(s string, p int32, _ string) (int, bool) { return int(p) + 7, s == "kv" }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	// A socket that never answers stands in for a paused node.
	silent, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { time.Sleep(time.Hour); return 0, true }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.conn.Close()
	late := make(chan PollAnswer, 1)
	pl, err := NewPoller(log, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl.OnLate(func(service string, a PollAnswer) {
		if service == "kv" {
			late <- a
		}
	})
	defer pl.Close()
	start := time.Now()
	got := pl.Poll(context.Background(), []PollTarget{{"fast", fast.Addr()}, {"silent", silent.Addr()}}, "kv", 2, "", 50*time.Millisecond)
	if len(got) != 1 || got[0].Replica != "fast" || got[0].Queue != 9 {
		t.Fatalf("answers = %+v, want only fast with queue 9", got)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("returned after %v, before the deadline, while a poll was outstanding", waited)
	}
	// An answer slower than the wait does not count but reaches LateFunc.
	slow, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { time.Sleep(30 * time.Millisecond); return 4, true }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if got := pl.Poll(context.Background(), []PollTarget{{"slow", slow.Addr()}}, "kv", 0, "", 5*time.Millisecond); len(got) != 0 {
		t.Fatalf("slow answer counted: %+v", got)
	}
	select {
	case a := <-late:
		if a.Replica != "slow" || a.Queue != 4 || a.RTT < 30*time.Millisecond {
			t.Fatalf("late answer = %+v", a)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("late answer never reached LateFunc")
	}
	// A node that does not host the partition answers "unknown": no answer.
	if got := pl.Poll(context.Background(), []PollTarget{{"fast", fast.Addr()}}, "other", 0, "", 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("unknown service answered: %+v", got)
	}
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
