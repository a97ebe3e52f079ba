// Package work is an emulated-work service for load-balancing experiments:
// its "work" method sleeps for the duration named in the request, so a node
// hosting it with one worker behaves as one FIFO processing unit whose
// service times the caller chooses, and sixteen of them fit on two cores.
package work

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
)

// ErrBadRequest is returned for a malformed body.
var ErrBadRequest = errors.New("work: malformed request")

// Workers is the pool size that makes a node one FIFO processing unit. The
// node's configuration sets it (services[].workers: 1); Service declares it
// for programs that register the service themselves.
const Workers = 1

// Service returns a fresh work service. Methods:
//   - work (read): body is the service time, Encode'd; sleeps it times the
//     slowdown and answers "pid=<process id>" so callers can tell which
//     node served them.
//   - spin (read): body is a CPU time, Encode'd; computes until its
//     thread has used that much CPU (where the thread's CPU clock can be
//     read; elsewhere, that much wall time), at most ten times as long in
//     wall time, and answers like work. A CPU-bound request whose cost
//     does not shrink on a loaded machine.
//   - fsync (read): body is a byte count, EncodeBytes'd; writes that many
//     bytes over the start of a scratch file under the system's temporary
//     directory, fsyncs it, and answers like work. A disk-bound request:
//     the node's per-thread I/O accounting sees the bytes written (the
//     pages were clean since the last fsync, so every one is written
//     again), and the time is the device's. Each call running at once has
//     a scratch file of its own, created on first need, unlinked at once
//     (nothing is left behind, even by a killed process) and kept open
//     for later calls: creating, allocating and removing a file for each
//     call cost the kernel three times the CPU of the write and fsync.
//   - file (read): body is a byte count, EncodeBytes'd; answers that many
//     bytes, as a web server answers a static file of that size from the
//     page cache. A network-bound request: its cost is the response's
//     bytes.
//   - read (read): body is a footprint in bytes and a CPU time,
//     EncodeRead'd; computes like spin, then reads one ReadBlock of a
//     file of that footprint at a random block-aligned offset through
//     the page cache, and answers like work. A file server's request:
//     CPU, and the disk as well when the block is not cached, which is
//     the case for a share of reads about one less the cache over the
//     footprint, so a memory limit on the node's cgroup (the page cache
//     is charged to it) makes real misses on this node alone. The node
//     picks the offset, not the caller: the footprint alone is the
//     workload, uniform over the file whatever the caller's draws. The
//     file is made on first need, filled with data (its pages cached,
//     dirty, then written back), unlinked at once and kept open; one
//     footprint at a time: a call of another replaces it, so each
//     starts from a freshly written file. It is made on a goroutine of
//     its own, so that the node does not charge the set-up's CPU and
//     writes to the request that needed it; readahead is off for it
//     (a random reader's), so a miss reads the block, not more.
//   - slowdown (write): body is a decimal factor (e.g. "10"); every later
//     work call on this node sleeps that many times longer. It answers with
//     the previous factor. A fault-injection knob for experiments: call it
//     on one node directly, not through the balancer.
func Service() neptune.Service {
	s := &server{pid: []byte("pid=" + strconv.Itoa(os.Getpid()))}
	s.slowdown.Store(math.Float64bits(1))
	return neptune.Service{
		Name:    "work",
		Workers: Workers,
		Methods: []neptune.Method{
			{Name: "work", Mode: neptune.Read, Handler: s.work},
			{Name: "spin", Mode: neptune.Read, Handler: s.spin},
			{Name: "fsync", Mode: neptune.Read, Handler: s.fsync},
			{Name: "file", Mode: neptune.Read, Handler: s.file},
			{Name: "read", Mode: neptune.Read, Handler: s.read},
			{Name: "slowdown", Mode: neptune.Write, Handler: s.setSlowdown},
		},
	}
}

// Encode is the body of a work call that takes d.
func Encode(d time.Duration) []byte { return binary.AppendUvarint(nil, uint64(max(d, 0))) }

// EncodeBytes is the body of an fsync call that writes n bytes, or of a
// file call that answers n bytes.
func EncodeBytes(n int) []byte { return binary.AppendUvarint(nil, uint64(max(n, 0))) }

