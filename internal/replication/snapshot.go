package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Snapshot transfer on real nodes (issue 17; the core's side is
// replica.Ready.Snapshots and Replica.InstallSnapshot).
//
// Primary: for each peer in Ready.Snapshots the loop, after the batch's
// writes ran, starts a goroutine that has the service write its image of
// the partition (Service.Snapshots.Snapshot) to a file under
// DataDir/<service>/.snapshots, while the loop goes on executing writes:
// a slow dump never stalls the partition. The image is one point in the
// write order (Snapshotter's contract) at or after the LSN executed when
// it began, A; the service reports the LSN L of the last write it
// reflects, so the image is the state at max(L, A) (writes between them,
// if L < A, changed nothing the service records). The dedup table
// (exactly-once writes) at that point travels in front of the image: the
// loop copied the table at A and journals its changes until the image is
// taken, then replays them up to the point. The goroutine then streams
// both to the peer's node over the InstallSnapshot RPC in chunks of
// snapshotChunk bytes (memory stays bounded whatever the state's size)
// and reports a failure or refusal to the core (SnapshotFailed). One
// stream per peer at a time. The core holds the log's truncation back
// while the peer waits (its match is 0), so the entries after the point
// are still there when the peer acknowledges the install.
//
// Follower: the RPC spools the chunks to a file, then hands it to the
// partition's loop, which asks the core (WantsSnapshot), restores the
// service from it (Service.Snapshots.Restore: all or nothing, durable),
// replaces the dedup table and calls InstallSnapshot; the next Ready's
// Installed resets the wal to the snapshot's base (wal.PersistInstalled)
// and acknowledges, and the primary resumes its appends after it.

// SnapshotStream is the sending side of one InstallSnapshot call (the
// generated gRPC client stream satisfies it).
type SnapshotStream interface {
	Send(*pb.SnapshotChunk) error
	CloseAndRecv() (*pb.SnapshotAck, error)
}

// SnapshotSender is what a Sender also implements to stream snapshots;
// without it replicas that need one stay recovering.
type SnapshotSender interface {
	// OpenSnapshot starts an InstallSnapshot call to node at addr.
	OpenSnapshot(ctx context.Context, node, addr string) (SnapshotStream, error)
}

const (
	// snapshotChunk is the data one SnapshotChunk carries: well under
	// gRPC's 4 MiB message limit and the bulk lane's batch size.
	snapshotChunk = 256 << 10
	// snapshotSendTimeout bounds one snapshot stream.
	snapshotSendTimeout = 10 * time.Minute
)

// snapshotDir is where a partition's snapshot files are spooled.
func (p *part) snapshotDir() (string, error) {
	dir := filepath.Join(p.rt.cfg.DataDir, p.key.service, ".snapshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("neptune: snapshot dir: %w", err)
	}
	return dir, nil
}

// sendSnapshots starts a snapshot to each peer in ids (from the Ready just
// processed: its writes ran, Advance was called). The service's image is
// taken on another goroutine while the loop goes on executing writes; the
// loop only copies the dedup table and journals its changes until the
// image is taken (see dump).
func (p *part) sendSnapshots(ctx context.Context, ids []replica.ID) {
	for _, to := range ids {
		if _, sending := p.snapSending[to]; sending {
			// One stream per peer: this ask is answered when that one
			// ends (see sendSnapshot), or the core would wait its whole
			// SnapshotTimeout for a snapshot nobody sends.
			if !p.snapSending[to] {
				p.rt.log.Info("snapshot asked for again while one is on its way", "service", p.key.service, "partition", p.key.partition, "to", to)
			}
			p.snapSending[to] = true
			continue
		}
		ss, ok := p.rt.cfg.Sender.(SnapshotSender)
		if p.spec.Snapshots == nil || !ok {
			p.rt.log.Warn("replica needs a snapshot, but the service takes none (Service.Snapshots): it stays recovering",
				"service", p.key.service, "partition", p.key.partition, "replica", to)
			continue
		}
		if p.snapSending == nil {
			p.snapSending = map[replica.ID]bool{}
		}
		p.snapSending[to] = false
		st := p.core.Status()
		d := &dump{from: st.Applied, base: p.dedup.Records(), high: p.dedup.High()}
		p.dumps = append(p.dumps, d)
		p.snapBusy.Add(1)
		p.rt.wg.Add(1)
		go func() {
			defer p.rt.wg.Done()
			defer p.snapBusy.Add(-1)
			p.sendSnapshot(ctx, ss, to, st.Epoch, d)
		}()
	}
}

// sendSnapshot takes d's image, settles on the loop which LSN it covers,
// streams it to peer to, and reports the outcome to the loop.
func (p *part) sendSnapshot(ctx context.Context, ss SnapshotSender, to replica.ID, epoch replica.Epoch, d *dump) {
	t, err := p.take(ctx, epoch, d)
	if errors.Is(err, errLoopGone) {
		return
	}
	var (
		ack *pb.SnapshotAck
		hdr *pb.SnapshotChunk
	)
	if err == nil {
		defer t.close()
		hdr = &pb.SnapshotChunk{From: p.rt.cfg.Self, Service: p.key.service, Partition: p.key.partition, To: string(to),
			Epoch: uint64(epoch), Lsn: uint64(t.lsn), LsnEpoch: uint64(t.lsnEpoch)}
		hdr.Members, hdr.MembersLsn = toPBPeers(t.conf.Members), uint64(t.conf.LSN)
		// The dedup section is encoded as the stream reads it.
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeDedupSection(pw, t.recs, t.high)) }()
		sum := crc32.New(castagnoli)
		ack, err = p.rt.streamSnapshot(ctx, ss, string(to), hdr, io.MultiReader(pr, io.TeeReader(t.img, sum)), func() error {
			return p.spoolIntact(t.img.Name(), sum.Sum32(), t.img.sum, "taken")
		})
		pr.Close() // ends the encoder if the stream stopped early
	}
	installed := err == nil && ack.Installed
	switch {
	case err != nil:
		p.rt.log.Warn("snapshot not delivered", "service", p.key.service, "partition", p.key.partition, "to", to, "err", err)
	case !installed:
		p.rt.log.Info("snapshot refused", "service", p.key.service, "partition", p.key.partition, "to", to, "reason", ack.Reason)
	default:
		p.rt.log.Info("snapshot installed", "service", p.key.service, "partition", p.key.partition, "to", to, "lsn", hdr.Lsn)
	}
	p.post(ctx, func(time.Time) {
		askedAgain := p.snapSending[to]
		delete(p.snapSending, to)
		// A snapshot asked for while this one was on its way was not
		// sent: the core asks again at the peer's next sign that it
		// needs one (a learner waited a whole minute for it).
		if !installed || askedAgain {
			p.core.SnapshotFailed(to)
		}
	})
}

