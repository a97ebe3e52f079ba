package micro

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
)

// Aggregation operator names (the DAC paper's micro benchmark, §5.1).
const (
	// LocalOp sleeps ~Exp(mean local cost) and contributes partition+1.
	LocalOp = "work"
	// ReduceOp sleeps ~Exp(mean reduction cost) and adds.
	ReduceOp = "sum"
)

// AggConfig sets the aggregation operators' mean costs. Zero fields take
// the paper's values: 25 ms local, 5 ms reduction.
type AggConfig struct {
	Local, Reduce time.Duration
	// Seed seeds the cost draws.
	Seed uint64
}

// Validate reports the first invalid field.
func (c AggConfig) Validate() error {
	switch {
	case c.Local < 0 || c.Local > MaxDuration:
		return fmt.Errorf("micro: AggConfig.Local %v is not in 0..%v", c.Local, MaxDuration)
	case c.Reduce < 0 || c.Reduce > MaxDuration:
		return fmt.Errorf("micro: AggConfig.Reduce %v is not in 0..%v", c.Reduce, MaxDuration)
	}
	return nil
}

// Aggregator returns the operators: costs drawn from exponential
// distributions and emulated by sleeping, so that dozens of nodes fit on a
// small machine (a node's capacity is its number of workers). Partition p
// contributes p+1 and reductions add, so a result is the sum of p+1 over
// the contributing partitions, which tests use to check coverage end to
// end. Params (LocalParams, ReduceParams) may override the mean (Params).
// Call Validate on a config from user input first.
func (c AggConfig) Aggregator() *neptune.Aggregator { return c.aggregator(newSleeper(c.Seed)) }

func (c AggConfig) aggregator(s *sleeper) *neptune.Aggregator {
	if c.Local == 0 {
		c.Local = 25 * time.Millisecond
	}
	if c.Reduce == 0 {
		c.Reduce = 5 * time.Millisecond
	}
	return &neptune.Aggregator{
		Local: map[string]neptune.LocalFunc{LocalOp: func(ctx context.Context, p int, params []byte) ([]byte, error) {
			if err := s.sleep(ctx, c.Local, params); err != nil {
				return nil, err
			}
			return Encode(uint64(p) + 1), nil
		}},
		Reduce: map[string]neptune.ReduceFunc{ReduceOp: func(ctx context.Context, a, b, params []byte) ([]byte, error) {
			x, err := Decode(a)
			if err != nil {
				return nil, err
			}
			y, err := Decode(b)
			if err != nil {
				return nil, err
			}
			if err := s.sleep(ctx, c.Reduce, params); err != nil {
				return nil, err
			}
			return Encode(x + y), nil
		}},
	}
}

// Params encodes a per-call mean cost for LocalParams or ReduceParams.
func Params(mean time.Duration) []byte { return Encode(uint64(mean)) }

// Encode converts a partial result (a sum) to bytes.
func Encode(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Decode is the inverse of Encode.
func Decode(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("micro: partial result has %d bytes, want 8", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// sleeper draws exponential costs, stretched by the node's slowdown
// factor; safe for concurrent use.
type sleeper struct {
	mu   sync.Mutex
	rng  *rand.Rand
	slow float64
}

func newSleeper(seed uint64) *sleeper {
	return &sleeper{rng: rand.New(rand.NewPCG(seed, 0x6d6963726f)), slow: 1}
}

// setSlowdown is the slowdown method: the body is a positive decimal
// factor; the answer is the previous one.
func (s *sleeper) setSlowdown(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	f, err := strconv.ParseFloat(string(r.Body), 64)
	if err != nil || f <= 0 || f > 1000 {
		return nil, fmt.Errorf("micro: slowdown %q is not a factor in (0, 1000]", r.Body)
	}
	s.mu.Lock()
	old := s.slow
	s.slow = f
	s.mu.Unlock()
	return &neptune.Response{Body: strconv.AppendFloat(nil, old, 'g', -1, 64)}, nil
}

// sleep waits ~Exp(mean), the mean taken from params if they are set.
func (s *sleeper) sleep(ctx context.Context, mean time.Duration, params []byte) error {
	if len(params) > 0 {
		v, err := Decode(params)
		if err != nil || time.Duration(v) > MaxDuration {
			return fmt.Errorf("micro: params must be empty or a mean cost up to %v (Params)", MaxDuration)
		}
		mean = time.Duration(v)
	}
	s.mu.Lock()
	d := time.Duration(s.rng.ExpFloat64() * float64(mean) * s.slow)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
