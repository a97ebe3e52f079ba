package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
	"github.com/neptune-cluster/neptune/internal/service"
)

// part is one hosted replica of a partition and its event loop.
type part struct {
	rt   *Runtime
	spec Partition
	key  partKey
	cfg  replica.Config

	inbox chan replica.Message
	props chan proposal
	ops   chan func(time.Time)
	done  chan struct{} // closed when the loop exits

	// inboxHeld is the entry bytes queued in inbox (memory.go).
	inboxHeld atomic.Int64

	status atomic.Pointer[replica.Status]
	// executing is the highest LSN handed to the service to execute, set
	// before it runs: a read that ends before it is loaded saw no write
	// above it (the published Applied lags a batch being executed).
	executing atomic.Uint64
	// changed is closed (and replaced) when the status changes and
	// someone waits for it (await).
	changedMu sync.Mutex
	changed   chan struct{}
	watched   bool

	// failure is the error that stopped the loop (its store failed; see
	// storage.go), nil while it runs.
	failure atomic.Pointer[error]

	// Loop-owned.
	// heard is when each peer's last message for this partition was
	// stepped (feedAlive).
	heard    map[replica.ID]time.Time
	log      *wal.Log
	core     *replica.Replica
	pending  map[uint64]chan Result
	traced   map[uint64]*tracedWrite // pending writes' calls (trace.go)
	nextReq  uint64
	results  map[uint64]Result
	nextTick time.Time
	dedup    *replica.DedupTable
	// snapSending: peers a snapshot is being streamed to (snapshot.go),
	// true if the core asked for another meanwhile; dumps: the snapshots
	// whose image is being taken; installed: the dedup table that came
	// with a snapshot just installed.
	snapSending map[replica.ID]bool
	dumps       []*dump
	installed   *installedDedup
	// snapBusy counts snapshots being taken or streamed (tests wait on it).
	snapBusy atomic.Int32

	keeper beatKeeper
	// ask is the replica's status now and the loop's time (current; a
	// test may stand in for the loop).
	ask func(context.Context) (replica.Status, time.Time, error)
}

type proposal struct {
	method  string
	body    []byte
	writeID string // the write's identity (nerr.WriteID.String); empty: none
	reply   chan Result
	trace   *tracedWrite // the call's request id and span (trace.go); nil: neither
}

// run is the partition's event loop: one event (a proposal, a message, an
// operator action or a clock tick) at a time, then whatever else is
// queued, then the replica's Ready batches. It returns true when it ended
// because the replica learned it was removed from the replica set, and
// an error when it stopped because its store failed (its pending writes
// then have an unknown outcome).
func (p *part) run(ctx context.Context) (removed bool, err error) {
	defer close(p.done)
	clk := p.rt.clock
	tick := clk.NewTicker(tickEvery)
	defer tick.Stop()
	p.nextTick = clk.Now().Add(tickEvery)
	for {
		select {
		case <-ctx.Done():
			p.failPending(nerr.ErrClosed)
			return false, nil
		case pr := <-p.props:
			p.propose(pr)
		case m := <-p.inbox:
			p.step(m)
		case f := <-p.ops:
			f(clk.Now())
		case <-tick.Chan():
		}
		p.drain()
		p.tickIfDue()
		if err := p.process(ctx); err != nil {
			if ctx.Err() != nil {
				p.failPending(nerr.ErrClosed)
				return false, nil
			}
			p.failure.Store(&err)
			p.failPending(fmt.Errorf("%w: %w", errStopped, err))
			return false, err
		}
		if p.status.Load().Removed {
			p.failPending(fmt.Errorf("%w: %w", nerr.ErrUnknownOutcome, errRemoved))
			return true, nil
		}
	}
}

// errRemoved: the replica left its partition's replica set while a write
// it accepted was pending (it may run at the remaining replicas).
var errRemoved = errors.New("neptune: replica removed from the replica set")

// tickIfDue ticks the replica once the clock has reached the next tick.
// Ticks follow the clock rather than the ticker's deliveries (the ticker
// only wakes the loop), so on a manual clock a tick happens exactly when
// the clock is advanced past it, whatever event the loop handles next.
func (p *part) tickIfDue() {
	now := p.rt.clock.Now()
	if now.Before(p.nextTick) {
		return
	}
	p.feedAlive(now)
	p.core.Tick(now)
	if p.nextTick = p.nextTick.Add(tickEvery); !p.nextTick.After(now) {
		p.nextTick = now.Add(tickEvery)
	}
}

