package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/neptune-cluster/neptune/internal/backup"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
)

// Backups (issue 31, `neptune backup` / `neptune restore`).
//
// Taking one: Backup at a partition's primary takes the snapshot a new
// replica would get (take, as sendSnapshots does, while writes go on) and
// streams it to the operator instead of a peer: the dedup section, then
// the service's image. It waits until the primary executed everything it
// knows committed, so every write acknowledged before the backup began is
// in it.
//
// Restoring: `neptune restore` leaves the verified backup file in a new
// node's data directory (RestoreFile). When the node starts, each replica
// of the service whose write log is fresh is seeded from its partition:
// the service restores the image (all or nothing), then the wal is reset
// to the backup's LSN with its dedup table, as after an installed
// snapshot. Every replica seeded from one file holds the same state at the
// same LSN, so they elect a primary as after a restart; a replica not
// seeded gets a snapshot from the primary. The file is removed once the
// runtime started: it seeds only the first start.

// RestoreFile is where `neptune restore` leaves a backup of service in a
// node's data directory, for the node's next start to seed from.
func RestoreFile(dataDir, service string) string {
	return filepath.Join(dataDir, service, "restore.nbk")
}

// errCatchingUp: the primary has not executed all it knows committed yet.
var errCatchingUp = errors.New("catching up")

// backupCatchUp bounds how long Backup waits for that.
const backupCatchUp = 10 * time.Second

