package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
)

// Full disk and storage failures (issue 28).
//
// A watchdog stats the data directory's file system every
// Config.DiskCheckEvery. Below Config.DiskReserve free bytes the runtime
// is *full*: it logs an error naming the directory and the free space,
// every hosted replica is told (replica.SetStorageFull: a primary hands
// its role over, no replica takes entries or snapshots or runs for
// primary), and writes proposed here are refused before they are logged,
// with a retryable ErrNoPrimary that says so (never executed). Reads go
// on wherever the replica may serve them. Once twice the reserve is free
// again (the gap keeps it from flapping), it logs that and lifts all of it.
//
// A write that fails anyway (the reserve was overrun, or an I/O error)
// fails the partition's store (wal.ErrFailed): the loop stops, its
// pending writes get an unknown outcome (a failed sync may still have
// written them), the replica is published as recovering and serves
// nothing, and its log is closed. It is reopened from disk, as at a
// restart, once the directory is above its reserve (a failure that was
// not a full disk is retried every storageRetry); writes resume by
// themselves. What the replica acknowledged was synced before it was
// acknowledged, so reopening loses none of it; a torn end of the
// newest segment is cut and recovered from the primary (wal.Damage).

const (
	// DefaultDiskReserve is the free space below which a node refuses
	// writes (Config.DiskReserve).
	DefaultDiskReserve = 64 << 20
	// defaultDiskCheckEvery is how often the watchdog stats the disk.
	defaultDiskCheckEvery = time.Second
	// storageRetry is the pause between attempts to reopen a failed store.
	storageRetry = time.Second
)

// ErrStorageFull marks a write refused because this node's data
// directory is below its reserve or its store failed: it was not
// executed. It comes wrapped with nerr.ErrNoPrimary (retryable: the
// client retries, and finds the primary the role was handed to).
var ErrStorageFull = errors.New("neptune: storage full or failed")

// FreeSpace reports the bytes available to the node in dir's file system.
func FreeSpace(dir string) (uint64, error) {
	u, err := vfs.Default.GetDiskUsage(dir)
	if err != nil {
		return 0, err
	}
	return u.AvailBytes, nil
}

// diskGuard is the watchdog's pure state: full below reserve, not full
// again until twice the reserve is free.
type diskGuard struct {
	reserve uint64
	full    bool
}

// observe takes a measurement and reports whether the state changed.
func (g *diskGuard) observe(free uint64) (changed bool) {
	was := g.full
	switch {
	case free < g.reserve:
		g.full = true
	case free >= 2*g.reserve:
		g.full = false
	}
	return g.full != was
}

// storage is the runtime's view of its data directory.
type storage struct {
	mu    sync.Mutex
	guard diskGuard
	free  uint64
	err   error // the last stat's failure
}

func (s *storage) state() (full bool, free uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.guard.full, s.free
}

// StorageState reports whether the data directory is below its reserve
// (writes refused) and the free bytes last measured.
func (rt *Runtime) StorageState() (full bool, free uint64) { return rt.disk.state() }

// checkDisk stats the data directory once and applies a change of state.
func (rt *Runtime) checkDisk(now time.Time) {
	free, err := rt.cfg.FreeSpace(rt.cfg.DataDir)
	rt.disk.mu.Lock()
	if err != nil {
		if rt.disk.err == nil {
			rt.log.Error("cannot measure the data directory's free space", "path", rt.cfg.DataDir, "err", err)
		}
		rt.disk.err = err
		rt.disk.mu.Unlock()
		return
	}
	rt.disk.err = nil
	rt.disk.free = free
	changed := rt.disk.guard.observe(free)
	full := rt.disk.guard.full
	rt.disk.mu.Unlock()
	if changed {
		rt.storageChanged(now, full, free, nil)
	}
}

// failStorage marks the data directory full after a write found it so
// (before the watchdog did).
func (rt *Runtime) failStorage(now time.Time, cause error) {
	free, err := rt.cfg.FreeSpace(rt.cfg.DataDir)
	rt.disk.mu.Lock()
	if err == nil {
		rt.disk.free = free
	}
	was := rt.disk.guard.full
	rt.disk.guard.full = true
	free = rt.disk.free
	rt.disk.mu.Unlock()
	if !was {
		rt.storageChanged(now, true, free, cause)
	}
}

// storageChanged logs a change of the data directory's state and tells
// every hosted replica.
func (rt *Runtime) storageChanged(now time.Time, full bool, free uint64, cause error) {
	if full {
		rt.log.Error("data directory full: this node refuses writes and hands over its primaries until space returns",
			"path", rt.cfg.DataDir, "free_bytes", free, "reserve_bytes", rt.disk.guard.reserve, "err", cause)
	} else {
		rt.log.Info("data directory has space again: writes resume", "path", rt.cfg.DataDir, "free_bytes", free,
			"reserve_bytes", rt.disk.guard.reserve)
	}
	rt.tellAll(context.Background(), func(p *part, now time.Time) { p.core.SetStorageFull(now, full) })
}

