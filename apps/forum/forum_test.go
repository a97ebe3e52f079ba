package forum_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/apps/internal/appkit/appkittest"
)

var (
	call = appkittest.Call
)

func mustCall[T any](t *testing.T, svc neptune.Service, method string, part int, lsn uint64, body any) T {
	t.Helper()
	return appkittest.MustCall[T](t, svc, method, part, lsn, body)
}

func open(t *testing.T, dsn string) *forum.Forum {
	t.Helper()
	f, err := forum.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestForum(t *testing.T) {
	for _, be := range appkittest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			dsn := be.DSN(t)
			t.Run("threads", func(t *testing.T) { testThreads(t, open(t, dsn).Service()) })
			t.Run("bad input", func(t *testing.T) { testBadInput(t, open(t, dsn).Service()) })
			t.Run("lsn", func(t *testing.T) { testLSN(t, dsn) })
			t.Run("concurrent writers", func(t *testing.T) { testConcurrent(t, open(t, dsn).Service()) })
			t.Run("digest", func(t *testing.T) { testDigest(t, dsn) })
		})
	}
}

func add(t *testing.T, svc neptune.Service, part int, lsn uint64, m forum.AddMsgRequest) int64 {
	t.Helper()
	return mustCall[forum.AddMsgResponse](t, svc, "AddMsg", part, lsn, m).ID
}

func testThreads(t *testing.T, svc neptune.Service) {
	const p = 10
	a := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "go", Author: "ann", Subject: "generics", Body: "yes?"})
	b := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "go", Author: "bob", Subject: "iterators", Body: "range over func"})
	a1 := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "go", ReplyTo: a, Author: "cat", Subject: "re: generics", Body: "yes"})
	add(t, svc, p, 0, forum.AddMsgRequest{Topic: "rust", Author: "dan", Subject: "borrowck", Body: "..."})
	a11 := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "go", ReplyTo: a1, Author: "ann", Subject: "re: re: generics", Body: "thanks"})
	a2 := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "go", ReplyTo: a, Author: "bob", Subject: "re: generics 2", Body: "no"})
	if a != 1 || b != 2 || a1 != 3 || a11 != 5 || a2 != 6 {
		t.Fatalf("ids %d %d %d %d %d, want 1 2 3 5 6 (numbered per partition)", a, b, a1, a11, a2)
	}
	got := mustCall[forum.ViewHeadersResponse](t, svc, "ViewHeaders", p, 0, forum.ViewHeadersRequest{Topic: "go"})
	want := forum.ViewHeadersResponse{Topic: "go", Threads: []forum.Header{
		{ID: a, Author: "ann", Subject: "generics", Replies: []forum.Header{
			{ID: a1, Author: "cat", Subject: "re: generics", Replies: []forum.Header{{ID: a11, Author: "ann", Subject: "re: re: generics"}}},
			{ID: a2, Author: "bob", Subject: "re: generics 2"},
		}},
		{ID: b, Author: "bob", Subject: "iterators"},
	}}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("ViewHeaders:\n got %s\nwant %s", gj, wj)
	}
	m := mustCall[forum.Message](t, svc, "ViewMsg", p, 0, forum.ViewMsgRequest{ID: a11})
	if (m != forum.Message{ID: a11, Topic: "go", ReplyTo: a1, Author: "ann", Subject: "re: re: generics", Body: "thanks"}) {
		t.Fatalf("ViewMsg = %+v", m)
	}
	// Partitions are independent: the same topic elsewhere is unknown.
	if _, err := call(t, svc, "ViewHeaders", p+1, 0, forum.ViewHeadersRequest{Topic: "go"}); !errors.Is(err, forum.ErrUnknownTopic) {
		t.Fatalf("other partition: err = %v, want ErrUnknownTopic", err)
	}
}