// EncodeRead is the body of a read call of one block of a footprint-byte
// file after cpu of computing.
func EncodeRead(footprint int, cpu time.Duration) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(nil, uint64(max(footprint, 0))), uint64(max(cpu, 0)))
}

// ReadBlock is what one read call reads: a block of a web server's
// response size, a multiple of every page size.
const ReadBlock = 64 << 10

// maxRead bounds a read call's footprint, the bytes of disk its file
// takes.
const maxRead = 1 << 30

// maxFsync bounds an fsync call's bytes, so a request cannot fill the disk.
const maxFsync = 64 << 20

// maxFile bounds a file call's answer, well within a Neptune call's
// message.
const maxFile = 16 << 20

// PID parses a work response body into the serving node's process id.
func PID(body []byte) (int, error) {
	s, ok := bytes.CutPrefix(body, []byte("pid="))
	if !ok {
		return 0, fmt.Errorf("%w: response %q does not name a pid", ErrBadRequest, body)
	}
	return strconv.Atoi(string(s))
}

type server struct {
	pid      []byte
	slowdown atomic.Uint64 // float64 bits

	mu      sync.Mutex
	scratch []*os.File // fsync's idle scratch files

	readMu sync.RWMutex // a read holds it shared; replacing the file, alone
	readF  *os.File     // read's file, of readN bytes
	readN  uint64
}

func (s *server) work(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	ns, err := decode(r.Body, "a service time from work.Encode")
	if err != nil {
		return nil, err
	}
	d := time.Duration(float64(ns) * math.Float64frombits(s.slowdown.Load()))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &neptune.Response{Body: s.pid}, nil
}

func (s *server) setSlowdown(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	f, err := strconv.ParseFloat(string(r.Body), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%w: slowdown %q is not a positive factor", ErrBadRequest, r.Body)
	}
	old := math.Float64frombits(s.slowdown.Swap(math.Float64bits(f)))
	return &neptune.Response{Body: strconv.AppendFloat(nil, old, 'g', -1, 64)}, nil
}

// decode reads a body of one uvarint (what it must be, for the error).
func decode(body []byte, what string) (uint64, error) {
	v, n := binary.Uvarint(body)
	if n <= 0 || n != len(body) {
		return 0, fmt.Errorf("%w: body must be %s", ErrBadRequest, what)
	}
	return v, nil
}

func (s *server) spin(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	ns, err := decode(r.Body, "a CPU time from work.Encode")
	if err != nil {
		return nil, err
	}
	if err := burn(ctx, time.Duration(ns)); err != nil {
		return nil, err
	}
	return &neptune.Response{Body: s.pid}, nil
}