// tellAll runs op on every hosted replica's loop, one after the other,
// and returns the replicas; it gives up when ctx ends (replicas not told
// yet are still returned).
func (rt *Runtime) tellAll(ctx context.Context, op func(p *part, now time.Time)) []*part {
	rt.pmu.RLock()
	parts := make([]*part, 0, len(rt.parts))
	for _, p := range rt.parts {
		parts = append(parts, p)
	}
	rt.pmu.RUnlock()
	for _, p := range parts {
		select {
		case p.ops <- func(now time.Time) { op(p, now) }:
		case <-p.done:
		case <-ctx.Done():
			return parts
		}
	}
	return parts
}

// watchDisk runs the watchdog until ctx ends.
func (rt *Runtime) watchDisk(ctx context.Context) {
	t := rt.clock.NewTicker(rt.cfg.DiskCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			rt.checkDisk(rt.clock.Now())
		}
	}
}

// refusal is the error for a write this replica must not log now (nil:
// none): its store failed, or the data directory is below its reserve.
func (p *part) refusal() error {
	if f := p.failure.Load(); f != nil {
		return fmt.Errorf("%w: %w: %s partition %d at node %s: its write log failed (%w); it reopens by itself (write not executed; retry safe)",
			nerr.ErrNoPrimary, ErrStorageFull, p.key.service, p.key.partition, p.rt.cfg.Self, *f)
	}
	if full, free := p.rt.disk.state(); full {
		return fmt.Errorf("%w: %w: %s partition %d at node %s: data directory %s has %d bytes free, below its reserve of %d (write not executed; retry safe)",
			nerr.ErrNoPrimary, ErrStorageFull, p.key.service, p.key.partition, p.rt.cfg.Self, p.rt.cfg.DataDir, free, p.rt.disk.guard.reserve)
	}
	return nil
}

// recoverPart runs after p's loop stopped on cause (its store failed):
// p is published as recovering, its log closed, and the partition is
// opened again from disk once the data directory allows, replacing p.
func (rt *Runtime) recoverPart(p *part, cause error) {
	st := *p.status.Load()
	st.Role, st.Phase, st.LeaseUntil, st.VersionAgo = replica.Recovering, replica.PhaseCatchUp, time.Time{}, 0
	if st.Primary == replica.ID(rt.cfg.Self) {
		st.Primary = ""
	}
	p.publish(st)
	if wal.IsNoSpace(cause) {
		rt.failStorage(rt.clock.Now(), cause)
	}
	if err := p.log.Close(); err != nil {
		rt.log.Warn("closing a failed write log", "service", p.key.service, "partition", p.key.partition, "err", err.Error())
	}
	p.log = nil
	for drained := false; !drained; {
		select {
		case m := <-p.inbox:
			p.took(m)
		default:
			drained = true
		}
	}
	_, free := rt.disk.state()
	rt.log.Error("replica storage failed: the replica stopped; it reopens from disk by itself when storage allows",
		"service", p.key.service, "partition", p.key.partition, "path", rt.partDir(p.key), "free_bytes", free, "err", cause)
	for attempt := 1; ; attempt++ {
		select {
		case <-rt.ctx.Done():
			return
		case <-rt.clock.After(storageRetry):
		}
		if full, _ := rt.disk.state(); full {
			rt.checkDisk(rt.clock.Now())
			if full, _ = rt.disk.state(); full {
				continue
			}
		}
		np, err := rt.open(p.spec, nil)
		if errors.Is(err, wal.ErrCorrupt) {
			return // logged and counted (openCorrupt); the replica stays stopped
		}
		if err != nil {
			rt.log.Error("reopening a failed write log", "service", p.key.service, "partition", p.key.partition, "attempt", attempt, "err", err)
			continue
		}
		rt.pmu.Lock()
		if rt.ctx.Err() != nil || rt.parts[p.key] != p {
			rt.pmu.Unlock()
			if np != nil {
				_ = np.log.Close()
			}
			return
		}
		if np == nil {
			delete(rt.parts, p.key)
		} else {
			rt.parts[p.key] = np
			rt.startPart(np)
		}
		rt.pmu.Unlock()
		rt.log.Info("write log reopened: the replica rejoins its partition", "service", p.key.service, "partition", p.key.partition,
			"attempt", attempt)
		rt.hostingChanged()
		return
	}
}