func testBadInput(t *testing.T, svc neptune.Service) {
	const p = 3
	root := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "s"})
	other := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "u", Author: "a", Subject: "s"})
	for _, tc := range []struct {
		name, method string
		body         any
		want         error
		text         string
	}{
		{"not json", "AddMsg", "topic=t", forum.ErrBadRequest, "AddMsg"},
		{"unknown field", "AddMsg", `{"topic":"t","author":"a","subject":"s","titel":"x"}`, forum.ErrBadRequest, "titel"},
		{"trailing data", "AddMsg", `{"topic":"t","author":"a","subject":"s"} {}`, forum.ErrBadRequest, "trailing"},
		{"no topic", "AddMsg", forum.AddMsgRequest{Author: "a", Subject: "s"}, forum.ErrBadRequest, "topic is empty"},
		{"no author", "AddMsg", forum.AddMsgRequest{Topic: "t", Subject: "s"}, forum.ErrBadRequest, "author is empty"},
		{"no subject", "AddMsg", forum.AddMsgRequest{Topic: "t", Author: "a"}, forum.ErrBadRequest, "subject is empty"},
		{"reply to unknown", "AddMsg", forum.AddMsgRequest{Topic: "t", ReplyTo: 99, Author: "a", Subject: "s"}, forum.ErrUnknownMessage, "reply_to 99"},
		{"reply across topics", "AddMsg", forum.AddMsgRequest{Topic: "t", ReplyTo: other, Author: "a", Subject: "s"}, forum.ErrBadRequest, `topic "u"`},
		{"headers of unknown topic", "ViewHeaders", forum.ViewHeadersRequest{Topic: "nope"}, forum.ErrUnknownTopic, `"nope"`},
		{"headers without topic", "ViewHeaders", `{}`, forum.ErrBadRequest, "topic is empty"},
		{"unknown message", "ViewMsg", forum.ViewMsgRequest{ID: 42}, forum.ErrUnknownMessage, "id 42"},
		{"malformed ViewMsg", "ViewMsg", `{"id":"one"}`, forum.ErrBadRequest, "ViewMsg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, svc, tc.method, p, 0, tc.body)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	// Nothing half-written: topic t still holds only its root.
	got := mustCall[forum.ViewHeadersResponse](t, svc, "ViewHeaders", p, 0, forum.ViewHeadersRequest{Topic: "t"})
	if len(got.Threads) != 1 || got.Threads[0].ID != root || len(got.Threads[0].Replies) != 0 {
		t.Fatalf("after rejected writes, topic t = %+v", got)
	}
	if next := add(t, svc, p, 0, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "s"}); next != other+1 {
		t.Fatalf("next id %d, want %d: a rejected write consumed an id", next, other+1)
	}
}

// testLSN checks the CHECK contract: an applied LSN is reported applied,
// also after reopening; a replayed LSN writes nothing.
func testLSN(t *testing.T, dsn string) {
	const p = 7
	f := open(t, dsn)
	svc := f.Service()
	ctx := context.Background()
	check := func(lsn uint64) bool {
		ok, err := svc.Check(ctx, p, lsn)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if check(1) {
		t.Fatal("Check(1) on an empty partition = true")
	}
	add(t, svc, p, 1, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "one"})
	add(t, svc, p, 2, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "two"})
	if !check(1) || !check(2) || check(3) {
		t.Fatalf("Check(1,2,3) = %v %v %v, want true true false", check(1), check(2), check(3))
	}
	if ok, _ := svc.Check(ctx, p+1, 1); ok {
		t.Fatal("LSNs leak across partitions")
	}
	r := mustCall[forum.AddMsgResponse](t, svc, "AddMsg", p, 2, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "two again"})
	if !r.Replayed || r.ID != 0 {
		t.Fatalf("replay of LSN 2 = %+v, want replayed", r)
	}
	// A failed write does not advance the LSN.
	if _, err := call(t, svc, "AddMsg", p, 3, forum.AddMsgRequest{Topic: "t", ReplyTo: 99, Author: "a", Subject: "x"}); err == nil {
		t.Fatal("reply to unknown message succeeded")
	}
	if check(3) {
		t.Fatal("a rejected write advanced the LSN")
	}
	f.Close()
	svc = open(t, dsn).Service()
	if ok, err := svc.Check(ctx, p, 2); !ok || err != nil {
		t.Fatalf("after reopening, Check(2) = %v, %v", ok, err)
	}
	got := mustCall[forum.ViewHeadersResponse](t, svc, "ViewHeaders", p, 0, forum.ViewHeadersRequest{Topic: "t"})
	if len(got.Threads) != 2 {
		t.Fatalf("after replay and reopen, %d threads, want 2", len(got.Threads))
	}
}

