package dac

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

func uniformServers(n int) []Server {
	s := make([]Server, n)
	for i := range s {
		s[i] = Server{Local: 25 * ms, Reduce: 5 * ms}
	}
	return s
}

// ceilLog2 is ⌈log2 n⌉ and floorLog2 ⌊log2 n⌋, for n ≥ 1.
func ceilLog2(n int) int  { return bits.Len(uint(n - 1)) }
func floorLog2(n int) int { return bits.Len(uint(n)) - 1 }

func TestBuildShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 5, 8, 24, 100} {
		for _, s := range []Scheme{Base, Flat, Binomial, LAT} {
			tr, err := Build(s, uniformServers(n), r)
			if err != nil {
				t.Fatalf("%v n=%d: %v", s, n, err)
			}
			if err := tr.Check(); err != nil {
				t.Fatalf("%v n=%d: %v", s, n, err)
			}
			sum := 0
			for i := range n {
				sum += tr.Reductions(i)
			}
			sum += tr.Reductions(Caller)
			if sum != n-1 {
				t.Errorf("%v n=%d: %d reductions, want n-1=%d", s, n, sum, n-1)
			}
			want := map[Scheme]struct{ callerKids, height int }{
				Base:     {n, 0},
				Flat:     {1, min(n-1, 1)},
				Binomial: {1, floorLog2(n)},
				LAT:      {1, floorLog2(n)}, // equal loads: one chain, made binomial
			}[s]
			if got := len(tr.CallerChildren); got != want.callerKids {
				t.Errorf("%v n=%d: %d caller children, want %d", s, n, got, want.callerKids)
			}
			if got := tr.Height(); got != want.height {
				t.Errorf("%v n=%d: height %d, want %d", s, n, got, want.height)
			}
		}
	}
	if _, err := Build(LAT, nil, r); err == nil {
		t.Error("Build with no servers: want error")
	}
	if _, err := Build(Scheme(9), uniformServers(3), r); err == nil {
		t.Error("Build with unknown scheme: want error")
	}
}

// TestLATFig10 follows the 8-server example of Fig 10: the least loaded
// server A takes four of the seven reductions and becomes the root.
func TestLATFig10(t *testing.T) {
	const A, B, C, D, E, F, G, H = 0, 1, 2, 3, 4, 5, 6, 7
	loads := []time.Duration{0, 2, 3, 4, 5, 6, 7, 8}
	servers := make([]Server, len(loads))
	for i, l := range loads {
		servers[i] = Server{Load: l * ms, Reduce: ms}
	}
	red, _ := latAssign(servers)
	if want := []int{4, 2, 1, 0, 0, 0, 0, 0}; !slices.Equal(red, want) {
		t.Fatalf("reductions %v, want %v", red, want)
	}
	tr := BuildLAT(servers)
	// A is the root; B and C, which reduce, come first; the leaves follow
	// most loaded first, so H and G hang right below the root.
	wantParent := []int{Caller, A, A, C, B, B, A, A}
	if !slices.Equal(tr.Parent, wantParent) {
		t.Fatalf("parents %v, want %v", tr.Parent, wantParent)
	}
	if want := []int{G, H, C, B}; !slices.Equal(tr.Children[A], want) {
		t.Errorf("A's children by rank %v, want %v", tr.Children[A], want)
	}
	if want := []int{E, F}; !slices.Equal(tr.Children[B], want) {
		t.Errorf("B's children by rank %v, want %v", tr.Children[B], want)
	}
}

// TestLATChainBecomesBinomial: with equal loads the greedy step gives every
// server but one a single reduction, a chain of n; the final step replaces
// it with a binomial tree rooted at the least loaded server.
func TestLATChainBecomesBinomial(t *testing.T) {
	servers := uniformServers(8)
	for i := range servers {
		servers[i].Load = time.Duration(i) * 100 * time.Microsecond // < one reduction apart
	}
	before := latPlace(latAssign(servers))
	if h := newTree(before).Height(); h != 7 {
		t.Fatalf("before adjustment: height %d, want a chain of height 7", h)
	}
	tr := BuildLAT(servers)
	if tr.Height() != 3 || tr.CallerChildren[0] != 0 {
		t.Fatalf("after adjustment: height %d root %d, want 3 and server 0", tr.Height(), tr.CallerChildren[0])
	}
	// Less loaded servers sit at positions with more children.
	for a := range servers {
		for b := a + 1; b < len(servers); b++ {
			if len(tr.Children[a]) < len(tr.Children[b]) {
				t.Errorf("server %d (lighter) has %d children, server %d has %d",
					a, len(tr.Children[a]), b, len(tr.Children[b]))
			}
		}
	}
}

