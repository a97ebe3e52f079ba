package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// TestWriteStreamPrimaryKilledMidStream: a write stream on three node
// processes (listappend, level 2) whose primary is SIGKILLed while
// hundreds of messages are in flight ends with a StreamOutcomeError that
// says which messages were applied and which may have been; resumed under
// the same identity (WithResume) on the new primary, resending from the
// first unanswered message, every message is applied exactly once and in
// order: the list holds 1..total, nothing twice.
func TestWriteStreamPrimaryKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, nodes, c := appProcs(t, ctx, "w", listappend.Name, 1, 2, "")
	byID := map[string]*localcluster.Node{}
	for _, n := range nodes {
		byID[n.Spec.ID] = n
	}
	const total, killAt = 400, 60
	var (
		id      string
		acked   uint64
		killed  string
		killErr error
		rounds  int
	)
	for acked < total {
		if ctx.Err() != nil {
			t.Fatalf("gave up with %d of %d messages answered: %v", acked, total, ctx.Err())
		}
		rounds++
		var opts []neptune.CallOption
		if id != "" {
			opts = append(opts, neptune.WithResume(&neptune.StreamOutcomeError{StreamID: id, Applied: acked}))
		}
		s, err := c.OpenStream(ctx, listappend.Name, 0, "append-stream", opts...)
		if err != nil {
			if !neptune.Retryable(err) {
				t.Fatalf("open (round %d): %v", rounds, err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if id == "" {
			id = s.ID()
		} else if s.ID() != id {
			t.Fatalf("resumed stream has identity %q, want %q", s.ID(), id)
		}
		go func(from uint64) {
			for i := from; i <= total; i++ {
				if s.Send(listappend.EncodeAppend("s", i)) != nil {
					return
				}
			}
			s.CloseSend()
		}(acked + 1)
		for {
			f, err := s.RecvFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				var se *neptune.StreamOutcomeError
				if !errors.As(err, &se) || se.StreamID != id || se.Applied != acked || se.Sent < se.MaybeApplied {
					t.Fatalf("stream on %s ended with %v (%+v); want a StreamOutcomeError of stream %s with %d applied", s.Node(), err, se, id, acked)
				}
				if killed != "" && killErr == nil {
					killErr = err
				}
				t.Logf("round %d on %s: %v", rounds, s.Node(), err)
				break
			}
			if f.Seq != acked+1 {
				t.Fatalf("answer for message %d after %d", f.Seq, acked)
			}
			acked = f.Seq
			if acked == killAt && killed == "" {
				killed = s.Node()
				if err := byID[killed].Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Close()
	}
	if killed == "" || killErr == nil {
		t.Fatalf("the primary was never killed mid-stream (killed %q, error %v)", killed, killErr)
	}
	var se *neptune.StreamOutcomeError
	errors.As(killErr, &se)
	if !errors.Is(killErr, neptune.ErrUnknownOutcome) || se.MaybeApplied <= se.Applied {
		t.Errorf("the kill's error %v does not say messages %d.. may have been applied", killErr, se.Applied+1)
	}
	// Every message once, in order: read until a replica has them all.
	var got []uint64
	want := fmt.Sprint(seqList(1, total))
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Call(ctx, listappend.Name, 0, "read", []byte("s"), neptune.WithTimeout(3*time.Second))
		if err == nil {
			if got, err = listappend.DecodeList(resp.Body); err != nil {
				t.Fatal(err)
			}
			if len(got) >= total {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fmt.Sprint(got) != want {
		t.Fatalf("list after the kill holds %d elements, want 1..%d each once in order: %v", len(got), total, got)
	}
	t.Logf("killed primary %s after %d answers; %d rounds; the kill's error: %v", killed, killAt, rounds, killErr)
}