// testConcurrent runs writers in parallel on one partition: ids stay dense
// and unique (writes to a partition are serialized).
func testConcurrent(t *testing.T, svc neptune.Service) {
	const p, writers, each = 5, 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for range each {
				if _, err := call(t, svc, "AddMsg", p, 0, forum.AddMsgRequest{Topic: "c", Author: string(rune('a' + w)), Subject: "s"}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := mustCall[forum.ViewHeadersResponse](t, svc, "ViewHeaders", p, 0, forum.ViewHeadersRequest{Topic: "c"})
	for i, h := range got.Threads {
		if h.ID != int64(i+1) {
			t.Fatalf("thread %d has id %d: ids are not dense", i, h.ID)
		}
	}
	if len(got.Threads) != writers*each {
		t.Fatalf("%d threads, want %d", len(got.Threads), writers*each)
	}
}

// testDigest: replicas that applied the same writes agree on the digest;
// one more message changes it; an untouched partition is empty.
func testDigest(t *testing.T, dsn string) {
	const p = 40 // other subtests share dsn but not this partition
	a, b := open(t, dsn).Service(), open(t, "").Service()
	var first forum.DigestResponse
	for i, svc := range []neptune.Service{a, b} {
		if d := mustCall[forum.DigestResponse](t, svc, "Digest", p+1, 0, struct{}{}); d.Messages != 0 || d.LSN != 0 {
			t.Fatalf("untouched partition: %+v", d)
		}
		root := add(t, svc, p, 7, forum.AddMsgRequest{Topic: "t", Author: "a", Subject: "s", Body: "x"})
		add(t, svc, p, 9, forum.AddMsgRequest{Topic: "t", ReplyTo: root, Author: "b", Subject: "re: s"})
		d := mustCall[forum.DigestResponse](t, svc, "Digest", p, 0, nil)
		if d.Messages != 2 || d.LSN != 9 || len(d.SHA256) != 64 {
			t.Fatalf("digest after two writes: %+v", d)
		}
		if i == 0 {
			first = d
		} else if d != first {
			t.Fatalf("replicas with the same writes differ: %+v vs %+v", first, d)
		}
	}
	add(t, b, p, 10, forum.AddMsgRequest{Topic: "t", Author: "c", Subject: "s2"})
	if d := mustCall[forum.DigestResponse](t, b, "Digest", p, 0, nil); d.SHA256 == first.SHA256 || d.Messages != 3 {
		t.Fatalf("digest did not change with a new message: %+v", d)
	}
	if _, err := call(t, a, "Digest", p, 0, `{"x":1}`); !errors.Is(err, forum.ErrBadRequest) {
		t.Fatalf("malformed Digest: err = %v", err)
	}
}

// The forum's snapshots on each backend (appkittest.TestSnapshots): one
// message per write, every other one a reply.
func TestSnapshots(t *testing.T) {
	for _, be := range appkittest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			appkittest.TestSnapshots(t, be.DSN, func(t *testing.T, dsn string) appkittest.Store { return open(t, dsn) },
				func(t *testing.T, svc neptune.Service, part int, lsn uint64) {
					m := forum.AddMsgRequest{Topic: "t", Author: "ann", Subject: fmt.Sprintf("s%d", lsn), Body: "body ünïcode 'quoted' " + strings.Repeat("x", int(lsn))}
					if lsn%2 == 0 {
						m.ReplyTo = 1
					}
					add(t, svc, part, lsn, m)
				},
				func(t *testing.T, svc neptune.Service, part int) int {
					return mustCall[forum.DigestResponse](t, svc, "Digest", part, 0, forum.DigestRequest{}).Messages
				})
		})
	}
}