// Backup writes a consistent snapshot of service's partition to w (the
// dedup section, then the service's image) if this node's replica is its
// primary, calling start first with the LSN it covers and that entry's
// epoch. An error wrapping ErrNoPrimary means it is not (nothing was
// written).
func (rt *Runtime) Backup(ctx context.Context, service string, partition int32, start func(lsn, lsnEpoch uint64) error, w io.Writer) error {
	p, err := rt.part(service, partition)
	if err != nil {
		return err
	}
	if p.spec.Snapshots == nil {
		return fmt.Errorf("neptune: service %q takes no snapshots (Service.Snapshots): it cannot be backed up", service)
	}
	if p.cfg.Level == replica.Level1 {
		return fmt.Errorf("neptune: service %q replicates at level 1, which has no primary to take a consistent backup from", service)
	}
	var (
		d     *dump
		epoch replica.Epoch
	)
	catchUp := rt.clock.Now().Add(backupCatchUp)
	for {
		var why error
		ran := make(chan struct{})
		if !p.post(ctx, func(time.Time) {
			defer close(ran)
			st := p.core.Status()
			switch {
			case st.Role != replica.Primary:
				why = fmt.Errorf("%w: %s partition %d: node %s is %s (primary %q)", nerr.ErrNoPrimary, service, partition, rt.cfg.Self, st.Role, st.Primary)
			case st.Applied < st.Commit:
				why = errCatchingUp
			default:
				d = &dump{from: st.Applied, base: p.dedup.Records(), high: p.dedup.High()}
				p.dumps = append(p.dumps, d)
				epoch = st.Epoch
			}
		}) {
			return errors.Join(ctx.Err(), fmt.Errorf("%w: partition loop stopped", nerr.ErrClosed))
		}
		select {
		case <-ran:
		case <-p.done:
			return fmt.Errorf("%w: partition loop stopped", nerr.ErrClosed)
		}
		if !errors.Is(why, errCatchingUp) {
			if why != nil {
				return why
			}
			break
		}
		if rt.clock.Now().After(catchUp) {
			return fmt.Errorf("%w: %s partition %d: primary %s has not executed the writes it knows committed within %v",
				nerr.ErrNoPrimary, service, partition, rt.cfg.Self, backupCatchUp)
		}
		select {
		case <-rt.clock.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.snapBusy.Add(1)
	defer p.snapBusy.Add(-1)
	t, err := p.take(ctx, epoch, d)
	if errors.Is(err, errLoopGone) {
		return errors.Join(ctx.Err(), fmt.Errorf("%w: partition loop stopped", nerr.ErrClosed))
	}
	if err != nil {
		return err
	}
	defer t.close()
	if err := start(uint64(t.lsn), uint64(t.lsnEpoch)); err != nil {
		return err
	}
	if err := writeDedupSection(w, t.recs, t.high); err != nil {
		return err
	}
	sum := crc32.New(castagnoli)
	if _, err := io.Copy(w, io.TeeReader(t.img, sum)); err != nil {
		return err
	}
	if err := p.spoolIntact(t.img.Name(), sum.Sum32(), t.img.sum, "taken"); err != nil {
		return err
	}
	rt.log.Info("backup taken", "service", service, "partition", partition, "lsn", t.lsn)
	return nil
}

// seed restores a fresh replica of key's partition from the backup
// `neptune restore` left (RestoreFile), if there is one, and returns the
// log's state after. A replica that already holds writes is refused: a
// backup seeds only new data directories.
func (rt *Runtime) seed(key partKey, spec Partition, l *wal.Log, rs replica.Restore) (replica.Restore, error) {
	path := RestoreFile(rt.cfg.DataDir, key.service)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return rs, nil
	}
	bf, err := backup.Open(path)
	if err != nil {
		return rs, fmt.Errorf("restore: %w", err)
	}
	defer bf.Close()
	if bf.Service != key.service {
		return rs, fmt.Errorf("restore: %s holds a backup of service %q, not %q", path, bf.Service, key.service)
	}
	i := bf.Find(int(key.partition))
	if i < 0 {
		rt.log.Warn("the backup to restore has no such partition: it starts empty", "service", key.service, "partition", key.partition, "file", path)
		return rs, nil
	}
	lsn := replica.LSN(bf.Partitions[i].LSN)
	if len(rs.Entries) == 0 && rs.Applied == lsn && rs.HardState == (replica.HardState{Commit: lsn}) {
		return rs, nil // seeded by an earlier start that failed later
	}
	if len(rs.Entries) > 0 || rs.Applied > 0 || rs.HardState.Commit > 0 || rs.HardState.Epoch > 0 {
		return rs, fmt.Errorf("restore: a backup waits in %s, but this replica already holds writes (to LSN %d): a backup seeds only a new data directory; remove the file, or the partition's directory %s",
			path, max(rs.Applied, rs.HardState.Commit, replica.LSN(len(rs.Entries))), rt.partDir(key))
	}
	if spec.Snapshots == nil {
		return rs, fmt.Errorf("restore: service %q takes no snapshots (Service.Snapshots)", key.service)
	}
	// Check the partition's bytes first: the service's Restore must never
	// see a damaged image.
	r, err := bf.Open(i)
	if err != nil {
		return rs, err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return rs, fmt.Errorf("restore: %w", err)
	}
	if r, err = bf.Open(i); err != nil {
		return rs, err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	recs, high, err := readDedupSection(br)
	if err != nil {
		return rs, fmt.Errorf("restore: %w", err)
	}
	if _, err := spec.Snapshots.Restore(rt.ctx, int(key.partition), br); err != nil {
		return rs, fmt.Errorf("restore: service %q partition %d: %w", key.service, key.partition, err)
	}
	if err := l.Install(lsn, &replica.HardState{Commit: lsn}, recs, high); err != nil {
		return rs, fmt.Errorf("restore: %w", err)
	}
	rt.log.Info("partition restored from a backup", "service", key.service, "partition", key.partition, "lsn", lsn,
		"exactly_once_records", len(recs), "taken", bf.Created, "file", path)
	seeded, err := l.Restore()
	if seeded.ConfState == nil {
		seeded.ConfState = rs.ConfState
	}
	return seeded, err
}

// seeded removes the backups that seeded this start: a later replica of
// the service (one placement adds) gets a snapshot from its primary.
func (rt *Runtime) seeded() {
	done := map[string]bool{}
	for key := range rt.specs {
		if done[key.service] {
			continue
		}
		done[key.service] = true
		path := RestoreFile(rt.cfg.DataDir, key.service)
		if err := os.Remove(path); err == nil {
			rt.log.Info("backup restored; its file removed", "service", key.service, "file", path)
		}
	}
}
