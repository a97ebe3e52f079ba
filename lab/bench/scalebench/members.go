package scalebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/memnet"
)

// sizeResult is what one cluster size measured.
type sizeResult struct {
	n int
	// dilation is how many times slower than real time the members' time
	// ran (clock.Dilated); every time and rate below is in their time.
	dilation float64
	// unjoined, if set, says how far the join got by JoinLimit.
	unjoined string
	// join is how long until every member knew every other and held its
	// entry.
	join time.Duration
	// cpuPerMember (ms of CPU per second) and bytesPerMember (sent per
	// second) are the idle cost; busy is the process's CPU use in cores.
	cpuPerMember, bytesPerMember, busy float64
	// propagation: when each other member learnt a new epoch; detection:
	// when each member dropped a cut member from its yellow pages.
	propagation, detection []time.Duration
	// propagationMissed and detectionMissed count members that had not
	// by the end of the wait.
	propagationMissed, detectionMissed int
	// pages are the announcements of the cluster a member held (encoded);
	// pagesBytes the heap they take as yellow pages, measured once the
	// members are gone (a quiet heap).
	pages      [][]byte
	pagesBytes uint64
	// falseDeaths counts (member, live member) pairs removed under loss,
	// over lossWatched; -1 when not run at this size.
	falseDeaths int
	lossWatched time.Duration
	// starved is how starved the machine was during the idle window
	// (bench.LagProbe): a starved machine stretches every timer.
	starved bench.Starvation
}

// member is one simulated member: membership.Gossip over memnet, with
// signed announcements and keyed gossip, announcing the replicas a node
// would.
type member struct {
	id    string
	g     *membership.Gossip
	tr    *memnet.Transport
	epoch atomic.Uint64
	// learnt and dropped record when this member saw the watched events.
	watch *watcher
}

// watcher records, for one member, when it first applied an epoch of the
// target and when it removed the cut member.
type watcher struct {
	clock       clock.Clock // the members' (dilated) clock
	target, cut string
	epoch       uint64
	start       time.Time
	mu          sync.Mutex
	learnt      time.Duration
	dropped     time.Duration
	removed     []string
}

func (w *watcher) Applied(e membership.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.target == "" || e.Ann.NodeId != w.target || w.learnt != 0 {
		return
	}
	for _, s := range e.Ann.Services {
		for _, r := range s.Replicas {
			if r.Epoch >= w.epoch && r.Role == 2 {
				w.learnt = w.clock.Since(w.start)
				return
			}
		}
	}
}

func (w *watcher) Removed(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removed = append(w.removed, node)
	if node == w.cut && w.dropped == 0 {
		w.dropped = w.clock.Since(w.start)
	}
}

// material is the cluster's PKI, made once for the largest size.
type material struct {
	dir string
	key []byte
}

func newMaterial(dir string, n int, progress io.Writer) (*material, error) {
	ids := make([]pki.Identity, n)
	for i := range ids {
		ids[i] = pki.Identity{Role: pki.RoleNode, Name: memberID(i)}
	}
	fmt.Fprintf(progress, "issuing %d node certificates...\n", n)
	if _, err := pki.Bootstrap(dir, "scale", ids...); err != nil {
		return nil, err
	}
	key, err := membership.GenerateKey()
	if err != nil {
		return nil, err
	}
	return &material{dir: dir, key: key}, nil
}

func memberID(i int) string { return fmt.Sprintf("m%04d", i) }