// burn computes until the calling thread has used d of CPU (where its CPU
// clock can be read; elsewhere, d of wall time), at most 10d of wall time.
func burn(ctx context.Context, d time.Duration) error {
	runtime.LockOSThread() // the thread's CPU clock measures this goroutine
	defer runtime.UnlockOSThread()
	used := cpuClock()
	end, deadline := used()+d, time.Now().Add(10*d)
	x := uint64(1)
	for i := 0; used() < end && time.Now().Before(deadline); i++ {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if x == 0 { // never: keeps the loop from being optimised away
		return errors.New("work: spin")
	}
	return nil
}

func (s *server) read(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	footprint, n := binary.Uvarint(r.Body)
	cpu, m := uint64(0), 0
	if n > 0 {
		cpu, m = binary.Uvarint(r.Body[n:])
	}
	if n <= 0 || m <= 0 || n+m != len(r.Body) {
		return nil, fmt.Errorf("%w: body must be a footprint and a CPU time from work.EncodeRead", ErrBadRequest)
	}
	if footprint < ReadBlock || footprint > maxRead {
		return nil, fmt.Errorf("%w: read footprint of %d bytes, want %d to %d", ErrBadRequest, footprint, ReadBlock, maxRead)
	}
	if err := burn(ctx, time.Duration(cpu)); err != nil {
		return nil, err
	}
	f, err := s.readFile(footprint)
	if err != nil {
		return nil, fmt.Errorf("work: read: %w", err)
	}
	defer s.readMu.RUnlock()
	buf := make([]byte, ReadBlock)
	if _, err := f.ReadAt(buf, int64(rand.N(footprint/ReadBlock))*ReadBlock); err != nil {
		return nil, fmt.Errorf("work: read: %w", err)
	}
	return &neptune.Response{Body: s.pid}, nil
}

// readFile is read's file of footprint bytes (rounded down to blocks),
// held shared until the caller's readMu.RUnlock; it replaces the file of
// another footprint, made on a goroutine of its own (see Service).
func (s *server) readFile(footprint uint64) (*os.File, error) {
	footprint -= footprint % ReadBlock
	for {
		s.readMu.RLock()
		if s.readN == footprint {
			return s.readF, nil
		}
		s.readMu.RUnlock()
		if err := s.replaceRead(footprint); err != nil {
			return nil, err
		}
	}
}

// replaceRead makes read's file footprint bytes, unless a call at the
// same time already has.
func (s *server) replaceRead(footprint uint64) error {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if s.readN == footprint {
		return nil
	}
	if s.readF != nil {
		s.readF.Close()
		s.readF, s.readN = nil, 0
	}
	type made struct {
		f   *os.File
		err error
	}
	ch := make(chan made, 1)
	go func() {
		f, err := fill(footprint)
		ch <- made{f, err}
	}()
	m := <-ch
	if m.err != nil {
		return m.err
	}
	s.readF, s.readN = m.f, footprint
	return nil
}

// fill makes an unlinked file of n bytes of data, cached as written, with
// readahead off.
func fill(n uint64) (*os.File, error) {
	f, err := unlinkedTemp("neptune-work-read-*")
	if err != nil {
		return nil, err
	}
	buf := pattern()
	for off := uint64(0); off < n && err == nil; off += uint64(len(buf)) {
		_, err = f.WriteAt(buf[:min(n-off, uint64(len(buf)))], int64(off))
	}
	if err == nil {
		err = adviseRandom(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (s *server) fsync(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	n, err := decode(r.Body, "a byte count from work.EncodeBytes")
	if err != nil {
		return nil, err
	}
	if n > maxFsync {
		return nil, fmt.Errorf("%w: fsync of %d bytes, at most %d", ErrBadRequest, n, maxFsync)
	}
	f, err := s.takeScratch()
	if err != nil {
		return nil, fmt.Errorf("work: fsync: %w", err)
	}
	defer s.putScratch(f)
	buf := pattern()
	for off := uint64(0); off < n; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := min(n-off, uint64(len(buf)))
		if _, err := f.WriteAt(buf[:k], int64(off)); err != nil {
			return nil, fmt.Errorf("work: fsync: %w", err)
		}
		off += k
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("work: fsync: %w", err)
	}
	return &neptune.Response{Body: s.pid}, nil
}

func (s *server) file(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	n, err := decode(r.Body, "a byte count from work.EncodeBytes")
	if err != nil {
		return nil, err
	}
	if n > maxFile {
		return nil, fmt.Errorf("%w: file of %d bytes, at most %d", ErrBadRequest, n, maxFile)
	}
	return &neptune.Response{Body: fileBytes()[:n]}, nil
}

// fileBytes is what file answers, a prefix of it; nothing writes to it.
var fileBytes = sync.OnceValue(func() []byte { return bytes.Repeat([]byte("neptune "), maxFile/8) })

// takeScratch is an idle scratch file, or a new one, already unlinked.
// A file grows to the largest count written to it, at most maxFsync.
func (s *server) takeScratch() (*os.File, error) {
	s.mu.Lock()
	if k := len(s.scratch); k > 0 {
		f := s.scratch[k-1]
		s.scratch = s.scratch[:k-1]
		s.mu.Unlock()
		return f, nil
	}
	s.mu.Unlock()
	return unlinkedTemp("neptune-work-fsync-*")
}

// unlinkedTemp is a new file under the system's temporary directory,
// already unlinked: nothing is left behind, even by a killed process.
func unlinkedTemp(name string) (*os.File, error) {
	f, err := os.CreateTemp("", name)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (s *server) putScratch(f *os.File) {
	s.mu.Lock()
	s.scratch = append(s.scratch, f)
	s.mu.Unlock()
}

// pattern is what fsync writes, in chunks of its length.
var pattern = sync.OnceValue(func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i)
	}
	return b
})
