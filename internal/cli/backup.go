package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/backup"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/version"
)

// backupOptions are the flags of `neptune backup`.
type backupOptions struct {
	join          []string
	service, file string
	wait, timeout time.Duration
	sec           securityFlags
}

func newBackupCmd() *cobra.Command {
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup --join host:port --service name --file F",
		Short: "Save a consistent copy of a replicated service to a file",
		Long: `Save a consistent copy of every partition of a replicated service to a
file, while the cluster keeps serving writes.

Each partition's primary takes the snapshot a new replica would get: the
service's state and its exactly-once table (the identities of the writes
it applied, so a client's retry after a restore is not applied twice) as
of a committed LSN that includes every write acknowledged before the
backup began. The file records the service, each partition's LSN, the
time and the release, and a checksum per partition; it is written to a
temporary file and renamed, so F is whole or absent.

Restore it into a new cluster with neptune restore. The service must take
snapshots (Service.Snapshots: kv, listappend, forum, auction, pcache) and
replicate at level 2 or 3. Only an operator certificate may back up.`,
		Example: "  neptune backup --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --service kv --file kv.nbk",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.service, "service", "", "replicated service `name` (required)")
	fs.StringVar(&o.file, "file", "", "backup `file` to write (required)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to keep trying a partition without a reachable primary")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	o.sec.add(fs, "operator/operator", "your operator")
	for _, f := range []string{"join", "service", "file"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *backupOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.timeout <= 0 {
		return Usagef("--timeout must be > 0, got %s", o.timeout)
	}
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := replicated(c, o.service); err != nil {
		return err
	}
	var parts []int
	for _, p := range c.Partitions() {
		if p.Service == o.service {
			parts = append(parts, p.Partition)
		}
	}
	slices.Sort(parts)
	h := backup.Header{Service: o.service, Created: time.Now().UTC(), Release: version.Release}
	var spools []*backup.Spool
	defer func() {
		for _, s := range spools {
			s.Close()
		}
	}()
	prog := newProgress(stderr)
	for i, p := range parts {
		s, err := backup.NewSpool(filepath.Dir(o.file))
		if err != nil {
			return err
		}
		spools = append(spools, s)
		what := fmt.Sprintf("%s partition %d (%d of %d)", o.service, p, i+1, len(parts))
		info, err := o.takePart(ctx, c, p, &progressWriter{w: s, p: prog, what: what})
		if err != nil {
			prog.done()
			return err
		}
		h.Partitions = append(h.Partitions, backup.Part{Partition: p, LSN: info.LSN, LSNEpoch: info.LSNEpoch, Node: info.Node})
	}
	prog.done()
	if err := backup.Write(o.file, h, spools); err != nil {
		return err
	}
	var total int64
	for _, s := range spools {
		total += s.Len()
	}
	fmt.Fprintf(stdout, "backed up %s: %d partitions, %s, to %s\n", o.service, len(parts), bytesText(total), o.file)
	for i, p := range h.Partitions {
		fmt.Fprintf(stdout, "  partition %d: LSN %d from %s, %s\n", p.Partition, p.LSN, p.Node, bytesText(spools[i].Len()))
	}
	return nil
}

// takePart streams partition p's snapshot from its primary into w, asking
// again (w emptied) while the partition has no primary or it changes.
func (o *backupOptions) takePart(ctx context.Context, c *neptune.Client, p int, w *progressWriter) (neptune.BackupInfo, error) {
	deadline := time.Now().Add(o.timeout)
	var last error
	for {
		primary := ""
		for _, pi := range c.Partitions() {
			if pi.Service != o.service || pi.Partition != p {
				continue
			}
			for _, r := range pi.Replicas {
				if r.Role == "primary" && r.Stale == "" {
					primary = r.Node
				}
			}
		}
		if primary == "" {
			last = fmt.Errorf("%w: %s partition %d has no primary in the yellow pages", neptune.ErrNoPrimary, o.service, p)
		} else {
			info, err := c.Backup(ctx, primary, o.service, p, w)
			if err == nil {
				return info, nil
			}
			last = err
			if err := w.reset(); err != nil {
				return info, err
			}
			if !neptune.Retryable(err) && !errors.Is(err, neptune.ErrNoPrimary) {
				return info, fmt.Errorf("backup of %s partition %d at %s: %w", o.service, p, primary, err)
			}
		}
		if time.Now().After(deadline) {
			return neptune.BackupInfo{}, fmt.Errorf("backup of %s partition %d: gave up after %s (--timeout): %w", o.service, p, o.timeout, last)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return neptune.BackupInfo{}, err
		}
	}
}

// restoreOptions are the flags of `neptune restore`.
type restoreOptions struct {
	file, dataDir string
	check         bool
}