// errLoopGone is take's error when the partition's loop stopped (or ctx
// ended) before the snapshot was settled: nobody is left to tell.
var errLoopGone = errors.New("neptune: partition loop stopped")

// taken is a snapshot settled on the loop: the service's image, the LSN
// it covers, that entry's epoch, the committed replica set and the dedup
// table at that point.
type taken struct {
	img      *image
	lsn      replica.LSN
	lsnEpoch replica.Epoch
	conf     replica.ConfState
	recs     []replica.DedupRecord
	high     int64
}

func (t *taken) close() {
	t.img.Close()
	os.Remove(t.img.Name())
}

// take takes d's image (off the loop) and settles on the loop which LSN
// it covers, while this replica is still primary of epoch. The caller
// closes what it returns.
func (p *part) take(ctx context.Context, epoch replica.Epoch, d *dump) (*taken, error) {
	img, got, err := p.dumpImage(ctx)
	t := &taken{img: img}
	settled := make(chan struct{})
	ok := p.post(ctx, func(time.Time) {
		defer close(settled)
		p.dumps = slices.DeleteFunc(p.dumps, func(x *dump) bool { return x == d })
		if err != nil {
			return
		}
		lsn := max(replica.LSN(got), d.from)
		// (Applied covers an installed snapshot, which executed nothing.)
		if executed := max(replica.LSN(p.executing.Load()), p.core.Status().Applied); lsn > executed {
			err = fmt.Errorf("neptune: service snapshot covers LSN %d, beyond the executed %d", got, executed)
			return
		}
		if st := p.core.Status(); st.Role != replica.Primary || st.Epoch != epoch {
			err = fmt.Errorf("%w: no longer primary of epoch %d", nerr.ErrNoPrimary, epoch)
			return
		}
		t.recs, t.high = d.tableAt(lsn)
		t.lsn, t.lsnEpoch, t.conf = lsn, p.core.Term(lsn), p.core.Committed()
	})
	if ok {
		select {
		case <-settled:
		case <-p.done:
			ok = false
		}
	}
	if !ok || err != nil {
		if img != nil {
			t.close()
		}
		if !ok {
			return nil, errLoopGone
		}
		return nil, err
	}
	return t, nil
}

