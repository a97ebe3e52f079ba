package check

import (
	"strings"
	"testing"
	"time"
)

func TestRegisterLinearizable(t *testing.T) {
	ops := []RegisterOp{
		{Key: "a", Put: true, Value: "1", Outcome: AppendOK, Start: ms(0), End: ms(10), Client: "c1"},
		{Key: "a", Value: "1", Outcome: AppendOK, Start: ms(20), End: ms(30), Client: "c2"},
		// Concurrent with the get: either order is fine.
		{Key: "a", Put: true, Value: "2", Outcome: AppendOK, Start: ms(40), End: ms(60), Client: "c1"},
		{Key: "a", Value: "1", Outcome: AppendOK, Start: ms(45), End: ms(50), Client: "c2"},
		// An unknown put may take effect late; a failed one never.
		{Key: "a", Put: true, Value: "3", Outcome: AppendUnknown, Start: ms(70), End: ms(80), Client: "c1"},
		{Key: "a", Put: true, Value: "4", Outcome: AppendFailed, Start: ms(81), End: ms(82), Client: "c1"},
		{Key: "a", Value: "2", Outcome: AppendOK, Start: ms(90), End: ms(95), Client: "c2"},
		{Key: "a", Value: "3", Outcome: AppendOK, Start: ms(100), End: ms(105), Client: "c2"},
		{Key: "b", Value: "", Outcome: AppendOK, Start: ms(0), End: ms(5), Client: "c3"},
	}
	rep := Register(ops, time.Second)
	if !rep.Valid() || rep.Keys != 2 || len(rep.Timeouts) != 0 {
		t.Fatalf("want linearizable over 2 keys, got %s", rep)
	}
}

func TestRegisterStaleReadFails(t *testing.T) {
	ops := []RegisterOp{
		{Key: "a", Put: true, Value: "1", Outcome: AppendOK, Start: ms(0), End: ms(10), Client: "c1"},
		{Key: "a", Put: true, Value: "2", Outcome: AppendOK, Start: ms(20), End: ms(30), Client: "c1"},
		// An old primary still serving: the read starts after put(2) was acknowledged.
		{Key: "a", Value: "1", Outcome: AppendOK, Start: ms(40), End: ms(45), Client: "c2"},
		{Key: "b", Put: true, Value: "x", Outcome: AppendOK, Start: ms(0), End: ms(10), Client: "c1"},
		// A read of a value never written (e.g. a failed put that ran).
		{Key: "b", Put: true, Value: "y", Outcome: AppendFailed, Start: ms(20), End: ms(30), Client: "c1"},
		{Key: "b", Value: "y", Outcome: AppendOK, Start: ms(40), End: ms(45), Client: "c2"},
	}
	rep := Register(ops, time.Second)
	if rep.Valid() || len(rep.NonLinearizable) != 2 {
		t.Fatalf("want keys a and b non-linearizable, got %s", rep)
	}
	if !strings.Contains(rep.Example, `returned "1"`) {
		t.Errorf("example should name the stale get: %s", rep.Example)
	}
}

func TestStaleBeyondBound(t *testing.T) {
	x := time.Second
	ops := []Op{
		{Session: "w", Kind: Write, Partition: "p0", Version: 5, Start: ms(0), End: ms(100)},
		{Session: "w", Kind: Write, Partition: "p0", Version: 6, Start: ms(1000), End: ms(1100)},
		// Within the bound: v5 acknowledged 1.9 s before, v6 only 0.9 s.
		{Session: "r", Kind: Read, Partition: "p0", Version: 5, Start: ms(2000), End: ms(2010)},
		// Other partitions do not count.
		{Session: "r", Kind: Read, Partition: "p1", Version: 0, Start: ms(5000), End: ms(5010)},
	}
	if vs := StaleBeyondBound(ops, x); len(vs) != 0 {
		t.Fatalf("want none, got %v", vs)
	}
	// Beyond: at 2.6 s, v6 was acknowledged 1.5 s ago, the read got v5.
	ops = append(ops, Op{Session: "r", Kind: Read, Partition: "p0", Version: 5, Start: ms(2600), End: ms(2610)},
		Op{Session: "r", Kind: Read, Partition: "p0", Version: 0, Start: ms(1200), End: ms(1210)})
	vs := StaleBeyondBound(ops, x)
	if len(vs) != 2 {
		t.Fatalf("want 2 stale reads, got %v", vs)
	}
	if got := MaxBeyond(ops, x); got != 500*time.Millisecond {
		t.Errorf("max beyond = %v, want 500ms", got)
	}
}

func TestTwoPrimaries(t *testing.T) {
	var ss []StatusSample
	add := func(round int, node string, primary bool) {
		ss = append(ss, StatusSample{Round: round, At: ms(100 * round), Node: node, Partition: "p0", Primary: primary})
	}
	for r := range 10 {
		add(r, "a", r < 6)
		add(r, "b", r >= 3)
		add(r, "c", false)
	}
	m := TwoPrimaries(ss)
	if m.Rounds != 10 || m.Double != 3 || m.Longest != 300*time.Millisecond {
		t.Fatalf("got %+v, want 3 double rounds lasting 300ms", m)
	}
	// With leases known, an unleased claim does not count.
	for i := range ss {
		ss[i].LeaseKnown = true
		ss[i].LeaseValid = ss[i].Node == "b" || ss[i].Round < 3
	}
	if m := TwoPrimaries(ss); m.Double != 0 || m.Claimed != 3 {
		t.Fatalf("leased: got %+v, want none leased and 3 rounds claimed", m)
	}
}

func TestLSNCollisions(t *testing.T) {
	ws := []Op{
		{Session: "put-1", Kind: Write, Partition: "p0", Version: 7},
		{Session: "put-1", Kind: Write, Partition: "p0", Version: 7}, // a retry answered with the original result
		{Session: "put-2", Kind: Write, Partition: "p1", Version: 7},
	}
	if vs := LSNCollisions(ws); len(vs) != 0 {
		t.Fatalf("want none, got %v", vs)
	}
	ws = append(ws, Op{Session: "put-3", Kind: Write, Partition: "p0", Version: 7})
	if vs := LSNCollisions(ws); len(vs) != 1 {
		t.Fatalf("want 1, got %v", vs)
	}
}

func TestLSNOrder(t *testing.T) {
	ws := []Op{
		{Session: "a", Kind: Write, Partition: "p0", Version: 5, Start: ms(0), End: ms(10)},
		{Session: "b", Kind: Write, Partition: "p0", Version: 6, Start: ms(20), End: ms(30)},
		// Concurrent with b: either order.
		{Session: "c", Kind: Write, Partition: "p0", Version: 4, Start: ms(5), End: ms(40)},
		// Another partition has its own LSNs.
		{Session: "d", Kind: Write, Partition: "p1", Version: 1, Start: ms(50), End: ms(60)},
	}
	if vs := LSNOrder(ws); len(vs) != 0 {
		t.Fatalf("want none, got %v", vs)
	}
	// An old primary acknowledges after the new one did, from its own log.
	ws = append(ws, Op{Session: "e", Kind: Write, Partition: "p0", Version: 5, Start: ms(50), End: ms(55)})
	if vs := LSNOrder(ws); len(vs) != 1 || vs[0].Op.Session != "e" {
		t.Fatalf("want e flagged, got %v", vs)
	}
}