// announcement is what member i of n announces: the four partitions it
// leads and, as a secondary, those of the next two members (three
// replicas of 4n partitions, spread as placement would).
func announcement(i, n, parts int, epoch uint64) *pb.Announcement {
	hs := &pb.HostedService{Name: "kv", Methods: []*pb.MethodInfo{{Name: "get", Mode: pb.Mode_MODE_READ}, {Name: "put", Mode: pb.Mode_MODE_WRITE}}}
	for r := range 3 {
		owner := (i - r + n) % n
		for k := range parts {
			p := int32(owner*parts + k)
			hs.Partitions = append(hs.Partitions, p)
			st := &pb.ReplicaStatus{Partition: p, Role: 1, Epoch: 1, Level: 2, Primary: memberID(owner)}
			if r == 0 {
				st.Role, st.LeaseMs = 2, 400
				if k == 0 {
					st.Epoch = epoch
				}
			}
			hs.Replicas = append(hs.Replicas, st)
		}
	}
	return &pb.Announcement{RpcAddr: fmt.Sprintf("10.1.%d.%d:7000", i/256, i%256), PollAddr: fmt.Sprintf("10.1.%d.%d:7001", i/256, i%256),
		Services: []*pb.HostedService{hs}}
}

// startMembers starts n members on nw with clk as their clock, each
// joining a random member already up, conc at a time, at most rate joins
// per second of clk (a cluster booting: in one process, unpaced joins
// would take all the CPU the members' failure detection needs).
func startMembers(ctx context.Context, nw *memnet.Network, clk clock.Clock, mat *material, n, parts, conc int, rate float64, log *slog.Logger, progress io.Writer) ([]*member, error) {
	t0 := clk.Now()
	members := make([]*member, n)
	var mu sync.Mutex
	var up []string
	start := func(i int) error {
		m := &member{id: memberID(i), tr: nw.NewTransport(), watch: &watcher{clock: clk}}
		m.epoch.Store(1)
		src, err := pki.NewSource(pki.SourceConfig{Files: pki.FilesFor(mat.dir, pki.Identity{Role: pki.RoleNode, Name: m.id})})
		if err != nil {
			return err
		}
		kr, err := membership.NewKeyring([][]byte{mat.key})
		if err != nil {
			return err
		}
		mu.Lock()
		var join []string
		if len(up) > 0 {
			join = []string{up[rand.IntN(len(up))]}
		}
		mu.Unlock()
		g, err := membership.Start(ctx, membership.Config{NodeID: m.id, Transport: m.tr, Join: join, JoinTimeout: 2 * time.Minute, Keyring: kr, Clock: clk, Label: "scale", Certs: src,
			Announce: func() *pb.Announcement { return announcement(i, n, parts, m.epoch.Load()) },
			Watch:    m.watch, Logger: log.With("member", m.id)})
		if err != nil {
			return fmt.Errorf("member %s: %w", m.id, err)
		}
		m.g = g
		members[i] = m
		mu.Lock()
		up = append(up, m.tr.Addr())
		if len(up)%100 == 0 {
			fmt.Fprintf(progress, "[%d members] %d started\n", n, len(up))
		}
		mu.Unlock()
		return nil
	}
	if err := start(0); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := atomic.Int64{}
	next.Store(1)
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				// The i-th join at t0 + i/rate of the members' time.
				if d := clk.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					clk.Sleep(d)
				}
				if err := start(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		closeMembers(members)
		return nil, err
	}
	return members, nil
}

func closeMembers(ms []*member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		if m != nil && m.g != nil {
			wg.Go(func() { m.tr.Cut(); _ = m.g.Close() })
		}
	}
	wg.Wait()
}

// converged reports whether every live member knows want members and
// holds want entries.
func converged(ms []*member, want int) bool {
	for _, m := range ms {
		if m.g.Members() != want || len(m.g.Snapshot()) != want {
			return false
		}
	}
	return true
}