// dump is a snapshot being taken. The service's image is one point in
// the write order at or after from (the executed LSN when it began), and
// the dedup table that goes with it must be the table at that point: the
// loop copies the table at from (base, high) and journals every change
// after it (steps), and tableAt replays the journal up to the point.
type dump struct {
	from  replica.LSN
	base  []replica.DedupRecord
	high  int64
	steps []dedupStep
}

// dedupStep is one change to the dedup table: an executed entry's time
// (rec nil) or a record.
type dedupStep struct {
	lsn  replica.LSN
	time int64
	rec  *replica.DedupRecord
}

// tableAt is the dedup table as it was when lsn had executed.
func (d *dump) tableAt(lsn replica.LSN) ([]replica.DedupRecord, int64) {
	t := replica.NewDedupTable(0, d.base, d.high)
	for _, s := range d.steps {
		switch {
		case s.lsn > lsn:
		case s.rec == nil:
			t.Observe(s.time)
		default:
			t.Record(*s.rec)
		}
	}
	return t.Records(), t.High()
}

// observeEntry advances the dedup table to executed entry e's time, and
// journals it for the snapshots being taken.
func (p *part) observeEntry(e replica.Entry) {
	p.dedup.Observe(e.Time)
	for _, d := range p.dumps {
		d.steps = append(d.steps, dedupStep{lsn: e.LSN, time: e.Time})
	}
}

// recordDedup records rec in the dedup table, and journals it for the
// snapshots being taken.
func (p *part) recordDedup(rec replica.DedupRecord) {
	p.dedup.Record(rec)
	for _, d := range p.dumps {
		d.steps = append(d.steps, dedupStep{lsn: rec.LSN, rec: &rec})
	}
}

// post queues f to run on the partition's loop; false if ctx ended or
// the loop stopped first.
func (p *part) post(ctx context.Context, f func(time.Time)) bool {
	select {
	case p.ops <- f:
		return true
	case <-ctx.Done():
	case <-p.done:
	}
	return false
}

