package dac

import (
	"cmp"
	"container/heap"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"
)

// Caller stands for the calling client in Tree.Parent: the node a tree's
// root sends its result to and, in Base, the node that reduces everything.
const Caller = -1

// Server is what a tree builder knows about the server of one participant.
// Costs are in time per processor: a server with twice the processors has
// half the cost (§4.2, footnote 1).
type Server struct {
	// Load is the server's load index: the sum over its queued aggregation
	// requests of RequestLoad (s + π·a).
	Load time.Duration
	// Local is the estimated cost of this call's local operator there.
	Local time.Duration
	// Reduce is the estimated cost of one reduction there.
	Reduce time.Duration
}

// Tree is a reduction tree over participants 0..n-1 (indexes into
// Request.Partitions). Participant i sends its partial result to Parent[i];
// exactly one participant sends to the Caller, except in Base where all do.
type Tree struct {
	Parent []int
	// Children[i] are the participants i reduces, ordered by staged-timeout
	// rank: ascending subtree size, ties by index.
	Children [][]int
	// CallerChildren are the participants whose parent is the Caller, in
	// the same rank order.
	CallerChildren []int
}

// Len is the number of participants.
func (t Tree) Len() int { return len(t.Parent) }

// Kids returns the children of node i, which may be Caller.
func (t Tree) Kids(i int) []int {
	if i == Caller {
		return t.CallerChildren
	}
	return t.Children[i]
}

// Reductions is the number of binary reductions node i performs: one per
// child for a participant (its local result is the first operand), one less
// than its children for the Caller, which has no local result.
func (t Tree) Reductions(i int) int {
	if i == Caller {
		return max(len(t.CallerChildren)-1, 0)
	}
	return len(t.Children[i])
}

// Depth returns the depth of every participant; children of the Caller
// have depth 0.
func (t Tree) Depth() []int {
	d := make([]int, len(t.Parent))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		d[i] = depth
		for _, c := range t.Children[i] {
			walk(c, depth+1)
		}
	}
	for _, r := range t.CallerChildren {
		walk(r, 0)
	}
	return d
}

// Height is the largest participant depth: the number of participant hops
// on the longest path below the caller's children.
func (t Tree) Height() int {
	return slices.Max(append(t.Depth(), 0))
}

// Check reports whether t is a tree: every participant reaches the Caller
// exactly once and Children and CallerChildren agree with Parent.
func (t Tree) Check() error {
	n := len(t.Parent)
	if len(t.Children) != n {
		return fmt.Errorf("dac: tree has %d parents but %d child lists", n, len(t.Children))
	}
	seen := make([]int, n)
	count := func(kids []int, parent int) error {
		for _, c := range kids {
			if c < 0 || c >= n || t.Parent[c] != parent {
				return fmt.Errorf("dac: child %d of %d disagrees with Parent", c, parent)
			}
			seen[c]++
		}
		return nil
	}
	if err := count(t.CallerChildren, Caller); err != nil {
		return err
	}
	for i := range n {
		if err := count(t.Children[i], i); err != nil {
			return err
		}
	}
	for i, s := range seen {
		if s != 1 {
			return fmt.Errorf("dac: participant %d appears %d times", i, s)
		}
	}
	for i := range n { // every path reaches the Caller within n hops
		j, hops := i, 0
		for j != Caller {
			if hops++; hops > n {
				return fmt.Errorf("dac: participant %d is on a cycle", i)
			}
			j = t.Parent[j]
		}
	}
	return nil
}

// newTree derives the child lists from parent and orders them by rank.
func newTree(parent []int) Tree {
	n := len(parent)
	t := Tree{Parent: parent, Children: make([][]int, n)}
	for i, p := range parent {
		if p == Caller {
			t.CallerChildren = append(t.CallerChildren, i)
		} else {
			t.Children[p] = append(t.Children[p], i)
		}
	}
	size := make([]int, n)
	var sz func(i int) int
	sz = func(i int) int {
		size[i] = 1
		for _, c := range t.Children[i] {
			size[i] += sz(c)
		}
		return size[i]
	}
	byRank := func(a, b int) int {
		return cmp.Or(cmp.Compare(size[a], size[b]), cmp.Compare(a, b))
	}
	for _, r := range t.CallerChildren {
		sz(r)
	}
	slices.SortFunc(t.CallerChildren, byRank)
	for i := range t.Children {
		slices.SortFunc(t.Children[i], byRank)
	}
	return t
}

// Build forms the tree of one call. servers[i] describes the server of
// participant i; only LAT reads their loads. r supplies the random
// placement of Flat and Binomial.
func Build(s Scheme, servers []Server, r *rand.Rand) (Tree, error) {
	if len(servers) == 0 {
		return Tree{}, ErrNoPartitions
	}
	switch s {
	case Base:
		return BuildBase(len(servers)), nil
	case Flat:
		return BuildFlat(len(servers), r), nil
	case Binomial:
		return BuildBinomial(len(servers), r), nil
	case LAT:
		return BuildLAT(servers), nil
	}
	return Tree{}, fmt.Errorf("%w %d", ErrScheme, int(s))
}

// BuildBase returns the tree where every participant reports to the Caller.
func BuildBase(n int) Tree {
	parent := make([]int, n)
	for i := range parent {
		parent[i] = Caller
	}
	return newTree(parent)
}

// BuildFlat returns a star rooted at a random participant.
func BuildFlat(n int, r *rand.Rand) Tree {
	root := r.IntN(n)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = root
	}
	parent[root] = Caller
	return newTree(parent)
}

