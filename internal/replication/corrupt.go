package replication

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/wal"
)

// Corruption (issue 28). Every damage the runtime detects in a replica's
// store is logged at ERROR and counted (Runtime.Corruption, the node's
// neptune_storage_corruption_total{service,partition,kind}):
//
//   - at open (wal.Open): a damaged record in the middle of a WAL segment
//     or in an older segment (kind "wal"), a damaged table block (every
//     table is read once at open: "table"), MANIFEST ("manifest"), OPTIONS
//     ("options") or anything else pebble calls corruption ("store"). The
//     node refuses to start, naming the partition and the command that
//     repairs it (`neptune partition rebuild`), unless
//     Config.RebuildCorrupt: then the partition's directory is moved
//     aside (Quarantine) and the replica starts empty, rebuilt from its
//     peers (a snapshot, or the log if the primary still holds it all).
//   - at open, a damaged record at the very end of the newest WAL segment
//     ("wal"): pebble cuts the log there, as after a crash mid-write; the
//     replica starts, and the protocol recovers from the primary the
//     entries it lost (architecture/replica.md, "A replica that lost
//     acknowledged entries").
//   - while running, damage pebble meets in the background (a compaction
//     reading a damaged table): the replica stops as for a failed store
//     (storage.go) and is reopened, which finds the damage as above.

// QuarantineDir is the directory, inside a node's data directory, where
// corrupt replicas' directories are moved.
const QuarantineDir = ".quarantine"

// corruptKey is one metric series.
type corruptKey struct {
	service   string
	partition int32
	kind      string
}

type corruptionCounter struct {
	mu sync.Mutex
	n  map[corruptKey]uint64
}

func (c *corruptionCounter) add(k corruptKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[corruptKey]uint64{}
	}
	c.n[k]++
}

// CorruptionCount is how often corruption of one kind was detected in one
// partition's store since the node started.
type CorruptionCount struct {
	Service   string
	Partition int32
	Kind      string
	Count     uint64
}

// Corruption lists the corruption detected so far, in order.
func (rt *Runtime) Corruption() []CorruptionCount {
	rt.corrupt.mu.Lock()
	defer rt.corrupt.mu.Unlock()
	out := make([]CorruptionCount, 0, len(rt.corrupt.n))
	for k, n := range rt.corrupt.n {
		out = append(out, CorruptionCount{Service: k.service, Partition: k.partition, Kind: k.kind, Count: n})
	}
	slices.SortFunc(out, func(a, b CorruptionCount) int {
		return strings.Compare(fmt.Sprint(a.Service, "/", a.Partition, "/", a.Kind), fmt.Sprint(b.Service, "/", b.Partition, "/", b.Kind))
	})
	return out
}

// corruptionKind names the kind of file a corruption error is about.
func corruptionKind(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, ".sst"), strings.Contains(msg, "block"), strings.Contains(msg, "table"):
		return "table"
	case strings.Contains(msg, "MANIFEST"), strings.Contains(msg, "manifest"):
		return "manifest"
	case strings.Contains(msg, "OPTIONS"), strings.Contains(msg, "options"):
		return "options"
	case strings.Contains(msg, ".log"), strings.Contains(msg, "WAL"):
		return "wal"
	}
	return "store"
}

// RebuildCommand is the command that quarantines a replica so that it is
// rebuilt from its peers at the next start.
func RebuildCommand(dataDir, service string, partition int32) string {
	return fmt.Sprintf("neptune partition rebuild --data-dir %s --service %s --partition %d", dataDir, service, partition)
}

// openCorrupt handles a write log found corrupt at open: it is counted and
// logged, then quarantined (with RebuildCorrupt; rebuilt reports true) or
// returned as an error that says how to repair it.
func (rt *Runtime) openCorrupt(key partKey, err error) (rebuilt bool, _ error) {
	kind := corruptionKind(err)
	rt.corrupt.add(corruptKey{key.service, key.partition, kind})
	dir := rt.partDir(key)
	if !rt.cfg.RebuildCorrupt {
		cmd := RebuildCommand(rt.cfg.DataDir, key.service, key.partition)
		rt.log.Error("write log corrupt: the replica cannot start; stop the node, run the rebuild command, start it again (or set storage.rebuild_corrupt)",
			"service", key.service, "partition", key.partition, "kind", kind, "path", dir, "rebuild", cmd, "err", err)
		return false, fmt.Errorf("write log in %s is corrupt (%w): stop the node and run `%s` to quarantine it, so that the replica is rebuilt from its peers when the node starts again",
			dir, err, cmd)
	}
	moved, qerr := Quarantine(rt.cfg.DataDir, key.service, key.partition, rt.clock.Now())
	if qerr != nil {
		rt.log.Error("write log corrupt, and it could not be quarantined", "service", key.service, "partition", key.partition,
			"kind", kind, "path", dir, "err", err, "quarantine_err", qerr)
		return false, fmt.Errorf("corrupt write log (%w) not quarantined: %w", err, qerr)
	}
	rt.log.Error("write log corrupt: quarantined; the replica is rebuilt from its peers", "service", key.service,
		"partition", key.partition, "kind", kind, "path", dir, "moved_to", moved, "err", err)
	return true, nil
}