// joinProgress says how far a join is: how many members hold every
// entry and know every member, and the entries missing most often.
func joinProgress(ms []*member, n int) string {
	full, known := 0, 0
	missing := map[string]int{}
	for _, m := range ms {
		if m.g.Members() == n {
			known++
		}
		held := map[string]bool{}
		for _, e := range m.g.Snapshot() {
			held[e.Ann.NodeId] = true
		}
		if len(held) == n {
			full++
		}
		for _, o := range ms {
			if !held[o.id] {
				missing[o.id]++
			}
		}
	}
	ids := slices.Collect(maps.Keys(missing))
	slices.SortFunc(ids, func(a, b string) int { return missing[b] - missing[a] })
	var worst []string
	for _, id := range ids[:min(len(ids), 3)] {
		worst = append(worst, fmt.Sprintf("%s missing at %d", id, missing[id]))
	}
	return fmt.Sprintf("%d hold every entry, %d know every member; %d entries missing somewhere (%s)", full, known, len(ids), strings.Join(worst, ", "))
}

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureSize runs every in-process measure at one size, its members'
// time dilated dilation times (every duration of cfg is in their time).
func measureSize(ctx context.Context, cfg Config, mat *material, n int, dilation float64, lossRun bool, progress io.Writer) (sizeResult, error) {
	res := sizeResult{n: n, dilation: dilation, falseDeaths: -1}
	nw := memnet.New(cfg.Seed + uint64(n))
	clk := clock.Dilated(clock.Real(), time.Now(), dilation)
	t0 := clk.Now()
	fmt.Fprintf(progress, "[%d members] starting, time dilated %g×...\n", n, dilation)
	ms, err := startMembers(ctx, nw, clk, mat, n, cfg.Partitions, 4, cfg.JoinRate, memberLogger(cfg.MemberLog), progress)
	if err != nil {
		return res, err
	}
	defer closeMembers(ms)
	lastReport := time.Now()
	for !converged(ms, n) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if clk.Since(t0) > cfg.JoinLimit {
			// Measure the rest all the same: the join's verdict fails.
			res.unjoined = joinProgress(ms, n)
			fmt.Fprintf(progress, "[%d members] not all joined within %v (%s); measuring the rest as it is\n", n, cfg.JoinLimit, res.unjoined)
			break
		}
		if time.Since(lastReport) > 15*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(progress, "[%d members] after %v, %s\n", n, clk.Since(t0).Round(time.Second), joinProgress(ms, n))
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.join = clk.Since(t0)
	// At least one refresh interval, so that every member refreshes in
	// the window whatever its phase.
	idle := max(cfg.Idle, membership.RefreshInterval(membership.DefaultAnnounceInterval, n))
	fmt.Fprintf(progress, "[%d members] all joined in %v; settling %v, then idle for %v\n", n, res.join.Round(time.Millisecond), cfg.Settle, idle)
	clk.Sleep(cfg.Settle)
	if cfg.HeapProfile != "" {
		if err := writeHeapProfile(fmt.Sprintf("%s-%d.pprof", cfg.HeapProfile, n)); err != nil {
			return res, err
		}
	}

	// Idle cost.
	probe := bench.StartLagProbe(10 * time.Millisecond)
	var sent0 uint64
	for _, m := range ms {
		s, _ := m.tr.Bytes()
		sent0 += s
	}
	c0, w0, d0 := cpuTime(), time.Now(), clk.Now()
	clk.Sleep(idle)
	cpu, wall, own := cpuTime()-c0, time.Since(w0), clk.Since(d0)
	res.starved = probe.Stop()
	var sent1 uint64
	for _, m := range ms {
		s, _ := m.tr.Bytes()
		sent1 += s
	}
	res.busy = cpu.Seconds() / wall.Seconds()
	res.cpuPerMember = float64(cpu.Milliseconds()) / own.Seconds() / float64(n)
	res.bytesPerMember = float64(sent1-sent0) / own.Seconds() / float64(n)
	fmt.Fprintf(progress, "[%d members] idle: %.2f ms CPU/s and %.0f B/s per member (%.2f cores busy; machine: %v)\n",
		n, res.cpuPerMember, res.bytesPerMember, res.busy, res.starved)

	// Propagation of a change that matters: member 0's new epoch.
	target := ms[0]
	start := clk.Now()
	for _, m := range ms[1:] {
		m.watch.mu.Lock()
		m.watch.target, m.watch.epoch, m.watch.start = target.id, 2, start
		m.watch.mu.Unlock()
	}
	target.epoch.Store(2)
	target.g.AnnounceNow()
	res.propagation, res.propagationMissed = waitFor(clk, ms[1:], cfg.EventLimit, func(w *watcher) time.Duration { return w.learnt })
	fmt.Fprintf(progress, "[%d members] a new epoch reached %s\n", n, describe(res.propagation, res.propagationMissed))

	// Failure detection: the last member cut off as by SIGKILL.
	cut := ms[n-1]
	start = clk.Now()
	for _, m := range ms[:n-1] {
		m.watch.mu.Lock()
		m.watch.cut, m.watch.start, m.watch.removed = cut.id, start, nil
		m.watch.mu.Unlock()
	}
	cut.tr.Cut()
	res.detection, res.detectionMissed = waitFor(clk, ms[:n-1], cfg.EventLimit, func(w *watcher) time.Duration { return w.dropped })
	fmt.Fprintf(progress, "[%d members] the cut member left %s\n", n, describe(res.detection, res.detectionMissed))

	// False deaths under loss, among the members still up.
	if lossRun && cfg.LossWatch > 0 {
		live := ms[:n-1]
		for _, m := range live {
			m.watch.mu.Lock()
			m.watch.removed = nil
			m.watch.mu.Unlock()
		}
		nw.SetLoss(cfg.Loss)
		fmt.Fprintf(progress, "[%d members] %.0f%% packet loss for %v...\n", n, cfg.Loss*100, cfg.LossWatch)
		clk.Sleep(cfg.LossWatch)
		nw.SetLoss(0)
		res.lossWatched = cfg.LossWatch
		res.falseDeaths = 0
		for _, m := range live {
			m.watch.mu.Lock()
			for _, id := range m.watch.removed {
				if id != cut.id {
					res.falseDeaths++
				}
			}
			m.watch.mu.Unlock()
		}
		fmt.Fprintf(progress, "[%d members] live members removed under loss: %d\n", n, res.falseDeaths)
		if cfg.HeapProfile != "" {
			if err := writeHeapProfile(fmt.Sprintf("%s-%d-loss.pprof", cfg.HeapProfile, n)); err != nil {
				return res, err
			}
		}
	}

	// The yellow pages of the whole cluster, as a client holds them.
	var anns [][]byte
	for _, e := range ms[0].g.Snapshot() {
		b, _ := proto.Marshal(e.Ann)
		anns = append(anns, b)
	}
	res.pages = anns
	return res, nil
}