// TestLATProperties checks, over random loads and sizes, the two properties
// of §4.2 on the tree before the chain adjustment (which may trade them for
// height), and on the final tree the height bound and that every server
// appears exactly once.
func TestLATProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	trials := 400
	if testing.Short() {
		trials = 100
	}
	for trial := range trials {
		n := 1 + r.IntN(300)
		servers := uniformServers(n)
		spread := time.Duration(1+r.IntN(200)) * ms
		for i := range servers {
			servers[i].Load = time.Duration(r.Int64N(int64(spread)))
		}
		red, work := latAssign(servers)
		pre := newTree(latPlace(red, work))
		depth := pre.Depth()
		height := subtreeHeights(pre)
		for a := range n {
			for b := range n {
				if servers[a].Load >= servers[b].Load {
					continue
				}
				// (1) A less loaded than B ⇒ A has at least as many children.
				if len(pre.Children[a]) < len(pre.Children[b]) {
					t.Fatalf("trial %d: lighter %d has %d children < %d of %d",
						trial, a, len(pre.Children[a]), len(pre.Children[b]), b)
				}
				// (2) Same depth, A less loaded ⇒ A's subtree is at least as deep.
				if depth[a] == depth[b] && height[a] < height[b] {
					t.Fatalf("trial %d: lighter %d subtree depth %d < %d of %d at depth %d",
						trial, a, height[a], height[b], b, depth[a])
				}
			}
		}
		tr := BuildLAT(servers)
		if err := tr.Check(); err != nil {
			t.Fatalf("trial %d n=%d: %v", trial, n, err)
		}
		if h, bound := tr.Height(), 2*ceilLog2(n); h > bound {
			t.Fatalf("trial %d n=%d: height %d > 2⌈log2 n⌉ = %d", trial, n, h, bound)
		}
	}
}

// subtreeHeights returns the height of the subtree rooted at each node.
func subtreeHeights(t Tree) []int {
	h := make([]int, t.Len())
	var walk func(i int) int
	walk = func(i int) int {
		for _, c := range t.Children[i] {
			h[i] = max(h[i], 1+walk(c))
		}
		return h[i]
	}
	for _, r := range t.CallerChildren {
		walk(r)
	}
	return h
}

// TestLATPutsBusyServersAtLeaves: servers with a far higher load index
// (slow, or unresponsive to polls) do no reductions, so staged timeouts
// can drop them alone.
func TestLATPutsBusyServersAtLeaves(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		n := 4 + r.IntN(100)
		servers := uniformServers(n)
		for i := range servers {
			servers[i].Load = time.Duration(r.IntN(50)) * ms
		}
		busy := r.Perm(n)[:1+r.IntN(n/4+1)]
		for _, b := range busy {
			servers[b].Load = 2 * time.Second
		}
		tr := BuildLAT(servers)
		for _, b := range busy {
			if len(tr.Children[b]) != 0 {
				t.Fatalf("trial %d: busy server %d has children %v", trial, b, tr.Children[b])
			}
		}
	}
}

func TestBinomialRandomPlacement(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	roots := map[int]bool{}
	for range 50 {
		roots[BuildBinomial(16, r).CallerChildren[0]] = true
		if tr := BuildFlat(16, r); len(tr.Children[tr.CallerChildren[0]]) != 15 {
			t.Fatal("flat root does not reduce all others")
		}
	}
	if len(roots) < 8 {
		t.Errorf("binomial roots over 50 calls: %d distinct servers, want placement to vary", len(roots))
	}
}

func TestCheckRejectsBrokenTrees(t *testing.T) {
	for name, parent := range map[string][]int{
		"cycle":     {Caller, 2, 1},
		"self loop": {Caller, 1},
	} {
		tr := newTree(parent)
		if err := tr.Check(); err == nil {
			t.Errorf("%s: Check accepted %v", name, parent)
		}
	}
	tr := BuildBase(3)
	tr.CallerChildren = tr.CallerChildren[:2]
	if err := tr.Check(); err == nil {
		t.Error("Check accepted a tree missing a participant")
	}
}
