// Package dispatch bounds how many requests of a service run at once and
// decides, through a scheduler, which waiting request runs next. The load
// index a node reports for the service is active plus queued requests.
//
// There are no worker goroutines: a request runs on its caller's goroutine
// once it holds one of the pool's slots. An idle pool runs a request at once
// with no hand-off; a busy one queues it, and a finishing request passes its
// slot to the request the scheduler picks. Waiting is an event, not a
// blocked worker.
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
	// OnChange, if set, is called after a request took a slot, joined the
	// queue or released its slot: the load index (Load, LoadFor) may have
	// changed. It runs on the request's goroutine, outside the pool's
	// lock, and must be cheap and never block (the node signals its poll
	// server, which pushes loads to subscribed clients).
	OnChange func()
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

// waiter is a queued request waiting for a slot.
type waiter struct {
	// grant receives nil when the request holds a slot, or why it will not
	// run. Buffered, so granting never blocks.
	grant chan error
	// abandoned is set (under Pool.mu) when the caller gave up; a popped
	// abandoned waiter is skipped.
	abandoned bool
	granted   bool
}

// FinishFunc observes each request's class, queue wait, run time and
// outcome (nil, ErrDeadline for a request dropped in the queue, or the
// context error of a caller that gave up).
type FinishFunc func(class string, queued, ran time.Duration, err error)

// Pool is one service's admission and ordering point on a node.
type Pool struct {
	cfg      Config
	clock    clock.Clock
	onFinish FinishFunc

	mu     sync.Mutex
	sched  sched.Scheduler
	active int
	closed bool
}

// New returns a pool that orders waiting requests with s. onFinish may be nil.
func New(cfg Config, s sched.Scheduler, clk clock.Clock, onFinish FinishFunc) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if onFinish == nil {
		onFinish = func(string, time.Duration, time.Duration, error) {}
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
	}
	return &Pool{cfg: cfg, clock: clk, sched: s, onFinish: onFinish}, nil
}

// Do runs run once the request holds a slot, and returns after it ran. It
// returns ErrOverloaded if the queue is full, ErrDeadline if ctx's deadline
// passed while the request was queued (run is then never called), ErrClosed
// after Close, and ctx's error if the caller gave up while queued.
// The scheduler is charged the request's wall run time; DoCharged lets the
// caller measure resource use another way.
func (p *Pool) Do(ctx context.Context, class string, run func(context.Context)) error {
	return p.do(ctx, class, func(ctx context.Context) (time.Duration, bool) { run(ctx); return 0, false })
}

// do is Do for a run that returns its resource use, or false to be charged
// its wall run time.
func (p *Pool) do(ctx context.Context, class string, run func(context.Context) (time.Duration, bool)) error {
	now := p.clock.Now()
	r := &sched.Request{Class: class, Arrival: now}
	if d, ok := ctx.Deadline(); ok {
		r.Deadline = d
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nerr.ErrClosed
	case p.active < p.cfg.Workers && p.sched.Len() == 0:
		// Even a request that runs at once passes through the scheduler,
		// so its class statistics and resource accounting see it.
		p.sched.Push(now, r)
		if next, _ := p.sched.Pop(now); next != r {
			p.mu.Unlock()
			return fmt.Errorf("%w: cannot finish in time", nerr.ErrDeadline)
		}
		p.active++
		p.mu.Unlock()
		p.cfg.OnChange()
		p.runHolding(ctx, r, now, run)
		return nil
	case p.sched.Len() >= p.cfg.QueueLimit:
		p.mu.Unlock()
		return fmt.Errorf("%w: %d requests queued", nerr.ErrOverloaded, p.cfg.QueueLimit)
	}
	w := &waiter{grant: make(chan error, 1)}
	r.Value = w
	p.sched.Push(now, r)
	p.mu.Unlock()
	p.cfg.OnChange()

	select {
	case err := <-w.grant:
		if err != nil {
			return err
		}
		p.runHolding(ctx, r, p.clock.Now(), run)
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		w.abandoned = true
		granted := w.granted
		p.mu.Unlock()
		if granted {
			// The slot arrived as the caller gave up: pass it on.
			p.release(r, 0, false)
		}
		p.onFinish(class, p.clock.Now().Sub(now), 0, ctx.Err())
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("%w: %w", nerr.ErrDeadline, ctx.Err())
		}
		return ctx.Err()
	}
}

// runHolding runs a request that holds a slot, then releases the slot.
// The scheduler is charged what run reports, or the wall run time if run
// reports nothing (or panics).
func (p *Pool) runHolding(ctx context.Context, r *sched.Request, start time.Time, run func(context.Context) (time.Duration, bool)) {
	var used time.Duration
	measured := false
	defer func() {
		ran := p.clock.Now().Sub(start)
		if !measured {
			used = ran
		}
		p.release(r, used, true)
		p.onFinish(r.Class, start.Sub(r.Arrival), ran, nil)
	}()
	used, measured = run(ctx)
}

// release frees r's slot, charges r used if it ran (or withdraws its
// dispatch if it did not), and grants the slot to the next runnable queued
// request.
func (p *Pool) release(r *sched.Request, used time.Duration, ran bool) {
	now := p.clock.Now()
	defer p.cfg.OnChange() // after the unlock
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active--
	if ran {
		p.sched.Finish(now, r, used)
	} else {
		p.sched.Abandon(now, r)
	}
	for p.active < p.cfg.Workers && p.sched.Len() > 0 {
		next, dropped := p.sched.Pop(now)
		for _, d := range dropped {
			dw := d.Value.(*waiter)
			if !dw.abandoned {
				dw.grant <- fmt.Errorf("%w: expired after %v in queue", nerr.ErrDeadline, now.Sub(d.Arrival))
			}
		}
		if next == nil {
			return
		}
		nw := next.Value.(*waiter)
		if nw.abandoned {
			p.sched.Abandon(now, next)
			continue
		}
		nw.granted = true
		p.active++
		nw.grant <- nil
	}
}

// Workers is how many requests the pool serves at once.
func (p *Pool) Workers() int { return p.cfg.Workers }

// Load is the load index: active plus queued requests.
func (p *Pool) Load() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active + p.sched.Len()
}

// Close makes new requests fail with ErrClosed and fails the queued ones;
// running requests finish.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for p.sched.Len() > 0 {
		now := p.clock.Now()
		next, dropped := p.sched.Pop(now)
		if next != nil {
			p.sched.Abandon(now, next) // popped, never to run
		}
		for _, r := range append(dropped, next) {
			if r != nil && !r.Value.(*waiter).abandoned {
				r.Value.(*waiter).grant <- nerr.ErrClosed
			}
		}
	}
}