// reportDamage logs and counts the damaged ends of WAL segments that
// pebble cut (wal.Log.Damage).
func (rt *Runtime) reportDamage(key partKey, ds []wal.Damage) {
	for _, d := range ds {
		rt.corrupt.add(corruptKey{key.service, key.partition, "wal"})
		rt.log.Error("write log damaged at the end of its newest segment: the log was cut there; entries after it are recovered from the primary",
			"service", key.service, "partition", key.partition, "kind", "wal", "file", d.File, "offset", d.Offset, "err", d.Err.Error())
	}
}

// Quarantine moves the directory of a replica's write log (in dataDir, of
// service's partition) to dataDir/.quarantine/<service>/<partition>-<time>
// and returns where. The node must not be running: the replica starts
// empty at its next start and is rebuilt from its peers. A directory
// still locked by a running node is refused.
func Quarantine(dataDir, service string, partition int32, now time.Time) (string, error) {
	dir := filepath.Join(dataDir, service, strconv.Itoa(int(partition)))
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("neptune: quarantine %s: %w", dir, err)
	}
	if err := unlocked(dir); err != nil {
		return "", err
	}
	qdir := filepath.Join(dataDir, QuarantineDir, service)
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		return "", fmt.Errorf("neptune: quarantine: %w", err)
	}
	to := filepath.Join(qdir, fmt.Sprintf("%d-%s", partition, now.UTC().Format("20060102T150405.000000000Z")))
	if err := os.Rename(dir, to); err != nil {
		return "", fmt.Errorf("neptune: quarantine %s: %w", dir, err)
	}
	if d, err := os.Open(filepath.Dir(dir)); err == nil {
		_ = d.Sync() // make the move durable
		_ = d.Close()
	}
	return to, nil
}

// QuarantineService moves everything a node keeps of service in dataDir
// aside, into dataDir/.quarantine/<service>/<time>: every replica's write
// log (dataDir/<service>) and the service's own state
// (dataDir/service-<service>, where the CLI keeps app services' stores).
// Both go together: a write log says which writes the service's state
// reflects, so a log kept over a fresh state would skip them. The node
// must not be running; at its next start each replica is rebuilt from
// its peers. It returns where they went.
func QuarantineService(dataDir, service string, now time.Time) (string, error) {
	logs := filepath.Join(dataDir, service)
	state := filepath.Join(dataDir, "service-"+service)
	var moved []string
	for _, dir := range []string{logs, state} {
		if _, err := os.Stat(dir); err == nil {
			moved = append(moved, dir)
		}
	}
	if len(moved) == 0 {
		return "", fmt.Errorf("neptune: quarantine: neither %s nor %s exists", logs, state)
	}
	if parts, err := os.ReadDir(logs); err == nil {
		for _, p := range parts {
			if err := unlocked(filepath.Join(logs, p.Name())); err != nil {
				return "", err
			}
		}
	}
	if err := unlocked(state); err != nil {
		return "", err
	}
	to := filepath.Join(dataDir, QuarantineDir, service, now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.MkdirAll(to, 0o755); err != nil {
		return "", fmt.Errorf("neptune: quarantine: %w", err)
	}
	for _, dir := range moved {
		if err := os.Rename(dir, filepath.Join(to, filepath.Base(dir))); err != nil {
			return "", fmt.Errorf("neptune: quarantine %s: %w", dir, err)
		}
	}
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return to, nil
}

// ErrInUse reports a write log that a running node holds open.
var ErrInUse = errors.New("neptune: write log in use by a running node")

// unlocked checks that no process holds pebble's lock on the store in dir.
func unlocked(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("neptune: quarantine %s: %w", dir, err)
	}
	defer f.Close()
	// pebble locks with fcntl (F_SETLK), which flock does not see.
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return fmt.Errorf("neptune: quarantine %s: %w", dir, err)
	}
	if lk.Type != syscall.F_UNLCK {
		return fmt.Errorf("%w: %s is locked by process %d: stop the node first", ErrInUse, dir, lk.Pid)
	}
	return nil
}
