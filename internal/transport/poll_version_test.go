package transport

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

func TestPollRepliesCarryReplicaVersionsAndWork(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	want := Version{Replicated: true, Version: 42, VersionAgo: 40, Serving: true, Primary: true, Lease: 120 * time.Millisecond}
	wantWork := Work{Pending: 37 * time.Millisecond, Capacity: 4}
	srv, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { return 3, true }, log,
		WithVersions(func(s string, p int32) Version {
			if s == "kv" && p == 1 {
				return want
			}
			return Version{}
		}),
		WithWork(func(s string) (Work, bool) { return wantWork, s == "kv" }))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	plain, err := ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { return 3, true }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pl, err := NewPoller(log)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	got := pl.Poll(context.Background(), []PollTarget{{"v", srv.Addr()}, {"plain", plain.Addr()}}, "kv", 1, "", time.Second)
	if len(got) != 2 {
		t.Fatalf("answers = %+v, want 2", got)
	}
	for _, a := range got {
		exp, expWork := want, wantWork
		if a.Replica == "plain" {
			exp, expWork = Version{}, Work{}
		}
		if a.Version != exp || a.Work != expWork {
			t.Errorf("%s: version %+v work %+v, want %+v %+v", a.Replica, a.Version, a.Work, exp, expWork)
		}
	}
}
