package node

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/service"
)

// Gage accounting on the node (issue 12 items 3 and 5). A call that names
// a subscriber (transport.MetaSubscriber) is measured: its handler runs
// locked to an OS thread and is charged that thread's CPU time and storage
// I/O (threadUsage), plus what the handler reports it used elsewhere
// (Response.Used: an exec program's rusage), plus the request and
// response message sizes. The node answers with the figures in the call's
// trailer, with its own last accounting cycle (nodeLoad). Calls without a
// subscriber cost nothing extra.

// DefaultAccountingCycle is how often a node closes its accounting cycle.
const DefaultAccountingCycle = 100 * time.Millisecond

// reqUsage accumulates one request's usage; the handler runs on a worker
// goroutine and the gRPC goroutine reads the sum, hence the lock.
type reqUsage struct {
	mu sync.Mutex
	u  service.Usage
}

func (r *reqUsage) add(u service.Usage) {
	r.mu.Lock()
	r.u = r.u.Add(u)
	r.mu.Unlock()
}

func (r *reqUsage) get() service.Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.u
}

type reqUsageKey struct{}

func withReqUsage(ctx context.Context, r *reqUsage) context.Context {
	return context.WithValue(ctx, reqUsageKey{}, r)
}

func reqUsageFrom(ctx context.Context) *reqUsage {
	r, _ := ctx.Value(reqUsageKey{}).(*reqUsage)
	return r
}

// measured wraps call so that, when ctx carries a request's accumulator,
// the handler's thread usage and its own report land in it.
func measured(clk clock.Clock, ctx context.Context, call func(context.Context) *service.Response) func(context.Context) *service.Response {
	acc := reqUsageFrom(ctx)
	if acc == nil {
		return call
	}
	return func(ctx context.Context) *service.Response {
		var resp *service.Response
		u := threadUsage(clk, func() { resp = call(ctx) })
		if resp != nil {
			u = u.Add(resp.Used)
		}
		acc.add(u)
		return resp
	}
}

// accounting is the node's accounting cycle: it sums the measured
// requests completed in each cycle and, when the cycle closes, reads how
// busy the process's CPU and the disks were. Cycles close on a ticker of
// the node's clock, which stops after a cycle in which no request
// completed and starts again with the next one: an idle node does not
// wake ten times a second to read /proc, and until a request completes
// nobody reads its load (load is sent with each call's usage).
type accounting struct {
	clk   clock.Clock
	cycle time.Duration
	// wake restarts the ticker after an idle pause (add sends, run
	// receives).
	wake chan struct{}

	mu sync.Mutex
	// sum is the usage of the completed requests of the current cycle,
	// completed how many they are.
	sum       service.Usage
	completed int
	last      service.NodeLoad
	since     time.Time
	cpu       time.Duration
	disk      map[string]int64
	paused    bool
}

func newAccounting(clk clock.Clock, cycle time.Duration) *accounting {
	return &accounting{clk: clk, cycle: cycle, wake: make(chan struct{}, 1), since: clk.Now(), cpu: processCPU(), disk: diskTicks()}
}

// add counts a completed request.
func (a *accounting) add(u service.Usage) {
	a.mu.Lock()
	a.sum = a.sum.Add(u)
	a.completed++
	if a.paused {
		a.paused = false
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	a.mu.Unlock()
}

// load is the last closed cycle.
func (a *accounting) load() service.NodeLoad {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// close ends the current cycle at now and reports whether no request
// completed in it (the cycle pauses).
func (a *accounting) close(now time.Time) (idle bool) {
	cpu, disk := processCPU(), diskTicks()
	a.mu.Lock()
	defer a.mu.Unlock()
	iv := now.Sub(a.since)
	if iv <= 0 {
		return false
	}
	cores := runtime.GOMAXPROCS(0)
	l := service.NodeLoad{Interval: iv, Used: a.sum, Cores: cores}
	l.CPUBusy = min(max((cpu-a.cpu).Seconds()/(iv.Seconds()*float64(cores)), 0), 1)
	for dev, t := range disk {
		if t0, ok := a.disk[dev]; ok {
			l.DiskBusy = max(l.DiskBusy, min(float64(t-t0)/float64(iv.Milliseconds()), 1))
		}
	}
	idle = a.completed == 0
	a.last, a.sum, a.completed, a.since, a.cpu, a.disk = l, service.Usage{}, 0, now, cpu, disk
	a.paused = idle
	return idle
}

// run closes a cycle every period until stop is closed, pausing while no
// request completes.
func (a *accounting) run(stop <-chan struct{}) {
	for {
		t := a.clk.NewTicker(a.cycle)
		paused := false
		for !paused {
			select {
			case <-stop:
				t.Stop()
				return
			case now := <-t.Chan():
				paused = a.close(now)
			}
		}
		t.Stop()
		select {
		case <-stop:
			return
		case <-a.wake:
			a.resume(a.clk.Now())
		}
	}
}

// resume starts a cycle at now after a pause, keeping the requests that
// completed since it began (the one that woke the cycle among them).
func (a *accounting) resume(now time.Time) {
	cpu, disk := processCPU(), diskTicks()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.since, a.cpu, a.disk = now, cpu, disk
}
