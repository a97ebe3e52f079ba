package cli

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/internal/localcluster"
)

// benchReplication reproduces dissertation §5.4 at laptop scale on the kv
// service: throughput versus replication degree for levels 1-3 at 10 % and
// 50 % writes (Fig 5.1, in-process nodes), and a throughput timeline
// through a primary SIGKILL and restart of real node processes, with the
// failover time and the disk and memory left after a sustained write load.
func benchReplication(ctx context.Context, args []string, stdout io.Writer) error {
	fset := newFlags("bench replication", "[flags]")
	var (
		out      = fset.String("out", "out", "directory for CSV and SVG outputs")
		cell     = fset.Duration("cell", 2*time.Second, "measuring time per Fig 5.1 cell")
		clients  = fset.Int("clients", 16, "closed-loop client goroutines")
		degrees  = fset.String("degrees", "1-4", "replication degrees (of 4 nodes)")
		levels   = fset.String("levels", "1-3", "consistency levels")
		failover = fset.Bool("failover", true, "run the failover timeline with node processes")
		fig51    = fset.Bool("fig51", true, "run the throughput-versus-degree sweep")
		sustain  = fset.Duration("sustain", 20*time.Second, "write load after the failover, before measuring disk and memory")
	)
	if err := parse(fset, args); err != nil {
		return err
	}
	degs, err := ParsePartitions(*degrees)
	if err != nil {
		return usagef("-degrees: %v", err)
	}
	levs, err := ParsePartitions(*levels)
	if err != nil {
		return usagef("-levels: %v", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "neptune-bench-repl-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if *fig51 {
		if err := benchReplThroughput(ctx, stdout, *out, tmp, degs, levs, *clients, *cell); err != nil {
			return err
		}
	}
	if *failover {
		return benchReplFailover(ctx, stdout, *out, tmp, *sustain)
	}
	return nil
}

// ---- Fig 5.1 ----

func benchReplThroughput(ctx context.Context, stdout io.Writer, out, tmp string, degs, levs []int, clients int, cell time.Duration) error {
	fmt.Fprintf(stdout, "Fig 5.1: kv throughput (ops/s) vs replication degree; 4 in-process nodes, 4 partitions, %d clients, %v per cell\n", clients, cell)
	fmt.Fprintln(stdout, "level  writes  "+strings.Join(mapInts(degs, func(d int) string { return fmt.Sprintf("deg%-7d", d) }), ""))
	csv := "level,write_pct,degree,ops_per_s\n"
	res := map[[3]int]float64{}
	var lines []svgSeries
	for _, pct := range []int{10, 50} {
		for _, lv := range levs {
			row := fmt.Sprintf("%-6d %-7s ", lv, fmt.Sprintf("%d%%", pct))
			s := svgSeries{name: fmt.Sprintf("level %d, %d%% writes", lv, pct)}
			for _, d := range degs {
				ops, err := replCell(ctx, filepath.Join(tmp, fmt.Sprintf("l%dd%dw%d", lv, d, pct)), lv, d, float64(pct)/100, clients, cell)
				if err != nil {
					return fmt.Errorf("level %d degree %d: %w", lv, d, err)
				}
				res[[3]int{lv, pct, d}] = ops
				row += fmt.Sprintf("%-10.0f", ops)
				csv += fmt.Sprintf("%d,%d,%d,%.1f\n", lv, pct, d, ops)
				s.x, s.y = append(s.x, float64(d)), append(s.y, ops)
			}
			fmt.Fprintln(stdout, row)
			lines = append(lines, s)
		}
	}
	if slices.Contains(levs, 2) && slices.Contains(levs, 3) {
		for _, pct := range []int{10, 50} {
			var rs []string
			for _, d := range degs {
				rs = append(rs, fmt.Sprintf("deg%d %.2f", d, res[[3]int{3, pct, d}]/res[[3]int{2, pct, d}]))
			}
			fmt.Fprintf(stdout, "level3/level2 at %d%% writes: %s\n", pct, strings.Join(rs, ", "))
		}
	}
	if err := os.WriteFile(filepath.Join(out, "replication-fig51.csv"), []byte(csv), 0o644); err != nil {
		return err
	}
	return writeLineSVG(filepath.Join(out, "replication-fig51.svg"), "kv throughput vs replication degree", "degree", "ops/s", lines)
}

func mapInts(xs []int, f func(int) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// replCell runs one closed-loop measurement on a fresh 4-node cluster.
func replCell(ctx context.Context, dir string, level, degree int, writeFrac float64, clients int, dur time.Duration) (float64, error) {
	const nodesN, parts = 4, 4
	rep := neptune.Replication{Level: level, Degree: degree}
	for i := range nodesN {
		rep.Nodes = append(rep.Nodes, fmt.Sprintf("n%d", i))
	}
	var nodes []*neptune.Node
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	var join []string
	for _, id := range rep.Nodes {
		n, err := neptune.NewNode(neptune.NodeConfig{ID: id, Join: join, AnnounceInterval: 200 * time.Millisecond,
			AnnounceTTL: time.Second, DataDir: filepath.Join(dir, id)})
		if err != nil {
			return 0, err
		}
		svc := kv.New().Service()
		r := rep
		svc.Replication = &r
		if ps := rep.PartitionsOn(id, []int{0, 1, 2, 3}); len(ps) > 0 {
			if err := n.Register(svc, ps...); err != nil {
				return 0, err
			}
		}
		if err := n.Start(ctx); err != nil {
			return 0, err
		}
		nodes = append(nodes, n)
		join = []string{nodes[0].GossipAddr()}
	}
	c := nodes[0].Client()
	// Ready once every partition takes a write.
	deadline := time.Now().Add(15 * time.Second)
	for p := range parts {
		for {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := c.Call(cctx, nil, "kv", p, "put", neptune.Write, []byte("warm=1"))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("partition %d not writable: %w", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(dur)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			sess := neptune.NewSession()
			for time.Now().Before(stop) && ctx.Err() == nil {
				p := rng.IntN(parts)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var err error
				if rng.Float64() < writeFrac {
					_, err = c.Call(cctx, sess, "kv", p, "put", neptune.Write, fmt.Appendf(nil, "k%d=v", rng.IntN(1000)))
				} else {
					_, err = c.Call(cctx, sess, "kv", p, "len", neptune.Read, nil)
				}
				cancel()
				if err == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / dur.Seconds(), ctx.Err()
}

// ---- failover timeline, disk and memory ----

func benchReplFailover(ctx context.Context, stdout io.Writer, out, tmp string, sustain time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, "failover")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "kv.yaml")
	if err := os.WriteFile(cfg, []byte("services:\n  - name: kv\n    partitions: 0-1\n    replication:\n      level: 2\n      nodes: [r1, r2, r3]\n      degree: 3\n"), 0o644); err != nil {
		return err
	}
	cl := localcluster.New(exe, dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range 3 {
		id := fmt.Sprintf("r%d", i+1)
		n, err := cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"-config", cfg, "-data-dir", filepath.Join(dir, id)}})
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds()})
	if err != nil {
		return err
	}
	defer c.Close()
	primary := ""
	for deadline := time.Now().Add(15 * time.Second); primary == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, p := range c.Partitions() {
			for _, r := range p.Replicas {
				if p.Partition == 0 && r.Role == "primary" {
					primary = r.Node
				}
			}
		}
	}
	if primary == "" {
		return fmt.Errorf("no primary for partition 0 after 15s")
	}
	victim := nodes[slices.IndexFunc(nodes, func(n *localcluster.Node) bool { return n.Spec.ID == primary })]

	type ack struct {
		at time.Time
		p  int
	}
	var mu sync.Mutex
	var acks []ack
	runCtx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; runCtx.Err() == nil; k++ {
				p := i % 2
				cctx, cancel := context.WithTimeout(runCtx, 2*time.Second)
				_, err := c.Call(cctx, nil, "kv", p, "put", neptune.Write, fmt.Appendf(nil, "w%d-%d=v", i, k%500))
				cancel()
				if err == nil {
					mu.Lock()
					acks = append(acks, ack{time.Now(), p})
					mu.Unlock()
				} else {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	start := time.Now()
	sleepCtx(ctx, 3*time.Second)
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		return err
	}
	sleepCtx(ctx, 3*time.Second)
	restarted := time.Now()
	if err := cl.Restart(ctx, victim); err != nil {
		return err
	}
	sleepCtx(ctx, 4*time.Second)
	timelineEnd := time.Now()
	mu.Lock()
	tl := slices.Clone(acks)
	mu.Unlock()

	// Failover: from the kill to the first acknowledged write on partition 0.
	failover := time.Duration(-1)
	for _, a := range tl {
		if a.p == 0 && a.at.After(killed) {
			failover = a.at.Sub(killed)
			break
		}
	}
	const bucket = 250 * time.Millisecond
	nb := int(timelineEnd.Sub(start)/bucket) + 1
	counts := make([][2]int, nb)
	for _, a := range tl {
		if b := int(a.at.Sub(start) / bucket); b >= 0 && b < nb {
			counts[b][a.p]++
		}
	}
	csv := "t_s,p0_ops_per_s,p1_ops_per_s\n"
	var s0, s1 svgSeries
	s0.name, s1.name = "partition 0 (primary killed)", "partition 1"
	for b, cnt := range counts {
		t := float64(b) * bucket.Seconds()
		csv += fmt.Sprintf("%.2f,%.0f,%.0f\n", t, float64(cnt[0])/bucket.Seconds(), float64(cnt[1])/bucket.Seconds())
		s0.x, s0.y = append(s0.x, t), append(s0.y, float64(cnt[0])/bucket.Seconds())
		s1.x, s1.y = append(s1.x, t), append(s1.y, float64(cnt[1])/bucket.Seconds())
	}
	fmt.Fprintf(stdout, "\nFailover timeline: 3 node processes, level 2, degree 3, 4 writers; primary %s of partition 0 SIGKILLed at %.1fs, restarted at %.1fs\n",
		primary, killed.Sub(start).Seconds(), restarted.Sub(start).Seconds())
	fmt.Fprintf(stdout, "failover (kill -> first acknowledged write on partition 0): %v\n", failover.Round(time.Millisecond))
	fmt.Fprintln(stdout, "t(s)   p0 ops/s  p1 ops/s")
	for b, cnt := range counts {
		if b%2 == 0 {
			fmt.Fprintf(stdout, "%-6.2f %-9.0f %-9.0f\n", float64(b)*bucket.Seconds(), float64(cnt[0])/bucket.Seconds(), float64(cnt[1])/bucket.Seconds())
		}
	}
	if err := os.WriteFile(filepath.Join(out, "replication-failover.csv"), []byte(csv), 0o644); err != nil {
		return err
	}
	if err := writeLineSVG(filepath.Join(out, "replication-failover.svg"), "writes through a primary kill (t=3s) and restart (t=6s)", "time (s)", "acknowledged writes/s", []svgSeries{s0, s1}); err != nil {
		return err
	}

	// Sustained load: the log is truncated, so disk stays bounded.
	fmt.Fprintf(stdout, "\nSustained write load for %v (keys cycle through 500 per writer):\n", sustain)
	before := replDisk(dir)
	mu.Lock()
	n0 := len(acks)
	mu.Unlock()
	sleepCtx(ctx, sustain)
	stopWriters()
	wg.Wait()
	mu.Lock()
	writes := len(acks) - n0
	mu.Unlock()
	after := replDisk(dir)
	fmt.Fprintf(stdout, "%d writes acknowledged (%.0f/s)\n", writes, float64(writes)/sustain.Seconds())
	fmt.Fprintln(stdout, "node  wal-before  wal-after  store-after  rss")
	for _, n := range nodes {
		rss, _ := localcluster.RSS(n.PID())
		id := n.Spec.ID
		fmt.Fprintf(stdout, "%-5s %-11s %-10s %-12s %s\n", id, mib(before[id][0]), mib(after[id][0]), mib(after[id][1]), mib(rss))
	}
	return ctx.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// replDisk returns per node the bytes of its write logs and of its
// service store.
func replDisk(dir string) map[string][2]int64 {
	out := map[string][2]int64{}
	for _, id := range []string{"r1", "r2", "r3"} {
		var v [2]int64
		_ = filepath.WalkDir(filepath.Join(dir, id), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			if strings.Contains(path, "service-") {
				v[1] += info.Size()
			} else {
				v[0] += info.Size()
			}
			return nil
		})
		out[id] = v
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// ---- a small SVG line chart ----

type svgSeries struct {
	name string
	x, y []float64
}

func writeLineSVG(path, title, xlabel, ylabel string, ss []svgSeries) error {
	const w, h, l, r, t, b = 640.0, 400.0, 70.0, 200.0, 30.0, 40.0
	var maxX, maxY float64
	for _, s := range ss {
		for i := range s.x {
			maxX, maxY = max(maxX, s.x[i]), max(maxY, s.y[i])
		}
	}
	if maxX == 0 || maxY == 0 {
		maxX, maxY = max(maxX, 1), max(maxY, 1)
	}
	px := func(x float64) float64 { return l + x/maxX*(w-l-r) }
	py := func(y float64) float64 { return h - b - y/maxY*(h-t-b) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%.0f" y="18">%s</text>`+"\n", l, title)
	fmt.Fprintf(&sb, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n",
		l, h-b, w-r, h-b, l, t, l, h-b)
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f">%s</text><text x="4" y="%.0f">%s</text>`+"\n", (l+w-r)/2, h-8, xlabel, t-8, ylabel)
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text><text x="%.0f" y="%.0f">%.4g</text>`+"\n", l-4, t+4, maxY, w-r, h-b+14, maxX)
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}
	for i, s := range ss {
		var pts []string
		for j := range s.x {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.x[j]), py(s.y[j])))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", w-r+8, t+16*float64(i+1), c, s.name)
	}
	sb.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}
