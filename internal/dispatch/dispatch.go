// Package dispatch runs a service's requests on a bounded pool of workers in
// the order a scheduler chooses. The load index a node reports for the
// service is the number of active plus queued requests.
package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/sched"
)

// Config sizes a pool.
type Config struct {
	// Workers is the number of requests served at once. Default 16.
	Workers int
	// QueueLimit bounds the queued (not yet running) requests; a request
	// arriving at a full queue fails fast with ErrOverloaded. Default 1024.
	QueueLimit int
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.QueueLimit == 0 {
		c.QueueLimit = 1024
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("dispatch: Workers must be >= 1, got %d", c.Workers)
	}
	if c.QueueLimit < 1 {
		return fmt.Errorf("dispatch: QueueLimit must be >= 1, got %d", c.QueueLimit)
	}
	return nil
}

// Job is one unit of work; Run receives the caller's context.
type job struct {
	ctx  context.Context
	run  func(context.Context)
	done chan error // receives nil after run, or why it was not run
}

// Pool is a per-service queue with a bounded set of workers.
type Pool struct {
	cfg   Config
	clock clock.Clock

	mu      sync.Mutex
	cond    *sync.Cond
	sched   sched.Scheduler
	active  int
	closed  bool
	workers sync.WaitGroup
	// onFinish observes every finished or dropped request (for metrics).
	onFinish func(class string, queued, ran time.Duration, err error)
}

// New starts a pool with cfg's workers taking requests from s.
func New(cfg Config, s sched.Scheduler, clk clock.Clock) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, clock: clk, sched: s}
	p.cond = sync.NewCond(&p.mu)
	p.workers.Add(cfg.Workers)
	for range cfg.Workers {
		go p.work()
	}
	return p, nil
}

// OnFinish sets a callback observing each request's queue wait, run time
// and outcome. Call it before the pool receives requests; the callback runs
// on worker goroutines and must not block.
func (p *Pool) OnFinish(f func(class string, queued, ran time.Duration, err error)) {
	p.mu.Lock()
	p.onFinish = f
	p.mu.Unlock()
}

// Do queues run and waits until it has run. It returns ErrOverloaded if the
// queue is full, ErrDeadline if ctx's deadline passed while the request was
// queued, and ctx's error if the caller gave up first (run may then still
// execute if a worker had already taken it).
func (p *Pool) Do(ctx context.Context, class string, run func(context.Context)) error {
	j := &job{ctx: ctx, run: run, done: make(chan error, 1)}
	now := p.clock.Now()
	r := &sched.Request{Class: class, Arrival: now, Value: j}
	if d, ok := ctx.Deadline(); ok {
		r.Deadline = d
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nerr.ErrClosed
	case p.sched.Len() >= p.cfg.QueueLimit:
		p.mu.Unlock()
		return fmt.Errorf("%w: %d requests queued", nerr.ErrOverloaded, p.cfg.QueueLimit)
	}
	p.sched.Push(now, r)
	p.cond.Signal()
	p.mu.Unlock()

	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		// The worker that pops it sees the cancelled context and skips it.
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("%w: %w", nerr.ErrDeadline, ctx.Err())
		}
		return ctx.Err()
	}
}

// Load is the load index: active plus queued requests.
func (p *Pool) Load() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active + p.sched.Len()
}

// Close stops the workers after the requests they are running; queued
// requests fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.workers.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.sched.Len() > 0 {
		next, dropped := p.sched.Pop(p.clock.Now())
		for _, r := range append(dropped, next) {
			if r != nil {
				r.Value.(*job).done <- nerr.ErrClosed
			}
		}
	}
}

func (p *Pool) work() {
	defer p.workers.Done()
	p.mu.Lock()
	for {
		for !p.closed && p.sched.Len() == 0 {
			p.cond.Wait()
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		now := p.clock.Now()
		next, dropped := p.sched.Pop(now)
		onFinish := p.onFinish
		if next != nil {
			p.active++
		}
		p.mu.Unlock()

		for _, r := range dropped {
			r.Value.(*job).done <- fmt.Errorf("%w: expired after %v in queue", nerr.ErrDeadline, now.Sub(r.Arrival))
			if onFinish != nil {
				onFinish(r.Class, now.Sub(r.Arrival), 0, nerr.ErrDeadline)
			}
		}
		if next != nil {
			ran, err := p.run(next)
			end := p.clock.Now()
			p.mu.Lock()
			p.active--
			p.sched.Finish(end, next, ran)
			p.mu.Unlock()
			if onFinish != nil {
				onFinish(next.Class, now.Sub(next.Arrival), ran, err)
			}
		}
		p.mu.Lock()
	}
}

// run executes one popped request unless its caller already gave up.
func (p *Pool) run(r *sched.Request) (time.Duration, error) {
	j := r.Value.(*job)
	if err := j.ctx.Err(); err != nil {
		j.done <- err
		return 0, err
	}
	start := p.clock.Now()
	j.run(j.ctx)
	ran := p.clock.Now().Sub(start)
	j.done <- nil
	return ran, nil
}