func newRestoreCmd() *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --file F (--data-dir DIR | --check)",
		Short: "Seed a new node's data directory from a backup",
		Long: `Seed a new node's data directory from a backup made by neptune backup,
before the node's first start (etcdutl snapshot restore's way).

The whole file is read and its checksums checked first: a damaged or
truncated backup is refused and nothing is written. The file is then
copied into DIR; when the node starts, each of its replicas of the
service starts from the backup's state of that partition, at the LSN the
backup recorded, with its exactly-once table. Seed the data directory of
every node that will host the service, each with the same file, then start
them: the replicas hold the same state and elect primaries as after a
restart, and a replica placed later gets a snapshot from its primary.

DIR must not hold the service's partitions yet (restore seeds a new
cluster; to roll an existing one back, stop it and start over with empty
data directories). --check only verifies the file.`,
		Example: "  neptune restore --file kv.nbk --data-dir /var/lib/neptune\n  neptune restore --file kv.nbk --check",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.file, "file", "", "backup `file` (required)")
	fs.StringVar(&o.dataDir, "data-dir", "", "the new node's data `directory`, before its first start")
	fs.BoolVar(&o.check, "check", false, "only verify the file")
	_ = cmd.MarkFlagRequired("file")
	cmd.MarkFlagsMutuallyExclusive("data-dir", "check")
	cmd.MarkFlagsOneRequired("data-dir", "check")
	return cmd
}

func (o *restoreOptions) run(stdout, stderr io.Writer) error {
	bf, err := backup.Open(o.file)
	if err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	defer bf.Close()
	var total int64
	for _, p := range bf.Partitions {
		total += p.Bytes
	}
	prog := newProgress(stderr)
	err = bf.Verify(func(n int64) { prog.show("verifying %s: %s of %s", o.file, bytesText(n), bytesText(total)) })
	prog.done()
	if err != nil {
		return fmt.Errorf("refused: %w", err)
	}
	fmt.Fprintf(stdout, "%s: a backup of %s taken %s by release %s: %d partitions, %s, checksums good\n",
		o.file, bf.Service, bf.Created.Format(time.RFC3339), bf.Release, len(bf.Partitions), bytesText(total))
	for _, p := range bf.Partitions {
		fmt.Fprintf(stdout, "  partition %d: LSN %d (from %s), %s\n", p.Partition, p.LSN, p.Node, bytesText(p.Bytes))
	}
	if o.check {
		return nil
	}
	svcDir := filepath.Join(o.dataDir, bf.Service)
	ents, err := os.ReadDir(svcDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			return fmt.Errorf("refused: %s already holds replicas of %s (partition %s): restore seeds a new data directory, before the node's first start",
				o.dataDir, bf.Service, e.Name())
		}
	}
	if err := os.MkdirAll(svcDir, 0o755); err != nil {
		return err
	}
	dst := replication.RestoreFile(o.dataDir, bf.Service)
	if err := copyFile(dst, o.file, func(n int64) { prog.show("copying: %s of %s", bytesText(n), bytesText(total)) }); err != nil {
		prog.done()
		return err
	}
	prog.done()
	fmt.Fprintf(stdout, "seeded %s: start the node with --data-dir %s; its replicas of %s start from the backup\n", o.dataDir, o.dataDir, bf.Service)
	return nil
}

// copyFile copies src to dst atomically (a temporary file, synced,
// renamed).
func copyFile(dst, src string, progress func(int64)) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), ".restore-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name()) // no-op after the rename
	defer out.Close()
	pw := &progressWriter{w: out, at: progress}
	if _, err := io.Copy(pw, in); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), dst)
}

// progress shows a long operation's progress on one line of a terminal,
// at most ten times a second, and nothing when its output is piped.
type progress struct {
	w     io.Writer
	on    bool
	last  time.Time
	shown bool
}

func newProgress(w io.Writer) *progress { return &progress{w: w, on: isTerminal(w)} }

// show replaces the line with the formatted text.
func (p *progress) show(format string, a ...any) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.shown = time.Now(), true
	fmt.Fprintf(p.w, "\r\033[K"+format, a...)
}

// done clears the line.
func (p *progress) done() {
	if p.on && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// progressWriter counts what passes through it into a backup spool (or
// any writer), telling a progress line or at.
type progressWriter struct {
	w    io.Writer
	n    int64
	p    *progress
	what string
	at   func(int64)
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.n += int64(n)
	if pw.p != nil {
		pw.p.show("%s: %s copied", pw.what, bytesText(pw.n))
	}
	if pw.at != nil {
		pw.at(pw.n)
	}
	return n, err
}

// reset empties the spool behind pw for another try.
func (pw *progressWriter) reset() error {
	pw.n = 0
	if s, ok := pw.w.(*backup.Spool); ok {
		return s.Reset()
	}
	return nil
}

// bytesText is n in B, KiB, MiB or GiB.
func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