// waitFor waits up to limit on clk for every member's watcher to record
// an event (get returns 0 until it did) and returns the times, sorted,
// and how many never recorded it.
func waitFor(clk clock.Clock, ms []*member, limit time.Duration, get func(*watcher) time.Duration) ([]time.Duration, int) {
	deadline := clk.Now().Add(limit)
	for {
		var got []time.Duration
		for _, m := range ms {
			m.watch.mu.Lock()
			if d := get(m.watch); d > 0 {
				got = append(got, d)
			}
			m.watch.mu.Unlock()
		}
		if len(got) == len(ms) || clk.Now().After(deadline) {
			slices.Sort(got)
			return got, len(ms) - len(got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pagesHeap is the heap that yellow pages holding the announcements
// anns (encoded) take, decoded: the median of five measures, taken once
// the members' goroutines had time to end (others may still allocate or
// free meanwhile).
func pagesHeap(anns [][]byte) uint64 {
	time.Sleep(2 * time.Second)
	var ms []uint64
	for range 5 {
		ms = append(ms, pagesHeapOnce(anns))
	}
	slices.Sort(ms)
	return ms[2]
}

func pagesHeapOnce(anns [][]byte) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := membership.NewPages(time.Hour)
	now := time.Now()
	for _, b := range anns {
		var a pb.Announcement
		if proto.Unmarshal(b, &a) == nil {
			p.Apply(now, &a)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(p)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// writeHeapProfile writes the live heap, after a collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("scale: heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("scale: heap profile: %w", err)
	}
	return f.Close()
}

// memberLogger logs to w at debug level, or nowhere if w is nil.
func memberLogger(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