// drain takes whatever else is queued so one Ready (one fsync) covers it.
func (p *part) drain() {
	for range 512 {
		select {
		case pr := <-p.props:
			p.propose(pr)
		case m := <-p.inbox:
			p.step(m)
		default:
			return
		}
	}
}

func (p *part) propose(pr proposal) {
	if p.proposeKnown(pr) {
		return
	}
	p.nextReq++
	p.pending[p.nextReq] = pr.reply
	if pr.trace != nil {
		if pr.trace.ctx != nil {
			pr.trace.proposed = p.rt.clock.Now()
		}
		p.traced[p.nextReq] = pr.trace
	}
	p.core.Propose(p.rt.clock.Now(), replica.Write{ReqID: p.nextReq, Method: pr.method, Body: pr.body, WriteID: pr.writeID})
}

func (p *part) failPending(err error) {
	for id, ch := range p.pending {
		ch <- Result{Err: err}
		delete(p.pending, id)
	}
	clear(p.traced)
}

// process handles Ready batches. The messages go out as soon as the
// batch is durable, before the CHECK calls and the writes' handlers, which
// may take long (or pause while the workers are full): heartbeats and acks
// promise only durability, so nothing waits on the handlers but the
// replies to their own callers.
func (p *part) process(ctx context.Context) error {
	for range 64 {
		rd := p.core.Ready()
		if rd.Empty() {
			break
		}
		p.keeper.busy(p.rt.clock.Now())
		if err := p.persist(&rd); err != nil {
			return err
		}
		p.tracedAppended(rd.Entries)
		p.rt.mem.add(entryBytes(rd.Entries), p.rt.clock.Now())
		for _, m := range rd.Messages {
			p.keeper.note(m)
			p.rt.send(p.key, m)
		}
		for _, e := range rd.Check {
			done := p.check(ctx, e.LSN)
			if done {
				p.recordChecked(e)
			}
			p.core.Checked(e.LSN, done) // reissues come in the next Ready
		}
		if err := p.apply(ctx, rd.Apply); err != nil {
			return err
		}
		for _, r := range rd.Replies {
			ch, ok := p.pending[r.ReqID]
			if !ok {
				continue
			}
			delete(p.pending, r.ReqID)
			delete(p.traced, r.ReqID)
			ch <- p.result(r)
		}
		clear(p.results)
		p.core.Advance(rd)
		if len(rd.Snapshots) > 0 {
			p.sendSnapshots(ctx, rd.Snapshots) // after the batch's writes: the image covers at least them
		}
	}
	p.keeper.busy(time.Time{})
	p.publish(p.core.Status())
	return p.storeHealth()
}

// storeHealth fails the loop when the store reported a failure or
// corruption in the background: the replica is then reopened from disk
// (storage.go), which finds any damage at open (corrupt.go).
func (p *part) storeHealth() error {
	if cs := p.log.TakeCorruption(); len(cs) > 0 {
		for _, c := range cs {
			p.rt.corrupt.add(corruptKey{p.key.service, p.key.partition, corruptionKind(c)})
			p.rt.log.Error("write log corrupt", "service", p.key.service, "partition", p.key.partition,
				"kind", corruptionKind(c), "path", p.rt.partDir(p.key), "err", c)
		}
		return cs[0]
	}
	return p.log.Failed()
}

// publish makes st the status callers and announcements see.
func (p *part) publish(st replica.Status) {
	prev := p.status.Swap(&st)
	p.rt.transitions.count(p.key, prev, st)
	if prev != nil && (prev.Role != st.Role || prev.Epoch != st.Epoch || prev.Primary != st.Primary) {
		p.rt.log.Info("replica role changed", "service", p.key.service, "partition", p.key.partition, "role", st.Role.String(),
			"epoch", st.Epoch, "primary", string(st.Primary), "applied", uint64(st.Applied))
		if f := p.rt.cfg.OnRoleChange; f != nil {
			f()
		}
	}
	p.changedMu.Lock()
	if p.watched {
		close(p.changed)
		p.changed, p.watched = make(chan struct{}), false
	}
	p.changedMu.Unlock()
}

// statusChanged returns a channel closed at the next publish.
func (p *part) statusChanged() <-chan struct{} {
	p.changedMu.Lock()
	defer p.changedMu.Unlock()
	p.watched = true
	return p.changed
}

