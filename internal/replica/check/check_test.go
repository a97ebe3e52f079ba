package check

import (
	"testing"
	"time"
)

var t0 = time.Unix(100, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func op(s string, k Kind, v uint64, start, end int) Op {
	return Op{Session: s, Kind: k, Partition: "p", Version: v, Start: ms(start), End: ms(end)}
}

func rules(vs []Violation) []string {
	var r []string
	for _, v := range vs {
		r = append(r, v.Rule)
	}
	return r
}

func TestSessions(t *testing.T) {
	tests := []struct {
		name string
		ops  []Op
		want []string
	}{
		{"valid", []Op{op("s", Write, 5, 0, 10), op("s", Read, 5, 20, 30), op("s", Read, 7, 40, 50), op("s", Read, 7, 60, 70)}, nil},
		{"read misses own write", []Op{op("s", Write, 5, 0, 10), op("s", Read, 4, 20, 30)}, []string{"read-your-writes"}},
		{"read goes back", []Op{op("s", Read, 6, 0, 10), op("s", Read, 5, 20, 30)}, []string{"monotonic-reads"}},
		{"concurrent ops impose nothing", []Op{op("s", Write, 5, 0, 30), op("s", Read, 4, 20, 40)}, nil},
		{"other sessions impose nothing", []Op{op("s", Write, 5, 0, 10), op("u", Read, 1, 20, 30)}, nil},
		{"other partitions impose nothing", []Op{op("s", Write, 5, 0, 10),
			{Session: "s", Kind: Read, Partition: "q", Version: 1, Start: ms(20), End: ms(30)}}, nil},
		{"both", []Op{op("s", Write, 5, 0, 10), op("s", Read, 8, 20, 30), op("s", Read, 3, 40, 50)},
			[]string{"read-your-writes", "monotonic-reads"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rules(Sessions(tt.ops))
			if len(got) != len(tt.want) {
				t.Fatalf("violations %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("violations %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestStaleness(t *testing.T) {
	tl := map[string]Timeline{"p": {{ms(0), 1}, {ms(100), 5}, {ms(200), 9}}}
	x, eps := 50*time.Millisecond, 10*time.Millisecond
	tests := []struct {
		name string
		read Op
		bad  bool
	}{
		{"fresh", op("s", Read, 9, 300, 310), false},
		{"within x", op("s", Read, 5, 230, 240), false},   // primary had 5 at 170
		{"beyond x", op("s", Read, 5, 270, 280), true},    // primary had 9 at 210
		{"within eps", op("s", Read, 5, 255, 260), false}, // primary had 5 at 195
		{"before history", op("s", Read, 0, 20, 30), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := Staleness([]Op{tt.read, op("s", Write, 1, 0, 400)}, tl, x, eps)
			if (len(vs) > 0) != tt.bad {
				t.Fatalf("violations %v, want violation=%v", vs, tt.bad)
			}
		})
	}
}

func TestConvergenceAndDurability(t *testing.T) {
	if vs := Convergence(map[string]string{"a": "x", "b": "x", "c": "x"}); len(vs) != 0 {
		t.Fatal(vs)
	}
	if vs := Convergence(map[string]string{"a": "x", "b": "y", "c": "x"}); len(vs) != 1 {
		t.Fatalf("want one divergence, got %v", vs)
	}
	present := map[string]map[string]bool{"a": {"w1": true, "w2": true}, "b": {"w1": true}}
	if vs := Durability([]string{"w1"}, present); len(vs) != 0 {
		t.Fatal(vs)
	}
	if vs := Durability([]string{"w1", "w2"}, present); len(vs) != 1 || vs[0].Rule != "durability" {
		t.Fatalf("want w2 lost at b, got %v", vs)
	}
}
