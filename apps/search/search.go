// Package search is a document retriever over a partitioned inverted index,
// the DAC paper's search application: every partition indexes its share of
// a generated corpus whose term frequencies follow Zipf's law; the local
// operator returns the top-k documents of a partition for a query, and the
// reduction merges two top-k lists.
package search

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/neptune-cluster/neptune"
)

// Operator names.
const (
	Name     = "search"
	LocalOp  = "topk"
	ReduceOp = "merge"
)

// Config describes the generated corpus. Zero fields take the defaults.
type Config struct {
	// Docs is the number of documents per partition (default 5000).
	Docs int
	// Vocab is the number of distinct terms (default 5000).
	Vocab int
	// DocLen is the number of term occurrences per document (default 40).
	DocLen int
	// Zipf is the exponent of the term distribution, > 1 (default 1.1).
	Zipf float64
	// Seed makes the corpus reproducible; partition p uses (Seed, p).
	Seed uint64
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Docs < 0:
		return fmt.Errorf("search: Config.Docs %d is negative", c.Docs)
	case c.Vocab < 0:
		return fmt.Errorf("search: Config.Vocab %d is negative", c.Vocab)
	case c.DocLen < 0:
		return fmt.Errorf("search: Config.DocLen %d is negative", c.DocLen)
	case c.Zipf != 0 && c.Zipf <= 1:
		return fmt.Errorf("search: Config.Zipf %v must exceed 1", c.Zipf)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Docs == 0 {
		c.Docs = 5000
	}
	if c.Vocab == 0 {
		c.Vocab = 5000
	}
	if c.DocLen == 0 {
		c.DocLen = 40
	}
	if c.Zipf == 0 {
		c.Zipf = 1.1
	}
	return c
}

// Query is a search request: the term ids to match and how many documents
// to return. It travels as LocalParams (JSON).
type Query struct {
	Terms []int `json:"terms"`
	K     int   `json:"k"`
}

// Hit is one matching document. Doc ids are global: partition p holds
// p·Docs … (p+1)·Docs−1.
type Hit struct {
	Doc   int     `json:"doc"`
	Score float64 `json:"score"`
}

// posting is one document containing a term, with the term's frequency.
type posting struct {
	doc, tf int
}

// Index is one partition's inverted index.
type Index struct {
	docs  int
	terms map[int][]posting
}

// NewIndex generates partition's documents and indexes them.
func NewIndex(c Config, partition int) *Index {
	c = c.withDefaults()
	r := rand.New(rand.NewPCG(c.Seed, uint64(partition)))
	z := rand.NewZipf(r, c.Zipf, 1, uint64(c.Vocab-1))
	ix := &Index{docs: c.Docs, terms: map[int][]posting{}}
	tf := map[int]int{}
	for i := range c.Docs {
		clear(tf)
		for range c.DocLen {
			tf[int(z.Uint64())]++
		}
		doc := partition*c.Docs + i
		for term, n := range tf {
			ix.terms[term] = append(ix.terms[term], posting{doc, n})
		}
	}
	return ix
}

// TopK scores documents by Σ tf·idf over the query terms (idf from this
// partition) and returns the k best, in canonical order.
func (ix *Index) TopK(q Query) []Hit {
	score := map[int]float64{}
	for _, term := range q.Terms {
		ps := ix.terms[term]
		if len(ps) == 0 {
			continue
		}
		idf := math.Log(1 + float64(ix.docs)/float64(len(ps)))
		for _, p := range ps {
			score[p.doc] += float64(p.tf) * idf
		}
	}
	hits := make([]Hit, 0, len(score))
	for doc, s := range score {
		hits = append(hits, Hit{doc, s})
	}
	return best(hits, q.K)
}

// Merge combines two top-k lists into the top k of their union. It is
// commutative and associative because the order is total (score, then doc).
func Merge(a, b []Hit, k int) []Hit {
	return best(slices.Concat(a, b), k)
}

func best(hits []Hit, k int) []Hit {
	slices.SortFunc(hits, func(x, y Hit) int {
		if c := cmp.Compare(y.Score, x.Score); c != 0 {
			return c
		}
		return cmp.Compare(x.Doc, y.Doc)
	})
	return hits[:min(k, len(hits))]
}

// Searcher serves the indexes of the partitions a node hosts, built on
// first use. Safe for concurrent use.
type Searcher struct {
	cfg     Config
	mu      sync.Mutex
	indexes map[int]*Index
}

// New returns a Searcher over the corpus c describes.
func New(c Config) (*Searcher, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Searcher{cfg: c, indexes: map[int]*Index{}}, nil
}

func (s *Searcher) index(partition int) *Index {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, ok := s.indexes[partition]
	if !ok {
		ix = NewIndex(s.cfg, partition)
		s.indexes[partition] = ix
	}
	return ix
}

// Service returns the search service: LocalOp takes a Query (JSON) and
// ReduceOp takes k (JSON number) as params; results are []Hit (JSON).
func (s *Searcher) Service() neptune.Service {
	return neptune.Service{
		Name: Name,
		Aggregate: &neptune.Aggregator{
			Local: map[string]neptune.LocalFunc{LocalOp: func(_ context.Context, p int, params []byte) ([]byte, error) {
				var q Query
				if err := json.Unmarshal(params, &q); err != nil || q.K <= 0 {
					return nil, fmt.Errorf("search: params %q are not a query like {\"terms\":[1,2],\"k\":10}", params)
				}
				return json.Marshal(s.index(p).TopK(q))
			}},
			Reduce: map[string]neptune.ReduceFunc{ReduceOp: func(_ context.Context, a, b, params []byte) ([]byte, error) {
				var k int
				if err := json.Unmarshal(params, &k); err != nil || k <= 0 {
					return nil, fmt.Errorf("search: reduce params %q are not a positive k", params)
				}
				var x, y []Hit
				if err := json.Unmarshal(a, &x); err != nil {
					return nil, fmt.Errorf("search: partial result: %w", err)
				}
				if err := json.Unmarshal(b, &y); err != nil {
					return nil, fmt.Errorf("search: partial result: %w", err)
				}
				return json.Marshal(Merge(x, y, k))
			}},
		},
	}
}

// Service is the search service over the default corpus, for the CLI.
func Service() neptune.Service {
	s, _ := New(Config{})
	return s.Service()
}
