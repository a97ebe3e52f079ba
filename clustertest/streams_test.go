package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/listappend"
)

// TestBidiStreamTalksManyRounds: a read stream is one session with one
// instance: each message sent is answered before the next is sent, the
// caller closes its side and the stream ends with io.EOF.
func TestBidiStreamTalksManyRounds(t *testing.T) {
	nodes := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := nodes[1].Client().OpenStream(ctx, "echo", 0, "talk")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		msg := fmt.Sprintf("round %d", i)
		if err := s.Send([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Recv()
		if err != nil || string(got) != msg {
			t.Fatalf("round %d: %q, %v", i, got, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

// TestBidiStreamLimitsAndWrongKinds: a message over the limit is refused
// before it is sent and the stream goes on; a plain method cannot be
// opened as a stream; the stream's deadline ends it.
func TestBidiStreamLimitsAndWrongKinds(t *testing.T) {
	nodes := startCluster(t, 1)
	c := nodes[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.OpenStream(ctx, "echo", 0, "echo"); !errors.Is(err, neptune.ErrWrongMode) {
		t.Fatalf("OpenStream of a plain method: %v, want ErrWrongMode", err)
	}
	s, err := c.OpenStream(ctx, "echo", 0, "talk", neptune.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(bytes.Repeat([]byte("x"), 17<<20)); !errors.Is(err, neptune.ErrTooLarge) {
		t.Fatalf("a 17 MiB message: %v, want ErrTooLarge", err)
	}
	if err := s.Send([]byte("small")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Recv(); err != nil || string(got) != "small" {
		t.Fatalf("after the refused message: %q, %v", got, err)
	}
	// The handler waits for the next message until the deadline.
	if _, err := s.Recv(); !errors.Is(err, neptune.ErrDeadline) {
		t.Fatalf("past the stream's deadline: %v, want ErrDeadline", err)
	}
}

// TestWriteStreamAppliesEachMessageOnceInOrder: on a replicated service
// every message of a write stream is answered, in order, with its seq
// and a growing version; a stream resumed from the middle (WithResume)
// whose caller resends messages already applied gets their first answers
// and applies nothing twice.
func TestWriteStreamAppliesEachMessageOnceInOrder(t *testing.T) {
	nodes := listappendNodes(t, 3, 2)
	c := nodes[2].Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The session records the answered versions (what a level-3 read
	// would wait for).
	sess := neptune.NewSession()
	s, err := c.OpenStream(ctx, listappend.Name, 0, "append-stream", neptune.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	go func() {
		for i := 1; i <= n; i++ {
			if s.Send(listappend.EncodeAppend("k", uint64(i))) != nil {
				return
			}
		}
		s.CloseSend()
	}()
	var version uint64
	for i := 1; i <= n; i++ {
		f, err := s.RecvFrame()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if f.Seq != uint64(i) || f.Version <= version {
			t.Fatalf("answer %d: seq %d, version %d after %d", i, f.Seq, f.Version, version)
		}
		version = f.Version
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("after the last answer: %v, want io.EOF", err)
	}
	// Resume as if the stream had broken after message 10: messages 11..20
	// are resent under the same identity, then 21..25 are new.
	broken := &neptune.StreamOutcomeError{StreamID: s.ID(), Applied: 10, MaybeApplied: n, Sent: n}
	r, err := c.OpenStream(ctx, listappend.Name, 0, "append-stream", neptune.WithResume(broken), neptune.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	for i := 11; i <= 25; i++ {
		if err := r.Send(listappend.EncodeAppend("k", uint64(i))); err != nil {
			t.Fatal(err)
		}
		f, err := r.RecvFrame()
		if err != nil || f.Seq != uint64(i) {
			t.Fatalf("resumed message %d: seq %d, %v", i, f.Seq, err)
		}
	}
	r.CloseSend()
	if _, err := r.Recv(); err != io.EOF {
		t.Fatalf("resumed stream's end: %v", err)
	}
	// Level 2 promises no read-your-writes (a session does at level 3):
	// the read may reach a replica still applying the last appends, so
	// wait, bounded, for it to show all 25 (a doubled one would too).
	var got []uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got = listOf(ctx, t, c, "k", neptune.WithSession(sess)); len(got) >= 25 || time.Now().After(deadline) {
			break
		}
	}
	if want := seqList(1, 25); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list = %v, want %v (each message once, in order)", got, want)
	}
}

// TestWriteStreamHandlerErrorSaysWhatRan: a message the handler refuses
// ends the stream with its error; the messages before it were applied,
// none after it ran, and the error says so without claiming an unknown
// outcome.
func TestWriteStreamHandlerErrorSaysWhatRan(t *testing.T) {
	nodes := listappendNodes(t, 1, 2)
	c := nodes[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.OpenStream(ctx, listappend.Name, 0, "append-stream")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"e=1", "e=2", "e=bad", "e=4"} {
		if err := s.Send([]byte(m)); err != nil {
			break
		}
	}
	var ends error
	for ends == nil {
		_, ends = s.Recv()
	}
	var se *neptune.StreamOutcomeError
	if !errors.As(ends, &se) || se.Applied != 2 || !se.HandlerFailed || errors.Is(ends, neptune.ErrUnknownOutcome) ||
		!strings.Contains(ends.Error(), "malformed") || !strings.Contains(ends.Error(), "3 ran and failed") || neptune.Retryable(ends) {
		t.Fatalf("stream ended with %v (%+v), want a StreamOutcomeError: 2 applied, the third failed in the handler, none unknown", ends, se)
	}
	if got := listOf(ctx, t, c, "e"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("list = %v, want [1 2]", got)
	}
}

// TestGoKeepsManyCallsInFlight: one goroutine starts many calls, selects
// on their handles and waits for each; a cancelled one ends with its
// context's error while the others complete.
func TestGoKeepsManyCallsInFlight(t *testing.T) {
	nodes := startCluster(t, 2)
	c := nodes[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ps []*neptune.Pending
	for i := range 20 {
		ps = append(ps, c.Go(ctx, "echo", i%2, "echo", fmt.Appendf(nil, "m%d", i)))
	}
	select {
	case <-ps[0].Done():
	case <-ctx.Done():
		t.Fatal("the first call never finished")
	}
	for i, p := range ps {
		resp, err := p.Wait()
		if err != nil || string(resp.Body) != fmt.Sprintf("m%d", i) {
			t.Fatalf("call %d: %q, %v", i, respBody(resp), err)
		}
	}
	// A stream method through Call fails; a cancelled call ends cancelled.
	blocked := c.Go(ctx, "echo", 0, "echo", nil, neptune.WithTimeout(5*time.Second))
	blocked.Cancel()
	if _, err := blocked.Wait(); err != nil && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("cancelled call: %v, want success (it won the race) or a cancellation", err)
	}
}