// check asks the service whether it completed the write at lsn. Without a
// Check callback, or if it keeps failing, the write is reissued (handlers
// of such services must then tolerate a repeat).
func (p *part) check(ctx context.Context, lsn replica.LSN) bool {
	f := p.spec.Check
	if f == nil {
		return false
	}
	for attempt := range 3 {
		ok, err := f(ctx, int(p.key.partition), uint64(lsn))
		if err == nil {
			return ok
		}
		p.rt.log.Warn("CHECK failed", "service", p.key.service, "partition", p.key.partition, "lsn", lsn, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-p.rt.clock.After(checkRetry):
		}
	}
	return false
}

// apply executes committed writes in order, one at a time, through the
// service's workers (offering a write again while they refuse it: a write
// cannot be skipped), and records the executed marker lazily.
func (p *part) apply(ctx context.Context, es []replica.Entry) error {
	if n := len(es); n > 0 && uint64(es[n-1].LSN) > p.executing.Load() {
		p.executing.Store(uint64(es[n-1].LSN))
	}
	var last replica.LSN
	for _, e := range es {
		last = e.LSN
		if e.Method == "" || e.IsConfig() || p.skipExecuted(e) {
			continue
		}
		req := &service.Request{Service: p.key.service, Partition: int(p.key.partition), Method: e.Method, Mode: service.Write, Body: e.Body, LSN: uint64(e.LSN)}
		ectx, span := p.tracedCommit(ctx, e)
		res, err := p.execute(ectx, req)
		if span != nil {
			span.End()
		}
		if errors.Is(err, ErrNoHandler) {
			p.rt.log.Error("replicated write names no handler", "service", p.key.service, "method", e.Method)
			continue
		}
		if err != nil {
			return err
		}
		if res.Err != nil && errors.Is(res.Err, service.ErrStorage) {
			// Not executed: the replica stops and runs it again once
			// reopened (storage.go). What ran before it is recorded by
			// CHECK then.
			return fmt.Errorf("write at LSN %d not executed: %w", e.LSN, res.Err)
		}
		p.recordExecuted(e, res)
		if e.Origin == replica.ID(p.rt.cfg.Self) && e.ReqID != 0 {
			if res.Resp == nil && res.Err == nil {
				res.Resp = &service.Response{}
			}
			if res.Resp != nil {
				res.Resp.Version = uint64(e.LSN)
			}
			p.setResult(e.ReqID, res)
		}
	}
	return p.storeApplied(last)
}

// errStopped: the partition's loop stopped on an error.
var errStopped = errors.New("neptune: replication stopped")

// ErrNoHandler is what an Executor returns for a write whose method has
// no handler: the runtime logs and skips it instead of offering it again.
var ErrNoHandler = errors.New("replicated write names no handler")

// execute runs req through the Executor, offering it again while the
// workers refuse it; it fails only when ctx ends or no handler exists.
func (p *part) execute(ctx context.Context, req *service.Request) (Result, error) {
	for {
		res, err := p.spec.Executor.Execute(ctx, req)
		switch {
		case err == nil:
			return res, nil
		case errors.Is(err, ErrNoHandler):
			return Result{}, err
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-p.rt.clock.After(applyRetry):
		}
	}
}

func (p *part) result(r replica.Reply) Result {
	if r.Err != nil {
		var np *replica.NotPrimaryError
		if errors.As(r.Err, &np) {
			return Result{Err: r.Err}
		}
		return Result{Err: fmt.Errorf("%w: %w", nerr.ErrNoPrimary, r.Err)}
	}
	if res, ok := p.results[r.ReqID]; ok {
		return res
	}
	return Result{Resp: &service.Response{Version: uint64(r.LSN)}}
}

// feedAlive tells the replica which peers are alive: announced in the
// yellow pages (or heard from lately) and not suspected by the fast
// failure detector.
func (p *part) feedAlive(now time.Time) {
	hosts := p.rt.cfg.Directory.Hosts(p.key.service, p.key.partition)
	primary := string(p.status.Load().Primary)
	for _, peer := range p.core.Peers() {
		id := string(peer)
		limit := p.core.SilenceLimit(now)
		alive := p.rt.det.alive(id, now, slices.Contains(hosts, id), id == primary, limit)
		if h, ok := p.heard[peer]; alive && id == primary && ok && now.Sub(h) > limit {
			// The node lives (it answers for other partitions) but this
			// partition's primary has been silent: its replica stopped
			// (a failed store). Its priority must not hold an election
			// back.
			alive = false
		}
		p.core.SetAlive(peer, alive)
	}
}