// dumpImage writes the service's image of the partition to a new file,
// rewound for reading, and returns the LSN the service says it reflects.
// It runs off the loop, concurrently with the partition's writes
// (Snapshotter's contract).
func (p *part) dumpImage(ctx context.Context) (*image, uint64, error) {
	dir, err := p.snapshotDir()
	if err != nil {
		return nil, 0, err
	}
	f, err := os.CreateTemp(dir, strconv.Itoa(int(p.key.partition))+"-send-*")
	if err != nil {
		return nil, 0, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	fail := func(err error) (*image, uint64, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, 0, err
	}
	sum := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(f, sum), 64<<10)
	got, err := p.spec.Snapshots.Snapshot(ctx, int(p.key.partition), bw)
	if err != nil {
		return fail(fmt.Errorf("neptune: service snapshot: %w", err))
	}
	if err := bw.Flush(); err != nil {
		return fail(fmt.Errorf("neptune: snapshot file: %w", err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(fmt.Errorf("neptune: snapshot file: %w", err))
	}
	return &image{File: f, sum: sum.Sum32()}, got, nil
}

// image is a snapshot's service image spooled to a file, with the
// checksum of what was written to it.
type image struct {
	*os.File
	sum uint32
}

// castagnoli is the CRC-32C table of snapshot files' checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// spooledHook, if set (tests), is called with a received snapshot's file
// once it is written, before it is checked.
var spooledHook func(path string)

// spoolIntact compares the checksum of a snapshot file as read back
// with that of what was written to it: a file damaged on disk is never
// restored or sent (counted as kind "snapshot" of
// neptune_storage_corruption_total). what says which file it is.
func (p *part) spoolIntact(path string, read, written uint32, what string) error {
	if read == written {
		return nil
	}
	p.rt.corrupt.add(corruptKey{p.key.service, p.key.partition, "snapshot"})
	p.rt.log.Error("snapshot file corrupt on disk: not used (the primary sends another)", "service", p.key.service,
		"partition", p.key.partition, "kind", "snapshot", "file", path, "snapshot", what, "crc", read, "written_crc", written)
	return fmt.Errorf("neptune: %s snapshot file %s corrupt on disk (checksum %08x, written %08x)", what, path, read, written)
}

// streamSnapshot sends hdr, then r's contents in chunks, to node, and
// completes the stream only if intact, called once r is read, says so
// (else the stream is abandoned: the peer installs nothing).
func (rt *Runtime) streamSnapshot(ctx context.Context, ss SnapshotSender, node string, hdr *pb.SnapshotChunk, r io.Reader, intact func() error) (*pb.SnapshotAck, error) {
	addr := rt.addrOf(node)
	if addr == "" {
		return nil, fmt.Errorf("no address for node %s", node)
	}
	ctx, cancel := clock.WithTimeout(ctx, rt.clock, snapshotSendTimeout)
	defer cancel()
	st, err := ss.OpenSnapshot(ctx, node, addr)
	if err != nil {
		return nil, err
	}
	if err := st.Send(hdr); err != nil {
		return nil, err
	}
	buf := make([]byte, snapshotChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := st.Send(&pb.SnapshotChunk{From: rt.cfg.Self, Data: buf[:n]}); serr != nil {
				return nil, serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if err := intact(); err != nil {
		return nil, err
	}
	return st.CloseAndRecv()
}

// InstallSnapshot takes a snapshot stream from a peer replica's node
// (recv returns its chunks, then io.EOF): it spools it to a file, then the
// partition's loop restores and installs it if its replica still wants
// it. The answer says whether it did.
func (rt *Runtime) InstallSnapshot(ctx context.Context, recv func() (*pb.SnapshotChunk, error)) (*pb.SnapshotAck, error) {
	hdr, err := recv()
	if err != nil {
		return nil, err
	}
	rt.det.heardFrom(hdr.From)
	p, err := rt.part(hdr.Service, hdr.Partition)
	if err != nil {
		return nil, err
	}
	if hdr.To != rt.cfg.Self || hdr.From == rt.cfg.Self ||
		!slices.ContainsFunc(p.status.Load().Members, func(r replica.Peer) bool { return string(r.ID) == hdr.From }) {
		return nil, fmt.Errorf("%w: snapshot of %s/%d from %q to %q: not a peer replica of this node's", nerr.ErrUnknownPartition,
			hdr.Service, hdr.Partition, hdr.From, hdr.To)
	}
	if p.spec.Snapshots == nil {
		return &pb.SnapshotAck{Reason: "the service takes no snapshots"}, nil
	}
	dir, err := p.snapshotDir()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, strconv.Itoa(int(p.key.partition))+"-recv-*")
	if err != nil {
		return nil, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(f, sum), 64<<10)
	bw.Write(hdr.Data)
	for {
		c, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if _, err := bw.Write(c.Data); err != nil {
			return nil, fmt.Errorf("neptune: snapshot file: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	if spooledHook != nil {
		spooledHook(f.Name())
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	read := crc32.New(castagnoli)
	if _, err := io.Copy(read, bufio.NewReaderSize(f, 64<<10)); err != nil {
		return nil, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	if err := p.spoolIntact(f.Name(), read.Sum32(), sum.Sum32(), "received"); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("neptune: snapshot file: %w", err)
	}
	type result struct {
		ack *pb.SnapshotAck
		err error
	}
	res := make(chan result, 1)
	closed := fmt.Errorf("%w: partition loop stopped", nerr.ErrClosed)
	queued := p.post(ctx, func(now time.Time) {
		ack, err := p.installSnapshot(now, hdr, f)
		res <- result{ack, err}
	})
	if !queued {
		return nil, errors.Join(ctx.Err(), closed)
	}
	// Once queued the loop runs it (it reads the file, which stays open
	// until then) unless it stops first.
	select {
	case r := <-res:
		return r.ack, r.err
	case <-p.done:
		return nil, closed
	}
}

// installSnapshot runs on the loop: restore the service from the spooled
// snapshot and install it in the replica, if it wants it.
func (p *part) installSnapshot(now time.Time, hdr *pb.SnapshotChunk, f *os.File) (*pb.SnapshotAck, error) {
	lsn := replica.LSN(hdr.Lsn)
	if !p.core.WantsSnapshot(replica.ID(hdr.From), replica.Epoch(hdr.Epoch), lsn) {
		st := p.core.Status()
		return &pb.SnapshotAck{Reason: fmt.Sprintf("not wanted (epoch %d, primary %q, executed %d, diverged %v)",
			st.Epoch, st.Primary, st.Applied, st.Diverged)}, nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	recs, high, err := readDedupSection(br)
	if err != nil {
		return nil, err
	}
	got, err := p.spec.Snapshots.Restore(p.rt.ctx, int(p.key.partition), br)
	if err != nil {
		return nil, fmt.Errorf("neptune: restore snapshot: %w", err)
	}
	if replica.LSN(got) > lsn {
		p.rt.log.Error("restored snapshot reports an LSN beyond what it covers", "service", p.key.service,
			"partition", p.key.partition, "restored", got, "covers", lsn)
	}
	var conf *replica.ConfState
	if len(hdr.Members) > 0 {
		conf = &replica.ConfState{LSN: replica.LSN(hdr.MembersLsn), Members: fromPBPeers(hdr.Members)}
	}
	p.core.InstallSnapshot(now, lsn, replica.Epoch(hdr.LsnEpoch), conf)
	p.dedup = replica.NewDedupTable(0, recs, high)
	p.installed = &installedDedup{recs: recs, high: high}
	p.rt.log.Info("snapshot installed here", "service", p.key.service, "partition", p.key.partition, "from", hdr.From, "lsn", lsn)
	return &pb.SnapshotAck{Installed: true}, nil
}

// installedDedup is the dedup table that came with a snapshot, for the
// wal's Install in the next Persist.
type installedDedup struct {
	recs []replica.DedupRecord
	high int64
}

// persist does the durable part of rd, resetting the wal to a snapshot's
// base first if rd installs one.
func (p *part) persist(rd *replica.Ready) error {
	if rd.Installed == nil {
		return p.log.Persist(rd)
	}
	d := p.installed
	p.installed = nil
	if d == nil {
		d = &installedDedup{high: p.dedup.High(), recs: p.dedup.Records()}
	}
	return p.log.PersistInstalled(rd, d.recs, d.high)
}

// The dedup section precedes the service's image in a snapshot: a count,
// the high-water time, then each record.
func writeDedupSection(w io.Writer, recs []replica.DedupRecord, high int64) error {
	b := binary.AppendUvarint(nil, uint64(len(recs)))
	b = binary.AppendUvarint(b, uint64(high))
	str := func(s []byte) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	for _, r := range recs {
		str([]byte(r.WriteID))
		b = binary.AppendUvarint(b, uint64(r.LSN))
		b = binary.AppendUvarint(b, uint64(r.Time))
		str(r.Body)
		str([]byte(r.Err))
		flags := byte(0)
		if r.HasErr {
			flags |= 1
		}
		if r.Recovered {
			flags |= 2
		}
		b = append(b, flags)
		if len(b) > 64<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

func readDedupSection(r *bufio.Reader) ([]replica.DedupRecord, int64, error) {
	bad := func(err error) ([]replica.DedupRecord, int64, error) {
		return nil, 0, fmt.Errorf("neptune: snapshot dedup section: %w", err)
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return bad(err)
	}
	high, err := binary.ReadUvarint(r)
	if err != nil {
		return bad(err)
	}
	str := func() ([]byte, error) {
		l, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if l > 1<<30 {
			return nil, errors.New("record too large")
		}
		b := make([]byte, l)
		_, err = io.ReadFull(r, b)
		return b, err
	}
	recs := make([]replica.DedupRecord, 0, min(n, 1<<16))
	for range n {
		var rec replica.DedupRecord
		id, err := str()
		if err != nil {
			return bad(err)
		}
		l, err := binary.ReadUvarint(r)
		if err != nil {
			return bad(err)
		}
		t, err := binary.ReadUvarint(r)
		if err != nil {
			return bad(err)
		}
		body, err := str()
		if err != nil {
			return bad(err)
		}
		e, err := str()
		if err != nil {
			return bad(err)
		}
		flags, err := r.ReadByte()
		if err != nil {
			return bad(err)
		}
		rec.WriteID, rec.LSN, rec.Time, rec.Err = string(id), replica.LSN(l), int64(t), string(e)
		if len(body) > 0 {
			rec.Body = body
		}
		rec.HasErr, rec.Recovered = flags&1 != 0, flags&2 != 0
		recs = append(recs, rec)
	}
	return recs, int64(high), nil
}