// BuildBinomial returns a binomial tree with participants placed in random
// order.
func BuildBinomial(n int, r *rand.Rand) Tree {
	perm := r.Perm(n)
	parent := make([]int, n)
	parent[perm[0]] = Caller
	for pos := 1; pos < n; pos++ {
		parent[perm[pos]] = perm[binomialParent(pos)]
	}
	return newTree(parent)
}

// binomialParent is the parent of position pos ≥ 1 in a binomial tree laid
// out on positions 0..m-1: pos with its lowest set bit cleared. Position 0
// is the root; the depth of pos is its number of set bits, so the height of
// an m-node tree is ⌊log2 m⌋.
func binomialParent(pos int) int { return pos & (pos - 1) }

// BuildLAT forms the load-adaptive tree of §4.2 (Fig 9):
//
//  1. The n−1 reductions go one by one to the server whose estimated
//     workload (load + local cost + reductions so far) is least after
//     taking one more.
//  2. Servers are placed in breadth-first order, most reductions first,
//     each taking the shallowest open slot and opening as many child slots
//     as it has reductions. Ties among servers with reductions go to the
//     less loaded one, so that it gets the longer path (property 2); ties
//     among leaves go to the more loaded one, so that a slow server sits
//     near the root, where staged timeouts cut it off cheaply (§5.5).
//  3. Every topmost subtree that is a chain of three or more is replaced by
//     a load-aware binomial tree, which bounds the height by O(log n).
//
// Ties are broken by participant index, so the result is deterministic.
func BuildLAT(servers []Server) Tree {
	red, work := latAssign(servers)
	parent := latPlace(red, work)
	latUnchain(parent, servers)
	return newTree(parent)
}

// latAssign is step 1: it returns each server's reduction count and final
// estimated workload.
func latAssign(servers []Server) (red []int, work []time.Duration) {
	n := len(servers)
	red = make([]int, n)
	work = make([]time.Duration, n)
	h := &costHeap{next: make([]time.Duration, n)}
	for i, s := range servers {
		work[i] = s.Load + s.Local
		h.next[i] = work[i] + s.Reduce
		h.idx = append(h.idx, i)
	}
	heap.Init(h)
	for range n - 1 {
		i := h.idx[0]
		red[i]++
		work[i] = h.next[i]
		h.next[i] += servers[i].Reduce
		heap.Fix(h, 0)
	}
	return red, work
}

// costHeap orders servers by their workload after one more reduction.
type costHeap struct {
	idx  []int
	next []time.Duration
}

func (h *costHeap) Len() int { return len(h.idx) }
func (h *costHeap) Less(a, b int) bool {
	i, j := h.idx[a], h.idx[b]
	return cmp.Or(cmp.Compare(h.next[i], h.next[j]), cmp.Compare(i, j)) < 0
}
func (h *costHeap) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *costHeap) Push(x any)    { h.idx = append(h.idx, x.(int)) }
func (h *costHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// latPlace is step 2: breadth-first placement by reduction count. The
// count of reductions is n−1, so the open slots exactly fill up.
func latPlace(red []int, work []time.Duration) []int {
	n := len(red)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(red[b], red[a]); c != 0 {
			return c
		}
		w := cmp.Compare(work[a], work[b]) // interior: less loaded first
		if red[a] == 0 {
			w = -w // leaves: more loaded first
		}
		return cmp.Or(w, cmp.Compare(a, b))
	})
	parent := make([]int, n)
	slots := make([]int, 0, n)
	parent[order[0]] = Caller
	for k, i := range order {
		if k > 0 {
			parent[i] = slots[k-1]
		}
		for range red[i] {
			slots = append(slots, i)
		}
	}
	return parent
}

// latUnchain is step 3. It scans the tree breadth first and replaces each
// topmost chain subtree of three or more nodes with a binomial tree whose
// positions, ordered by out-degree descending and then depth ascending, go
// to the chain's servers ordered by workload ascending.
func latUnchain(parent []int, servers []Server) {
	t := newTree(parent)
	queue := slices.Clone(t.CallerChildren)
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		chain := []int{u}
		for v := u; len(t.Children[v]) == 1; {
			v = t.Children[v][0]
			chain = append(chain, v)
		}
		if last := chain[len(chain)-1]; len(t.Children[last]) > 1 || len(chain) < 3 {
			queue = append(queue, t.Children[u]...)
			continue
		}
		m := len(chain)
		pos := make([]int, m)
		degree := make([]int, m)
		for p := range pos {
			pos[p] = p
			if p > 0 {
				degree[binomialParent(p)]++
			}
		}
		slices.SortFunc(pos, func(a, b int) int {
			return cmp.Or(cmp.Compare(degree[b], degree[a]),
				cmp.Compare(bits.OnesCount(uint(a)), bits.OnesCount(uint(b))), cmp.Compare(a, b))
		})
		slices.SortFunc(chain, func(a, b int) int {
			return cmp.Or(cmp.Compare(servers[a].Load+servers[a].Local, servers[b].Load+servers[b].Local), cmp.Compare(a, b))
		})
		at := make([]int, m) // binomial position → server
		for k, p := range pos {
			at[p] = chain[k]
		}
		top := parent[u]
		parent[at[0]] = top
		for p := 1; p < m; p++ {
			parent[at[p]] = at[binomialParent(p)]
		}
	}
}
